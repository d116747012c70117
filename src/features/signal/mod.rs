//! Signal-quality stages: real per-frame statistics that need no model.
//!
//! Contract:
//! - [`VideoSignalStage`] (modality `video_signal`): per frame, `brightness` (mean luma,
//!   0-1, luma = 0.299 R + 0.587 G + 0.114 B), `contrast` (luma standard deviation, 0-1) and
//!   `sharpness` (variance of the 4-neighbour Laplacian of luma on the 0-255 scale; focus
//!   blur and motion blur lower it).
//! - [`AudioSignalStage`] (modality `audio_signal`): per 10 ms row (non-overlapping), the
//!   RMS level in dBFS (floored at -120), the fraction of clipped samples
//!   (|x| >= `clipping_level`) and voice activity (1 when the level is above
//!   `vad_floor_dbfs` and at least `vad_margin_db` above a noise floor that follows quiet
//!   rows down at once and rises 2 dB/s). Pooled per video frame as: energy-mean level,
//!   mean clipped fraction, fraction of voiced rows.
//!
//! Both keep session totals for the quality report. The video stage (`video.rs`) reads
//! frames through OpenCV and is built with the `sensing` feature only.

#[cfg(feature = "sensing")]
mod video;
#[cfg(feature = "sensing")]
pub use video::VideoSignalStage;

use super::{AudioRow, AudioStage, PoolFn, StageError};

use crate::capture::{samples_to_ns, AudioBlock};
use crate::config::QualityConfig;
use crate::core::ModalitySpec;
use crate::Nanos;

/// Lowest level reported, for digital silence.
pub const SILENCE_DBFS: f32 = -120.0;
/// Audio row length.
pub const ROW_MS: u32 = 10;

/// Session totals of the video signal stage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VideoSignalTotals {
    pub frames: u64,
    pub brightness_sum: f64,
    pub sharpness_sum: f64,
    /// Frames the bystander screen looked at, and what it found (`[privacy]`).
    pub screened_frames: u64,
    pub frames_with_bystanders: u64,
    pub frames_masked: u64,
    pub frames_without_participant: u64,
}

/// Per-10-ms level, clipping and voice activity.
pub struct AudioSignalStage {
    spec: ModalitySpec,
    clipping_level: f32,
    vad_floor_dbfs: f32,
    vad_margin_db: f32,
    row_len: usize,
    rate_hz: u32,
    /// Samples of the row being filled.
    pending: Vec<f32>,
    /// Stamp of the first sample in `pending`.
    pending_t_ns: Nanos,
    /// Where the next block should start, to detect discontinuities.
    expected_t_ns: Option<Nanos>,
    noise_floor_dbfs: f32,
    totals: AudioSignalTotals,
}

/// Session totals of the audio signal stage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AudioSignalTotals {
    pub samples: u64,
    pub clipped_samples: u64,
    pub rows: u64,
    pub voiced_rows: u64,
}

impl AudioSignalStage {
    pub fn new(quality: &QualityConfig, rate_hz: u32) -> Self {
        Self {
            spec: ModalitySpec::by_algorithm(
                "audio_signal",
                vec![
                    "level_dbfs".into(),
                    "clipped_fraction".into(),
                    "voice_activity".into(),
                ],
                "signal::AudioSignalStage",
                1,
            ),
            clipping_level: quality.clipping_level as f32,
            vad_floor_dbfs: quality.vad_floor_dbfs as f32,
            vad_margin_db: quality.vad_margin_db as f32,
            row_len: (rate_hz * ROW_MS / 1000).max(1) as usize,
            rate_hz,
            pending: Vec::new(),
            pending_t_ns: 0,
            expected_t_ns: None,
            noise_floor_dbfs: quality.vad_floor_dbfs as f32,
            totals: AudioSignalTotals::default(),
        }
    }

    pub fn totals(&self) -> &AudioSignalTotals {
        &self.totals
    }

