//! Evaluation of stored predictions against self-ratings (`empathic evaluate`).
//!
//! Contract: the unit is one (session, story, predictor): its session-level prediction is
//! the mean calibrated score over the windows predicted toward that story (windows of the
//! configured phases after the story was shown, optionally one phase only), set against
//! the participant's 1-5 self-rating of the story. Metrics: Pearson r and Spearman rho
//! (ranks with ties averaged), mean squared error on the 1-5 scale, and accuracy and F1
//! after binarising both sides at [`POSITIVE_AT`] (a rating of 4 or 5, "empathised", is
//! the positive class; a score of 4 or more predicts it). Intervals are 95 % percentile
//! bootstraps over participants (whole participants are resampled, so a participant's
//! several ratings stay together), [`BOOTSTRAP_RESAMPLES`] resamples from a fixed seed, so a
//! report is reproducible.

use std::collections::BTreeMap;

use serde::Serialize;

/// Ratings and scores at or above this are the positive class.
pub const POSITIVE_AT: f64 = 4.0;
/// Bootstrap resamples for the intervals.
pub const BOOTSTRAP_RESAMPLES: usize = 1000;
/// Fewest participants for which an interval is reported. A bootstrap over k participants
/// draws from C(2k-1, k) distinct resamples: 1 for one participant (the "interval" is the
/// estimate itself), 3 for two, 35 for four, 126 for five. Below five, the 2.5th and 97.5th
/// percentiles of so few distinct values say nothing about the population, so no interval
/// is given and the report says why.
pub const MIN_PARTICIPANTS_FOR_INTERVAL: usize = 5;
/// Fewest rated stories below which a correlation is flagged as anecdotal: with n < 10 a
/// Pearson r of 0.63 is not distinguishable from zero at the 5 % level.
pub const FEW_RATED: usize = 10;

use crate::core::RatedWindow;

/// Session-level predictions per predictor: the mean stored score over each (session,
/// story)'s windows, and the same through the predictor's population map (`map_of`; None
/// for a predictor this build does not know, or windows without a raw cosine), so the
/// two calibrations can be compared on the same windows.
pub fn session_level(
    windows: &[RatedWindow],
    map_of: impl Fn(&str) -> Option<super::PopulationMap>,
) -> Vec<(String, Rated, Option<Rated>)> {
    let mut out: Vec<(String, Rated, Option<Rated>)> = Vec::new();
    let mut i = 0;
    while i < windows.len() {
        let w = &windows[i];
        let mut j = i;
        while j < windows.len()
            && windows[j].predictor == w.predictor
            && windows[j].session_id == w.session_id
            && windows[j].story_id == w.story_id
        {
            j += 1;
        }
        let group = &windows[i..j];
        let n = group.len() as f64;
        let rated = |predicted: f64| Rated {
            participant: w.participant.clone(),
            session_id: w.session_id.clone(),
            story_id: w.story_id.clone(),
            predicted,
            rating: w.rating,
        };
        let stored = group.iter().map(|g| g.score).sum::<f64>() / n;
        let population = map_of(&w.predictor).and_then(|map| {
            let scores: Option<Vec<f64>> = group
                .iter()
                .map(|g| g.raw_cosine.map(|c| map.score(c)))
                .collect();
            scores.map(|s| rated(s.iter().sum::<f64>() / n))
        });
        out.push((w.predictor.clone(), rated(stored), population));
        i = j;
    }
    out
}

/// One rated prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rated {
    pub participant: String,
    pub session_id: String,
    pub story_id: String,
    pub predicted: f64,
    pub rating: f64,
}

/// A metric with its 95 % bootstrap interval (None when undefined, e.g. r with no variance).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub value: Option<f64>,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

/// The metrics of a set of rated predictions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metrics {
    pub n: usize,
    pub participants: usize,
    /// Why the intervals are withheld (too few participants, or no ratings), or None.
    pub interval_withheld: Option<String>,
    pub pearson_r: Estimate,
    pub spearman_rho: Estimate,
    pub mse: Estimate,
    pub accuracy: Estimate,
    pub f1: Estimate,
}

pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len();
    if n < 2 || n != y.len() {
        return None;
    }
    let mx = x.iter().sum::<f64>() / n as f64;
    let my = y.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    let d = (sxx * syy).sqrt();
    (d > 0.0).then(|| sxy / d)
}

/// Ranks from 1, ties given their average rank.
pub fn ranks(x: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..x.len()).collect();
    order.sort_by(|&a, &b| x[a].total_cmp(&x[b]));
    let mut r = vec![0.0; x.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && x[order[j + 1]] == x[order[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for k in &order[i..=j] {
            r[*k] = avg;
        }
        i = j + 1;
    }
    r
}

pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    pearson(&ranks(x), &ranks(y))
}

pub fn mse(x: &[f64], y: &[f64]) -> Option<f64> {
    (!x.is_empty() && x.len() == y.len())
        .then(|| x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f64>() / x.len() as f64)
}

/// (accuracy, F1 of the positive class) after binarising at [`POSITIVE_AT`].
pub fn binary(predicted: &[f64], rating: &[f64]) -> (Option<f64>, Option<f64>) {
    if predicted.is_empty() || predicted.len() != rating.len() {
        return (None, None);
    }
    let (mut tp, mut fp, mut fne, mut correct) = (0.0, 0.0, 0.0, 0.0);
    for (p, r) in predicted.iter().zip(rating) {
        let (p, r) = (*p >= POSITIVE_AT, *r >= POSITIVE_AT);
        correct += f64::from(u8::from(p == r));
        match (p, r) {
            (true, true) => tp += 1.0,
            (true, false) => fp += 1.0,
            (false, true) => fne += 1.0,
            _ => {}
        }
    }
    let accuracy = correct / predicted.len() as f64;
    let f1 = (tp + fp + fne > 0.0).then(|| 2.0 * tp / (2.0 * tp + fp + fne));
    (Some(accuracy), f1)
}

/// splitmix64: a small deterministic generator for the bootstrap (no statistical claims
/// beyond resampling indices).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

type MetricFn = fn(&[f64], &[f64]) -> Option<f64>;

fn percentile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64))
}

