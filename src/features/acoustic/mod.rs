//! openSMILE-compatible low-level descriptors, streaming: ComParE-2016 (65 per 10 ms) and
//! eGeMAPSv02 (25 per 10 ms).
//!
//! Contract: a clean implementation of `specs/compare-2016-llds.md` (no openSMILE code).
//! [`LldExtractor`] takes mono audio in blocks of any size and emits one row per 10 ms frame
//! `t` (frame t starts at sample `160 t` at 16 kHz), stamped with the frame's start on the
//! session timeline, with openSMILE's columns in its order ([`LldSet::columns`]). The rows do
//! not depend on how the audio was split into blocks. Rows are emitted once final (ComParE;
//! eGeMAPS alike with a Viterbi lag of up to 40 frames):
//!
//! | columns | latency after the frame's start |
//! |---|---|
//! | spectral, MFCC, loudness, RASTA, RMS (20 ms frames), ZCR (60 ms) | 60 ms frame + 10 ms smoothing look-ahead = 70 ms |
//! | F0, voicing, jitter, shimmer, HNR | the above plus the Viterbi decision lag: 0-300 ms (30 frames at most) |
//!
//! A row is released only when all its columns are final, so the row latency is the larger
//! one: between 70 and 370 ms.
//!
//! Samples are scaled by 32768/32767 first: the pipeline reads int16 as s/32768, openSMILE
//! as s/32767, and the values here follow openSMILE. Non-finite input samples are replaced by
//! 0 (and counted); the WAV reader already rejects them. Only complete 60 ms frames give
//! rows: a stream of N samples gives `floor((N - 960) / 160) + 1` rows at 16 kHz
//! (openSMILE adds one end-of-input row, which is not reproduced).
//!
//! Pooling into a video frame ([`pool_compare_rows`]): the mean of the rows; for F0, jitter,
//! shimmer and log HNR only over voiced rows (F0 > 0), and when a frame has no voiced row
//! those take their unvoiced values (F0 0, jitter 0, shimmer 0, log HNR -100).

pub mod egemaps;
pub mod jitter;
pub mod pitch;
pub mod spectral;

mod pool;
use pool::Smoother;
pub use pool::{pool_compare_rows, pool_egemaps_rows};

use std::collections::VecDeque;

use self::egemaps::{harmonic_levels, semitones, AcfHnr, EgemapsSpectral, Formants};
use self::jitter::PitchJitter;
use self::pitch::{ShsPitch, Viterbi};
use self::spectral::{
    mfcc, rms, zcr, Auditory, MagnitudeSpectrum, MelFilterbank, SpectralDescriptors, WindowKind,
    MEL_BANDS,
};
use super::{AudioRow, AudioStage, PoolFn, StageError};
use crate::capture::AudioBlock;
use crate::core::{LldSet, ModalitySpec};
use crate::Nanos;

/// Number of ComParE-2016 LLDs (the widest set).
pub const DIMS: usize = crate::core::COMPARE_LLDS;

