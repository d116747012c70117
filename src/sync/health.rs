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
    /// Sealed sync: the station's public key and its signature over [`signed_bytes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
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
    crate::clock::check_rfc3339(&h.sent_at)
        .map_err(|e| format!("health `sent_at` {:?}: {e}", h.sent_at))?;
    if h.sent_at.len() != 24 || !h.sent_at.ends_with('Z') {
        return Err(format!(
            "health `sent_at` {:?} is not UTC to the millisecond (YYYY-MM-DDTHH:MM:SS.mmmZ)",
            h.sent_at
        ));
    }
    if h.sent_at.as_str() > later(now, FUTURE_TOLERANCE).as_str() {
        return Err(format!(
            "health sent at {} is from the future (the collector's clock says {now}): the station's clock is wrong",
            h.sent_at
        ));
    }
    let texts = [
        &h.software,
        &h.camera.problem.clone().unwrap_or_default(),
        &h.microphone.problem.clone().unwrap_or_default(),
        &h.last_session_status.clone().unwrap_or_default(),
    ];
    if texts.iter().any(|t| t.len() > 1024) || h.stage_failures.iter().any(|t| t.len() > 1024) {
        return Err("health message with a text over 1024 bytes".into());
    }
    if h.stage_failures.len() > 16 {
        return Err(format!(
            "health message with {} stage failures (at most 16)",
            h.stage_failures.len()
        ));
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
    fn utc_strings_round_trip() {
        for s in ["2026-11-25T10:00:00.000Z", "2024-02-29T23:59:59.999Z"] {
            assert_eq!(crate::clock::utc_at(parse_utc_ms(s)), s);
        }
    }
}
