//! The study page, stations first: what study staff need every morning from the central
//! database, as facts (`--json`) and as one self-contained page (no script, no URL).
//!
//! Contract: [`StudyFacts::gather`] reads the stations' enrolments, status, latest health
//! and record counts (`sync::central`) and says, per station, every open problem with what
//! to do about it, judged at `now`:
//! - offline (the broker's last will), or never heard from (enrolled, no status, no health);
//! - camera or microphone missing in the latest health;
//! - disk below the raw-media floor;
//! - the outbox backing up (a message pending for more than [`BACKLOG_HOURS`]);
//! - no health for more than [`STALE_HEALTH_HOURS`] while online;
//! - the last session not `complete`; messages quarantined; a station not enrolled.
//!
//! Stations are sorted worst first (the most severe problem, then how many), the problem
//! list likewise. The page says when it was made and from which database (a PostgreSQL URL
//! without its password). Participants against the study's plan, data quality over time
//! and ratings across the study are not on it yet (issue 34).

use serde::Serialize;

use crate::report::plots::esc;
use crate::sync::central::Central;
use crate::sync::health::parse_utc_ms;

/// A message pending this long is a backlog.
pub const BACKLOG_HOURS: f64 = 24.0;
/// No health this long from an online station (it sends one every 15 min by default).
pub const STALE_HEALTH_HOURS: f64 = 1.0;

/// One open problem of a station.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub station: String,
    /// 3: the station cannot record usable sessions; 2: it will soon or its data is not
    /// reaching the study; 1: worth a look.
    pub severity: u8,
    pub what: String,
    pub todo: String,
}

/// One station as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StationFacts {
    pub station: String,
    pub enrolled: bool,
    pub status: Option<String>,
    pub status_since: Option<String>,
    pub health: Option<serde_json::Value>,
    pub records: i64,
    pub quarantined: i64,
    pub problems: Vec<Problem>,
}

/// Everything on the page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyFacts {
    pub study: String,
    pub made_at: String,
    pub database: String,
    pub stations: Vec<StationFacts>,
    /// Every station's problems, worst first.
    pub problems: Vec<Problem>,
}

/// `2026-11-25T22:30:26.541Z` as `2026-11-25 22:30 UTC` (what a reader needs of it).
fn short(t: &str) -> String {
    match (t.get(..10), t.get(11..16)) {
        (Some(day), Some(hm)) if t.ends_with('Z') => format!("{day} {hm} UTC"),
        _ => t.to_string(),
    }
}

fn hours_between(earlier: &str, later: &str) -> f64 {
    parse_utc_ms(later)
        .duration_since(parse_utc_ms(earlier))
        .map_or(0.0, |d| d.as_secs_f64() / 3600.0)
}

impl StudyFacts {
    /// The facts of `study` in `central` (named `database` on the page) at `now`.
    pub fn gather(
        central: &mut Central,
        study: &str,
        database: &str,
        now: &str,
    ) -> Result<Self, String> {
        let enrolled: std::collections::BTreeSet<String> = central
            .enrolments(study)?
            .into_iter()
            .filter(|e| e.revoked_at.is_none())
            .map(|e| e.station)
            .collect();
        let counts = central.station_counts(study)?;
        let mut stations: Vec<StationFacts> = Vec::new();
        let mut names: std::collections::BTreeSet<String> = enrolled.clone();
        let health = central.station_health(study)?;
        names.extend(health.iter().map(|h| h.station.clone()));
        names.extend(counts.iter().map(|c| c.station.clone()));
        for name in names {
            let h = health.iter().find(|h| h.station == name);
            let c = counts.iter().find(|c| c.station == name);
            let mut s = StationFacts {
                station: name.clone(),
                enrolled: enrolled.contains(&name),
                status: h.and_then(|h| h.status.clone()),
                status_since: h.and_then(|h| h.status_received_at.clone()),
                health: h.and_then(|h| h.health.clone()),
                records: c.map_or(0, |c| c.sealed + c.plain),
                quarantined: c.map_or(0, |c| c.quarantined),
                problems: Vec::new(),
            };
            s.problems = problems_of(&s, now);
            stations.push(s);
        }
        let worst = |s: &StationFacts| s.problems.iter().map(|p| p.severity).max().unwrap_or(0);
        stations.sort_by(|a, b| {
            worst(b)
                .cmp(&worst(a))
                .then(b.problems.len().cmp(&a.problems.len()))
                .then(a.station.cmp(&b.station))
        });
        let mut problems: Vec<Problem> = stations.iter().flat_map(|s| s.problems.clone()).collect();
        problems.sort_by_key(|p| std::cmp::Reverse(p.severity));
        Ok(Self {
            study: study.to_string(),
            made_at: now.to_string(),
            database: database.to_string(),
            stations,
            problems,
        })
    }
}