/// What the LLD set means here: its columns (the set itself is [`LldSet`], in
/// [`crate::core`], so the configuration names it without the extractor).
impl LldSet {
    /// openSMILE's column names, in its order.
    pub fn columns(self) -> Vec<String> {
        match self {
            LldSet::Compare => column_names(),
            LldSet::Egemaps => EGEMAPS_COLUMNS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Columns smoothed ignoring zeros (the pitch, voice-quality and formant group).
    fn nz(self) -> std::ops::Range<usize> {
        match self {
            LldSet::Compare => 0..6,
            LldSet::Egemaps => 10..25,
        }
    }
}

const EGEMAPS_COLUMNS: [&str; 25] = [
    "Loudness_sma3",
    "alphaRatio_sma3",
    "hammarbergIndex_sma3",
    "slope0-500_sma3",
    "slope500-1500_sma3",
    "spectralFlux_sma3",
    "mfcc1_sma3",
    "mfcc2_sma3",
    "mfcc3_sma3",
    "mfcc4_sma3",
    "F0semitoneFrom27.5Hz_sma3nz",
    "jitterLocal_sma3nz",
    "shimmerLocaldB_sma3nz",
    "HNRdBACF_sma3nz",
    "logRelF0-H1-H2_sma3nz",
    "logRelF0-H1-A3_sma3nz",
    "F1frequency_sma3nz",
    "F1bandwidth_sma3nz",
    "F1amplitudeLogRelF0_sma3nz",
    "F2frequency_sma3nz",
    "F2bandwidth_sma3nz",
    "F2amplitudeLogRelF0_sma3nz",
    "F3frequency_sma3nz",
    "F3bandwidth_sma3nz",
    "F3amplitudeLogRelF0_sma3nz",
];

/// openSMILE's ComParE-2016 column names, in its order.
pub fn column_names() -> Vec<String> {
    let mut c: Vec<String> = [
        "F0final_sma",
        "voicingFinalUnclipped_sma",
        "jitterLocal_sma",
        "jitterDDP_sma",
        "shimmerLocal_sma",
        "logHNR_sma",
        "audspec_lengthL1norm_sma",
        "audspecRasta_lengthL1norm_sma",
        "pcm_RMSenergy_sma",
        "pcm_zcr_sma",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    c.extend((0..26).map(|i| format!("audSpec_Rfilt_sma[{i}]")));
    c.extend(
        [
            "pcm_fftMag_fband250-650_sma",
            "pcm_fftMag_fband1000-4000_sma",
            "pcm_fftMag_spectralRollOff25.0_sma",
            "pcm_fftMag_spectralRollOff50.0_sma",
            "pcm_fftMag_spectralRollOff75.0_sma",
            "pcm_fftMag_spectralRollOff90.0_sma",
            "pcm_fftMag_spectralFlux_sma",
            "pcm_fftMag_spectralCentroid_sma",
            "pcm_fftMag_spectralEntropy_sma",
            "pcm_fftMag_spectralVariance_sma",
            "pcm_fftMag_spectralSkewness_sma",
            "pcm_fftMag_spectralKurtosis_sma",
            "pcm_fftMag_spectralSlope_sma",
            "pcm_fftMag_psySharpness_sma",
            "pcm_fftMag_spectralHarmonicity_sma",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    c.extend((1..=14).map(|i| format!("mfcc_sma[{i}]")));
    c
}

/// A frame whose spectral columns are known and whose pitch columns may still be pending.
struct PendingRow {
    raw: [f32; DIMS],
    e60: f32,
    /// eGeMAPS: the 60 ms magnitudes (harmonics, HNR need the decided F0).
    mag60: Vec<f32>,
}

/// Loudness, RASTA loudness and the 26 RASTA auditory bands of one 20 ms frame.
type Loudness = (f32, f32, [f32; MEL_BANDS]);

/// The eGeMAPS-only parts.
struct EgemapsParts {
    spectral: EgemapsSpectral,
    hnr: AcfHnr,
    formants: Formants,
    df60: f64,
}

/// The streaming LLD extractor.
pub struct LldExtractor {
    set: LldSet,
    spec: ModalitySpec,
    egemaps: Option<EgemapsParts>,
    rate: u32,
    hop: usize,
    len20: usize,
    len60: usize,
    gain: f32,
    /// Samples from absolute index `buf_start`.
    buf: Vec<f32>,
    buf_start: usize,
    total: usize,
    first_t_ns: Option<Nanos>,
    next_frame: u64,
    next_decided: u64,
    fft20: MagnitudeSpectrum,
    fft60: MagnitudeSpectrum,
    mel: MelFilterbank,
    auditory: Auditory,
    spectral: SpectralDescriptors,
    shs: ShsPitch,
    viterbi: Viterbi,
    jitter: PitchJitter,
    pending: VecDeque<PendingRow>,
    smoother: Smoother,
    sanitised: u64,
    // scratch
    mag: Vec<f32>,
    pow: Vec<f32>,
}

impl LldExtractor {
    pub fn new(set: LldSet, sample_rate_hz: u32) -> Self {
        let sr = f64::from(sample_rate_hz);
        let len20 = (0.020 * sr).round() as usize;
        let len60 = (0.060 * sr).round() as usize;
        let fft20 = MagnitudeSpectrum::new(len20, WindowKind::Hamming);
        let fft60 = MagnitudeSpectrum::new(len60, WindowKind::Gauss);
        let mel = MelFilterbank::new(sample_rate_hz, fft20.nfft());
        let auditory = Auditory::new(&mel);
        let spectral = SpectralDescriptors::new(sample_rate_hz, fft20.nfft());
        let (min_pitch, max_pitch, viterbi_len, search_range) = match set {
            LldSet::Compare => (52.0, 620.0, 30, 0.25),
            LldSet::Egemaps => (55.0, 1000.0, 40, 0.1),
        };
        let shs = ShsPitch::new(sample_rate_hz, fft60.nfft(), min_pitch, max_pitch);
        let egemaps = (set == LldSet::Egemaps).then(|| EgemapsParts {
            spectral: EgemapsSpectral::new(sample_rate_hz, fft20.nfft()),
            hnr: AcfHnr::new(sample_rate_hz, fft60.nfft()),
            formants: Formants::new(sample_rate_hz, fft20.nfft()),
            df60: sr / fft60.nfft() as f64,
        });
        Self {
            set,
            egemaps,
            spec: ModalitySpec::by_algorithm(
                set.modality(),
                set.columns(),
                format!("acoustic::LldExtractor {}", set.modality()),
                1,
            ),
            rate: sample_rate_hz,
            hop: (0.010 * sr).round() as usize,
            len20,
            len60,
            gain: 32768.0 / 32767.0,
            buf: Vec::new(),
            buf_start: 0,
            total: 0,
            first_t_ns: None,
            next_frame: 0,
            next_decided: 0,
            fft20,
            fft60,
            mel,
            auditory,
            spectral,
            shs,
            viterbi: Viterbi::new(viterbi_len),
            jitter: PitchJitter::new(sample_rate_hz, search_range),
            pending: VecDeque::new(),
            smoother: Smoother::new(set),
            sanitised: 0,
            mag: Vec::new(),
            pow: Vec::new(),
        }
    }

    /// Input samples replaced by 0 because they were NaN or infinite.
    pub fn sanitised_samples(&self) -> u64 {
        self.sanitised
    }

    fn row_time(&self, t: u64) -> Nanos {
        self.first_t_ns.unwrap_or(0) + crate::capture::samples_to_ns(t * self.hop as u64, self.rate)
    }

    /// Feeds samples (already at this stage's rate); returns the rows that became final.
    pub fn push_samples(&mut self, t_ns: Nanos, samples: &[f32]) -> Vec<AudioRow> {
        self.first_t_ns.get_or_insert(t_ns);
        self.buf.reserve(samples.len());
        for &s in samples {
            let v = if s.is_finite() {
                s * self.gain
            } else {
                self.sanitised += 1;
                0.0
            };
            self.buf.push(v);
        }
        self.total += samples.len();
        let mut rows = Vec::new();
        while self.total >= self.next_frame as usize * self.hop + self.len60 {
            let t = self.next_frame;
            let cands = self.analyse(t);
            self.next_frame += 1;
            for d in self.viterbi.push(cands) {
                self.decide(d);
            }
            self.release(&mut rows);
        }
        self.trim();
        rows
    }

    /// Ends the stream: flushes the pitch decisions and the smoother.
    pub fn finish_rows(&mut self) -> Vec<AudioRow> {
        for d in self.viterbi.flush() {
            self.decide(d);
        }
        let mut rows = Vec::new();
        self.release(&mut rows);
        // The 20 ms columns of the last row look ahead at the next 20 ms frame when the
        // audio holds one (as openSMILE's 20 ms levels do); the others repeat the last row.
        let t = self.next_frame;
        let lookahead = if self.total >= t as usize * self.hop + self.len20 {
            self.smoother.last().map(|last| {
                let mut raw = last;
                let start = t as usize * self.hop - self.buf_start;
                let frame20: Vec<f32> = self.buf[start..start + self.len20].to_vec();
                self.twenty_ms_columns(&frame20, &mut raw);
                raw
            })
        } else {
            None
        };
        if let Some(row) = self.smoother.finish(lookahead) {
            let t = self.smoother.emitted;
            rows.push(AudioRow {
                t_ns: self.row_time(t - 1),
                values: row[..self.set.dims()].to_vec(),
            });
        }
        rows
    }

    /// Computes frame `t`'s spectral columns into a pending row; returns its SHS candidates.
    fn analyse(&mut self, t: u64) -> pitch::Candidates {
        let start = t as usize * self.hop - self.buf_start;
        let frame60: Vec<f32> = self.buf[start..start + self.len60].to_vec();
        let mut raw = [0f32; DIMS];
        if self.set == LldSet::Compare {
            raw[9] = zcr(&frame60);
        }
        self.twenty_ms_columns(&frame60[..self.len20], &mut raw);
        // 60 ms Gaussian frame: energy gate and pitch.
        let win60 = self.fft60.windowed(&frame60);
        let e60 = rms(&win60);
        let mut mag = std::mem::take(&mut self.mag);
        self.fft60.magnitudes(&win60, &mut mag);
        let cands = self.shs.candidates(&mag);
        let mag60 = if self.egemaps.is_some() {
            mag.clone()
        } else {
            Vec::new()
        };
        self.mag = mag;
        self.pending.push_back(PendingRow { raw, e60, mag60 });
        cands
    }

    /// The columns computed from the 20 ms frame, in the set's layout.
    fn twenty_ms_columns(&mut self, frame20: &[f32], raw: &mut [f32; DIMS]) {
        match self.set {
            LldSet::Compare => self.compare_columns(frame20, raw),
            LldSet::Egemaps => self.egemaps_columns(frame20, raw),
        }
    }

    /// The 20 ms Hamming spectrum (magnitudes; powers left in `self.pow`), its 26 mel band
    /// energies, and the loudness figures. The caller hands the magnitudes back to
    /// `self.mag` when done.
    fn auditory_spectrum(&mut self, frame20: &[f32]) -> (Vec<f32>, [f64; MEL_BANDS], Loudness) {
        let win20 = self.fft20.windowed(frame20);
        let mut mag = std::mem::take(&mut self.mag);
        self.fft20.magnitudes(&win20, &mut mag);
        self.pow.clear();
        self.pow.extend(mag.iter().map(|m| m * m));
        let mut bands = [0f64; MEL_BANDS];
        self.mel.apply(&self.pow, &mut bands);
        let (mut plain, mut rasta) = ([0f32; MEL_BANDS], [0f32; MEL_BANDS]);
        let (loud, loud_rasta) = self.auditory.process(&bands, &mut plain, &mut rasta);
        (mag, bands, (loud, loud_rasta, rasta))
    }

    /// eGeMAPS 20 ms columns: loudness, alpha ratio, Hammarberg, slopes, flux, MFCC 1-4,
    /// and the formant frequencies and bandwidths.
    fn egemaps_columns(&mut self, frame20: &[f32], raw: &mut [f32; DIMS]) {
        let (mag, bands, loudness) = self.auditory_spectrum(frame20);
        raw[0] = loudness.0;
        if let Some(e) = &mut self.egemaps {
            let v = e.spectral.process(&mag, &self.pow);
            raw[1..6].copy_from_slice(&v);
            let f = e.formants.process(self.fft20.spectrum());
            raw[16] = f[0];
            raw[17] = f[1];
            raw[19] = f[2];
            raw[20] = f[3];
            raw[22] = f[4];
            raw[23] = f[5];
        }
        let mut cep = [0f32; 14];
        mfcc(&bands, &mut cep);
        raw[6..10].copy_from_slice(&cep[..4]);
        self.mag = mag;
    }

    /// ComParE 20 ms columns (energy, auditory, RASTA, spectral, MFCC).
    fn compare_columns(&mut self, frame20: &[f32], raw: &mut [f32; DIMS]) {
        raw[8] = rms(frame20);
        let (mag, bands, (loud, loud_rasta, rasta)) = self.auditory_spectrum(frame20);
        raw[6] = loud;
        raw[7] = loud_rasta;
        raw[10..36].copy_from_slice(&rasta);
        let mut sp = [0f32; 15];
        self.spectral.process(&mag, &self.pow, &mut sp);
        raw[36..51].copy_from_slice(&sp);
        let mut cep = [0f32; 14];
        mfcc(&bands, &mut cep);
        raw[51..65].copy_from_slice(&cep);
        self.mag = mag;
    }

    /// Applies the next pitch decision: energy gate, then voice quality from the waveform.
    fn decide(&mut self, d: pitch::PitchDecision) {
        let t = self.next_decided;
        let index = (t - (self.next_frame - self.pending.len() as u64)) as usize;
        let Some(row) = self.pending.get(index) else {
            return;
        };
        let gated = row.e60 > 0.001;
        let (f0, voicing) = if gated { (d.f0, d.voicing) } else { (0.0, 0.0) };
        let (buf, buf_start, total) = (&self.buf, self.buf_start, self.total);
        let vq = self.jitter.process(t, f0, |start, len| {
            let s = start.max(buf_start).min(total);
            let e = (start + len).min(total);
            &buf[s - buf_start..e.max(s) - buf_start]
        });
        let egemaps = &mut self.egemaps;
        if let Some(row) = self.pending.get_mut(index) {
            match egemaps {
                None => {
                    row.raw[0] = f0;
                    row.raw[1] = voicing;
                    row.raw[2] = vq.jitter_local;
                    row.raw[3] = vq.jitter_ddp;
                    row.raw[4] = vq.shimmer_local;
                    row.raw[5] = vq.log_hnr;
                }
                Some(e) => {
                    row.raw[10] = semitones(f0);
                    row.raw[11] = vq.jitter_local;
                    row.raw[12] = (20.0 * (1.0 + f64::from(vq.shimmer_local)).log10()) as f32;
                    row.raw[13] = e.hnr.hnr_db(&row.mag60, f0);
                    let formants = [row.raw[16], row.raw[19], row.raw[22]];
                    let (h1h2, h1a3, amps) = harmonic_levels(&row.mag60, e.df60, f0, formants);
                    row.raw[14] = h1h2;
                    row.raw[15] = h1a3;
                    row.raw[18] = amps[0];
                    row.raw[21] = amps[1];
                    row.raw[24] = amps[2];
                    row.mag60 = Vec::new();
                }
            }
        }
        self.next_decided += 1;
    }

    /// Moves decided rows through the smoother.
    fn release(&mut self, out: &mut Vec<AudioRow>) {
        let decided_rows = self.pending.len() - (self.next_frame - self.next_decided) as usize;
        for _ in 0..decided_rows {
            let Some(row) = self.pending.pop_front() else {
                break;
            };
            if let Some(y) = self.smoother.push(row.raw) {
                let t = self.smoother.emitted - 1;
                out.push(AudioRow {
                    t_ns: self.row_time(t),
                    values: y[..self.set.dims()].to_vec(),
                });
            }
        }
    }

    /// Drops samples no later frame or voice-quality window can read.
    fn trim(&mut self) {
        let keep_from = (self.next_frame as usize * self.hop)
            .min(self.jitter.first_needed_sample(self.next_decided))
            .min(self.total);
        if keep_from > self.buf_start + 8192 {
            self.buf.drain(..keep_from - self.buf_start);
            self.buf_start = keep_from;
        }
    }
}

impl AudioStage for LldExtractor {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(&mut self, block: &AudioBlock) -> Result<Vec<AudioRow>, StageError> {
        if block.sample_rate_hz != self.rate {
            return Err(StageError {
                stage: "acoustic",
                message: format!(
                    "block at {} Hz, stage set up for {} Hz",
                    block.sample_rate_hz, self.rate
                ),
            });
        }
        Ok(self.push_samples(block.t_ns, &block.samples))
    }

    fn finish(&mut self) -> Result<Vec<AudioRow>, StageError> {
        Ok(self.finish_rows())
    }

    fn end_warning(&self) -> Option<String> {
        (self.sanitised_samples() > 0).then(|| {
            format!(
                "{} non-finite audio samples were replaced by 0 for the acoustic features",
                self.sanitised_samples()
            )
        })
    }

    fn pooling(&self) -> PoolFn {
        match self.set {
            LldSet::Compare => pool_compare_rows,
            LldSet::Egemaps => pool_egemaps_rows,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(signal: &[f32], sizes: &[usize]) -> Vec<AudioRow> {
        let mut s = LldExtractor::new(LldSet::Compare, 16_000);
        let mut rows = Vec::new();
        let (mut pos, mut k) = (0usize, 0usize);
        while pos < signal.len() {
            let n = sizes[k % sizes.len()].min(signal.len() - pos);
            let t = crate::capture::samples_to_ns(pos as u64, 16_000);
            rows.extend(s.push_samples(t, &signal[pos..pos + n]));
            pos += n;
            k += 1;
        }
        rows.extend(s.finish_rows());
        rows
    }

    fn tone(hz: f32, secs: f32, amp: f32) -> Vec<f32> {
        (0..(secs * 16_000.0) as usize)
            .map(|i| amp * (2.0 * std::f32::consts::PI * hz * i as f32 / 16_000.0).sin())
            .collect()
    }

    #[test]
    fn names_are_65_in_opensmile_order() {
        let c = column_names();
        assert_eq!(c.len(), 65);
        assert_eq!(c[0], "F0final_sma");
        assert_eq!(c[10], "audSpec_Rfilt_sma[0]");
        assert_eq!(c[64], "mfcc_sma[14]");
    }

    #[test]
    fn row_count_and_stamps() {
        let rows = run(&vec![0.0; 16_000], &[16_000]);
        // floor((16000 - 960) / 160) + 1
        assert_eq!(rows.len(), 95);
        assert_eq!(rows[3].t_ns, 30_000_000);
    }

    #[test]
    fn silence_gives_the_reference_edge_values() {
        let rows = run(&vec![0.0; 16_000], &[4000]);
        let r = &rows[50].values;
        assert_eq!(r[0], 0.0); // F0
        assert_eq!(r[5], -100.0); // logHNR
        assert!((r[6] - 0.001_033_97).abs() < 1e-7); // loudness
        assert!((r[7] - 0.988_341).abs() < 1e-5); // RASTA loudness
        assert_eq!(r[8], 0.0); // RMS
        assert!((r[9] - 0.997_92).abs() < 1e-5); // zcr quirk
        assert_eq!(r[38], 31.25); // roll-off 25 %
        assert!(r[51..].iter().all(|&v| v == 0.0)); // MFCC
    }

    #[test]
    fn tone_220_hz_has_its_pitch() {
        let rows = run(&tone(220.0, 1.0, 0.5), &[320]);
        let f0 = rows[50].values[0];
        assert!((f0 - 219.73).abs() < 1.0, "{f0}");
        assert!(
            (rows[50].values[9] - 0.0271).abs() < 0.002,
            "zcr {}",
            rows[50].values[9]
        );
    }

    #[test]
    fn rows_do_not_depend_on_block_sizes() {
        let mut signal = tone(180.0, 1.2, 0.3);
        for (i, v) in signal.iter_mut().enumerate() {
            *v += ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.05;
        }
        let whole = run(&signal, &[signal.len()]);
        assert_eq!(whole, run(&signal, &[1, 333, 160, 2048, 17]));
        assert_eq!(whole, run(&signal, &[320]));
        assert!(whole.iter().all(|r| r.values.iter().all(|v| v.is_finite())));
    }

    #[test]
    fn hostile_input_gives_finite_rows_or_none() {
        assert!(run(&[], &[1]).is_empty());
        assert!(run(&vec![0.1; 160], &[160]).is_empty()); // 10 ms: no complete 60 ms frame
        let mut s = tone(300.0, 0.5, 1.0);
        s[100] = f32::NAN;
        s[200] = f32::INFINITY;
        s[300] = 1e-40; // denormal
        for v in s.iter_mut().skip(4000).take(2000) {
            *v = v.signum(); // hard clipping
        }
        for v in s.iter_mut().skip(6000) {
            *v += 0.5; // DC offset
        }
        let rows = run(&s, &[512]);
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|r| r.values.iter().all(|v| v.is_finite())));
    }

    #[test]
    fn pooling_uses_voiced_rows_for_pitch_columns() {
        let mut a = vec![0f32; DIMS];
        let mut b = vec![0f32; DIMS];
        a[0] = 200.0;
        a[5] = 10.0;
        a[6] = 1.0;
        b[5] = -100.0;
        b[6] = 3.0;
        let (ra, rb) = (
            AudioRow { t_ns: 0, values: a },
            AudioRow { t_ns: 0, values: b },
        );
        let v = pool_compare_rows(&[&ra, &rb]).unwrap();
        assert_eq!((v[0], v[5], v[6]), (200.0, 10.0, 2.0));
        let v = pool_compare_rows(&[&rb]).unwrap();
        assert_eq!((v[0], v[5]), (0.0, -100.0));
    }
}