/// The metrics of `rated`, with intervals from resampling participants.
pub fn evaluate(rated: &[Rated]) -> Metrics {
    let mut by_participant: BTreeMap<&str, Vec<&Rated>> = BTreeMap::new();
    for r in rated {
        by_participant.entry(&r.participant).or_default().push(r);
    }
    let groups: Vec<&Vec<&Rated>> = by_participant.values().collect();
    let columns = |rows: &[&Rated]| -> (Vec<f64>, Vec<f64>) {
        (
            rows.iter().map(|r| r.predicted).collect(),
            rows.iter().map(|r| r.rating).collect(),
        )
    };
    let all: Vec<&Rated> = rated.iter().collect();
    let (p, y) = columns(&all);
    let metrics: [MetricFn; 5] = [
        pearson,
        spearman,
        mse,
        |p, y| binary(p, y).0,
        |p, y| binary(p, y).1,
    ];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); metrics.len()];
    let mut rng = SplitMix(0x5EED_E4FA_7E1C);
    let interval_withheld = (groups.len() < MIN_PARTICIPANTS_FOR_INTERVAL).then(|| {
        format!(
            "{} participant(s): a bootstrap over participants needs at least {MIN_PARTICIPANTS_FOR_INTERVAL} for a 95 % interval",
            groups.len()
        )
    });
    if interval_withheld.is_none() {
        for _ in 0..BOOTSTRAP_RESAMPLES {
            let mut rows: Vec<&Rated> = Vec::with_capacity(rated.len());
            for _ in 0..groups.len() {
                rows.extend(groups[rng.below(groups.len())].iter().copied());
            }
            let (bp, by) = columns(&rows);
            for (m, f) in metrics.iter().enumerate() {
                if let Some(v) = f(&bp, &by) {
                    samples[m].push(v);
                }
            }
        }
    }
    let estimate = |m: usize| {
        let mut s = samples[m].clone();
        s.sort_by(f64::total_cmp);
        Estimate {
            value: metrics[m](&p, &y),
            low: percentile(&s, 0.025),
            high: percentile(&s, 0.975),
        }
    };
    Metrics {
        n: rated.len(),
        participants: groups.len(),
        interval_withheld,
        pearson_r: estimate(0),
        spearman_rho: estimate(1),
        mse: estimate(2),
        accuracy: estimate(3),
        f1: estimate(4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        // x = 1..5, y = 2, 4, 5, 4, 5: by hand, mean x 3, mean y 4; deviations -2 -1 0 1 2
        // and -2 0 1 0 1, so sxy = 4 + 2 = 6, sxx = 10, syy = 6 and r = 6 / sqrt(60).
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [2.0, 4.0, 5.0, 4.0, 5.0];
        assert!(close(pearson(&x, &y), 6.0 / 60f64.sqrt()));
        // Ranks of y with ties: 1, 2.5, 4.5, 2.5, 4.5.
        assert_eq!(ranks(&y), vec![1.0, 2.5, 4.5, 2.5, 4.5]);
        // Squared errors 1, 4, 4, 0, 0.
        assert!(close(mse(&x, &y), 9.0 / 5.0));
        // Predicted positive: 4, 5 (2 of them); rated positive: 4, 5, 4, 5 (items 2-5).
        // Correct: item 1 (neg, neg), items 4 and 5 (pos, pos): 3 of 5. tp 2, fp 0, fn 2.
        let (acc, f1) = binary(&x, &y);
        assert!(close(acc, 0.6));
        assert!(close(f1, 4.0 / 6.0));
        assert_eq!(pearson(&[1.0, 1.0], &[1.0, 2.0]), None);
    }

    #[test]
    fn session_level_means_stored_and_population_scores_per_story() {
        let w = |story: &str, score: f64, cos: Option<f64>| RatedWindow {
            predictor: "p".into(),
            participant: "P1".into(),
            session_id: "s".into(),
            story_id: story.into(),
            score,
            raw_cosine: cos,
            rating: 4.0,
            synthetic: false,
            calibration: "population".into(),
        };
        let map = super::super::PopulationMap {
            intercept: 1.0,
            slope: 4.0,
        };
        let rows = [
            w("a", 2.0, Some(0.25)),
            w("a", 4.0, Some(0.5)),
            w("b", 3.0, None),
        ];
        let out = session_level(&rows, |_| Some(map));
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1.predicted, 3.0);
        // Population: mean of 2.0 and 3.0.
        assert_eq!(out[0].2.as_ref().map(|r| r.predicted), Some(2.5));
        // A window without a raw cosine has no population score.
        assert_eq!(out[1].2, None);
        assert!(session_level(&rows, |_| None).iter().all(|o| o.2.is_none()));
    }

    #[test]
    fn intervals_resample_participants_and_contain_the_estimate() {
        let rated: Vec<Rated> = (0..30)
            .map(|i| Rated {
                participant: format!("P{}", i % 10),
                session_id: format!("s{i}"),
                story_id: "x".into(),
                predicted: 1.0 + (i % 5) as f64 + 0.3 * ((i * 7) % 3) as f64,
                rating: 1.0 + (i % 5) as f64,
            })
            .collect();
        let m = evaluate(&rated);
        assert_eq!((m.n, m.participants), (30, 10));
        assert_eq!(m.interval_withheld, None);
        let r = m.pearson_r;
        assert!(r.low.unwrap() <= r.value.unwrap() && r.value.unwrap() <= r.high.unwrap());
        // Deterministic.
        assert_eq!(evaluate(&rated), m);
    }

    #[test]
    fn no_interval_from_too_few_participants() {
        let rated: Vec<Rated> = (0..3)
            .map(|i| Rated {
                participant: "P1".into(),
                session_id: "s".into(),
                story_id: format!("x{i}"),
                predicted: 1.0 + i as f64,
                rating: 3.0 + i as f64,
            })
            .collect();
        let m = evaluate(&rated);
        assert!(m.pearson_r.value.is_some());
        assert_eq!((m.pearson_r.low, m.pearson_r.high), (None, None));
        assert!(m.interval_withheld.unwrap().contains("1 participant(s)"));
    }
}
