//! empathic: senses empathy on an in-home social robot.
//!
//! The pipeline, in the order data flows (see `ARCHITECTURE.md`):
//!
//! - [`session`]: the recorded-session folder format (version 1): `video.avi`, `audio.wav`,
//!   `session.json`, `events.jsonl`.
//! - [`capture`]: sources that stamp video frames and audio blocks on one session timeline
//!   (recorded files now; live camera and microphone implement the same traits).
//! - [`features`]: per-frame and per-audio-block stages (plain structs, no threads).
//! - [`windows`]: aligns audio to video frames and assembles sliding windows with presence masks.
//! - [`fusion`]: predictors that turn a window into predicted empathy toward each story
//!   in play.
//! - [`store`]: the SQLite session store (migrations, one batched writer thread).
//! - [`runtime`]: the threads, bounded queues, pacing and graceful stop that tie it together.
//! - [`cli`]: the body of each command (progress bars and output files live here).
//! - [`config`], [`clock`], [`report`], [`doctor`]: configuration, the injected clock, the
//!   end-of-run summary, and the installation check.
//! - [`files`]: the one way a command writes a file the user named (never over a device or
//!   a link, never half a file).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod capture;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
#[cfg(feature = "sensing")]
pub mod doctor;
pub mod exit;
pub mod features;
pub mod files;
pub mod fusion;
pub mod models;
pub mod named_thread;
pub mod report;
#[cfg(feature = "sensing")]
pub mod runtime;
pub mod session;
pub mod store;
pub mod stories;
pub mod sync;
pub mod windows;

/// Nanoseconds on a session timeline: 0 is the session start.
pub type Nanos = u64;

/// Nanoseconds per second, for stamp arithmetic.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;
