//! From per-frame outputs to sliding windows.
//!
//! Contract:
//! - [`align::FrameAligner`] joins the video stages' output for each frame slot with the
//!   audio rows whose time falls in that slot's interval `[t_slot, t_slot + period)`, pooled
//!   by each audio stage, giving one [`FrameRecord`] per slot with every modality present or
//!   absent. A slot is released once every audio stage has produced a row at or after the
//!   slot's end, or audio has ended.
//! - [`assembler::WindowAssembler`] cuts the stream of frame records into windows of
//!   `length` frames starting every `hop` frames. Window `i` covers frames
//!   `[i * hop, i * hop + length)`; a trailing partial window is not emitted.
//!
//! Both are plain structs with no clock and no threads; the runtime drives them.

pub mod align;
pub mod assembler;

use std::sync::Arc;

use crate::features::ModalitySpec;
use crate::Nanos;

pub use align::{FrameAligner, VideoSlot};
pub use assembler::WindowAssembler;

/// Where a modality comes from: computed per video frame slot (video, and text, which
/// follows the utterance events at the slot's time), or pooled from the audio stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Video,
    Text,
    Audio,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Video => "video",
            Stream::Text => "text",
            Stream::Audio => "audio",
        }
    }
}

/// The modalities of a pipeline, in the order of [`FrameRecord::features`].
#[derive(Debug, Clone, PartialEq)]
pub struct ModalityLayout {
    pub modalities: Vec<(Stream, ModalitySpec)>,
}

impl ModalityLayout {
    /// Index of the modality called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.modalities.iter().position(|(_, m)| m.name == name)
    }

    pub fn len(&self) -> usize {
        self.modalities.len()
    }

    pub fn is_empty(&self) -> bool {
        self.modalities.is_empty()
    }
}

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
    pub frames: Vec<Arc<FrameRecord>>,
}

impl Window {
    /// Per-frame presence of modality `m`.
    pub fn presence(&self, m: usize) -> Vec<bool> {
        self.frames
            .iter()
            .map(|f| f.features.get(m).is_some_and(Option::is_some))
            .collect()
    }

    /// Column-wise mean of modality `m` over the frames where it is present.
    pub fn mean(&self, m: usize) -> Option<Vec<f32>> {
        let mut sum: Option<Vec<f64>> = None;
        let mut n = 0usize;
        for v in self
            .frames
            .iter()
            .filter_map(|f| f.features.get(m)?.as_ref())
        {
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
