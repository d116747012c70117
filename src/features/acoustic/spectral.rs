//! The 20 ms and 60 ms analysis frames: windows, FFT magnitudes, RMS, ZCR, the auditory
//! spectrum (loudness), RASTA, the spectral descriptors and MFCC
//! (`specs/compare-2016-llds.md`, sections 3-7).
//!
//! Contract: pure functions of one frame (plus the explicit state of RASTA and flux), in the
//! precision the specification names: float32 where openSMILE stores float32, f64 sums.

// Index loops over bins follow the specification's notation (k = lo..=hi, f_k, P[k]).
#![allow(clippy::needless_range_loop)]

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

/// A window applied before an FFT of `nfft` points, the frame placed at the symmetric offset.
pub struct MagnitudeSpectrum {
    window: Vec<f32>,
    nfft: usize,
    offset: usize,
    fft: Arc<dyn RealToComplex<f64>>,
    input: Vec<f64>,
    output: Vec<realfft::num_complex::Complex<f64>>,
    scratch: Vec<realfft::num_complex::Complex<f64>>,
}

/// Which window a frame level uses.
#[derive(Debug, Clone, Copy)]
pub enum WindowKind {
    Hamming,
    /// Gaussian with sigma 0.4 (relative to half the frame).
    Gauss,
}

impl MagnitudeSpectrum {
    pub fn new(frame_len: usize, kind: WindowKind) -> Self {
        let n = frame_len as f64;
        let window: Vec<f32> = (0..frame_len)
            .map(|i| {
                let i = i as f64;
                let w = match kind {
                    WindowKind::Hamming => {
                        0.54 - 0.46 * (2.0 * std::f64::consts::PI * i / (n - 1.0)).cos()
                    }
                    WindowKind::Gauss => {
                        let half = (n - 1.0) / 2.0;
                        (-0.5 * ((i - half) / (0.4 * half)).powi(2)).exp()
                    }
                };
                w as f32
            })
            .collect();
        let nfft = frame_len.next_power_of_two();
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(nfft);
        let input = fft.make_input_vec();
        let output = fft.make_output_vec();
        let scratch = fft.make_scratch_vec();
        Self {
            window,
            nfft,
            offset: (nfft - frame_len) / 2,
            fft,
            input,
            output,
            scratch,
        }
    }

    pub fn nfft(&self) -> usize {
        self.nfft
    }

    /// The complex spectrum of the last [`Self::magnitudes`] call.
    pub fn spectrum(&self) -> &[realfft::num_complex::Complex<f64>] {
        &self.output
    }

    /// The windowed frame (float32, as openSMILE's windower stores it).
    pub fn windowed(&self, frame: &[f32]) -> Vec<f32> {
        frame.iter().zip(&self.window).map(|(x, w)| x * w).collect()
    }

    /// Unnormalised magnitudes `|X[k]|`, `k = 0..=nfft/2`, of the windowed frame.
    pub fn magnitudes(&mut self, windowed: &[f32], out: &mut Vec<f32>) {
        self.input.iter_mut().for_each(|v| *v = 0.0);
        for (slot, &x) in self.input[self.offset..].iter_mut().zip(windowed) {
            *slot = f64::from(x);
        }
        // A planned FFT of the right length on vectors it made cannot fail.
        let _ = self
            .fft
            .process_with_scratch(&mut self.input, &mut self.output, &mut self.scratch);
        out.clear();
        out.extend(self.output.iter().map(|c| c.norm() as f32));
    }
}

/// RMS of a frame: float32 squares summed in double.
pub fn rms(frame: &[f32]) -> f32 {
    let sum: f64 = frame.iter().map(|&x| f64::from(x * x)).sum();
    (sum / frame.len() as f64).sqrt() as f32
}

/// Zero-crossing rate (crossings per sample) of a raw frame, openSMILE's `cMZcr`.
pub fn zcr(x: &[f32]) -> f32 {
    let n = x.len();
    if n < 3 {
        return 0.0;
    }
    let mut count = 0u32;
    for i in 1..n - 1 {
        if (x[i - 1] * x[i + 1] <= 0.0 && x[i] == 0.0) || (x[i - 1] * x[i] < 0.0) {
            count += 1;
        }
    }
    count as f32 / n as f32
}

