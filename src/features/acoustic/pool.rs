//! After the extractor: the smoother (openSMILE's 3-frame moving average of the LLDs that
//! take one) and the pooling of 10 ms rows into a video frame's vector.

use super::*;

/// `cContourSmoother smaWin=3`: the set's pitch group ignores zeros, the others average
/// three rows; the row before the first is the first (edge replication).
pub(super) struct Smoother {
    pub(super) nz: std::ops::Range<usize>,
    pub(super) prev: Option<[f32; DIMS]>,
    pub(super) cur: Option<[f32; DIMS]>,
    pub(super) emitted: u64,
}

impl Smoother {
    pub(super) fn new(set: LldSet) -> Self {
        Self {
            nz: set.nz(),
            prev: None,
            cur: None,
            emitted: 0,
        }
    }

    pub(super) fn smooth(
        &self,
        prev: &[f32; DIMS],
        cur: &[f32; DIMS],
        next: &[f32; DIMS],
    ) -> [f32; DIMS] {
        let mut y = [0f32; DIMS];
        for c in 0..DIMS {
            y[c] = if self.nz.contains(&c) {
                if cur[c] == 0.0 {
                    0.0
                } else {
                    let (mut s, mut n) = (cur[c], 1.0f32);
                    for v in [prev[c], next[c]] {
                        if v != 0.0 {
                            s += v;
                            n += 1.0;
                        }
                    }
                    s / n
                }
            } else {
                (prev[c] + cur[c] + next[c]) / 3.0
            };
        }
        y
    }

    pub(super) fn push(&mut self, next: [f32; DIMS]) -> Option<[f32; DIMS]> {
        let Some(cur) = self.cur else {
            self.cur = Some(next);
            self.prev = Some(next);
            return None;
        };
        let prev = self.prev.unwrap_or(cur);
        let y = self.smooth(&prev, &cur, &next);
        self.prev = Some(cur);
        self.cur = Some(next);
        self.emitted += 1;
        Some(y)
    }

    pub(super) fn last(&self) -> Option<[f32; DIMS]> {
        self.cur
    }

    pub(super) fn finish(&mut self, lookahead: Option<[f32; DIMS]>) -> Option<[f32; DIMS]> {
        let cur = self.cur.take()?;
        let prev = self.prev.unwrap_or(cur);
        let next = lookahead.unwrap_or(cur);
        self.emitted += 1;
        Some(self.smooth(&prev, &cur, &next))
    }
}

/// Pools ComParE rows into one video frame's 65-d vector (see the module header).
pub fn pool_compare_rows(rows: &[&AudioRow]) -> Option<Vec<f32>> {
    if rows.is_empty() {
        return None;
    }
    let n = rows.len() as f64;
    let voiced: Vec<&&AudioRow> = rows.iter().filter(|r| r.values[0] > 0.0).collect();
    let mut out = vec![0f32; DIMS];
    for (c, o) in out.iter_mut().enumerate() {
        let voiced_only = c == 0 || (2..6).contains(&c);
        *o = if voiced_only {
            if voiced.is_empty() {
                if c == 5 {
                    -100.0
                } else {
                    0.0
                }
            } else {
                (voiced.iter().map(|r| f64::from(r.values[c])).sum::<f64>() / voiced.len() as f64)
                    as f32
            }
        } else {
            (rows.iter().map(|r| f64::from(r.values[c])).sum::<f64>() / n) as f32
        };
    }
    Some(out)
}

/// Pools eGeMAPS rows into one video frame's 25-d vector (see the module header).
pub fn pool_egemaps_rows(rows: &[&AudioRow]) -> Option<Vec<f32>> {
    if rows.is_empty() {
        return None;
    }
    let voiced: Vec<&&AudioRow> = rows.iter().filter(|r| r.values[10] > 0.0).collect();
    let mean = |set: &[&&AudioRow], c: usize| {
        (set.iter().map(|r| f64::from(r.values[c])).sum::<f64>() / set.len() as f64) as f32
    };
    let all: Vec<&&AudioRow> = rows.iter().collect();
    Some(
        (0..25)
            .map(|c| match c {
                10..=15 | 18 | 21 | 24 if voiced.is_empty() => {
                    if matches!(c, 18 | 21 | 24) {
                        -201.0
                    } else {
                        0.0
                    }
                }
                10..=15 | 18 | 21 | 24 => mean(&voiced, c),
                _ => mean(&all, c),
            })
            .collect(),
    )
}
