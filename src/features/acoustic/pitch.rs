//! Pitch: octave-scale spectrum, sub-harmonic summation (SHS) candidates and Viterbi
//! smoothing (`specs/compare-2016-llds.md`, section 8).
//!
//! Contract: [`ShsPitch::candidates`] is a pure function of one 60 ms Gaussian magnitude
//! spectrum. [`Viterbi`] takes candidates frame by frame and releases decisions in frame
//! order with a variable lag of at most `buffer_len` frames; [`Viterbi::flush`] releases the
//! rest at the end of the stream.

use std::collections::VecDeque;

pub const N_CANDIDATES: usize = 6;

/// SHS candidates of one frame, best (largest score) first.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Candidates {
    pub f0: [f32; N_CANDIDATES],
    pub voicing: [f32; N_CANDIDATES],
    pub score: [f32; N_CANDIDATES],
}

/// Octave-scale spectrum and SHS, set up for one sample rate and FFT size.
pub struct ShsPitch {
    n: usize,
    /// log2 Hz of source bins (`ft`).
    src_x: Vec<f64>,
    /// log2 Hz of target points (`xt`).
    dst_x: Vec<f64>,
    weight: Vec<f64>,
    shifts: Vec<usize>,
    fmint: f32,
    fstept: f32,
    min_pitch: f64,
    max_pitch: f64,
    // scratch
    y: Vec<f64>,
    y2: Vec<f64>,
    u: Vec<f64>,
    o: Vec<f32>,
    ss: Vec<f32>,
}

impl ShsPitch {
    /// `nfft` of the 60 ms frame; pitch range in Hz (ComParE: 52-620).
    pub fn new(sample_rate: u32, nfft: usize, min_pitch: f64, max_pitch: f64) -> Self {
        let n = nfft / 2 + 1;
        let df = f64::from(sample_rate) / nfft as f64;
        let max_f = df * (n - 1) as f64;
        let mut src_x: Vec<f64> = (0..n).map(|i| (i as f64 * df).log2()).collect();
        src_x[0] = 2.0 * src_x[1] - src_x[2];
        let lo = 25f64.log2();
        let step = (max_f.log2() - lo) / (n - 1) as f64;
        let dst_x: Vec<f64> = (0..n).map(|j| lo + j as f64 * step).collect();
        let n_oct = (max_f / 25.0).log2();
        let ppo = n as f64 / n_oct;
        let s = ppo * (65.0f64 / 50.0).log2() - 1.0;
        let weight = (0..n)
            .map(|j| 0.5 + (3.0 * (j as f64 + 1.0 - s) / ppo).atan() / std::f64::consts::PI)
            .collect();
        let ppo32 = ppo as f32;
        let shifts = (2..=15)
            .map(|h: u32| (f64::from(ppo32) * f64::from(h).log2()).floor() as usize)
            .collect();
        Self {
            n,
            src_x,
            dst_x,
            weight,
            shifts,
            fmint: lo as f32,
            fstept: step as f32,
            min_pitch,
            max_pitch,
            y: vec![0.0; n],
            y2: vec![0.0; n],
            u: vec![0.0; n],
            o: vec![0.0; n],
            ss: vec![0.0; n],
        }
    }

