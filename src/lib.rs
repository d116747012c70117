//! empathic: senses empathy on an in-home social robot.
//!
//! The modules in layer order, bottom up (ARCHITECTURE.md; `tests/it/architecture.rs`
//! holds each to the modules below it; every format is specified in docs/formats.md):
//!
//! - [`core`]: the shared vocabulary (modalities, frame records, windows, phases, choices);
//!   [`exit`], [`clock`], [`files`], [`named_thread`]: exit codes, the injected clock, the
//!   one way a command writes a file the user named, the one way a thread starts.
//! - [`session`]: the recorded-session folder format; [`models`]: the model manifest and
//!   ONNX Runtime; [`config`]: the configuration.
//! - [`capture`]: sources that stamp video frames and audio blocks on one session timeline,
//!   and the recorder; [`features`]: per-frame and per-audio-block stages (plain structs,
//!   no threads); [`windows`]: aligns audio to video frames and assembles sliding windows;
//!   [`fusion`]: predictors that turn a window into predicted empathy toward each story.
//! - [`store`]: the SQLite session store and the central databases' tables; [`sync`]: the
//!   outbox to the study's broker and the collector; [`stories`]: the story bank.
//! - [`report`]: session, participant and study pages; [`runtime`]: the threads, bounded
//!   queues, pacing and graceful stop that run a session; [`doctor`]: the installation
//!   check.
//! - [`cli`]: the body of each command (progress bars are drawn only here).
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod capture;
pub mod cli;
pub mod clock;
pub mod config;
pub mod core;
pub mod digest;
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

/// This build: Cargo's version, the commit and the commit's date (`build.rs`), as
/// `empathic --version`, the stations' health and the pages name it, so staff can tell which
/// stations have updated.
pub const BUILD: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("EMPATHIC_BUILD_COMMIT"),
    ", ",
    env!("EMPATHIC_BUILD_DATE"),
    ")"
);