    fn row(&mut self, t_ns: Nanos, samples: &[f32]) -> AudioRow {
        let n = samples.len().max(1) as f64;
        let energy = samples.iter().map(|&s| f64::from(s).powi(2)).sum::<f64>() / n;
        let level = if energy > 0.0 {
            ((10.0 * energy.log10()) as f32).max(SILENCE_DBFS)
        } else {
            SILENCE_DBFS
        };
        let clipped = samples
            .iter()
            .filter(|s| s.abs() >= self.clipping_level)
            .count();
        // Noise floor: follows quiet rows down at once, creeps up 2 dB/s (0.02 dB per row).
        self.noise_floor_dbfs = if level < self.noise_floor_dbfs {
            level
        } else {
            (self.noise_floor_dbfs + 0.02).min(level)
        };
        let voiced =
            level > self.vad_floor_dbfs && level >= self.noise_floor_dbfs + self.vad_margin_db;
        self.totals.samples += samples.len() as u64;
        self.totals.clipped_samples += clipped as u64;
        self.totals.rows += 1;
        self.totals.voiced_rows += u64::from(voiced);
        AudioRow {
            t_ns,
            values: vec![
                level,
                clipped as f32 / samples.len().max(1) as f32,
                f32::from(u8::from(voiced)),
            ],
        }
    }
}

impl AudioStage for AudioSignalStage {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(&mut self, block: &AudioBlock) -> Result<Vec<AudioRow>, StageError> {
        if block.sample_rate_hz != self.rate_hz {
            return Err(StageError {
                stage: "audio_signal",
                message: format!(
                    "block at {} Hz, stage set up for {} Hz",
                    block.sample_rate_hz, self.rate_hz
                ),
            });
        }
        let mut rows = Vec::new();
        // A block that does not follow on from the last one starts a new row grid; the
        // partial row before the break is emitted as it is rather than mixed across it.
        if self
            .expected_t_ns
            .is_some_and(|e| e.abs_diff(block.t_ns) > 1_000)
        {
            let partial = std::mem::take(&mut self.pending);
            if !partial.is_empty() {
                rows.push(self.row(self.pending_t_ns, &partial));
            }
        }
        if self.pending.is_empty() {
            self.pending_t_ns = block.t_ns;
        }
        self.expected_t_ns =
            Some(block.t_ns + samples_to_ns(block.samples.len() as u64, self.rate_hz));
        let mut rest = block.samples.as_slice();
        while !rest.is_empty() {
            let take = (self.row_len - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == self.row_len {
                let samples = std::mem::take(&mut self.pending);
                rows.push(self.row(self.pending_t_ns, &samples));
                self.pending = samples;
                self.pending.clear();
                self.pending_t_ns += samples_to_ns(self.row_len as u64, self.rate_hz);
            }
        }
        Ok(rows)
    }

    fn finish(&mut self) -> Result<Vec<AudioRow>, StageError> {
        let partial = std::mem::take(&mut self.pending);
        Ok(if partial.is_empty() {
            Vec::new()
        } else {
            vec![self.row(self.pending_t_ns, &partial)]
        })
    }

    fn pooling(&self) -> PoolFn {
        pool_signal_rows
    }
}

/// Pooling of `audio_signal` rows: energy-mean level, mean clipped fraction, voiced fraction.
pub fn pool_signal_rows(rows: &[&AudioRow]) -> Option<Vec<f32>> {
    if rows.is_empty() {
        return None;
    }
    let n = rows.len() as f64;
    let energy = rows
        .iter()
        .map(|r| 10f64.powf(f64::from(r.values[0]) / 10.0))
        .sum::<f64>()
        / n;
    let level = ((10.0 * energy.log10()) as f32).max(SILENCE_DBFS);
    let clipped = rows.iter().map(|r| f64::from(r.values[1])).sum::<f64>() / n;
    let voiced = rows.iter().map(|r| f64::from(r.values[2])).sum::<f64>() / n;
    Some(vec![level, clipped as f32, voiced as f32])
}

/// The participant started or stopped speaking (a `voice` message).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VoiceChange {
    pub speaking: bool,
    /// The session time of the change (where speech began, or where it last was heard).
    pub at_ns: Nanos,
    /// The session time of the last sample the rule needed to tell (the end of the row or
    /// chunk that crossed into speech, or of the minimum silence after it): no stream can
    /// say so earlier than this sample is heard.
    pub decided_ns: Nanos,
}