    /// SHS candidates from the 60 ms Gaussian magnitude spectrum (n = nfft/2 + 1 values).
    pub fn candidates(&mut self, mag: &[f32]) -> Candidates {
        let n = self.n;
        for (y, &m) in self.y.iter_mut().zip(mag) {
            *y = f64::from(m);
        }
        enhance_peaks(&mut self.y);
        smooth(&mut self.y);
        spline(&self.src_x, &self.y, &mut self.y2, &mut self.u);
        // Evaluate at the (increasing) target points with a moving bracket.
        let mut klo = 0usize;
        for j in 0..n {
            let x = self.dst_x[j];
            while klo + 2 < n && self.src_x[klo + 1] <= x {
                klo += 1;
            }
            let khi = klo + 1;
            let h = self.src_x[khi] - self.src_x[klo];
            let a = (self.src_x[khi] - x) / h;
            let b = (x - self.src_x[klo]) / h;
            let v = a * self.y[klo]
                + b * self.y[khi]
                + ((a * a * a - a) * self.y2[klo] + (b * b * b - b) * self.y2[khi]) * (h * h) / 6.0;
            let w = v * self.weight[j];
            self.o[j] = if w > 0.0 { w as f32 } else { 0.0 };
        }
        // Sub-harmonic summation in float32.
        self.ss.copy_from_slice(&self.o);
        let mut scale = 0.85f32;
        for &shift in &self.shifts {
            for j in shift..n {
                self.ss[j - shift] += self.o[j] * scale;
            }
            scale *= 0.85;
        }
        for v in self.ss.iter_mut() {
            *v = (*v / 15.0).max(0.0);
        }
        let ss_mean = self.ss.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64;
        // Up to 6 peaks by descending score.
        let mut bins = [0usize; N_CANDIDATES];
        let mut scores = [0f32; N_CANDIDATES];
        for i in 1..n - 1 {
            let v = self.ss[i];
            if self.ss[i - 1] < v && v > self.ss[i + 1] {
                if let Some(slot) = (0..N_CANDIDATES).find(|&j| scores[j] == 0.0 || scores[j] < v) {
                    for j in (slot + 1..N_CANDIDATES).rev() {
                        scores[j] = scores[j - 1];
                        bins[j] = bins[j - 1];
                    }
                    scores[slot] = v;
                    bins[slot] = i;
                }
            }
        }
        let mut c = Candidates::default();
        let mut count = 0;
        for k in 0..N_CANDIDATES {
            if scores[k] == 0.0 {
                continue;
            }
            let j = bins[k];
            let (fmint, fstept) = (f64::from(self.fmint), f64::from(self.fstept));
            let x = |i: usize| i as f64 * fstept + fmint;
            let (xp, yp) = quad_peak(
                [x(j - 1), x(j), x(j + 1)],
                [
                    f64::from(self.ss[j - 1]),
                    f64::from(self.ss[j]),
                    f64::from(self.ss[j + 1]),
                ],
            );
            c.f0[count] = 2f64.powf(xp) as f32;
            c.score[count] = yp as f32;
            c.voicing[count] = if yp > 0.0 && yp > ss_mean {
                (1.0 - ss_mean / yp) as f32
            } else {
                0.0
            };
            count += 1;
        }
        // Range filter: drop candidates outside [min, max], shifting later ones left.
        let mut k = 0;
        while k < N_CANDIDATES {
            let f = f64::from(c.f0[k]);
            if c.f0[k] != 0.0 && (f < self.min_pitch || f > self.max_pitch) {
                for j in k..N_CANDIDATES - 1 {
                    c.f0[j] = c.f0[j + 1];
                    c.voicing[j] = c.voicing[j + 1];
                    c.score[j] = c.score[j + 1];
                }
                c.f0[N_CANDIDATES - 1] = 0.0;
                c.voicing[N_CANDIDATES - 1] = 0.0;
                c.score[N_CANDIDATES - 1] = 0.0;
            } else {
                k += 1;
            }
        }
        // The largest score goes to slot 0.
        let best = (0..N_CANDIDATES).fold(0, |b, k| if c.score[k] > c.score[b] { k } else { b });
        if best != 0 {
            c.f0.swap(0, best);
            c.voicing.swap(0, best);
            c.score.swap(0, best);
        }
        c
    }
}

/// `smileDsp_specEnhanceSHS`: zero the valleys between peaks.
fn enhance_peaks(y: &mut [f64]) {
    let n = y.len();
    let mut pos = Vec::new();
    if n > 1 && y[0] > y[1] {
        pos.push(0);
    }
    for i in 1..n - 1 {
        if y[i] > y[i - 1] && y[i] >= y[i + 1] {
            pos.push(i);
        }
    }
    if n > 1 && y[n - 1] > y[n - 2] {
        pos.push(n - 1);
    }
    if pos.len() == 1 {
        // Quirk: one peak zeroes everything from index 3 (the code reads posmax[1] == 0).
        for v in y.iter_mut().skip(3) {
            *v = 0.0;
        }
        return;
    }
    for w in pos.windows(2) {
        let (a, b) = (w[0] + 3, w[1]);
        if b >= 3 && a <= b - 3 {
            for v in &mut y[a..=b - 3] {
                *v = 0.0;
            }
        }
    }
}

/// `smileDsp_specSmoothSHS`: in place, left to right, the last element unchanged.
fn smooth(y: &mut [f64]) {
    let n = y.len();
    let mut prev_old = 0.0;
    for i in 0..n - 1 {
        let old = y[i];
        y[i] = (prev_old + 2.0 * old + y[i + 1]) / 4.0;
        prev_old = old;
    }
}

