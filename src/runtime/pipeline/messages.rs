//! The messages the pipeline's threads pass on their queues, and what each thread returns
//! when it ends. Internal to the pipeline: `graph.rs` builds the queues of these types,
//! `threads.rs` and `text.rs` send and receive them.

use crate::capture::timeline::{AudioTimelineStats, VideoTimelineStats};
use crate::capture::VideoFrame;
use crate::core::{ModalityId, StoryInPlay};
use crate::features::signal::{AudioSignalTotals, VideoSignalTotals};
use crate::features::text::{EmbeddedUtterance, RetrievalSet};
use crate::features::{AudioRow, FrameContext};
use crate::session::events::PhaseSpan;
use crate::windows::VideoSlot;
use crate::Nanos;

use super::figures::LatencySummary;

/// What the video-features thread returns: the slot grid's figures and the signal totals.
pub(super) struct VideoFeaturesDone {
    pub(super) timeline: VideoTimelineStats,
    pub(super) totals: VideoSignalTotals,
}

/// What the audio-features thread returns: the audio timeline's figures and the signal
/// totals.
pub(super) struct AudioFeaturesDone {
    pub(super) timeline: AudioTimelineStats,
    pub(super) totals: AudioSignalTotals,
}

/// What the audio thread hands the aligner per block: rows per modality, and the audio
/// modalities whose stage failed with this block (no more rows will come for them).
pub(super) struct AudioOut {
    pub(super) rows: Vec<(ModalityId, Vec<AudioRow>)>,
    pub(super) retired: Vec<ModalityId>,
}

/// What the align-windows thread returns: frames and windows released, and (paced runs)
/// how long frames took from capture to the writer.
pub(super) struct AlignDone {
    pub(super) frames: u64,
    pub(super) windows: u64,
    pub(super) latency: Option<LatencySummary>,
}

/// What the text stage tells the aligner: utterances embedded, phases entered, and how far
/// the session's events are known.
pub(super) struct TextUpdate {
    pub(super) utterances: Vec<EmbeddedUtterance>,
    pub(super) stories: Vec<StoryInPlay>,
    pub(super) retrievals: Vec<RetrievalSet>,
    pub(super) phases: Vec<PhaseSpan>,
    pub(super) known_until_ns: Nanos,
}

/// A slot on its way through the frame-stage threads: the frame it was decoded from (none
/// for a dropped frame) and what earlier stages found on it.
pub(super) struct PendingSlot {
    pub(super) slot: VideoSlot,
    pub(super) frame: Option<VideoFrame>,
    pub(super) ctx: FrameContext,
}
