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

/// Checks that `s` is an RFC 3339 date-time that exists on the calendar:
/// `YYYY-MM-DDTHH:MM:SS`, an optional fraction, then `Z` or `+HH:MM`/`-HH:MM`.
/// Shape alone is not enough: 2026-02-30 or 25:00 would be stored and then sort
/// among real sessions (stories seen before, calibration pairs) where they do not belong.
/// The error says which part is wrong.
pub fn check_rfc3339(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = b.get(r)?;
        if part.iter().all(u8::is_ascii_digit) {
            std::str::from_utf8(part).ok()?.parse().ok()
        } else {
            None
        }
    };
    let sep = |i: usize, allowed: &[u8]| b.get(i).is_some_and(|c| allowed.contains(c));
    let shape = "the shape is YYYY-MM-DDTHH:MM:SS then Z or +HH:MM";
    let (Some(year), Some(month), Some(day)) = (num(0..4), num(5..7), num(8..10)) else {
        return Err(shape.into());
    };
    let (Some(hour), Some(minute), Some(second)) = (num(11..13), num(14..16), num(17..19)) else {
        return Err(shape.into());
    };
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return Err(shape.into());
    }
    if !(1..=12).contains(&month) {
        return Err(format!("month {month:02} does not exist"));
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if day == 0 || day > days {
        return Err(format!("{year:04}-{month:02} has no day {day:02}"));
    }
    // RFC 3339 allows second 60 (a leap second).
    if hour > 23 || minute > 59 || second > 60 {
        return Err(format!(
            "{hour:02}:{minute:02}:{second:02} is not a time of day"
        ));
    }
    let mut i = 19;
    if sep(i, b".") {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return Err("a `.` must be followed by the fraction's digits".into());
        }
    }
    match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => Ok(()),
        Some(b'+' | b'-') if i + 6 == b.len() && sep(i + 3, b":") => {
            match (num(i + 1..i + 3), num(i + 4..i + 6)) {
                (Some(h), Some(m)) if h <= 23 && m <= 59 => Ok(()),
                _ => Err(format!("the zone `{}` is not an offset", &s[i..])),
            }
        }
        _ => Err("the time must end in Z or an offset like +01:00".into()),
    }
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
    fn rfc3339_dates_must_exist() {
        for good in [
            "2026-11-01T18:30:00Z",
            "2024-02-29T00:00:00.123+01:00",
            "2026-12-31t23:59:60z",
            "2026-01-01 00:00:00-05:30",
        ] {
            assert_eq!(super::check_rfc3339(good), Ok(()), "{good}");
        }
        for (bad, says) in [
            ("2026-02-30T10:00:00Z", "no day 30"),
            ("2025-02-29T10:00:00Z", "no day 29"),
            ("2026-13-01T10:00:00Z", "month 13"),
            ("2026-11-01T24:00:00Z", "not a time of day"),
            ("2026-11-01T10:61:00Z", "not a time of day"),
            ("2026-11-01T10:00:00", "end in Z"),
            ("2026-11-01T10:00:00Zjunk", "end in Z"),
            ("2026-11-01T10:00:00+25:00", "not an offset"),
            ("2026-11-01T10:00:00.Z", "fraction"),
            ("2026-1-01T10:00:00Z", "shape"),
            ("", "shape"),
            ("2026-11-01T10:00:00+01", "end in Z"),
        ] {
            let err = super::check_rfc3339(bad).unwrap_err();
            assert!(err.contains(says), "{bad}: {err}");
        }
    }

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