/// Natural cubic spline second derivatives (Numerical Recipes `spline`, y'' = 0 at the ends).
fn spline(x: &[f64], y: &[f64], y2: &mut [f64], u: &mut [f64]) {
    let n = x.len();
    y2[0] = 0.0;
    u[0] = 0.0;
    for i in 1..n - 1 {
        let sig = (x[i] - x[i - 1]) / (x[i + 1] - x[i - 1]);
        let p = sig * y2[i - 1] + 2.0;
        y2[i] = (sig - 1.0) / p;
        let d = (y[i + 1] - y[i]) / (x[i + 1] - x[i]) - (y[i] - y[i - 1]) / (x[i] - x[i - 1]);
        u[i] = (6.0 * d / (x[i + 1] - x[i - 1]) - sig * u[i - 1]) / p;
    }
    y2[n - 1] = 0.0;
    for k in (0..n - 1).rev() {
        y2[k] = y2[k] * y2[k + 1] + u[k];
    }
}

/// Peak of the parabola through three points, by Cramer's rule on the 3x3 Vandermonde system
/// (the form `smileMath_quadFrom3pts` uses, so near-degenerate cases round the same way);
/// the largest point when degenerate.
pub fn quad_peak(x: [f64; 3], y: [f64; 3]) -> (f64, f64) {
    let [x1, x2, x3] = x;
    let [y1, y2, y3] = y;
    let den =
        x1 * x1 * x2 + x2 * x2 * x3 + x3 * x3 * x1 - x3 * x3 * x2 - x2 * x2 * x1 - x1 * x1 * x3;
    if den != 0.0 {
        let a = (y1 * x2 + y2 * x3 + y3 * x1 - y3 * x2 - y2 * x1 - y1 * x3) / den;
        let b = (x1 * x1 * y2 + x2 * x2 * y3 + x3 * x3 * y1
            - x3 * x3 * y2
            - x2 * x2 * y1
            - x1 * x1 * y3)
            / den;
        let c = (x1 * x1 * x2 * y3 + x2 * x2 * x3 * y1 + x3 * x3 * x1 * y2
            - x3 * x3 * x2 * y1
            - x2 * x2 * x1 * y3
            - x1 * x1 * x3 * y2)
            / den;
        if a != 0.0 {
            let xp = -b / (2.0 * a);
            return (xp, c - a * xp * xp);
        }
    }
    let k = (0..3).fold(0, |b, k| if y[k] > y[b] { k } else { b });
    (x[k], y[k])
}

const STATES: usize = N_CANDIDATES + 1;
const UNVOICED: usize = N_CANDIDATES;
const THR: f32 = 0.7;
const W_LOCAL: f64 = 2.0;
const W_THR: f64 = 4.0;
const W_RANGE: f64 = 1.0;
const W_TVV: f64 = 10.0;
/// `setWeights` assigns wTvv to wTvvd (quirk kept).
const W_TVVD: f64 = 10.0;
const W_TVUV: f64 = 10.0;

/// A decided frame: F0 (Hz, 0 unvoiced) and the unclipped voicing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PitchDecision {
    pub f0: f32,
    pub voicing: f32,
}

impl PitchDecision {
    /// The output for `state` of a frame: its candidate's F0 and voicing, or F0 0 with the
    /// first candidate's voicing when unvoiced.
    fn of(c: &Candidates, state: usize) -> Self {
        if state == UNVOICED {
            Self {
                f0: 0.0,
                voicing: c.voicing[0],
            }
        } else {
            Self {
                f0: c.f0[state],
                voicing: c.voicing[state],
            }
        }
    }
}

/// `cPitchSmootherViterbi`.
pub struct Viterbi {
    buffer_len: usize,
    cost: [f64; STATES],
    /// Per state, the states of the frames not yet released.
    paths: Vec<VecDeque<u8>>,
    frames: VecDeque<Candidates>,
    last_change: f64,
    started: bool,
}

fn range_cost(f: f32) -> f64 {
    let f = f64::from(f);
    if f <= 0.0 {
        2.0
    } else if f < 100.0 {
        1.0 - f / 100.0
    } else if f < 350.0 {
        0.0
    } else if f < 600.0 {
        (f - 350.0) / 250.0
    } else {
        1.2
    }
}

impl Viterbi {
    pub fn new(buffer_len: usize) -> Self {
        Self {
            buffer_len,
            cost: [0.0; STATES],
            paths: vec![VecDeque::new(); STATES],
            frames: VecDeque::new(),
            last_change: 1.0,
            started: false,
        }
    }

    fn local(c: &Candidates, i: usize) -> f64 {
        if i == UNVOICED {
            if c.voicing.iter().any(|&v| v >= THR) {
                W_LOCAL * W_THR
            } else {
                0.0
            }
        } else {
            let pv = c.voicing[i].clamp(0.01, 1.0);
            (-f64::from(pv).ln() + if pv < THR { W_THR } else { 0.0 }) * W_LOCAL
                + range_cost(c.f0[i]) * W_RANGE
        }
    }

