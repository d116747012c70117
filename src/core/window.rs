//! Frame records and windows: what the aligner produces per frame slot, what the assembler
//! cuts from them, and the stories in play a window is predicted against.
//!
//! Contract: a [`FrameRecord`] holds one entry per modality of the run's
//! [`super::ModalityLayout`] (`None`: absent on that frame); a [`Window`] is consecutive
//! records with the phase and stories in play decided when it was emitted. Plain data: who
//! fills them is `windows`, who reads them is fusion and the store.

use std::sync::Arc;

use super::{ModalityId, Phase};
use crate::Nanos;

/// Everything known about one frame slot.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameRecord {
    /// Slot on the nominal frame grid (0-based).
    pub index: u64,
    /// Nominal start time of the slot.
    pub t_ns: Nanos,
    /// Whether a video frame was decoded for this slot (false: a dropped frame).
    pub decoded: bool,
    /// One entry per modality of the [`ModalityLayout`](crate::core::ModalityLayout); `None` when absent on this frame.
    pub features: Vec<Option<Vec<f32>>>,
}

impl FrameRecord {
    /// Modality `m` on this frame, when present.
    pub fn get(&self, m: ModalityId) -> Option<&[f32]> {
        self.features.get(m.index())?.as_deref()
    }
}

/// A window of consecutive frame records.
#[derive(Debug, Clone)]
pub struct Window {
    pub index: u64,
    /// First frame (inclusive) and last frame (exclusive).
    pub start_frame: u64,
    pub end_frame: u64,
    pub start_ns: Nanos,
    /// End of the last frame's interval.
    pub end_ns: Nanos,
    /// The phase in force at the window's midpoint, decided when it was emitted.
    pub phase: Option<Phase>,
    pub frames: Vec<Arc<FrameRecord>>,
    /// The stories in play when the window ended (set when it is emitted): those shown
    /// before its end, in the order shown; before any is shown, the latest retrieval from
    /// the bank for what the participant had shared; else none.
    pub stories: Vec<Arc<StoryInPlay>>,
}

/// A story in play in the session, with its sentence embedding: shown to the participant,
/// or retrieved from the bank for what they have shared so far.
#[derive(Debug, Clone, PartialEq)]
pub struct StoryInPlay {
    pub story_id: String,
    pub title: String,
    /// When it was shown, or when the retrieval that found it was made.
    pub shown_ns: Nanos,
    pub embedding: Vec<f32>,
    /// Retrieved (not yet shown): in play only until a story is shown.
    pub retrieved: bool,
}

impl Window {
    /// Per-frame presence of modality `m`.
    pub fn presence(&self, m: ModalityId) -> Vec<bool> {
        self.frames.iter().map(|f| f.get(m).is_some()).collect()
    }

    /// Column-wise mean of modality `m` over the frames where it is present.
    pub fn mean(&self, m: ModalityId) -> Option<Vec<f32>> {
        let mut sum: Option<Vec<f64>> = None;
        let mut n = 0usize;
        for v in self.frames.iter().filter_map(|f| f.get(m)) {
            let s = sum.get_or_insert_with(|| vec![0.0; v.len()]);
            for (a, b) in s.iter_mut().zip(v) {
                *a += f64::from(*b);
            }
            n += 1;
        }
        sum.map(|s| s.into_iter().map(|a| (a / n as f64) as f32).collect())
    }

    /// The window's midpoint on the timeline (used to pick its phase).
    pub fn mid_ns(&self) -> Nanos {
        self.start_ns + (self.end_ns - self.start_ns) / 2
    }
}