/// The 26-band mel filterbank of `cMelspec` (20-8000 Hz, power, peak weight 1).
pub struct MelFilterbank {
    /// For each used bin: (bin, lower band index k or none, weight w).
    taps: Vec<(usize, usize, f64)>,
    pub centres_hz: Vec<f64>,
}

pub const MEL_BANDS: usize = 26;

fn mel(f: f64) -> f64 {
    1127.0 * (1.0 + f / 700.0).ln()
}

fn mel_inv(m: f64) -> f64 {
    700.0 * ((m / 1127.0).exp() - 1.0)
}

impl MelFilterbank {
    pub fn new(sample_rate: u32, nfft: usize) -> Self {
        let sr = f64::from(sample_rate);
        let hi = 8000.0f64.min(sr / 2.0);
        let lo = if (0.0..=sr / 2.0).contains(&20.0) && 20.0 <= hi {
            20.0
        } else {
            0.0
        };
        let (mlo, mhi) = (mel(lo), mel(hi));
        let c: Vec<f64> = (0..MEL_BANDS + 2)
            .map(|m| mlo + m as f64 * (mhi - mlo) / (MEL_BANDS as f64 + 1.0))
            .collect();
        let df = sr / nfft as f64;
        let n_lo = (lo / df).round() as usize;
        let n_hi = (hi / df).round() as usize;
        let mut taps = Vec::new();
        for n in n_lo + 1..n_hi {
            let m = mel(n as f64 * df);
            // c[k] < m <= c[k+1]
            if let Some(k) = (0..MEL_BANDS + 1).find(|&k| c[k] < m && m <= c[k + 1]) {
                let w = (c[k + 1] - m) / (c[k + 1] - c[k]);
                taps.push((n, k, w));
            }
        }
        let centres_hz = (1..=MEL_BANDS).map(|b| mel_inv(c[b])).collect();
        Self { taps, centres_hz }
    }

    /// Band energies of the power spectrum `p`.
    pub fn apply(&self, p: &[f32], out: &mut [f64; MEL_BANDS]) {
        out.iter_mut().for_each(|v| *v = 0.0);
        for &(n, k, w) in &self.taps {
            let pn = f64::from(p[n]);
            if k >= 1 {
                out[k - 1] += w * pn;
            }
            if k < MEL_BANDS {
                out[k] += (1.0 - w) * pn;
            }
        }
    }
}

/// Equal-loudness weight of `cPlp` at frequency `f` (with the source's w^7 term).
pub fn eql(f: f64) -> f64 {
    let w = 2.0 * std::f64::consts::PI * f;
    let w2 = w * w;
    let c = w2 + 6.3e6;
    1e32 * (w2 + 56.8e6) * w2 * w2 / (c * c * (w2 + 0.38e9) * (w2 * w2 * w2 * w + 1.7e31))
}

pub const MEL_FLOOR: f64 = 9.3e-10;

/// The auditory spectrum (loudness per band) and the RASTA-filtered one, with state.
pub struct Auditory {
    eql: [f64; MEL_BANDS],
    ln_eql: [f64; MEL_BANDS],
    rasta: [[f64; 4]; MEL_BANDS],
    frames: u64,
    b: [f64; 5],
    a: f64,
}

impl Auditory {
    pub fn new(bank: &MelFilterbank) -> Self {
        let mut eq = [0.0; MEL_BANDS];
        let mut ln_eq = [0.0; MEL_BANDS];
        for (b, &f) in bank.centres_hz.iter().enumerate() {
            eq[b] = eql(f);
            ln_eq[b] = eq[b].ln();
        }
        let t = 0.01;
        let a = 1.0 - (2.0 * std::f64::consts::PI * 1.0 * t).sin();
        let om = (2.0 * std::f64::consts::PI * 29.0 * t).cos();
        let norm = (10.0 * (32.0 * om * om + 8.0)).sqrt();
        Self {
            eql: eq,
            ln_eql: ln_eq,
            rasta: [[0.0; 4]; MEL_BANDS],
            frames: 0,
            b: [
                2.0 / norm,
                -4.0 * om / norm,
                0.0,
                4.0 * om / norm,
                -2.0 / norm,
            ],
            a,
        }
    }

