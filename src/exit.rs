//! Exit-code classification shared by every command.
//!
//! Contract: 0 ok, 1 runtime failure (something on this machine went wrong: disk, database,
//! thread, signal), 2 bad input or usage (a file, config or argument the user can fix); and
//! the live service's 75 ([`RESTART_NEW_BUILD`]).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

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

/// The live service's exit code when its binary was replaced (an upgrade) and it ended
/// between sessions to be started anew (EX_TEMPFAIL): the unit's
/// `RestartForceExitStatus=75` restarts it, `SuccessExitStatus=75` does not count it failed.
pub const RESTART_NEW_BUILD: u8 = 75;

/// What kind of failure an error is, which decides the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// A runtime failure: exit code 1.
    Runtime,
    /// Bad input or usage: exit code 2.
    BadInput,
}

impl ExitKind {
    /// The process exit code for this kind.
    pub fn code(self) -> i32 {
        match self {
            ExitKind::Runtime => 1,
            ExitKind::BadInput => 2,
        }
    }
}

/// Implemented by every error type that can reach `main`.
pub trait Classify {
    /// Which exit code this error deserves.
    fn exit_kind(&self) -> ExitKind;
}
