//! The eGeMAPSv02-only descriptors (`specs/compare-2016-llds.md`, appendix A): alpha ratio,
//! Hammarberg index, spectral slopes, 0-5 kHz flux, harmonic-to-noise ratio from the ACF,
//! harmonic levels relative to F0, and formants from LPC.
//!
//! Contract: pure functions of one frame's spectrum (flux keeps its previous spectrum).
//! The formant and harmonic parts follow the specification's description of the source; the
//! specification did not prototype them, and the README reports how far they agree with
//! openSMILE.

use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{ComplexToReal, RealFftPlanner};

use super::pitch::quad_peak;
use super::spectral::band_edges;

/// The 20 ms spectral descriptors of eGeMAPS.
pub struct EgemapsSpectral {
    df: f64,
    slope_bands: [(usize, f64, usize, f64); 2],
    flux_bins: usize,
    prev: Vec<f32>,
}

impl EgemapsSpectral {
    pub fn new(sample_rate: u32, nfft: usize) -> Self {
        let df = f64::from(sample_rate) / nfft as f64;
        let nmag = nfft / 2 + 1;
        let flux_bins = (0..nmag).filter(|&k| (k as f64) * df < 5000.0).count();
        Self {
            df,
            slope_bands: [
                band_edges(0.0, 500.0, df, nmag),
                band_edges(500.0, 1500.0, df, nmag),
            ],
            flux_bins,
            prev: Vec::new(),
        }
    }

    /// (alphaRatio, hammarbergIndex, slope0-500, slope500-1500, spectralFlux).
    pub fn process(&mut self, m: &[f32], p: &[f32]) -> [f32; 5] {
        let f = |k: usize| k as f64 * self.df;
        let (mut lo_sum, mut hi_sum) = (0f32, 0f32);
        let (mut lo_max, mut hi_max) = (0f32, 0f32);
        for (k, &v) in p.iter().enumerate() {
            let fk = f(k);
            if fk < 1000.0 {
                lo_sum += v;
            } else if fk <= 5000.0 {
                hi_sum += v;
            }
            if fk < 2000.0 {
                lo_max = lo_max.max(v);
            } else if fk <= 5000.0 {
                hi_max = hi_max.max(v);
            }
        }
        let ratio_db = |num: f32, den: f32| -> f32 {
            if den == 0.0 {
                0.0
            } else {
                let num = if f64::from(num) <= 1e-14 {
                    1e-14
                } else {
                    f64::from(num)
                };
                (10.0 * (num / f64::from(den)).log10()) as f32
            }
        };
        let alpha = ratio_db(hi_sum, lo_sum);
        let hammarberg = ratio_db(lo_max, hi_max);
        let ldb = |k: usize| -> f64 {
            let v = f64::from(p[k]);
            if v <= 1e-14 {
                -140.0
            } else {
                10.0 * v.log10()
            }
        };
        let mut slopes = [0f32; 2];
        for (s, &(il, wl, ir, wr)) in slopes.iter_mut().zip(&self.slope_bands) {
            let (fl, fr) = (f(il) * wl, f(ir) * wr);
            let mut sf = fl + fr;
            let mut s2f = fl * fl + fr * fr;
            let mut sum_a = fl * ldb(il) + fr * ldb(ir);
            let mut sum_b = ldb(il) * wl + ldb(ir) * wr;
            for k in il + 1..ir {
                let fk = f(k);
                sf += fk;
                s2f += fk * fk;
                sum_a += fk * ldb(k);
                sum_b += ldb(k);
            }
            // Quirk kept: n is iR - iL, not the number of points.
            let n = (ir - il) as f64;
            let den = n * s2f - sf * sf;
            *s = if den != 0.0 {
                ((n * sum_a - sf * sum_b) / den) as f32
            } else {
                0.0
            };
        }
        let nb = self.flux_bins;
        let flux = if self.prev.len() == m.len() {
            let sum: f64 = (0..nb)
                .map(|k| (f64::from(m[k]) - f64::from(self.prev[k])).powi(2))
                .sum();
            (sum / nb as f64).sqrt() as f32
        } else {
            0.0
        };
        self.prev.clear();
        self.prev.extend_from_slice(m);
        [alpha, hammarberg, slopes[0], slopes[1], flux]
    }
}

/// Harmonic-to-noise ratio from the autocorrelation of the 60 ms power spectrum, in dB.
pub struct AcfHnr {
    inverse: Arc<dyn ComplexToReal<f64>>,
    spectrum: Vec<Complex<f64>>,
    acf: Vec<f64>,
    scratch: Vec<Complex<f64>>,
    sample_rate: f64,
}

