//! What the pipeline measures about itself: per-thread figures (items, busy time, the
//! output queue's highest depth) logged at `debug` at the end of a run, and the
//! capture-to-store latency of paced runs.

use crate::runtime::queues::PolicySender;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What one thread did, for the end-of-run summary at `debug`.
#[derive(Debug, Clone)]
pub struct ThreadFigures {
    pub thread: String,
    pub items: u64,
    /// Time spent in the thread's own work (not waiting on its queues).
    pub busy: Duration,
    /// The most items seen waiting in its output queue, and that queue's capacity.
    pub out_queue: Option<(usize, usize)>,
}

/// Collects [`ThreadFigures`] from the threads as they end.
#[derive(Default)]
pub(super) struct Figures(pub(super) Mutex<Vec<ThreadFigures>>);

impl Figures {
    pub(super) fn push(&self, f: ThreadFigures) {
        if let Ok(mut v) = self.0.lock() {
            v.push(f);
        }
    }
}

/// Counts items and busy time of one thread.
pub(super) struct Meter {
    thread: String,
    items: u64,
    busy: Duration,
}

impl Meter {
    pub(super) fn new(thread: &str) -> Self {
        Self {
            thread: thread.to_string(),
            items: 0,
            busy: Duration::ZERO,
        }
    }

    /// Times `f` as one item of work.
    pub(super) fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.busy += t.elapsed();
        self.items += 1;
        out
    }

    pub(super) fn done<T>(self, figures: &Figures, out: Option<&PolicySender<T>>) {
        figures.push(ThreadFigures {
            thread: self.thread,
            items: self.items,
            busy: self.busy,
            out_queue: out.map(PolicySender::depth),
        });
    }
}

/// Capture-to-store latency of a paced run's decoded frames: from the frame's time on
/// the session clock to the moment its features were handed to the store writer (which
/// commits within `store.batch_max_ms`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatencySummary {
    pub frames: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    pub(super) fn of(mut us: Vec<u32>) -> Option<Self> {
        if us.is_empty() {
            return None;
        }
        us.sort_unstable();
        let at = |q: f64| f64::from(us[((us.len() - 1) as f64 * q).round() as usize]) / 1e3;
        Some(Self {
            frames: us.len(),
            p50_ms: at(0.5),
            p95_ms: at(0.95),
            max_ms: at(1.0),
        })
    }
}

/// The per-thread figures at `debug`, one line each: where a slow run spent its time.
pub(super) fn log_figures(threads: &[ThreadFigures]) {
    for f in threads {
        let per_item_ms = if f.items == 0 {
            0.0
        } else {
            f.busy.as_secs_f64() * 1e3 / f.items as f64
        };
        match f.out_queue {
            Some((depth, capacity)) => tracing::debug!(
                thread = %f.thread,
                items = f.items,
                busy_s = format_args!("{:.3}", f.busy.as_secs_f64()),
                ms_per_item = format_args!("{per_item_ms:.2}"),
                out_queue_max = depth,
                out_queue_capacity = capacity,
                "thread summary"
            ),
            None => tracing::debug!(
                thread = %f.thread,
                items = f.items,
                busy_s = format_args!("{:.3}", f.busy.as_secs_f64()),
                ms_per_item = format_args!("{per_item_ms:.2}"),
                "thread summary"
            ),
        }
    }
}
