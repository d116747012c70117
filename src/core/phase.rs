//! The session's phases and who transcribed an utterance: the two vocabularies that the
//! session format, the configuration, the windows and the store share.
//!
//! Contract: the names (`as_str`, and serde's) are the ones written in `events.jsonl`, in
//! the configuration and in the database (docs/formats.md); they never change meaning.

use serde::{Deserialize, Serialize};

/// The five phases of an EmpathicStories++ session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    WarmUp,
    StoryShare,
    StoryReceive,
    Reflection,
    CoolDown,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::WarmUp,
        Phase::StoryShare,
        Phase::StoryReceive,
        Phase::Reflection,
        Phase::CoolDown,
    ];

    /// The name used in files and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::WarmUp => "warm_up",
            Phase::StoryShare => "story_share",
            Phase::StoryReceive => "story_receive",
            Phase::Reflection => "reflection",
            Phase::CoolDown => "cool_down",
        }
    }
}

/// Who transcribed an utterance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TranscriptSource {
    /// The dialogue app (its own or a cloud recogniser, or a human): the default.
    #[default]
    DialogueApp,
    /// The station's own recogniser (`features::speech`).
    Asr,
}

impl TranscriptSource {
    /// The name used in files and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            TranscriptSource::DialogueApp => "dialogue_app",
            TranscriptSource::Asr => "asr",
        }
    }

    pub fn is_dialogue_app(&self) -> bool {
        *self == TranscriptSource::DialogueApp
    }
}
