//! The rules that make a station's or a participant's facts open problems, each with its
//! severity, what it is and what to do. The thresholds are the study's (`[study]`) or the
//! station's own (its raw-media floor), never fitted to data.

use super::{
    hours_between, short, ParticipantFacts, Problem, StationFacts, BACKLOG_HOURS,
    OFFLINE_GRACE_SECS, OFFLINE_INTERVALS, STALE_HEALTH_HOURS,
};
use crate::config::StudyConfig;

/// The open problems of one station at `now`.
pub(super) fn of_station(s: &StationFacts, now: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    if let Some(revoked) = &s.revoked_at {
        // Decommissioned: nothing of it is a problem any more, unless it keeps sending
        // records (a stolen station, or one nobody switched off): refused, and told.
        if let Some(latest) = s
            .refused_latest
            .as_deref()
            .filter(|l| *l > revoked.as_str())
        {
            out.push(Problem {
                station: s.station.clone(),
                participant: None,
                kind: "revoked_sending",
                severity: 2,
                what: format!(
                    "revoked {}, still sending: records refused, the latest at {}",
                    short(revoked),
                    short(latest)
                ),
                todo: "find the station (switch it off, or wipe its keys); `collect quarantine list` shows what it sent".into(),
            });
        }
        return out;
    }
    let mut add = |kind: &'static str, severity: u8, what: String, todo: &str| {
        out.push(Problem {
            station: s.station.clone(),
            participant: None,
            kind,
            severity,
            what,
            todo: todo.to_string(),
        })
    };
    // Offline: the service's connection ended (its status word, `offline` by its last
    // will or its stop; a batch `empathic sync` says nothing, issue 44), or its health
    // stopped for longer than the interval it states allows (a service alive to the
    // broker but hung, or cut off without the broker noticing yet).
    let interval = s.health.as_ref().and_then(|m| m["interval_s"].as_f64());
    let sent = s.health.as_ref().and_then(|m| m["sent_at"].as_str());
    let overdue = interval.zip(sent).and_then(|(every, sent)| {
        let quiet_s = hours_between(sent, now) * 3600.0;
        (quiet_s > OFFLINE_INTERVALS * every + OFFLINE_GRACE_SECS).then_some((every, sent))
    });
    match (&s.status, &s.health, overdue) {
        (Some(st), _, _) if st == "offline" => add(
            "offline",
            3,
            format!(
                "offline since {}",
                s.status_since.as_deref().map_or("an unknown time".into(), short)
            ),
            "check the station's power and network; its outbox keeps what it records meanwhile and sends it when it is back",
        ),
        (_, _, Some((every, sent))) => add(
            "offline",
            3,
            format!(
                "offline: no health since {} (it sends one every {:.0} min)",
                short(sent),
                every / 60.0
            ),
            "check the station's service (`systemctl status empathic`), power and network; its outbox keeps what it records meanwhile",
        ),
        // A station that only ever ran a batch `empathic sync` sends records, no status
        // and no health: heard, and nothing to say.
        (None, None, _) if s.messages == 0 => add(
            "never_heard",
            3,
            "never heard from: no status, no health message".into(),
            "check that it is switched on and that its [sync] broker and study are this study's",
        ),
        _ => {}
    }
    if let Some(m) = &s.health {
        let sent = m["sent_at"].as_str().unwrap_or("");
        for (device, kind) in [
            ("camera", "camera_missing"),
            ("microphone", "microphone_missing"),
        ] {
            if m[device]["present"] == false {
                add(
                    kind,
                    3,
                    format!(
                        "{device} missing ({}), as of {}",
                        m[device]["problem"].as_str().unwrap_or("no reason given"),
                        short(sent)
                    ),
                    "check its cable and power, then run `empathic doctor --live` on the station",
                );
            }
        }
        if let (Some(free), Some(min)) =
            (m["disk_free_mib"].as_u64(), m["disk_min_free_mib"].as_u64())
        {
            if free < min {
                add(
                    "disk_low",
                    2,
                    format!("disk low: {free} MiB free, raw media stop below {min} MiB"),
                    "free space on the station or lower [recording] retention_days; features and events are still kept",
                );
            }
        }
        // Everything pending at the health message has been stored since: no backlog.
        let pending = s.outbox_pending().unwrap_or(0);
        if let Some(oldest) = m["outbox_oldest_pending"].as_str().filter(|_| pending > 0) {
            let hours = hours_between(oldest, now);
            if hours > BACKLOG_HOURS {
                add(
                    "outbox_backlog",
                    2,
                    format!(
                        "outbox backing up: {} message(s) pending, the oldest for {hours:.0} h",
                        pending
                    ),
                    "check the broker and that a collector runs; the station sends again by itself",
                );
            }
        }
        let quiet = hours_between(sent, now);
        if interval.is_none() && s.status.as_deref() == Some("online") && quiet > STALE_HEALTH_HOURS
        {
            add(
                "health_stale",
                2,
                format!("no health message for {quiet:.1} h while online"),
                "check the station's service (`systemctl status empathic`) and its log",
            );
        }
        if let Some(last) = m["last_session_status"]
            .as_str()
            .filter(|l| *l != "complete")
        {
            add(
                "last_session",
                1,
                format!(
                    "last session {last} (ended {})",
                    m["last_session_ended_at"]
                        .as_str()
                        .map_or("?".into(), short)
                ),
                "read its reason with `empathic report` on the station or here once synced",
            );
        }
    } else if s.status.as_deref() == Some("online") {
        add(
            "no_health",
            2,
            "online but no health message received".into(),
            "update the station's software (health messages came with central format 4)",
        );
    }
    if let Some(n) = s
        .health
        .as_ref()
        .and_then(|m| m["sync_refused"].as_u64())
        .filter(|n| *n > 0)
    {
        add(
            "sync_refused",
            2,
            format!(
                "holds {n} record(s) a collector refused: {}",
                s.health.as_ref().and_then(|m| m["sync_refusal"].as_str()).unwrap_or("no reason given")
            ),
            "put right what the reason names (enrol the station, its keys); it probes once an hour, or sends at once when its [sync] changes",
        );
    }
    if s.quarantined > 0 {
        add(
            "quarantined",
            1,
            format!("{} message(s) quarantined", s.quarantined),
            "`empathic collect quarantine list` shows each with its reason; it clears when the message is stored after all, or `collect quarantine drop ID`",
        );
    }
    if !s.enrolled {
        add(
            "not_enrolled",
            1,
            "not enrolled in this study".into(),
            "enrol it (`empathic collect enrol`) or find out whose station it is",
        );
    }
    out
}

