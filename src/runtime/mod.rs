//! The runtime: the only place with threads, channels, pacing and signals.
//!
//! Contract: [`replay::replay`] runs a recorded session through the same stages a live
//! station runs, on named threads joined by bounded queues ([`queues`]):
//!
//! ```text
//! video-capture -> video-features -+
//!                                  +-> align-windows -> store-writer
//! audio-capture -> audio-features -+
//! ```
//!
//! Stop is a flag ([`stop_flag`]): sources stop reading, every queue drains, everything
//! already computed is written and the session is closed as `incomplete`.

pub mod queues;
pub mod replay;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::capture::CaptureError;
use crate::config::ConfigError;
use crate::exit::{Classify, ExitKind};
use crate::features::StageError;
use crate::session::SessionError;
use crate::store::StoreError;

/// Errors of a run, each classified for the exit code.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Stage(#[from] StageError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    #[error("runtime thread {thread} failed: {message}")]
    Thread {
        thread: &'static str,
        message: String,
    },
    /// The thread a queue feeds ended early; that thread's own error is the cause.
    #[error("runtime thread {thread} failed: {next} stopped")]
    NextStopped {
        thread: &'static str,
        next: &'static str,
    },
}

impl Classify for RunError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            RunError::Config(e) => e.exit_kind(),
            RunError::Session(e) => e.exit_kind(),
            RunError::Capture(e) => e.exit_kind(),
            RunError::Stage(e) => e.exit_kind(),
            RunError::Store(e) => e.exit_kind(),
            RunError::Model(e) => e.exit_kind(),
            RunError::Thread { .. } | RunError::NextStopped { .. } => ExitKind::Runtime,
        }
    }
}

/// A stop flag set by SIGINT and SIGTERM. A second signal while stopping exits at once
/// (exit code 1), for when a flush hangs on a dead disk.
pub fn stop_flag() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // Order matters: the conditional exit must see the flag before this signal sets it.
        signal_hook::flag::register_conditional_shutdown(signal, 1, stop.clone())?;
        signal_hook::flag::register(signal, stop.clone())?;
    }
    Ok(stop)
}
