//! Whose words a run stores and feeds to the text modality: the dialogue app's transcripts,
//! the station's own recogniser's, or both (`[asr]`).
//!
//! Contract: [`TranscriptPlan::resolve`] decides from the config and what kind of run it is
//! (live, a replay of a live recording, or a replay of any other recording with its events),
//! so a live run and the replay of its recording decide alike. [`TranscriptPlan::apply`]
//! sets the stages up accordingly: it opens the recogniser (a missing or broken model file
//! is said once, and the run goes on without the recogniser's words: a session is never
//! refused for it), tells the text stage whose utterances to embed, and, for a recording
//! whose events declare no phase at all, lets retrieval and prediction run over the whole
//! session.

use crate::config::{AsrSource, Config};
use crate::core::TranscriptSource;
use crate::features::speech::stream::{rules_of, SpeechStream};
use crate::features::speech::{vad, Recogniser, SpeechModels};
use crate::session::{Event, EventKind};

use super::stages::Stages;

/// What kind of run the plan is for.
pub enum RunKind<'a> {
    Live,
    /// A folder the live recorder wrote: decided as the live run decided.
    LiveRecording,
    /// Any other recording, with all its events.
    Recording(&'a [Event]),
}

/// The decision, with the reason given in the log.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptPlan {
    /// Run the station's recogniser (its utterances are stored with `source: asr`).
    pub recognise: bool,
    /// Whose utterances feed the text modality and retrieval.
    pub text_from: TranscriptSource,
    /// The recording's events declare no phase: the whole session is the participant's to
    /// share from (retrieval) and is predicted.
    pub unphased: bool,
    pub why: String,
}

impl TranscriptPlan {
    pub fn resolve(config: &Config, kind: RunKind<'_>) -> Self {
        let asr = &config.asr;
        let speaker = config.text.speaker.as_str();
        let (participant_said, phased, what) = match kind {
            RunKind::Recording(events) => {
                let said = events.iter().any(
                    |e| matches!(&e.kind, EventKind::Utterance { speaker: s, .. } if s == speaker),
                );
                let phased = events
                    .iter()
                    .any(|e| matches!(e.kind, EventKind::Phase { .. }));
                let what = if events.is_empty() {
                    "the recording has no events"
                } else if said {
                    "the recording's events carry the participant's utterances"
                } else {
                    "the recording's events carry no participant utterances"
                };
                (said, phased, what)
            }
            RunKind::Live => (false, true, "a live session"),
            RunKind::LiveRecording => (false, true, "a live recording (decided as live)"),
        };
        let unphased = !phased;
        let station = |why: String| Self {
            recognise: true,
            text_from: TranscriptSource::Asr,
            unphased,
            why,
        };
        let dialogue = |why: String| Self {
            recognise: false,
            text_from: TranscriptSource::DialogueApp,
            unphased,
            why,
        };
        if !asr.enabled {
            return dialogue("asr.enabled = false".into());
        }
        match asr.source {
            AsrSource::Station => station("asr.source = \"station\"".into()),
            AsrSource::DialogueApp => dialogue("asr.source = \"dialogue_app\"".into()),
            AsrSource::Both => Self {
                recognise: true,
                text_from: asr.text_from.source(),
                unphased,
                why: "asr.source = \"both\"".into(),
            },
            AsrSource::Auto if participant_said => {
                dialogue(format!("asr.source = \"auto\" and {what}"))
            }
            AsrSource::Auto => station(format!("asr.source = \"auto\" and {what}")),
        }
    }

    /// Sets `stages` up for this plan (see the module's contract).
    pub fn apply(mut self, stages: &mut Stages, config: &Config) -> Self {
        if self.recognise {
            match open_stream(config) {
                Ok(stream) => stages.speech = Some(stream),
                Err(why) => {
                    tracing::warn!("the station's speech recogniser is off for this session: {why}; the text modality has no station transcripts");
                    self.recognise = false;
                    self.why = format!("{} (recogniser off: {why})", self.why);
                }
            }
        }
        stages.text.stage.set_source(self.text_from);
        stages.text.stage.set_unphased(self.unphased);
        if let Some(fusion) = stages.fusion.as_mut() {
            fusion.set_predict_unphased(self.unphased);
        }
        tracing::info!(
            recognise = self.recognise,
            text_from = self.text_from.as_str(),
            unphased = self.unphased,
            "transcripts: {}",
            self.why
        );
        self
    }
}

fn open_stream(config: &Config) -> Result<SpeechStream, String> {
    if config.audio.sample_rate_hz != vad::RATE_HZ {
        return Err(format!(
            "it runs on {} Hz audio and audio.sample_rate_hz is {}",
            vad::RATE_HZ,
            config.audio.sample_rate_hz
        ));
    }
    let models = SpeechModels::in_dir(&config.models.dir);
    let recogniser = Recogniser::open(&models, config.models.onnxruntime_library.as_deref())
        .map_err(|e| format!("{e} (run scripts/setup.sh to fetch the speech models)"))?;
    Ok(SpeechStream::new(
        recogniser.with_rules(rules_of(&config.asr)),
    ))
}
