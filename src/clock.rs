//! The one injected clock, and replay pacing.
//!
//! Contract: no stage reads the wall clock. Sources stamp data with session-timeline
//! nanoseconds; the runtime paces replay against a [`Clock`] it is given. Live runs use
//! [`MonotonicClock`]; tests use [`ManualClock`], whose `sleep_until` advances time instead of
//! sleeping, so a real-time replay is checked without waiting for it.
//! Pacing is a pure function of (start instant, stamp, speed): [`Pacer::deadline`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Nanos;

/// A monotonic clock in nanoseconds since some fixed origin.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now_ns(&self) -> Nanos;
    /// Returns once `now_ns() >= t_ns` (at once when that is already true).
    fn sleep_until_ns(&self, t_ns: Nanos);
}

/// The machine's monotonic clock.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> Nanos {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn sleep_until_ns(&self, t_ns: Nanos) {
        let now = self.now_ns();
        if t_ns > now {
            std::thread::sleep(Duration::from_nanos(t_ns - now));
        }
    }
}

/// A clock that only moves when told to, or when someone sleeps on it.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    pub fn new(start_ns: Nanos) -> Self {
        Self {
            now: AtomicU64::new(start_ns),
        }
    }

    /// Moves time forward by `d_ns`.
    pub fn advance(&self, d_ns: Nanos) {
        self.now.fetch_add(d_ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until_ns(&self, t_ns: Nanos) {
        self.now.fetch_max(t_ns, Ordering::SeqCst);
    }
}

/// How fast a recorded session is replayed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// Each item is released when its stamp is due on the clock, as a live source would.
    Realtime,
    /// As fast as the pipeline can go (the default for research replays).
    Max,
}

impl std::str::FromStr for Speed {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "realtime" => Ok(Speed::Realtime),
            "max" => Ok(Speed::Max),
            other => Err(format!(
                "unknown speed `{other}`: expected `realtime` or `max`"
            )),
        }
    }
}

impl std::fmt::Display for Speed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Speed::Realtime => "realtime",
            Speed::Max => "max",
        })
    }
}

/// Releases stamped items at the pace `speed` asks for, against a shared clock.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    /// Clock reading that session time 0 corresponds to.
    pub start_clock_ns: Nanos,
    pub speed: Speed,
}

impl Pacer {
    /// The clock reading at which an item stamped `stamp_ns` is due, or `None` when it is due
    /// at once. Pure: the same inputs always give the same deadline.
    pub fn deadline(&self, stamp_ns: Nanos) -> Option<Nanos> {
        match self.speed {
            Speed::Max => None,
            Speed::Realtime => Some(self.start_clock_ns.saturating_add(stamp_ns)),
        }
    }

    /// Waits on `clock` until the item stamped `stamp_ns` is due.
    pub fn wait(&self, clock: &dyn Clock, stamp_ns: Nanos) {
        if let Some(deadline) = self.deadline(stamp_ns) {
            clock.sleep_until_ns(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_speed_never_waits() {
        let pacer = Pacer {
            start_clock_ns: 5,
            speed: Speed::Max,
        };
        assert_eq!(pacer.deadline(1_000_000_000), None);
    }

    #[test]
    fn realtime_deadline_is_start_plus_stamp() {
        let pacer = Pacer {
            start_clock_ns: 1_000,
            speed: Speed::Realtime,
        };
        assert_eq!(pacer.deadline(66_666_667), Some(66_667_667));
    }

    #[test]
    fn manual_clock_advances_when_slept_on_and_never_goes_back() {
        let clock = ManualClock::new(10);
        clock.sleep_until_ns(100);
        assert_eq!(clock.now_ns(), 100);
        clock.sleep_until_ns(50);
        assert_eq!(clock.now_ns(), 100);
        clock.advance(5);
        assert_eq!(clock.now_ns(), 105);
    }

    #[test]
    fn speed_parses_and_rejects_unknown() {
        assert_eq!("max".parse::<Speed>(), Ok(Speed::Max));
        assert_eq!("realtime".parse::<Speed>(), Ok(Speed::Realtime));
        assert!("fast".parse::<Speed>().unwrap_err().contains("fast"));
    }
}
