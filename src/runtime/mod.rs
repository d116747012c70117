//! The runtime: the threads, queues, pacing and stop of a run (threads elsewhere are the
//! collector's study page and the alert command's pipe readers: ARCHITECTURE.md, "Rules").
//!
//! Contract: [`pipeline::run`] is the one thread graph every run goes through, whatever
//! its sources; [`stages::Stages`] sets up the stages and their modality layout; front
//! ends open their sources and hand the session's sequence (set-up from the store, writer,
//! begin, run, close or fail) to [`sequence`]: [`replay::replay`] for a recorded folder,
//! [`live`] for the station's devices and control socket. [`WriterThread`] runs the store
//! writer actor on its own named thread. Queues are bounded with a written overflow policy
//! ([`queues`]).
//!
//! Stop is a flag ([`stop_flag`]): sources stop reading, every queue drains, everything
//! already computed is written and the session is closed as `incomplete`.

pub mod live;
pub mod pipeline;
pub mod queues;
pub mod replay;
pub mod screen;
pub mod sequence;
pub mod stages;
pub mod transcripts;

use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::capture::CaptureError;
use crate::config::ConfigError;
use crate::exit::{Classify, ExitKind};
use crate::features::StageError;
use crate::session::SessionError;
use crate::store::writer::BatchLimits;
use crate::store::{StoreError, StoreWriter};

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
    #[error(transparent)]
    Fusion(#[from] crate::fusion::FusionError),
    #[error("cannot start runtime thread {thread}: {message}")]
    ThreadStart { thread: String, message: String },
    #[error("runtime thread {thread} panicked")]
    Panicked { thread: String },
    /// A fail point of the test build made this thread's work fail.
    #[error("runtime thread {thread} failed: {message}")]
    Injected { thread: String, message: String },
    #[error("cannot set up the run: {0}")]
    SetUp(String),
    #[error("cannot encode {what}: {message}")]
    Encode { what: &'static str, message: String },
    #[error(transparent)]
    Output(#[from] crate::files::OutputError),
    /// The thread a queue feeds ended early; that thread's own error is the cause.
    #[error("runtime thread {thread} failed: {next} stopped")]
    NextStopped { thread: String, next: String },
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
            RunError::Fusion(_) => ExitKind::BadInput,
            RunError::Output(e) => e.exit_kind(),
            RunError::ThreadStart { .. }
            | RunError::Panicked { .. }
            | RunError::Injected { .. }
            | RunError::SetUp(_)
            | RunError::Encode { .. }
            | RunError::NextStopped { .. } => ExitKind::Runtime,
        }
    }
}

impl RunError {
    /// An input that went bad part of the way through (a recording cut short by a crash or
    /// a full disk, a corrupt frame): what it gave before is good and is kept.
    pub fn is_cut_input(&self) -> bool {
        matches!(
            self,
            RunError::Capture(CaptureError::Corrupt { .. } | CaptureError::TruncatedAudio { .. })
        )
    }
}

pub use crate::exit::stop_flag;

/// Starts `f` on a thread called `name` in `scope` ([`crate::named_thread`]); a thread
/// that cannot start is a [`RunError::ThreadStart`] naming it.
pub(crate) fn spawn_in<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'scope,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>, RunError> {
    crate::named_thread::spawn_scoped(scope, name, f).map_err(|e| RunError::ThreadStart {
        thread: name.into(),
        message: e.to_string(),
    })
}

/// The store writer actor on its own thread (`store-writer`), with a handle to it.
pub struct WriterThread {
    writer: Option<StoreWriter>,
    thread: Option<JoinHandle<()>>,
}

impl WriterThread {
    /// Connects to the store at `path` (already opened and migrated) and starts the actor.
    pub fn spawn(path: &Path, config: &crate::config::StoreConfig) -> Result<Self, RunError> {
        let limits = BatchLimits {
            max_rows: config.batch_max_rows,
            max_age: Duration::from_millis(config.batch_max_ms),
        };
        let (writer, actor) = StoreWriter::open(path, limits, config.into())?;
        let thread =
            crate::named_thread::spawn("store-writer", move || actor.run()).map_err(|e| {
                RunError::ThreadStart {
                    thread: "store-writer".into(),
                    message: e.to_string(),
                }
            })?;
        Ok(Self {
            writer: Some(writer),
            thread: Some(thread),
        })
    }

    /// The handle (clone it for each thread that writes).
    pub fn writer(&self) -> Result<&StoreWriter, StoreError> {
        self.writer
            .as_ref()
            .ok_or_else(|| StoreError::WriterGone("already closed".into()))
    }

    /// Commits what is queued, then stops and joins the writer thread (every other
    /// handle must be gone by then, as they are once the pipeline's threads have ended).
    pub fn close(mut self) -> Result<(), RunError> {
        let flushed = self.writer().and_then(StoreWriter::flush);
        self.shutdown();
        Ok(flushed?)
    }

    fn shutdown(&mut self) {
        self.writer.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
        }
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        // Dropping the last handle ends the actor's loop after it has committed what it holds.
        self.shutdown();
    }
}

/// Asks for SCHED_FIFO at `priority` for the calling thread; logs a refusal and goes on.
pub(crate) fn realtime_priority(priority: u8) {
    if priority == 0 {
        return;
    }
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
        ThreadPriority, ThreadPriorityValue, ThreadSchedulePolicy,
    };
    let value = ThreadPriorityValue::try_from(priority.min(99)).ok();
    let result = value.map(|v| {
        set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Crossplatform(v),
            ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
        )
    });
    match result {
        Some(Ok(())) => tracing::debug!(priority, "real-time priority"),
        Some(Err(e)) => tracing::info!(
            "real-time priority {priority} refused ({e:?}); running at normal priority (allow it with the unit's LimitRTPRIO=)"
        ),
        None => {}
    }
}