impl AcfHnr {
    pub fn new(sample_rate: u32, nfft: usize) -> Self {
        let inverse = RealFftPlanner::<f64>::new().plan_fft_inverse(nfft);
        Self {
            spectrum: inverse.make_input_vec(),
            acf: inverse.make_output_vec(),
            scratch: inverse.make_scratch_vec(),
            inverse,
            sample_rate: f64::from(sample_rate),
        }
    }

    /// HNR in dB for `f0` (Hz) from magnitudes `m` (n = nfft/2 + 1), clamped to [-90, 110];
    /// 0 when unvoiced.
    pub fn hnr_db(&mut self, m: &[f32], f0: f32) -> f32 {
        if f0 <= 0.0 {
            return 0.0;
        }
        for (s, &v) in self.spectrum.iter_mut().zip(m) {
            *s = Complex::new(f64::from(v) * f64::from(v), 0.0);
        }
        // The imaginary parts of DC and Nyquist must be zero for a real inverse.
        let _ =
            self.inverse
                .process_with_scratch(&mut self.spectrum, &mut self.acf, &mut self.scratch);
        let half = self.acf.len() / 2;
        let acf = |k: usize| self.acf[k].abs();
        let mut lag = (self.sample_rate / f64::from(f0)).floor() as usize;
        if lag == 0 || lag >= half {
            return 0.0;
        }
        // Refine to the nearest local maximum.
        if lag + 1 < half && acf(lag + 1) > acf(lag) {
            while lag + 1 < half && acf(lag + 1) > acf(lag) {
                lag += 1;
            }
        } else {
            while lag > 1 && acf(lag - 1) > acf(lag) {
                lag -= 1;
            }
        }
        let (a0, al) = (acf(0), acf(lag));
        let den = a0 - al;
        let ratio = if den > 0.0 { al / den } else { 1e11 };
        (10.0 * ratio.clamp(1e-9, 1e11).log10()) as f32
    }
}

/// One harmonic found near a multiple of F0.
#[derive(Debug, Clone, Copy)]
struct Harmonic {
    bin: usize,
    freq: f64,
    mag_bin: f64,
    mag_interp: f64,
}

const N_HARMONICS: usize = 100;

/// Harmonic levels relative to F0: (H1-H2, H1-A3, [F1, F2, F3] amplitude), all in dB.
/// `formants` are F1-F3 in Hz (0 when absent). Unvoiced: (0, 0, [-201; 3]).
pub fn harmonic_levels(m: &[f32], df: f64, f0: f32, formants: [f32; 3]) -> (f32, f32, [f32; 3]) {
    if f0 <= 0.0 {
        return (0.0, 0.0, [-201.0; 3]);
    }
    let f0 = f64::from(f0);
    let n = m.len();
    let is_peak = |b: usize| b >= 1 && b + 1 < n && m[b] > m[b - 1] && m[b] >= m[b + 1];
    let mut harmonics: Vec<Option<Harmonic>> = Vec::with_capacity(N_HARMONICS);
    for i in 0..N_HARMONICS {
        let expected = (i + 1) as f64 * f0;
        let (lo, hi) = ((i as f64 + 0.5) * f0 / df, (i as f64 + 1.5) * f0 / df);
        let centre = (expected / df).round() as i64;
        let mut found = None;
        let mut d = 0i64;
        while (centre + d) as f64 <= hi || (centre - d) as f64 >= lo {
            for b in [centre + d, centre - d] {
                if b >= 1 && (b as f64) >= lo && (b as f64) <= hi && is_peak(b as usize) {
                    found = Some(b as usize);
                    break;
                }
            }
            if found.is_some() {
                break;
            }
            d += 1;
        }
        harmonics.push(found.map(|b| {
            let (x, y) = quad_peak(
                [b as f64 - 1.0, b as f64, b as f64 + 1.0],
                [f64::from(m[b - 1]), f64::from(m[b]), f64::from(m[b + 1])],
            );
            Harmonic {
                bin: b,
                freq: x * df,
                mag_bin: f64::from(m[b]),
                mag_interp: y,
            }
        }));
    }
    let Some(h0) = harmonics[0] else {
        return (0.0, 0.0, [-201.0; 3]);
    };
    let reference = h0.mag_bin.max(1e-300).log10();
    let log_rel: Vec<f64> = harmonics
        .iter()
        .enumerate()
        .map(|(i, h)| match h {
            Some(h) if i > 0 && harmonics[i - 1].is_some_and(|p| p.bin == h.bin) => -201.0,
            Some(h) => (20.0 * (h.mag_interp.max(1e-300).log10() - reference)).max(-200.0),
            None => -201.0,
        })
        .collect();
    let clamp = |v: f64| v.clamp(-201.0, 201.0) as f32;
    let formant_harmonic = |fk: f32| -> Option<usize> {
        if fk <= 0.0 {
            return None;
        }
        let (lo, hi) = (0.8 * f64::from(fk), 1.2 * f64::from(fk));
        harmonics
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.map(|h| (i, h)))
            .filter(|(_, h)| h.freq >= lo && h.freq <= hi)
            .fold(None, |best: Option<(usize, f64)>, (i, h)| match best {
                Some((_, m)) if m >= h.mag_bin => best,
                _ => Some((i, h.mag_bin)),
            })
            .map(|(i, _)| i)
    };
    let h1_h2 = clamp(log_rel[1] - log_rel[2]);
    let a3 = formant_harmonic(formants[2]);
    let h1_a3 = a3.map_or(0.0, |i| clamp(log_rel[1] - log_rel[i]));
    let mut amps = [0f32; 3];
    for (a, &fk) in amps.iter_mut().zip(&formants) {
        *a = formant_harmonic(fk).map_or(0.0, |i| clamp(log_rel[i]));
    }
    (h1_h2, h1_a3, amps)
}

