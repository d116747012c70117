//! The no-speech check: whether a segment the voice-activity model accepted changes the
//! way speech does, decided before the recogniser sees it.
//!
//! Contract: [`SpectralChange::of`] measures a segment's spectral change: the median, over
//! its 32 ms frames (16 ms apart, Hann window) within [`FLOOR_DB`] of its loudest, of the
//! mean absolute change in dB of [`BANDS`] log-spaced band energies (150-6000 Hz) from one
//! frame to the next. [`is_speech_like`] is that median at or above
//! [`MIN_SPECTRAL_CHANGE_DB`]. Speech moves its energy between bands with every phone
//! (formant transitions, voicing on and off, frication), several dB per 16 ms; a steady
//! sound the model can still score as speech (a hum, a tone, a fan's whine, a held note)
//! has nearly the same spectrum frame after frame, and a segment of it is never sent to
//! the recogniser, which would otherwise write words for it ("You", "10.").
//!
//! The threshold is set from first principles and checked on material of both kinds
//! (docs/features.md "What is sent to the recogniser"): it is a floor far below every
//! speech segment measured, far above steady sounds.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

/// Frame and hop, samples at 16 kHz.
const FRAME: usize = 512;
const HOP: usize = 256;
/// Bands between these edges (Hz), log-spaced.
pub const BANDS: usize = 12;
const LOW_HZ: f32 = 150.0;
const HIGH_HZ: f32 = 6_000.0;
/// Frames quieter than the loudest by more than this are left out (padding, pauses).
pub const FLOOR_DB: f32 = 30.0;
/// The median band change (dB per 16 ms) below which a segment is not speech.
pub const MIN_SPECTRAL_CHANGE_DB: f32 = 1.5;

/// The spectral-change meter (its FFT plan and window kept between segments).
pub struct SpectralChange {
    fft: Arc<dyn RealToComplex<f32>>,
    window: Vec<f32>,
    /// FFT bin ranges of the bands.
    bands: Vec<(usize, usize)>,
}

impl Default for SpectralChange {
    fn default() -> Self {
        Self::new()
    }
}

impl SpectralChange {
    pub fn new() -> Self {
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(FRAME);
        let window = (0..FRAME)
            .map(|i| {
                let x = std::f32::consts::TAU * i as f32 / FRAME as f32;
                0.5 - 0.5 * x.cos()
            })
            .collect();
        let bin_hz = 16_000.0 / FRAME as f32;
        let ratio = (HIGH_HZ / LOW_HZ).powf(1.0 / BANDS as f32);
        let bands = (0..BANDS)
            .map(|b| {
                let lo = LOW_HZ * ratio.powi(b as i32);
                let hi = lo * ratio;
                let a = (lo / bin_hz).round() as usize;
                let z = ((hi / bin_hz).round() as usize).max(a + 1);
                (a, z)
            })
            .collect();
        Self { fft, window, bands }
    }

    /// The median change in dB per 16 ms of `samples` (16 kHz mono); 0 when the segment
    /// has fewer than three frames.
    pub fn of(&self, samples: &[f32]) -> f32 {
        if samples.len() < FRAME + 2 * HOP {
            return 0.0;
        }
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut frames: Vec<([f32; BANDS], f32)> = Vec::new();
        for start in (0..=samples.len() - FRAME).step_by(HOP) {
            for (i, (x, w)) in input.iter_mut().zip(&self.window).enumerate() {
                *x = samples[start + i] * w;
            }
            if self.fft.process(&mut input, &mut spectrum).is_err() {
                return 0.0;
            }
            let mut bands = [0f32; BANDS];
            let mut total = 0f32;
            for (b, &(a, z)) in self.bands.iter().enumerate() {
                let e: f32 = spectrum[a..z].iter().map(|c| c.norm_sqr()).sum();
                total += e;
                bands[b] = 10.0 * (e + 1e-10).log10();
            }
            frames.push((bands, 10.0 * (total + 1e-10).log10()));
        }
        let loudest = frames.iter().map(|f| f.1).fold(f32::MIN, f32::max);
        let mut changes: Vec<f32> = frames
            .windows(2)
            .filter(|w| w[0].1 >= loudest - FLOOR_DB && w[1].1 >= loudest - FLOOR_DB)
            .map(|w| {
                w[0].0
                    .iter()
                    .zip(&w[1].0)
                    .map(|(a, b)| (a - b).abs())
                    .sum::<f32>()
                    / BANDS as f32
            })
            .collect();
        if changes.is_empty() {
            return 0.0;
        }
        changes.sort_by(f32::total_cmp);
        changes[changes.len() / 2]
    }
}

/// Whether a segment's spectral change is speech's.
pub fn is_speech_like(change_db: f32) -> bool {
    change_db >= MIN_SPECTRAL_CHANGE_DB
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(hz: f32, seconds: f32, amplitude: f32) -> Vec<f32> {
        (0..(seconds * 16_000.0) as usize)
            .map(|i| amplitude * (std::f32::consts::TAU * hz * i as f32 / 16_000.0).sin())
            .collect()
    }

    #[test]
    fn a_steady_hum_is_not_speech_and_a_changing_spectrum_is() {
        let meter = SpectralChange::new();
        // A mains hum with harmonics: the same spectrum every frame.
        let hum: Vec<f32> = tone(120.0, 0.8, 0.2)
            .iter()
            .zip(tone(240.0, 0.8, 0.1))
            .zip(tone(360.0, 0.8, 0.05))
            .map(|((a, b), c)| a + b + c)
            .collect();
        let h = meter.of(&hum);
        assert!(!is_speech_like(h), "hum {h}");
        // Syllable-like: a voiced buzz whose formant jumps every 80 ms and that stops and
        // starts, as phones do.
        let mut syllables = Vec::new();
        for k in 0..10 {
            let f = [500.0, 1_500.0, 800.0, 2_300.0, 300.0][k % 5];
            let mut s = tone(f, 0.08, 0.3);
            s.iter_mut()
                .zip(tone(140.0, 0.08, 0.2))
                .for_each(|(a, b)| *a += b);
            syllables.extend(s);
            if k % 3 == 2 {
                syllables.extend(vec![0.001; 800]);
            }
        }
        let s = meter.of(&syllables);
        assert!(is_speech_like(s), "syllables {s}");
        assert_eq!(meter.of(&[0.0; 100]), 0.0);
    }
}