    /// Writes the 26 plain and 26 RASTA auditory bands; returns (loudness, RASTA loudness).
    pub fn process(
        &mut self,
        bands: &[f64; MEL_BANDS],
        plain: &mut [f32; MEL_BANDS],
        rasta: &mut [f32; MEL_BANDS],
    ) -> (f32, f32) {
        let t = self.frames;
        self.frames += 1;
        let (mut sum_plain, mut sum_rasta) = (0.0f64, 0.0f64);
        for k in 0..MEL_BANDS {
            let bk = bands[k] as f32;
            let a = ((f64::from(bk).max(MEL_FLOOR)) * self.eql[k]).powf(0.33) as f32;
            plain[k] = a;
            sum_plain += f64::from(a);

            let l = f64::from(if f64::from(bk) >= MEL_FLOOR {
                f64::from(bk).ln() as f32
            } else {
                MEL_FLOOR.ln() as f32
            });
            let s = &mut self.rasta[k];
            let b = &self.b;
            let y = b[0] * l + s[0];
            s[0] = b[1] * l + s[1] + if t >= 5 { self.a * y } else { 0.0 };
            s[1] = b[2] * l + s[2];
            s[2] = b[3] * l + s[3];
            s[3] = b[4] * l;
            let r = if t >= 5 { y } else { 0.0 };
            let v = (0.33 * (r + self.ln_eql[k])).exp() as f32;
            rasta[k] = v;
            sum_rasta += f64::from(v);
        }
        (
            (sum_plain / MEL_BANDS as f64) as f32,
            (sum_rasta / MEL_BANDS as f64) as f32,
        )
    }
}

/// MFCC 1-14 from mel band energies (HTK scaling, log floor 1, lifter 22).
pub fn mfcc(bands: &[f64; MEL_BANDS], out: &mut [f32; 14]) {
    let scale = 32767.0f64 * 32767.0;
    let mut l = [0.0f64; MEL_BANDS];
    for (lm, &b) in l.iter_mut().zip(bands) {
        // The band energy is stored as float32 after the HTK scaling.
        let b = f64::from((b * scale) as f32);
        *lm = b.max(1.0).ln();
    }
    let n = MEL_BANDS as f64;
    for (i, o) in out.iter_mut().enumerate() {
        let i = (i + 1) as f64;
        let sum: f64 = l
            .iter()
            .enumerate()
            .map(|(m, &lm)| lm * (std::f64::consts::PI * i * (m as f64 + 0.5) / n).cos())
            .sum();
        let lifter = 1.0 + 11.0 * (std::f64::consts::PI * i / 22.0).sin();
        *o = ((2.0 / n).sqrt() * lifter * sum) as f32;
    }
}

/// The `cSpectral` descriptors of ComParE, in output order (15 values).
pub struct SpectralDescriptors {
    df: f64,
    n_bins: usize,
    bands: [(usize, f64, usize, f64); 2],
    bark: Vec<(f64, f64)>,
    prev: Vec<f32>,
}

/// Bin edges and weights (iL, wL, iR, wR) of the band `l`-`h` Hz, as `cSpectral` computes
/// them for fbands (also used by eGeMAPS slopes).
pub(crate) fn band_edges(l: f64, h: f64, df: f64, nmag: usize) -> (usize, f64, usize, f64) {
    let f = |k: usize| k as f64 * df;
    let ii = (0..nmag).find(|&k| f(k) > l).unwrap_or(nmag - 1);
    let mut wl = if ii == 0 { 1.0 } else { (f(ii) - l) / df };
    let il = ii.saturating_sub(1);
    let jj = (0..nmag).find(|&k| f(k) >= h).unwrap_or(nmag - 1);
    let mut wr = (h - f(jj.saturating_sub(1))) / df;
    let ir = if f(jj) == h { jj } else { jj.saturating_sub(1) };
    if wl == 0.0 {
        wl = 1.0;
    }
    if wr == 0.0 {
        wr = 1.0;
    }
    (il, wl, ir, wr)
}