/// Voiced rows in a row that start speech (30 ms: about one 32 ms chunk of the learned VAD).
const START_ROWS: u32 = 3;

/// Turns from the energy rule's voiced rows: the `voice` topic when the station's learned
/// voice activity does not run. Speech starts at the first of `START_ROWS` voiced rows
/// in a row, and stops where the last voiced row ended once `min_silence_ms` of rows were
/// not voiced (the recogniser's segment rule, `[asr] min_silence_ms`).
#[derive(Debug, Clone)]
pub struct EnergyTurns {
    silence_rows: u32,
    speaking: bool,
    /// Voiced rows in a row (not speaking) or rows not voiced since the last voiced one.
    run: u32,
    run_start: Nanos,
    last_voiced_end: Nanos,
}

impl EnergyTurns {
    pub fn new(min_silence_ms: u32) -> Self {
        Self {
            silence_rows: min_silence_ms.div_ceil(ROW_MS).max(1),
            speaking: false,
            run: 0,
            run_start: 0,
            last_voiced_end: 0,
        }
    }

    /// One `audio_signal` row (10 ms): the change it decides, if any.
    pub fn push(&mut self, row: &AudioRow) -> Option<VoiceChange> {
        let voiced = row.values.get(2).is_some_and(|&v| v >= 0.5);
        let end = row.t_ns + u64::from(ROW_MS) * 1_000_000;
        if !self.speaking {
            if !voiced {
                self.run = 0;
                return None;
            }
            if self.run == 0 {
                self.run_start = row.t_ns;
            }
            self.run += 1;
            self.last_voiced_end = end;
            if self.run < START_ROWS {
                return None;
            }
            self.speaking = true;
            self.run = 0;
            return Some(VoiceChange {
                speaking: true,
                at_ns: self.run_start,
                decided_ns: end,
            });
        }
        if voiced {
            self.run = 0;
            self.last_voiced_end = end;
            return None;
        }
        self.run += 1;
        if self.run < self.silence_rows {
            return None;
        }
        self.speaking = false;
        self.run = 0;
        Some(VoiceChange {
            speaking: false,
            at_ns: self.last_voiced_end,
            decided_ns: end,
        })
    }

