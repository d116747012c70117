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

/// RFC 3339 UTC now, to the millisecond.
pub fn utc_now() -> String {
    utc_at(std::time::SystemTime::now())
}

/// RFC 3339 UTC of `t`, to the millisecond (these strings sort as the times do).
pub fn utc_at(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_780), (2026, 11, 23));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }

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
