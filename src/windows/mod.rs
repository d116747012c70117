//! From per-frame outputs to sliding windows.
//!
//! Contract:
//! - The types it fills live in [`crate::core`]: the [`crate::core::ModalityLayout`] fixed
//!   at set-up, the [`crate::core::FrameRecord`] per slot, the [`crate::core::Window`].
//! - [`align::FrameAligner`] joins the video stages' output for each frame slot with the
//!   audio rows whose time falls in that slot's interval `[t_slot, t_slot + period)`, pooled
//!   by each audio stage, and with the text vector at the slot's start, giving one
//!   [`FrameRecord`](crate::core::FrameRecord) per slot with every modality present or absent. A slot is released once
//!   every audio stage has produced a row at or after the slot's end (or audio has ended)
//!   and the session events are known up to the slot's start (or have ended).
//! - [`assembler::WindowAssembler`] cuts the stream of frame records into windows of
//!   `length` frames starting every `hop` frames. Window `i` covers frames
//!   `[i * hop, i * hop + length)`; a trailing partial window is not emitted. Its phase is
//!   decided by whoever emits it (the phase in force at its midpoint, from the phase events
//!   known then).
//! - A window's quality figures are computed once, by [`crate::core::WindowQuality::of`].
//!
//! All are plain structs with no clock and no threads; the runtime drives them.

#[cfg(feature = "sensing")]
pub mod align;
pub mod assembler;

#[cfg(feature = "sensing")]
pub use align::{FrameAligner, VideoSlot};
pub use assembler::WindowAssembler;