fn bark(f: f64) -> f64 {
    if f <= 0.0 {
        return 0.0;
    }
    let zz = 26.81 / (1.0 + 1960.0 / f) - 0.53;
    if zz < 2.0 {
        0.85 * zz + 0.3
    } else if zz > 20.1 {
        1.22 * zz - 0.22 * 20.1
    } else {
        zz
    }
}

impl SpectralDescriptors {
    pub fn new(sample_rate: u32, nfft: usize) -> Self {
        let df = f64::from(sample_rate) / nfft as f64;
        let nmag = nfft / 2 + 1;
        let bark = (0..nmag)
            .map(|k| {
                let z = bark(k as f64 * df);
                let g = if z <= 16.0 {
                    1.0
                } else {
                    ((z - 16.0) / 4.0).powf(1.584_962_5) + 1.0
                };
                (z, g)
            })
            .collect();
        Self {
            df,
            n_bins: nfft / 2,
            bands: [
                band_edges(250.0, 650.0, df, nmag),
                band_edges(1000.0, 4000.0, df, nmag),
            ],
            bark,
            prev: Vec::new(),
        }
    }

    /// Computes the 15 descriptors from magnitudes `m` and powers `p` (k = 0..=nfft/2).
    pub fn process(&mut self, m: &[f32], p: &[f32], out: &mut [f32; 15]) {
        let (lo, hi) = (1usize, self.n_bins);
        let nb = self.n_bins as f64;
        let f = |k: usize| k as f64 * self.df;
        let s: f64 = p[lo..=hi].iter().map(|&v| f64::from(v)).sum();
        // fbands
        for (o, &(il, wl, ir, wr)) in out.iter_mut().zip(&self.bands) {
            let mut sum = f64::from(p[il]) * wl + f64::from(p[ir]) * wr;
            for &v in &p[il + 1..ir] {
                sum += f64::from(v);
            }
            *o = (sum / nb) as f32;
        }
        // roll-offs
        for (j, r) in [0.25, 0.5, 0.75, 0.9].iter().enumerate() {
            let target = r * s;
            let mut c = 0.0f64;
            let mut at = f(lo);
            if s > 0.0 {
                for k in lo..=hi {
                    c += f64::from(p[k]);
                    if c >= target {
                        at = f(k);
                        break;
                    }
                }
            }
            out[2 + j] = at as f32;
        }
        // flux (magnitudes, not normalised)
        out[6] = if self.prev.len() == m.len() {
            let sum: f64 = (lo..=hi)
                .map(|k| (f64::from(m[k]) - f64::from(self.prev[k])).powi(2))
                .sum();
            (sum / nb).sqrt() as f32
        } else {
            0.0
        };
        self.prev.clear();
        self.prev.extend_from_slice(m);
        // centroid
        let centroid = if s > 0.0 {
            (lo..=hi).map(|k| f(k) * f64::from(p[k])).sum::<f64>() / s
        } else {
            0.0
        };
        out[7] = centroid as f32;
        // entropy
        let mut dn = s;
        if dn < 1e-7 {
            dn = f64::from(1e-7f32);
        }
        let mut h = 0.0f64;
        for &v in &p[lo..=hi] {
            let pk = f64::from(v).max(1e-7) / dn;
            h -= pk * pk.log2();
        }
        out[8] = h as f32;
        // moments
        let (mut m2, mut m3, mut m4) = (0.0f64, 0.0f64, 0.0f64);
        for k in lo..=hi {
            let d = f(k) - centroid;
            let pk = f64::from(p[k]);
            m2 += d * d * pk;
            m3 += d * d * d * pk;
            m4 += d * d * d * d * pk;
        }
        let var = if s > 0.0 { m2 / s } else { 0.0 };
        out[9] = var as f32;
        out[10] = if var > 0.0 {
            (m3 / (s * var.powf(1.5))) as f32
        } else {
            0.0
        };
        out[11] = if var != 0.0 {
            (m4 / (s * var * var)) as f32
        } else {
            0.0
        };
        // slope (x nBins-1, oldSlopeScale)
        let (mut sf, mut sf2, mut sfp) = (0.0f64, 0.0f64, 0.0f64);
        for k in lo..=hi {
            let fk = f(k);
            sf += fk;
            sf2 += fk * fk;
            sfp += fk * f64::from(p[k]);
        }
        let denom = nb * sf2 - sf * sf;
        let slope = if denom != 0.0 {
            (nb * sfp - sf * s) / denom
        } else {
            0.0
        };
        out[12] = (slope * (nb - 1.0)) as f32;
        // psychoacoustic sharpness
        out[13] = if s > 0.0 {
            let sum: f64 = (lo..=hi)
                .map(|k| {
                    let (z, g) = self.bark[k];
                    z * g * f64::from(p[k])
                })
                .sum();
            (0.11 * sum / s) as f32
        } else {
            0.0
        };
        // harmonicity
        let mut sum = 0.0f64;
        let mut last: Option<f32> = None;
        for k in lo + 2..=hi.saturating_sub(2) {
            let v = p[k];
            let nbrs = [p[k - 2], p[k - 1], p[k + 1], p[k + 2]];
            let is_max = nbrs.iter().all(|&x| v > x);
            let is_min = nbrs.iter().all(|&x| v < x);
            if is_max || is_min {
                if let Some(prev) = last {
                    sum += f64::from((v - prev).abs());
                }
                last = Some(v);
            }
        }
        out[14] = (sum / 2.0 / nb) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mel_centres_and_eql_match_the_specification() {
        let bank = MelFilterbank::new(16_000, 512);
        let expected = [89.61, 165.95, 249.68, 7233.01];
        for (got, want) in [
            bank.centres_hz[0],
            bank.centres_hz[1],
            bank.centres_hz[2],
            bank.centres_hz[25],
        ]
        .iter()
        .zip(expected)
        {
            assert!((got - want).abs() < 0.01, "{got} vs {want}");
        }
        assert!((eql(bank.centres_hz[0]) - 0.002028).abs() < 1e-6);
        assert!((eql(bank.centres_hz[18]) - 3.134).abs() < 1e-3);
        // Bins 2..=255 are used at 16 kHz.
        assert_eq!(bank.taps.first().unwrap().0, 2);
        assert_eq!(bank.taps.last().unwrap().0, 255);
    }

    #[test]
    fn band_edges_match_the_specification() {
        let d = SpectralDescriptors::new(16_000, 512);
        assert_eq!(d.bands[0], (8, 1.0, 20, 0.8));
        assert_eq!(d.bands[1], (32, 1.0, 128, 1.0));
    }

    #[test]
    fn zcr_of_silence_is_the_reference_quirk() {
        assert!((zcr(&[0.0; 960]) - 0.997_916_7).abs() < 1e-6);
    }

    #[test]
    fn silence_gives_reference_loudness_values() {
        let bank = MelFilterbank::new(16_000, 512);
        let mut aud = Auditory::new(&bank);
        let bands = [0.0; MEL_BANDS];
        let (mut a, mut r) = ([0.0; MEL_BANDS], [0.0; MEL_BANDS]);
        let mut last = (0.0, 0.0);
        for _ in 0..50 {
            last = aud.process(&bands, &mut a, &mut r);
        }
        assert!((last.0 - 0.001_033_97).abs() < 1e-7, "{}", last.0);
        assert!((last.1 - 0.988_341).abs() < 1e-5, "{}", last.1);
        let mut c = [1.0; 14];
        mfcc(&bands, &mut c);
        assert!(c.iter().all(|&v| v.abs() < 1e-9));
    }
}
