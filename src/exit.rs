//! Exit-code classification shared by every command.
//!
//! Contract: 0 ok, 1 runtime failure (something on this machine went wrong: disk, database,
//! thread, signal), 2 bad input or usage (a file, config or argument the user can fix).

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
