//! What every thread of a run borrows for the run's scope ([`Shared`]): the configuration,
//! the clock and pacing, the stop flags, where figures and failures are recorded, the
//! observer, the store writer and the modality layout. Built once by `run`, read by the
//! graph (`graph.rs`) and the thread bodies (`threads.rs`).

use std::sync::atomic::AtomicBool;

use super::failures::StageFailures;
use super::figures::Figures;
use super::observe::Observer;
use super::Progress;
use crate::clock::{Clock, Pacer, Speed};
use crate::config::Config;
use crate::core::ModalityLayout;
use crate::store::StoreWriter;
use crate::Nanos;

/// What every thread of a run borrows for the run's scope.
pub(super) struct Shared<'a> {
    pub(super) config: &'a Config,
    pub(super) clock: &'a dyn Clock,
    pub(super) pacer: &'a Pacer,
    pub(super) realtime_priority: u8,
    pub(super) stop: &'a AtomicBool,
    /// Set when `stop` ended a capture before the end of its input.
    pub(super) stopped: &'a AtomicBool,
    /// Inputs that ended on bad data (a file cut short, a corrupt frame) after what they
    /// had decoded: `(thread, error)`; what they decoded is kept.
    pub(super) cut: &'a std::sync::Mutex<Vec<(String, String)>>,
    pub(super) figures: &'a Figures,
    pub(super) failures: &'a StageFailures,
    pub(super) progress: &'a dyn Progress,
    pub(super) observer: Option<&'a dyn Observer>,
    pub(super) writer: &'a StoreWriter,
    pub(super) layout: &'a ModalityLayout,
    pub(super) period_ns: f64,
    /// Live: how far behind the capture the events may be known; 0 for a replay.
    pub(super) events_lag_ns: Nanos,
    /// Live text: known as far as the events are (see `TextInputs::live`).
    pub(super) live_text: bool,
    pub(super) words_reach_ns: Option<Nanos>,
}

impl<'a> Shared<'a> {
    /// Paced runs: the clock and the session's start on it, to measure latencies.
    pub(super) fn latency_from(&self) -> Option<(&'a dyn Clock, Nanos)> {
        (self.pacer.speed == Speed::Realtime).then_some((self.clock, self.pacer.start_clock_ns))
    }
}