/// The open problems of one station at `now`.
fn problems_of(s: &StationFacts, now: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut add = |severity: u8, what: String, todo: &str| {
        out.push(Problem {
            station: s.station.clone(),
            severity,
            what,
            todo: todo.to_string(),
        })
    };
    match (&s.status, &s.health) {
        (Some(st), _) if st == "offline" => add(
            3,
            format!(
                "offline since {}",
                s.status_since.as_deref().map_or("an unknown time".into(), short)
            ),
            "check the station's power and network; its outbox keeps what it records meanwhile and sends it when it is back",
        ),
        (None, None) => add(
            3,
            "never heard from: no status, no health message".into(),
            "check that it is switched on and that its [sync] broker and study are this study's",
        ),
        _ => {}
    }
    if let Some(m) = &s.health {
        let sent = m["sent_at"].as_str().unwrap_or("");
        for device in ["camera", "microphone"] {
            if m[device]["present"] == false {
                add(
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
                    2,
                    format!("disk low: {free} MiB free, raw media stop below {min} MiB"),
                    "free space on the station or lower [recording] retention_days; features and events are still kept",
                );
            }
        }
        if let Some(oldest) = m["outbox_oldest_pending"].as_str() {
            let hours = hours_between(oldest, now);
            if hours > BACKLOG_HOURS {
                add(
                    2,
                    format!(
                        "outbox backing up: {} message(s) pending, the oldest for {hours:.0} h",
                        m["outbox_pending"].as_u64().unwrap_or(0)
                    ),
                    "check the broker and that a collector runs; the station sends again by itself",
                );
            }
        }
        let quiet = hours_between(sent, now);
        if s.status.as_deref() == Some("online") && quiet > STALE_HEALTH_HOURS {
            add(
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
            2,
            "online but no health message received".into(),
            "update the station's software (health messages came with central format 4)",
        );
    }
    if s.quarantined > 0 {
        add(
            1,
            format!("{} message(s) quarantined", s.quarantined),
            "read the reasons in the central database's collect_quarantine table",
        );
    }
    if !s.enrolled {
        add(
            1,
            "not enrolled in this study".into(),
            "enrol it (`empathic collect enrol`) or find out whose station it is",
        );
    }
    out
}

const CSS: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1300px;color:#1d232a;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #d5dbe1;padding-bottom:4px}
.meta{color:#566}table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e3e7eb;vertical-align:top}
th{background:#f3f5f7}td:first-child{white-space:nowrap}.s3{background:#fde2e1}.s2{background:#fff1d6}.s1{background:#eef3f8}.ok{color:#1e7b3a}
.flag{display:inline-block;padding:1px 6px;border-radius:4px;margin:1px 4px 1px 0;font-size:13px}
ol li{margin:4px 0}.todo{color:#3b4a57}";

fn severity_word(s: u8) -> &'static str {
    match s {
        3 => "urgent",
        2 => "soon",
        _ => "look",
    }
}

/// The page.
pub fn html(f: &StudyFacts) -> String {
    let mut p = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Study {}</title><style>{CSS}</style></head><body>\n",
        esc(&f.study)
    );
    p += &format!(
        "<h1>Study {}</h1><p class=\"meta\">Made {} ({}) from {}. {} station(s), {} open problem(s).</p>\n",
        esc(&f.study),
        esc(&short(&f.made_at)),
        esc(&f.made_at),
        esc(&f.database),
        f.stations.len(),
        f.problems.len()
    );
    p += "<h2 id=\"problems\">Open problems</h2>\n";
    if f.problems.is_empty() {
        p += "<p class=\"ok\">None: every station is online, with its devices, disk and outbox in order.</p>\n";
    } else {
        p += "<ol>\n";
        for x in &f.problems {
            p += &format!(
                "<li class=\"s{}\"><b>{}</b> ({}): {}. <span class=\"todo\">What to do: {}.</span></li>\n",
                x.severity,
                esc(&x.station),
                severity_word(x.severity),
                esc(&x.what),
                esc(&x.todo)
            );
        }
        p += "</ol>\n";
    }
    p += "<h2 id=\"stations\">Stations</h2>\n<table><tr><th>station</th><th>status</th><th>camera</th><th>microphone</th><th>disk free</th><th>outbox pending</th><th>last session</th><th>records</th><th>problems</th></tr>\n";
    for s in &f.stations {
        let worst = s.problems.iter().map(|p| p.severity).max().unwrap_or(0);
        let m = s.health.clone().unwrap_or_default();
        let device = |d: &serde_json::Value| match d["present"].as_bool() {
            Some(true) => "ok".to_string(),
            Some(false) => "MISSING".to_string(),
            None => "-".to_string(),
        };
        let status = match (&s.status, &s.status_since) {
            (Some(st), Some(at)) => format!("{st} since {}", short(at)),
            _ => "never heard".into(),
        };
        let flags: String = s
            .problems
            .iter()
            .map(|x| {
                format!(
                    "<span class=\"flag s{}\">{}</span>",
                    x.severity,
                    esc(&x.what)
                )
            })
            .collect();
        p += &format!(
            "<tr class=\"s{worst}\"><td><b>{}</b>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            esc(&s.station),
            if s.enrolled { "" } else { " (not enrolled)" },
            esc(&status),
            device(&m["camera"]),
            device(&m["microphone"]),
            m["disk_free_mib"].as_u64().map_or("-".into(), |v| format!("{v} MiB")),
            m["outbox_pending"].as_u64().map_or("-".into(), |v| v.to_string()),
            esc(&format!(
                "{} {}",
                m["last_session_status"].as_str().unwrap_or("-"),
                m["last_session_ended_at"].as_str().map(short).unwrap_or_default()
            )),
            s.records,
            if flags.is_empty() { "<span class=\"ok\">none</span>".into() } else { flags }
        );
    }
    p += "</table>\n<p class=\"meta\">Not on this page yet: participants against the study's plan, data quality over time, ratings and predictions across the study.</p>\n</body></html>\n";
    p
}
