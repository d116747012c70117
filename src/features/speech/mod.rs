//! On-station speech recognition: what the participant said, heard on the station.
//!
//! Contract: [`Recogniser`] runs Silero VAD v6 ([`vad`]) over 16 kHz mono audio, cuts it into
//! utterances ([`vad::Segmenter`]: 200 ms of silence ends one, 200 ms kept before it and 100 ms after, a forced
//! cut at the quietest moment before 10 s of unbroken speech) and recognises each with Moonshine tiny-en
//! ([`moonshine`]) unless the no-speech check ([`nospeech`]) finds it does not change as
//! speech does, giving [`Utterance`]s stamped in milliseconds from the audio's first
//! sample, with the model's id and a confidence (mean token log-probability). Nothing
//! leaves the process: the models are local files fetched at set-up (`scripts/setup.sh`,
//! `models/speech/`), never at run time. [`word_error_rate`] scores a transcript against a
//! reference under the project's one scoring normalisation ([`score`]).
//!
//! [`is_robot`] tells the robot's voice from the participant's by overlap with the robot's
//! own utterances. [`stream::SpeechStream`] is the recogniser as the pipeline runs it (the
//! `speech-recognition` thread): blocks in, utterances on the session timeline out.

pub mod activity;
pub mod moonshine;
pub mod nospeech;
pub mod score;
pub mod stream;
pub mod tokenizer;
pub mod vad;

use std::path::{Path, PathBuf};

use crate::models::ModelError;

pub use score::{normalised_words, word_error_rate, word_errors};

/// The recogniser's id, as stored with each utterance.
pub const MODEL_ID: &str = "moonshine-tiny-en";

/// Where the speech models are, under the models folder.
pub struct SpeechModels {
    pub vad: PathBuf,
    pub encoder: PathBuf,
    pub decoder: PathBuf,
    pub vocabulary: PathBuf,
}

impl SpeechModels {
    /// The files `scripts/setup.sh` puts in `<models>/speech/`.
    pub fn in_dir(models: &Path) -> Self {
        let d = models.join("speech");
        Self {
            vad: d.join("silero-vad-v6.onnx"),
            encoder: d.join("moonshine-tiny-en.encoder.ort"),
            decoder: d.join("moonshine-tiny-en.decoder.ort"),
            vocabulary: d.join("moonshine-tiny-en.tokenizer.bin"),
        }
    }
}

/// One recognised utterance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Utterance {
    pub start_ms: u64,
    pub end_ms: u64,
    pub text: String,
    /// Mean log-probability of the recogniser's tokens (0: certain).
    pub confidence: f32,
    pub model: &'static str,
    /// When (same clock) the segmenter decided the utterance had ended: the end of the
    /// silence that closed it, or the chunk at which unbroken speech was cut. A function
    /// of the audio only, so a live run and its replay agree on it.
    #[serde(skip)]
    pub decided_ms: u64,
}

/// Voice activity and recognition together.
pub struct Recogniser {
    vad: vad::SileroVad,
    asr: moonshine::Moonshine,
    rules: vad::SegmentRules,
    spectral_change: nospeech::SpectralChange,
}

impl Recogniser {
    pub fn open(
        models: &SpeechModels,
        onnxruntime_library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            vad: vad::SileroVad::open("silero-vad-v6", &models.vad, onnxruntime_library)?,
            asr: moonshine::Moonshine::open(
                MODEL_ID,
                &models.encoder,
                &models.decoder,
                &models.vocabulary,
                onnxruntime_library,
            )?,
            rules: vad::SegmentRules::default(),
            spectral_change: nospeech::SpectralChange::new(),
        })
    }

    /// The words of one segment, or `None` when the no-speech check ([`nospeech`]) finds
    /// it does not change as speech does: such a segment never reaches the decoder.
    pub fn recognise_segment(
        &mut self,
        samples: &[f32],
        start_ms: u64,
    ) -> Result<Option<moonshine::Recognised>, ModelError> {
        let change = self.spectral_change.of(samples);
        if !nospeech::is_speech_like(change) {
            tracing::debug!(
                start_ms,
                ms = samples.len() / 16,
                change_db = change,
                "segment not sent to the recogniser: its spectrum does not change as speech does"
            );
            return Ok(None);
        }
        Ok(Some(self.asr.transcribe(samples)?))
    }

    /// The same recogniser with other segment rules.
    pub fn with_rules(mut self, rules: vad::SegmentRules) -> Self {
        self.rules = rules;
        self
    }

    /// Every utterance of `samples` (16 kHz mono, one whole stream); `progress` is told the
    /// samples done.
    pub fn transcribe(
        &mut self,
        samples: &[f32],
        progress: &dyn Fn(u64),
    ) -> Result<Vec<Utterance>, ModelError> {
        self.vad.reset();
        let mut segmenter = vad::Segmenter::new(self.rules);
        let mut segments = Vec::new();
        for (i, block) in samples.chunks(16_000).enumerate() {
            for chunk in self.vad.push_chunks(block)? {
                segments.extend(segmenter.push(chunk));
            }
            progress(((i + 1) * 16_000).min(samples.len()) as u64 / 2);
        }
        segments.extend(segmenter.finish());
        let mut out = Vec::new();
        let total = samples.len() as u64;
        for seg in segments {
            let (a, b) = (seg.start.min(total) as usize, seg.end.min(total) as usize);
            let r = self.recognise_segment(&samples[a..b], a as u64 / 16)?;
            progress(total / 2 + b as u64 / 2);
            let Some(r) = r.filter(|r| !r.text.is_empty()) else {
                continue;
            };
            out.push(Utterance {
                start_ms: a as u64 / 16,
                end_ms: b as u64 / 16,
                text: r.text,
                confidence: r.mean_logprob,
                model: MODEL_ID,
                decided_ms: b as u64 / 16,
            });
        }
        Ok(out)
    }
}

/// Whose voice an utterance is, on a microphone that hears the robot too: the robot's when
/// at least half of it overlaps the robot's own utterances (`robot`: `(start_ms, end_ms)`
/// spans from the dialogue app's `speaker: robot` events), else the participant's. Speech
/// of both at once counts for whichever covers more of it; that overlap is not separated.
pub fn is_robot(u: &Utterance, robot: &[(u64, u64)]) -> bool {
    let len = u.end_ms.saturating_sub(u.start_ms).max(1);
    let overlap: u64 = robot
        .iter()
        .map(|&(s, e)| e.min(u.end_ms).saturating_sub(s.max(u.start_ms)))
        .sum();
    overlap * 2 >= len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_utterance_mostly_under_the_robots_speech_is_the_robots() {
        let u = |start_ms, end_ms| Utterance {
            start_ms,
            end_ms,
            text: "x".into(),
            confidence: 0.0,
            model: MODEL_ID,
            decided_ms: end_ms,
        };
        let robot = [(1_000, 3_000), (10_000, 10_500)];
        assert!(is_robot(&u(1_200, 2_800), &robot));
        assert!(is_robot(&u(2_000, 3_800), &robot)); // 1.0 of 1.8 s
        assert!(!is_robot(&u(2_500, 5_000), &robot)); // 0.5 of 2.5 s
        assert!(!is_robot(&u(4_000, 9_000), &robot));
        assert!(!is_robot(&u(4_000, 9_000), &[]));
    }
}