    fn transition(&mut self, prev: &Candidates, cur: &Candidates, i: usize, j: usize) -> f64 {
        match (i == UNVOICED, j == UNVOICED) {
            (false, false) => {
                let (fc, fp) = (cur.f0[i], prev.f0[j]);
                if fp == 0.0 || fc == 0.0 {
                    return 999.0;
                }
                let r = f64::from(fc / fp).ln();
                let cost = W_TVV * r.abs() + W_TVVD * (r - self.last_change).abs();
                self.last_change = r;
                cost
            }
            (true, false) | (false, true) => {
                self.last_change = 0.0;
                W_TVUV
            }
            (true, true) => 1.0,
        }
    }

    /// Adds a frame; returns the decisions this releases, in frame order.
    pub fn push(&mut self, cand: Candidates) -> Vec<PitchDecision> {
        let mut new_cost = [0.0; STATES];
        let mut best_prev = [0usize; STATES];
        if !self.started {
            for (i, nc) in new_cost.iter_mut().enumerate() {
                *nc = Self::local(&cand, i);
            }
            self.started = true;
        } else {
            let prev = self.frames.back().copied().unwrap_or_default();
            for i in 0..STATES {
                let mut best = f64::INFINITY;
                let mut arg = 0;
                for j in 0..STATES {
                    let c = self.transition(&prev, &cand, i, j) + self.cost[j];
                    if c < best {
                        best = c;
                        arg = j;
                    }
                }
                new_cost[i] = best + Self::local(&cand, i);
                best_prev[i] = arg;
            }
        }
        let new_paths: Vec<VecDeque<u8>> = (0..STATES)
            .map(|i| {
                let mut p = if self.frames.is_empty() {
                    VecDeque::new()
                } else {
                    self.paths[best_prev[i]].clone()
                };
                p.push_back(i as u8);
                p
            })
            .collect();
        self.paths = new_paths;
        self.cost = new_cost;
        self.frames.push_back(cand);
        let mut out = Vec::new();
        if self.frames.len() > self.buffer_len {
            let s = self.best_state();
            out.push(self.release(s));
        } else {
            while !self.paths[0].is_empty() && {
                let first = self.paths[0][0];
                self.paths.iter().all(|p| p.front() == Some(&first))
            } {
                let s = self.paths[0][0] as usize;
                out.push(self.release(s));
            }
        }
        out
    }

    fn best_state(&self) -> usize {
        (0..STATES).fold(0, |b, k| if self.cost[k] < self.cost[b] { k } else { b })
    }

    /// Releases the oldest frame with the state at the front of path `s`.
    fn release(&mut self, s: usize) -> PitchDecision {
        let state = self.paths[s].front().copied().unwrap_or(UNVOICED as u8) as usize;
        for p in self.paths.iter_mut() {
            p.pop_front();
        }
        let c = self.frames.pop_front().unwrap_or_default();
        PitchDecision::of(&c, state)
    }

    /// Releases every remaining frame along the best current path.
    pub fn flush(&mut self) -> Vec<PitchDecision> {
        let s = self.best_state();
        let path: Vec<u8> = self.paths[s].iter().copied().collect();
        let mut out = Vec::new();
        for state in path {
            let c = self.frames.pop_front().unwrap_or_default();
            out.push(PitchDecision::of(&c, state as usize));
        }
        self.paths.iter_mut().for_each(VecDeque::clear);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifts_match_the_specification_at_16khz() {
        let p = ShsPitch::new(16_000, 1024, 52.0, 620.0);
        assert_eq!(
            p.shifts,
            vec![61, 97, 123, 143, 159, 173, 184, 195, 204, 213, 220, 228, 234, 240]
        );
    }

    #[test]
    fn parabola_peak() {
        let (x, y) = quad_peak([0.0, 1.0, 2.0], [0.0, 1.0, 0.0]);
        assert!((x - 1.0).abs() < 1e-12 && (y - 1.0).abs() < 1e-12);
        let (x, _) = quad_peak([0.0, 1.0, 2.0], [0.0, 1.0, 0.5]);
        assert!(x > 1.0 && x < 1.5);
    }

    #[test]
    fn viterbi_releases_every_frame_once_in_order() {
        let mut v = Viterbi::new(30);
        let mut released = 0;
        for k in 0..100 {
            let mut c = Candidates::default();
            if k % 10 < 6 {
                c.f0[0] = 200.0 + k as f32;
                c.voicing[0] = 0.9;
            }
            released += v.push(c).len();
            assert!(k + 1 - released <= 31);
        }
        released += v.flush().len();
        assert_eq!(released, 100);
    }
}