/// Formants F1-F3 (frequency and bandwidth, Hz) from the 20 ms Hamming spectrum: band-limited
/// resampling to 11 kHz by a truncated inverse DFT, LPC order 11, polynomial roots.
pub struct Formants {
    /// cos and sin (float32) of 2 pi k n / nd for bins k = 1..kMax/2 and outputs n.
    table: Vec<(f32, f32)>,
    n_out: usize,
    bins: usize,
}

const LPC_ORDER: usize = 11;
const FORMANT_RATE: f64 = 11_000.0;

impl Formants {
    pub fn new(sample_rate: u32, nfft: usize) -> Self {
        let sr = f64::from(sample_rate);
        let ratio = FORMANT_RATE / sr;
        // The 20 ms frame was zero-padded to nfft: the output covers 20 ms at 11 kHz, and the
        // ratio is adjusted so that it is a whole number of samples.
        let frame_share = 0.020 / (nfft as f64 / sr);
        let n_out = (nfft as f64 * ratio * frame_share).round();
        let ratio = n_out / (nfft as f64 * frame_share);
        let nd = nfft as f64 * ratio;
        let n_out = n_out as usize;
        let mut k_max = nfft.min(n_out);
        if k_max % 2 == 1 {
            k_max -= 1;
        }
        let bins = k_max / 2;
        let mut table = Vec::with_capacity(bins * n_out);
        for n in 0..n_out {
            for k in 1..bins {
                let w = 2.0 * std::f64::consts::PI * (k * n) as f64 / nd;
                table.push((w.cos() as f32, w.sin() as f32));
            }
        }
        Self { table, n_out, bins }
    }

    /// `[F1, F1bw, F2, F2bw, F3, F3bw]` from the complex spectrum of the 20 ms frame.
    ///
    /// The resampled frame, its autocorrelation and the Levinson-Durbin recursion are in
    /// float32 as in openSMILE: the band-limited frame makes the LPC ill-conditioned, and the
    /// precision shows in the formants.
    pub fn process(&self, spectrum: &[Complex<f64>]) -> [f32; 6] {
        let mut x = vec![0f32; self.n_out];
        let per_n = self.bins.saturating_sub(1);
        for (n, xn) in x.iter_mut().enumerate() {
            // DC and bins 1..kMax/2-1; output sample n sits at n / nd of the FFT buffer.
            let mut s = spectrum[0].re as f32;
            for (k, &(c, si)) in (1..self.bins).zip(&self.table[n * per_n..(n + 1) * per_n]) {
                // Ooura's packing holds +sin terms: the negated imaginary part.
                s += spectrum[k].re as f32 * c + (-spectrum[k].im) as f32 * si;
            }
            *xn = s;
        }
        let Some(a) = lpc(&x, LPC_ORDER) else {
            return [0.0; 6];
        };
        // Quirk kept: the root polynomial is built from the negated coefficients,
        // z^p - a1 z^(p-1) - ... - ap.
        let mut poly = vec![Complex::new(1.0, 0.0)];
        poly.extend(a.iter().map(|&c| Complex::new(-f64::from(c), 0.0)));
        let mut found: Vec<(f64, f64)> = roots(&poly)
            .into_iter()
            .map(|r| if r.norm() > 1.0 { 1.0 / r.conj() } else { r })
            .filter(|r| r.im >= 0.0)
            .filter_map(|r| {
                let f = r.im.atan2(r.re).abs() * FORMANT_RATE / (2.0 * std::f64::consts::PI);
                let bw = -r.norm().ln() * FORMANT_RATE / std::f64::consts::PI;
                (50.0..=5450.0).contains(&f).then_some((f, bw))
            })
            .collect();
        found.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut out = [0f32; 6];
        for (i, (f, bw)) in found.into_iter().take(3).enumerate() {
            out[2 * i] = f as f32;
            out[2 * i + 1] = bw as f32;
        }
        out
    }
}