    /// The end of the stream: speech still going stops where it was last heard.
    pub fn finish(&mut self) -> Option<VoiceChange> {
        let speaking = std::mem::take(&mut self.speaking);
        speaking.then_some(VoiceChange {
            speaking: false,
            at_ns: self.last_voiced_end,
            decided_ns: self.last_voiced_end,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_audio_columns_sit_where_window_quality_reads_them() {
        use crate::core::quality::audio_columns::*;
        let stage = super::AudioSignalStage::new(&crate::config::QualityConfig::default(), 16_000);
        let columns = &super::AudioStage::spec(&stage).columns;
        assert_eq!(columns[LEVEL_DBFS], "level_dbfs");
        assert_eq!(columns[CLIPPED_FRACTION], "clipped_fraction");
        assert_eq!(columns[VOICE_ACTIVITY], "voice_activity");
    }

    use super::*;

    fn block(t_ns: Nanos, samples: Vec<f32>) -> AudioBlock {
        AudioBlock {
            seq: 0,
            t_ns,
            sample_rate_hz: 16_000,
            samples,
            handed_ns: None,
        }
    }

    fn tone(len: usize, amp: f32) -> Vec<f32> {
        (0..len).map(|i| amp * (i as f32 * 0.1).sin()).collect()
    }

    #[test]
    fn level_of_full_scale_sine_is_minus_3_dbfs_and_silence_is_floor() {
        let mut stage = AudioSignalStage::new(&QualityConfig::default(), 16_000);
        let rows = stage.process(&block(0, tone(1600, 1.0))).unwrap();
        assert_eq!(rows.len(), 10);
        assert!((rows[5].values[0] + 3.01).abs() < 0.1, "{:?}", rows[5]);
        let rows = stage.process(&block(100_000_000, vec![0.0; 160])).unwrap();
        assert_eq!(rows[0].values[0], SILENCE_DBFS);
        assert_eq!(rows[0].values[2], 0.0);
    }

    #[test]
    fn clipping_is_counted() {
        let mut stage = AudioSignalStage::new(&QualityConfig::default(), 16_000);
        let mut s = vec![0.1f32; 160];
        for v in s.iter_mut().take(16) {
            *v = 1.0;
        }
        let rows = stage.process(&block(0, s)).unwrap();
        assert!((rows[0].values[1] - 0.1).abs() < 1e-6);
        assert_eq!(stage.totals().clipped_samples, 16);
    }

    #[test]
    fn speech_after_quiet_is_voiced_and_steady_noise_is_not() {
        let mut stage = AudioSignalStage::new(&QualityConfig::default(), 16_000);
        let quiet = stage.process(&block(0, tone(16_000, 0.001))).unwrap();
        assert!(quiet.iter().all(|r| r.values[2] == 0.0));
        let loud = stage
            .process(&block(1_000_000_000, tone(1600, 0.3)))
            .unwrap();
        assert!(loud.iter().all(|r| r.values[2] == 1.0));
    }

    #[test]
    fn rows_do_not_depend_on_block_sizes() {
        let signal: Vec<f32> = (0..8000)
            .map(|i| ((i * 7919) % 200) as f32 / 200.0 - 0.5)
            .collect();
        let run = |sizes: &[usize]| {
            let mut stage = AudioSignalStage::new(&QualityConfig::default(), 16_000);
            let mut rows = Vec::new();
            let (mut pos, mut k) = (0usize, 0usize);
            while pos < signal.len() {
                let n = sizes[k % sizes.len()].min(signal.len() - pos);
                let t = samples_to_ns(pos as u64, 16_000);
                rows.extend(
                    stage
                        .process(&block(t, signal[pos..pos + n].to_vec()))
                        .unwrap(),
                );
                pos += n;
                k += 1;
            }
            rows.extend(stage.finish().unwrap());
            rows
        };
        let a = run(&[8000]);
        assert_eq!(a, run(&[1, 159, 7, 333]));
        assert_eq!(a, run(&[320]));
    }

    #[test]
    fn pooling_averages_energy_not_decibels() {
        let a = AudioRow {
            t_ns: 0,
            values: vec![-10.0, 0.0, 1.0],
        };
        let b = AudioRow {
            t_ns: 0,
            values: vec![SILENCE_DBFS, 0.5, 0.0],
        };
        let v = pool_signal_rows(&[&a, &b]).unwrap();
        assert!((v[0] - (-13.01)).abs() < 0.01, "{v:?}");
        assert_eq!((v[1], v[2]), (0.25, 0.5));
        assert_eq!(pool_signal_rows(&[]), None);
    }

    #[test]
    fn energy_turns_start_after_three_voiced_rows_and_stop_after_the_silence_rule() {
        let row = |k: u64, voiced: bool| AudioRow {
            t_ns: k * 10_000_000,
            values: vec![-20.0, 0.0, f32::from(u8::from(voiced))],
        };
        let mut turns = EnergyTurns::new(300);
        // A 20 ms click is not speech.
        let mut changes: Vec<(u64, VoiceChange)> = Vec::new();
        let pattern: Vec<bool> = [vec![false; 5], vec![true; 2], vec![false; 5]]
            .concat()
            .into_iter()
            // Speech from row 12 to 61 with a 200 ms pause inside (shorter than the rule).
            .chain((12..62).map(|k| !(30..50).contains(&k)))
            .chain(std::iter::repeat_n(false, 40))
            .collect();
        for (k, &v) in pattern.iter().enumerate() {
            if let Some(c) = turns.push(&row(k as u64, v)) {
                changes.push((k as u64, c));
            }
        }
        assert_eq!(changes.len(), 2, "{changes:?}");
        let (k0, start) = changes[0];
        assert!(start.speaking && start.at_ns == 120_000_000 && k0 == 14);
        assert_eq!(start.decided_ns, 150_000_000);
        let (k1, stop) = changes[1];
        assert!(!stop.speaking && stop.at_ns == 620_000_000);
        // Decided at the end of the 30th silent row after the last voiced one.
        assert_eq!(k1, 91);
        assert_eq!(stop.decided_ns, 920_000_000);
        assert_eq!(turns.finish(), None);
    }
}
