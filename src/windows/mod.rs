//! From per-frame outputs to sliding windows.
//!
//! Contract:
//! - [`layout::ModalityLayout`] fixes at set-up which modalities a run carries; every
//!   [`FrameRecord`] holds one entry per modality, found by [`ModalityId`].
//! - [`align::FrameAligner`] joins the video stages' output for each frame slot with the
//!   audio rows whose time falls in that slot's interval `[t_slot, t_slot + period)`, pooled
//!   by each audio stage, and with the text vector at the slot's start, giving one
//!   [`FrameRecord`] per slot with every modality present or absent. A slot is released once
//!   every audio stage has produced a row at or after the slot's end (or audio has ended)
//!   and the session events are known up to the slot's start (or have ended).
//! - [`assembler::WindowAssembler`] cuts the stream of frame records into windows of
//!   `length` frames starting every `hop` frames. Window `i` covers frames
//!   `[i * hop, i * hop + length)`; a trailing partial window is not emitted. Its phase is
//!   decided by whoever emits it (the phase in force at its midpoint, from the phase events
//!   known then).
//! - [`quality::WindowQuality`] is the one computation of a window's quality figures.
//!
//! All are plain structs with no clock and no threads; the runtime drives them.

#[cfg(feature = "sensing")]
pub mod align;
pub mod assembler;
pub mod layout;
pub mod quality;

use std::sync::Arc;

use crate::session::Phase;
use crate::Nanos;

#[cfg(feature = "sensing")]
pub use align::{FrameAligner, VideoSlot};
pub use assembler::WindowAssembler;
pub use layout::{Modality, ModalityId, ModalityLayout, Stream};
pub use quality::WindowQuality;

/// Everything known about one frame slot.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameRecord {
    /// Slot on the nominal frame grid (0-based).
    pub index: u64,
    /// Nominal start time of the slot.
    pub t_ns: Nanos,
    /// Whether a video frame was decoded for this slot (false: a dropped frame).
    pub decoded: bool,
    /// One entry per modality of the [`ModalityLayout`]; `None` when absent on this frame.
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
