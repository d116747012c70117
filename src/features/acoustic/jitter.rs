//! Voice quality from the waveform: jitter (local, DDP), shimmer (local) and log HNR,
//! openSMILE's `cPitchJitter` (`specs/compare-2016-llds.md`, section 9).
//!
//! Contract: frames are processed in order with their gated F0; the state (`last_*`)
//! carries across frames. The caller gives access to the waveform by absolute sample index.

use crate::features::pearson;

/// One frame's voice-quality values.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct VoiceQuality {
    pub jitter_local: f32,
    pub jitter_ddp: f32,
    pub shimmer_local: f32,
    pub log_hnr: f32,
}

pub struct PitchJitter {
    t: f64,
    len_f: usize,
    pp_len: usize,
    search_range_rel: f64,
    min_cc: f64,
    last_idx: usize,
    last_mis: usize,
    last_t0: f32,
    last_diff: f32,
    last_jitter_local: f32,
    last_jitter_ddp: f32,
    last_shimmer: f32,
}

/// Peak-to-peak amplitude over elements 1..len-2 (initial max = min = element 1).
fn amplitude(x: &[f32]) -> f32 {
    if x.len() < 3 {
        return 0.0;
    }
    let (mut mx, mut mn) = (x[1], x[1]);
    for &v in &x[1..x.len() - 1] {
        mx = mx.max(v);
        mn = mn.min(v);
    }
    mx - mn
}

impl PitchJitter {
    /// ComParE settings: search range 0.25, minimum correlation 0.5.
    pub fn new(sample_rate: u32, search_range_rel: f64) -> Self {
        let t = 1.0 / f64::from(sample_rate);
        Self {
            t,
            len_f: (0.06 / t).ceil() as usize,
            pp_len: (0.01 / t).ceil() as usize,
            search_range_rel,
            min_cc: 0.5,
            last_idx: 0,
            last_mis: 0,
            last_t0: 0.0,
            last_diff: 0.0,
            last_jitter_local: 0.0,
            last_jitter_ddp: 0.0,
            last_shimmer: 0.0,
        }
    }

    /// The first absolute sample the next call may read.
    pub fn first_needed_sample(&self, next_frame: u64) -> usize {
        let start_v = next_frame as usize * self.pp_len;
        self.last_idx.min(start_v)
    }