/// The open problems of one participant against `plan`: missed days (more than
/// `max_days_between_sessions` since their last session while not done and not
/// withdrawn; only with a plan set), and their latest `bad_sessions_in_a_row` sessions all "bad" in data quality.
pub(super) fn of_participant(p: &ParticipantFacts, plan: &StudyConfig) -> Vec<Problem> {
    let mut out = Vec::new();
    if p.consent == "withdrawn" {
        return out;
    }
    let station = p.stations.last().cloned().unwrap_or_else(|| "-".into());
    let done = p.planned.is_some_and(|n| p.complete >= u64::from(n))
        || (plan.days > 0
            && p.first_session
                .as_deref()
                .zip(p.last_session.as_deref())
                .is_some_and(|(f, l)| hours_between(f, l) / 24.0 >= f64::from(plan.days)));
    // Without a plan a participant who finished cannot be told from one who stopped
    // coming: missed days are flagged only against a plan.
    let planned = plan.sessions_per_participant > 0 || plan.days > 0;
    if let Some(days) = p.days_since_last {
        if planned && !done && days > f64::from(plan.max_days_between_sessions) {
            out.push(Problem {
                station: station.clone(),
                participant: Some(p.participant.clone()),
                kind: "missed_days",
                severity: 2,
                what: format!(
                    "participant {} has had no session for {:.0} days (last {})",
                    p.participant,
                    days.floor(),
                    p.last_session.as_deref().map(short).unwrap_or_default()
                ),
                todo: "call the participant (or check the station's status above)".into(),
            });
        }
    }
    if p.bad_in_a_row >= plan.bad_sessions_in_a_row {
        out.push(Problem {
            station,
            participant: Some(p.participant.clone()),
            kind: "bad_quality",
            severity: 2,
            what: format!(
                "participant {}'s last {} sessions were all bad in data quality",
                p.participant, p.bad_in_a_row
            ),
            todo: "open the latest session's report (`empathic report`) and visit the station if the camera or microphone is to blame".into(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn participant(days_since: f64, complete: u64, consent: &str, bad: u32) -> ParticipantFacts {
        ParticipantFacts {
            participant: "P1".into(),
            consent: consent.into(),
            withdrawn_at: None,
            stations: vec!["st-1".into()],
            sessions: complete,
            complete,
            planned: Some(10),
            expected_by_now: None,
            first_session: Some("2026-11-01T10:00:00Z".into()),
            last_session: Some("2026-11-05T10:00:00Z".into()),
            days_since_last: Some(days_since),
            ratings: 0,
            surveys: Vec::new(),
            bad_in_a_row: bad,
            problems: Vec::new(),
        }
    }

    fn kinds(p: &ParticipantFacts, plan: &StudyConfig) -> Vec<&'static str> {
        of_participant(p, plan).iter().map(|x| x.kind).collect()
    }

    #[test]
    fn missed_days_need_a_plan_and_stop_when_done_or_withdrawn() {
        let plan = StudyConfig {
            sessions_per_participant: 10,
            days: 30,
            ..StudyConfig::default()
        };
        assert_eq!(
            kinds(&participant(4.5, 3, "given", 0), &plan),
            ["missed_days"]
        );
        assert!(kinds(&participant(2.0, 3, "given", 0), &plan).is_empty());
        // Done: all sessions, or the plan's days gone by.
        assert!(kinds(&participant(9.0, 10, "given", 0), &plan).is_empty());
        let mut long = participant(9.0, 3, "given", 0);
        long.last_session = Some("2026-12-02T10:00:00Z".into());
        assert!(kinds(&long, &plan).is_empty());
        assert!(kinds(&participant(9.0, 3, "withdrawn", 2), &plan).is_empty());
        // No plan: nothing to tell a finished participant from one who stopped.
        assert!(kinds(&participant(9.0, 3, "given", 0), &StudyConfig::default()).is_empty());
    }

    #[test]
    fn repeated_bad_sessions_are_flagged_from_the_configured_count() {
        let plan = StudyConfig::default();
        assert!(kinds(&participant(0.0, 3, "given", 1), &plan).is_empty());
        assert_eq!(
            kinds(&participant(0.0, 3, "given", 2), &plan),
            ["bad_quality"]
        );
        let p = &of_participant(&participant(0.0, 3, "given", 3), &plan)[0];
        assert_eq!((p.severity, p.participant.as_deref()), (2, Some("P1")));
        assert!(p.what.contains("last 3 sessions"), "{}", p.what);
    }

    fn station(status: Option<&str>, health: Option<serde_json::Value>) -> StationFacts {
        StationFacts {
            station: "st".into(),
            enrolled: true,
            revoked_at: None,
            status: status.map(str::to_string),
            status_since: Some("2026-11-27T10:00:00.000Z".into()),
            health,
            sessions: 1,
            messages: 3,
            quarantined: 0,
            refused_latest: None,
            delivered_since_health: 0,
            problems: Vec::new(),
        }
    }

    /// Issue 55 item 10: a health message sent before the receipts came showed its
    /// pending figure (and a backlog) until the next one, 15 minutes later.
    #[test]
    fn records_stored_after_the_health_message_count_as_delivered() {
        let health = serde_json::json!({"sent_at": "2026-11-27T10:00:00.000Z",
            "outbox_pending": 5, "outbox_oldest_pending": "2026-11-25T10:00:00.000Z"});
        let mut s = station(Some("online"), Some(health));
        assert_eq!(s.outbox_pending(), Some(5));
        assert!(station_kinds(&s, "2026-11-27T10:05:00.000Z").contains(&"outbox_backlog"));
        s.delivered_since_health = 5;
        assert_eq!(s.outbox_pending(), Some(0));
        assert!(!station_kinds(&s, "2026-11-27T10:05:00.000Z").contains(&"outbox_backlog"));
        s.delivered_since_health = 7;
        assert_eq!(s.outbox_pending(), Some(0));
    }

    fn station_kinds(s: &StationFacts, now: &str) -> Vec<&'static str> {
        of_station(s, now).iter().map(|p| p.kind).collect()
    }

    /// Issue 44: offline means the service's connection ended, or its health stopped for
    /// longer than the interval it states allows; never a quiet hour of a station that
    /// sends health every 15 minutes and has not missed one.
    #[test]
    fn offline_is_judged_by_the_stated_health_interval_and_the_service_word() {
        let health = |sent: &str| {
            serde_json::json!({"sent_at": sent, "interval_s": 900,
                               "camera": {"present": true}, "microphone": {"present": true}})
        };
        let now = "2026-11-27T12:00:00.000Z";
        // Health 20 min ago, every 15 min: allowed (2 x 15 min + 5 min).
        let fresh = station(Some("online"), Some(health("2026-11-27T11:40:00.000Z")));
        assert!(
            station_kinds(&fresh, now).is_empty(),
            "{:?}",
            station_kinds(&fresh, now)
        );
        // 40 min without one while the broker says online: offline.
        let quiet = station(Some("online"), Some(health("2026-11-27T11:20:00.000Z")));
        assert_eq!(station_kinds(&quiet, now), ["offline"]);
        // No status word at all (stations that only ever ran a batch `sync`), fresh health:
        // nothing; the service's own `offline` word: offline at once.
        let batch = station(None, Some(health("2026-11-27T11:50:00.000Z")));
        assert!(station_kinds(&batch, now).is_empty());
        let stopped = station(Some("offline"), Some(health("2026-11-27T11:50:00.000Z")));
        assert_eq!(station_kinds(&stopped, now), ["offline"]);
    }

    #[test]
    fn a_revoked_station_is_quiet_unless_it_keeps_sending() {
        let mut s = station(Some("offline"), None);
        s.revoked_at = Some("2026-11-27T09:00:00.000Z".into());
        s.refused_latest = Some("2026-11-27T08:00:00.000Z".into());
        assert!(station_kinds(&s, "2026-11-27T12:00:00.000Z").is_empty());
        s.refused_latest = Some("2026-11-27T11:00:00.000Z".into());
        assert_eq!(
            station_kinds(&s, "2026-11-27T12:00:00.000Z"),
            ["revoked_sending"]
        );
    }
}