/// LPC coefficients a[1..=order] (A(z) = 1 + sum a_i z^-i) by autocorrelation and
/// Levinson-Durbin in float32; `None` for a silent frame.
fn lpc(x: &[f32], order: usize) -> Option<Vec<f32>> {
    let r: Vec<f32> = (0..=order)
        .map(|lag| {
            let mut acc = 0f32;
            for i in lag..x.len() {
                acc += x[i] * x[i - lag];
            }
            acc
        })
        .collect();
    if r[0] == 0.0 {
        return None;
    }
    let mut a = vec![0f32; order + 1];
    a[0] = 1.0;
    let mut err = r[0];
    for i in 1..=order {
        let mut acc = r[i];
        for j in 1..i {
            acc += a[j] * r[i - j];
        }
        let k = -acc / err;
        let prev = a.clone();
        for j in 1..i {
            a[j] = prev[j] + k * prev[i - j];
        }
        a[i] = k;
        err *= 1.0 - k * k;
        if err <= 0.0 {
            break;
        }
    }
    Some(a[1..].to_vec())
}

/// Roots of a polynomial with coefficients from the highest power (Aberth-Ehrlich).
fn roots(coeffs: &[Complex<f64>]) -> Vec<Complex<f64>> {
    let degree = coeffs.len() - 1;
    if degree == 0 {
        return Vec::new();
    }
    let eval = |z: Complex<f64>| {
        let (mut p, mut dp) = (coeffs[0], Complex::new(0.0, 0.0));
        for c in &coeffs[1..] {
            dp = dp * z + p;
            p = p * z + c;
        }
        (p, dp)
    };
    // Initial guesses on a circle of the Cauchy bound's radius, off the axes.
    let radius = 1.0
        + coeffs[1..]
            .iter()
            .map(|c| (c / coeffs[0]).norm())
            .fold(0.0, f64::max);
    let mut z: Vec<Complex<f64>> = (0..degree)
        .map(|k| {
            Complex::from_polar(
                radius * 0.5,
                2.0 * std::f64::consts::PI * k as f64 / degree as f64 + 0.4,
            )
        })
        .collect();
    for _ in 0..500 {
        let mut moved = 0.0f64;
        for i in 0..degree {
            let (p, dp) = eval(z[i]);
            if p.norm() == 0.0 {
                continue;
            }
            let ratio = p / dp;
            let sum: Complex<f64> = (0..degree)
                .filter(|&j| j != i)
                .map(|j| Complex::new(1.0, 0.0) / (z[i] - z[j]))
                .sum();
            let step = ratio / (Complex::new(1.0, 0.0) - ratio * sum);
            if step.is_finite() {
                z[i] -= step;
                moved = moved.max(step.norm());
            }
        }
        if moved < 1e-14 {
            break;
        }
    }
    z
}

/// Semitones above 27.5 Hz, as eGeMAPS reports F0 (1 for very low F0, 0 unvoiced).
pub fn semitones(f0: f32) -> f32 {
    if f0 > 29.136 {
        (12.0 * (f64::from(f0) / 27.5).log2()) as f32
    } else if f0 > 0.0 {
        1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_slopes_have_the_reference_quirk() {
        let mut s = EgemapsSpectral::new(16_000, 512);
        let zeros = vec![0f32; 257];
        let v = s.process(&zeros, &zeros);
        assert!((v[2] - 0.112).abs() < 1e-3, "{v:?}");
        assert!((v[3] - 0.0764).abs() < 1e-4, "{v:?}");
        assert_eq!((v[0], v[1], v[4]), (0.0, 0.0, 0.0));
    }

    #[test]
    fn roots_of_a_known_polynomial() {
        // (z - 0.5)(z + 0.25)(z^2 + 1)
        let c = |re| Complex::new(re, 0.0);
        let poly = [c(1.0), c(-0.25), c(0.875), c(-0.25), c(-0.125)];
        let mut r = roots(&poly);
        r.sort_by(|a, b| a.re.total_cmp(&b.re).then(a.im.total_cmp(&b.im)));
        assert!((r[0] - c(-0.25)).norm() < 1e-9);
        assert!((r[1] - Complex::new(0.0, -1.0)).norm() < 1e-9);
        assert!((r[2] - Complex::new(0.0, 1.0)).norm() < 1e-9);
        assert!((r[3] - c(0.5)).norm() < 1e-9);
    }

    #[test]
    fn semitone_scale() {
        assert_eq!(semitones(0.0), 0.0);
        assert!((semitones(55.0) - 12.0).abs() < 1e-5);
        assert!((semitones(150.0) - 29.369).abs() < 1e-2);
    }
}