    /// Processes frame `t` with gated F0 `f0`; `wave(start, len)` returns up to `len`
    /// samples from absolute index `start` (fewer at the end of the stream).
    pub fn process<'a>(
        &mut self,
        t: u64,
        f0: f32,
        wave: impl Fn(usize, usize) -> &'a [f32],
    ) -> VoiceQuality {
        let start_v = t as usize * self.pp_len;
        let to_read0 = self.pp_len + self.last_mis;
        let mut to_read = to_read0;
        let (mut t0f, mut t0min, mut t0max) = (0usize, 0usize, 0usize);
        if f0 > 0.0 {
            let tf = (1.0 / f64::from(f0)) / self.t;
            t0f = tf.round() as usize;
            t0min = ((1.0 - self.search_range_rel) * tf).floor() as usize;
            t0max = ((1.0 + self.search_range_rel) * tf).ceil() as usize;
            to_read = to_read.max(2 * t0max + 2);
        }
        let max_read = self.last_mis + self.len_f;
        to_read = to_read.min(max_read);
        if start_v.checked_sub(self.last_mis) != Some(self.last_idx) {
            self.last_idx = start_v;
            to_read = to_read.min(self.len_f);
        }
        let m = wave(self.last_idx, to_read);
        let nt = m.len();
        let mut out = VoiceQuality::default();
        let last_period;
        if f0 > 0.0 && t0f > 0 {
            let mut start = 0usize;
            let mut lp = 0usize;
            let mut periods: Vec<usize> = Vec::new();
            let mut avg_wf = vec![0f32; t0f + 1];
            let mut pp = 0usize;
            let (mut avg_period, mut n_periods) = (0f32, 0u32);
            let (mut jl, mut n_jl, mut jd, mut n_jd) = (0f32, 0u32, 0f32, 0u32);
            let (mut avg_amp, mut avg_amp_diff) = (0f32, 0f32);
            let mut cc = vec![0f64; t0max - t0min + 1];
            while start + 2 * t0max + 1 < nt {
                for (i, k) in (t0min..=t0max).enumerate() {
                    cc[i] = if k == 0 {
                        0.0
                    } else {
                        pearson(&m[start..start + k], &m[start + k..start + 2 * k])
                    };
                }
                let mut max_i: Option<usize> = None;
                let last = (t0max - t0min).saturating_sub(2);
                for i in 1..=last {
                    if i + 1 < cc.len()
                        && cc[i] > cc[i - 1]
                        && cc[i] > cc[i + 1]
                        && max_i.is_none_or(|b| cc[i] > cc[b])
                    {
                        max_i = Some(i);
                    }
                }
                pp = max_i.map_or(t0f, |i| t0min + i);
                let os = start;
                if let Some(mi) = max_i {
                    start += pp;
                    let a0 = amplitude(&m[os..os + pp]);
                    let a1 = amplitude(&m[start..(start + pp).min(nt)]);
                    let ad = (a0 - a1).abs();
                    periods.push(os);
                    for (w, &x) in avg_wf.iter_mut().zip(&m[os..(os + t0f).min(nt)]) {
                        *w += x;
                    }
                    let (xi, cci) = super::pitch::quad_peak(
                        [mi as f64 - 1.0, mi as f64, mi as f64 + 1.0],
                        [cc[mi - 1], cc[mi], cc[mi + 1]],
                    );
                    let period = ((t0min as f64 + xi).abs() * self.t) as f32;
                    if cci > self.min_cc {
                        avg_period += period;
                        n_periods += 1;
                        if self.last_t0 > 0.0 {
                            let diff = (self.last_t0 - period).abs();
                            jl += diff;
                            n_jl += 1;
                            if self.last_diff > 0.0 {
                                jd += (self.last_diff - diff).abs();
                                n_jd += 1;
                            }
                            self.last_diff = diff;
                        }
                        self.last_t0 = period;
                        avg_amp += (a0 + a1) / 2.0;
                        avg_amp_diff += ad;
                    }
                } else {
                    start += t0f;
                }
                if start + 1 < to_read0 {
                    lp = start;
                }
            }
            periods.push(start);
            let np = periods.len();
            for i in 0..t0f {
                if start + i >= nt {
                    break;
                }
                avg_wf[i] = (avg_wf[i] + m[start + i]) / np as f32;
            }
            let eh = if t0f > 4 {
                let s: f32 = (3..=t0f.saturating_sub(3))
                    .map(|i| avg_wf[i] * avg_wf[i])
                    .sum();
                (s / (t0f - 4) as f32).sqrt()
            } else {
                0.0
            };
            if pp > 0 {
                periods.push(start + pp);
            }
            let (mut en_sum, mut en_n) = (0f32, 0u32);
            for i in 0..np {
                let Some(&next) = periods.get(i + 1) else {
                    break;
                };
                let p0 = periods[i];
                let end = next.min(p0 + t0f).saturating_sub(3);
                let mut j = p0 + 2;
                while j <= end && j < nt {
                    let d = m[j] - avg_wf[j - p0];
                    en_sum += d * d;
                    en_n += 1;
                    j += 1;
                }
            }
            let en = if en_n > 0 {
                (en_sum / en_n as f32).sqrt()
            } else {
                0.0
            };
            if en > 0.0 {
                let r = eh / en;
                out.log_hnr = if r > 0.0 {
                    (20.0 * f64::from(r).log10()) as f32
                } else {
                    -100.0
                };
            }
            out.log_hnr = out.log_hnr.max(-100.0);
            self.last_mis = to_read0.saturating_sub(lp);
            last_period = lp;
            // Outputs
            if n_periods > 0 && n_jl > 0 {
                self.last_jitter_local = (jl / n_jl as f32) / (avg_period / n_periods as f32);
                out.jitter_local = self.last_jitter_local.min(1.0);
            } else if n_periods == 0 {
                out.jitter_local = self.last_jitter_local.min(1.0);
            }
            if n_periods > 0 && n_jd > 0 {
                self.last_jitter_ddp = (jd / n_jd as f32) / (avg_period / n_periods as f32);
                out.jitter_ddp = self.last_jitter_ddp.min(1.0);
            } else if n_periods == 0 {
                out.jitter_ddp = self.last_jitter_ddp.min(1.0);
            }
            if n_periods > 0 {
                self.last_shimmer = if avg_amp > 0.0 {
                    avg_amp_diff / avg_amp
                } else {
                    0.0
                };
            }
            out.shimmer_local = self.last_shimmer.min(1.0);
        } else {
            last_period = to_read0;
            self.last_mis = 0;
            self.last_t0 = 0.0;
            self.last_diff = 0.0;
            self.last_jitter_local = 0.0;
            self.last_jitter_ddp = 0.0;
            self.last_shimmer = 0.0;
            out.log_hnr = -100.0;
        }
        self.last_idx += last_period;
        out
    }
}
