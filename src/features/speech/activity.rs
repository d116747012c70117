//! The learned voice activity per frame (modality `speech_activity`): Silero VAD v6's speech
//! probability, beside the energy rule's `voice_activity` of `audio_signal`.
//!
//! Contract: an [`AudioStage`] on 16 kHz blocks; one row per 512-sample chunk (32 ms), stamped
//! at the chunk's first sample, holding the model's probability; a frame's value is the mean
//! of the rows that start in it. The blocks are placed as the live recorder keeps them
//! ([`Placement`]), so a live run and the replay of its recording store the same values.
//! The partial chunk at the end of a stream gives no row.

use std::path::Path;

use super::stream::Placement;
use super::vad::{SileroVad, CHUNK, RATE_HZ};
use crate::capture::AudioBlock;
use crate::core::ModalitySpec;
use crate::features::{AudioRow, AudioStage, PoolFn, StageError};
use crate::models::ModelError;

/// The modality's name.
pub const MODALITY: &str = "speech_activity";

pub struct SpeechActivityStage {
    vad: SileroVad,
    placement: Placement,
    /// Chunks given so far.
    chunks: u64,
    spec: ModalitySpec,
}

impl SpeechActivityStage {
    pub fn open(path: &Path, onnxruntime_library: Option<&Path>) -> Result<Self, ModelError> {
        Ok(Self {
            vad: SileroVad::open("silero-vad-v6", path, onnxruntime_library)?,
            placement: Placement::default(),
            chunks: 0,
            spec: ModalitySpec::by_model(
                MODALITY,
                vec!["speech_prob".into()],
                "silero-vad-v6 (512-sample chunks at 16 kHz, mean per frame)",
                1,
            ),
        })
    }
}

impl AudioStage for SpeechActivityStage {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(&mut self, block: &AudioBlock) -> Result<Vec<AudioRow>, StageError> {
        if block.sample_rate_hz != RATE_HZ {
            return Err(StageError {
                stage: MODALITY,
                message: format!(
                    "block at {} Hz, the model runs at {RATE_HZ} Hz",
                    block.sample_rate_hz
                ),
            });
        }
        let fresh = self.placement.place(block.t_ns, &block.samples);
        let probs = self.vad.push(&fresh).map_err(|e| StageError {
            stage: MODALITY,
            message: e.to_string(),
        })?;
        let mut rows = Vec::with_capacity(probs.len());
        for p in probs {
            rows.push(AudioRow {
                t_ns: self.placement.time_ns(self.chunks * CHUNK as u64),
                values: vec![p],
            });
            self.chunks += 1;
        }
        Ok(rows)
    }

    fn finish(&mut self) -> Result<Vec<AudioRow>, StageError> {
        Ok(Vec::new())
    }

    fn pooling(&self) -> PoolFn {
        pool_mean
    }
}

/// The mean probability of a frame's chunks.
fn pool_mean(rows: &[&AudioRow]) -> Option<Vec<f32>> {
    if rows.is_empty() {
        return None;
    }
    let sum: f64 = rows.iter().map(|r| f64::from(r.values[0])).sum();
    Some(vec![(sum / rows.len() as f64) as f32])
}
