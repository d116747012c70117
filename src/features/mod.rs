//! Feature stages: plain structs that turn captured data into per-frame feature vectors.
//!
//! Contract: a stage owns no thread, channel or clock; the runtime calls it in order.
//! - A [`FrameStage`] gets each video frame and returns its vector, or `None` when its
//!   modality is absent on that frame (no face, say).
//! - An [`AudioStage`] gets audio blocks of any size and returns stamped rows at its own rate
//!   (10 ms for the signal stage and for the ComParE LLDs); the output must not depend on
//!   how the audio was split into blocks. [`AudioStage::pooling`] turns the rows that fall in
//!   one video frame's interval into that frame's vector (or `None`: absent).
//!
//! Every stage names its modality and its columns ([`ModalitySpec`]); the window assembler
//! and the store carry vectors per modality with a presence flag per frame. The facial,
//! appearance, acoustic and text extractors implement these traits.

pub mod acoustic;
#[cfg(feature = "sensing")]
pub mod appearance;
#[cfg(feature = "sensing")]
pub mod body;
#[cfg(feature = "sensing")]
pub mod face;
pub mod retrieval;
pub mod signal;
#[cfg(feature = "sensing")]
pub mod speech;
#[cfg(feature = "sensing")]
pub mod text;

use crate::capture::AudioBlock;
#[cfg(feature = "sensing")]
use crate::capture::VideoFrame;
use crate::core::ModalitySpec;
use crate::exit::{Classify, ExitKind};
use crate::Nanos;

/// Pearson correlation of two equal-length slices, in double (0 when either is flat).
/// Shared by the pitch-period jitter and the face tracker's look check.
pub fn pearson(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len() as f64;
    let ma = a.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let mb = b.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    let d = saa.sqrt() * sbb.sqrt();
    if d > 0.0 {
        sab / d
    } else {
        0.0
    }
}

/// What earlier frame stages found on the same frame, for later ones (stages run in
/// layout order on one thread).
#[cfg(feature = "sensing")]
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameContext {
    /// The participant's aligned face crop (eyes levelled, 1.5x the face), from the facial
    /// stage; `None` when no face was found or the stage is off.
    pub face_roi: Option<face::crop::Roi>,
    /// The participant's 52 blendshape coefficients, from the facial stage; `None` when no
    /// face was found or the stage is off.
    pub blendshapes: Option<[f32; 52]>,
}

/// A per-video-frame stage.
#[cfg(feature = "sensing")]
pub trait FrameStage: Send {
    fn spec(&self) -> &ModalitySpec;
    /// The frame's vector (length `spec().dims()`), or `None` when the modality is absent.
    /// `ctx` carries what earlier stages found on this frame; a stage may add to it.
    fn process(
        &mut self,
        frame: &VideoFrame,
        ctx: &mut FrameContext,
    ) -> Result<Option<Vec<f32>>, StageError>;
}

/// One stamped output row of an audio stage.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioRow {
    /// Time of the row's first sample on the session timeline.
    pub t_ns: Nanos,
    pub values: Vec<f32>,
}

/// A per-audio-block stage producing rows at its own rate.
pub trait AudioStage: Send {
    /// The spec of the pooled per-frame vector.
    fn spec(&self) -> &ModalitySpec;
    fn process(&mut self, block: &AudioBlock) -> Result<Vec<AudioRow>, StageError>;
    /// Rows still held at the end of the stream.
    fn finish(&mut self) -> Result<Vec<AudioRow>, StageError>;
    /// How rows that fall in one video frame become that frame's vector. A plain function
    /// (no stage state), so the aligner can pool on its own thread.
    fn pooling(&self) -> PoolFn;
    /// A warning about the whole stream, for the log at its end (input it had to repair).
    fn end_warning(&self) -> Option<String> {
        None
    }
}

/// Pools the rows of one video frame into its vector; `None` when the modality is absent.
pub type PoolFn = fn(&[&AudioRow]) -> Option<Vec<f32>>;

/// A stage failed on data it was given.
#[derive(Debug, thiserror::Error)]
#[error("stage {stage} failed: {message}")]
pub struct StageError {
    pub stage: &'static str,
    pub message: String,
}

impl Classify for StageError {
    fn exit_kind(&self) -> ExitKind {
        ExitKind::Runtime
    }
}
