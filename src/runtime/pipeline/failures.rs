//! Stages that fail mid-session: the session goes on without them.
//!
//! Contract: a stage thread (a frame stage, an audio stage, the recogniser, the text encoder,
//! a window consumer such as fusion) that gets an error from its stage calls
//! [`StageFailures::fail`] once and from then on runs without it: its modality is absent
//! from every later frame (the recogniser's and the text encoder's words stop; fusion stops
//! predicting), while capture, the recording, the other stages and the store go on. The
//! failure is logged as an ERROR, told to the observer as a `quality` message
//! (`event: stage_failed`), visible to live `status` while the session runs (the front end
//! holds the same [`StageFailures`]) and kept in the session's quality report
//! (`stage_failures`), which is stored with the session, shown by `sessions show`, the
//! summary and the report, and synced. A replay of the session's recording fails the same
//! way only if the stage does; the session's other data are the same as live.
//!
//! Why not fail the run: a study session cannot be repeated; a session without one
//! modality is still most of its value, a session stored `failed` with no frames is none.

use std::sync::{Arc, Mutex};

use super::observe::{Observer, Topic};
pub use crate::report::StageFailure;
use crate::Nanos;

/// The failures of one run, shared by its threads and its front end.
#[derive(Default)]
pub struct StageFailures {
    list: Mutex<Vec<StageFailure>>,
    observer: Mutex<Option<Arc<dyn Observer>>>,
}

impl StageFailures {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Tells `observer` of every failure from now on.
    pub fn tell(&self, observer: Option<Arc<dyn Observer>>) {
        *self.observer.lock().unwrap_or_else(|p| p.into_inner()) = observer;
    }

    /// `stage` failed on data at session time `at_ns` with `error`; the caller goes on
    /// without it.
    pub fn fail(&self, stage: &str, at_ns: Nanos, error: &dyn std::fmt::Display) {
        let failure = StageFailure {
            stage: stage.to_string(),
            at_ms: at_ns / 1_000_000,
            error: error.to_string(),
        };
        tracing::error!(
            stage = %failure.stage,
            at_ms = failure.at_ms,
            "stage failed; the session goes on without it: {}",
            failure.error
        );
        let observer = self
            .observer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(o) = observer {
            o.observe(
                Topic::Quality,
                failure.at_ms,
                serde_json::json!({
                    "event": "stage_failed",
                    "stage": failure.stage,
                    "error": failure.error,
                }),
            );
        }
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(failure);
    }

    /// The failures so far, in the order they happened.
    pub fn list(&self) -> Vec<StageFailure> {
        self.list.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Test-only fail points (`fail` crate, feature `failpoints`): a stage's error injected at a
/// chosen moment. In a build without the feature this is nothing.
///
/// The point `stage-<name>` is evaluated with the session time in milliseconds of the data
/// the stage is about to process; its configured action `return(<ms>)` makes the stage fail
/// once its data reach `<ms>` (for example `FAILPOINTS=stage-face=return(30000)`).
#[cfg(feature = "failpoints")]
pub fn injected(stage: &str, at_ns: Nanos) -> Option<String> {
    let name = format!("stage-{stage}");
    fail::eval(&name, |arg: Option<String>| {
        let from_ms: u64 = arg.as_deref().and_then(|a| a.parse().ok()).unwrap_or(0);
        (at_ns / 1_000_000 >= from_ms).then(|| format!("injected failure (fail point {name})"))
    })
    .flatten()
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn injected(_stage: &str, _at_ns: Nanos) -> Option<String> {
    None
}
