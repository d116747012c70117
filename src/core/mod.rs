//! The shared vocabulary of the pipeline: the types every stage, the store and the
//! configuration agree on, with no behaviour that needs a device, a model or a database.
//!
//! Contract: `core` depends on nothing else in this crate (tests/it/architecture.rs holds
//! it to that). It holds what two layers would otherwise import from each other:
//! - [`modality`]: what a modality is ([`ModalitySpec`]) and which a run carries
//!   ([`ModalityLayout`], found by [`ModalityId`]);
//! - [`window`]: a [`FrameRecord`] per frame slot, a [`Window`] of them, a [`StoryInPlay`];
//! - [`quality`]: a window's quality figures ([`WindowQuality`]) and the signal columns
//!   they are read from;
//! - [`phase`]: the session's [`Phase`]s and who transcribed an utterance
//!   ([`TranscriptSource`]);
//! - [`choices`]: what a configuration chooses ([`LldSet`], [`Policy`], the built-in
//!   predictors);
//! - [`rated`]: a stored prediction against its rating ([`RatedWindow`]);
//! - [`vector`]: the one [`cosine`] between embeddings;
//! - [`attribution`]: what moved a prediction ([`Attribution`], per cue);
//! - [`prediction`]: one [`Prediction`] (a window, a predictor, a story), as the fusion
//!   stage makes it and the store keeps it.

pub mod attribution;
pub mod choices;
pub mod modality;
pub mod phase;
pub mod prediction;
pub mod quality;
pub mod rated;
pub mod vector;
pub mod window;

pub use attribution::{Attribution, CueAttribution};
pub use choices::{LldSet, Policy, BUILTIN_PREDICTORS, COMPARE_LLDS};
pub use modality::{
    Computed, DuplicateModality, Modality, ModalityId, ModalityLayout, ModalitySpec, Stream,
};
pub use phase::{Phase, TranscriptSource};
pub use prediction::Prediction;
pub use quality::{QualitySources, WindowQuality};
pub use rated::RatedWindow;
pub use vector::cosine;
pub use window::{FrameRecord, StoryInPlay, Window};
