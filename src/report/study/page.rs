//! The study page as HTML: problems, stations, participants, data quality over time (small
//! multiples, one per station) and ratings and predictions, with inline SVG and no script.

use std::fmt::Write as _;

use super::{
    severity_word, short, Agreement, ParticipantFacts, SessionQuality, StationFacts, StudyFacts,
};
use crate::report::plots::esc;
use crate::report::verdict::Verdict;
use crate::sync::health::parse_utc_ms;

const CSS: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1300px;color:#1d232a;padding:0 16px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #d5dbe1;padding-bottom:4px}
h3{font-size:15px;margin:0 0 4px}.meta{color:#566}table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e3e7eb;vertical-align:top}
th{background:#f3f5f7}td:first-child{white-space:nowrap}.s3{background:#fde2e1}.s2{background:#fff1d6}.s1{background:#eef3f8}.ok{color:#1e7b3a}
.flag{display:inline-block;padding:1px 6px;border-radius:4px;margin:1px 4px 1px 0;font-size:13px}
ol li{margin:4px 0}.todo{color:#3b4a57}.grid{display:flex;flex-wrap:wrap;gap:16px}.cell{border:1px solid #e3e7eb;border-radius:6px;padding:8px}
.syn{color:#8a5a00;font-size:13px}.num{text-align:right}";

/// Verdict colours: good, check, bad.
fn colour(v: Verdict) -> &'static str {
    match v {
        Verdict::Good => "#2e8540",
        Verdict::Check => "#d08c00",
        Verdict::Bad => "#c62828",
    }
}

/// The page.
pub fn html(f: &StudyFacts) -> String {
    let mut p = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Study {}</title><style>{CSS}</style></head><body>\n",
        esc(&f.study)
    );
    let plan = if f.plan.sessions_per_participant > 0 {
        format!(
            "Plan: {} session(s) per participant{}.",
            f.plan.sessions_per_participant,
            if f.plan.days > 0 {
                format!(" over {} days", f.plan.days)
            } else {
                String::new()
            }
        )
    } else {
        "No plan set ([study] sessions_per_participant).".into()
    };
    let _ = writeln!(
        p,
        "<h1>Study {}</h1><p class=\"meta\">Made {} ({}) from {}. {} station(s), {} participant(s), {} session(s), {} open problem(s). {}</p>",
        esc(&f.study),
        esc(&short(&f.made_at)),
        esc(&f.made_at),
        esc(&f.database),
        f.stations.len(),
        f.participants.len(),
        f.sessions,
        f.problems.len(),
        esc(&plan)
    );
    problems(&mut p, f);
    stations(&mut p, &f.stations);
    if f.strangers.messages > 0 {
        let _ = writeln!(
            p,
            "<p class=\"meta\">Refused and not listed: {} message(s) from {} sender(s) that are no station of this study (neither enrolled nor sending records; kept {} days in collect_quarantine).</p>",
            f.strangers.messages,
            f.strangers.senders,
            crate::sync::central::REFUSED_EXPIRY_DAYS
        );
    }
    participants(&mut p, &f.participants);
    quality(&mut p, f);
    ratings(&mut p, f);
    p += "</body></html>\n";
    p
}

fn problems(p: &mut String, f: &StudyFacts) {
    p.push_str("<h2 id=\"problems\">Open problems</h2>\n");
    if f.problems.is_empty() {
        p.push_str("<p class=\"ok\">None: every station is online, with its devices, disk and outbox in order, and no participant is behind.</p>\n");
        return;
    }
    p.push_str("<ol>\n");
    for x in &f.problems {
        let who = match &x.participant {
            Some(part) => format!("{} / {}", esc(&x.station), esc(part)),
            None => esc(&x.station),
        };
        let _ = writeln!(
            p,
            "<li class=\"s{}\"><b>{who}</b> ({}): {}. <span class=\"todo\">What to do: {}.</span></li>",
            x.severity,
            severity_word(x.severity),
            esc(&x.what),
            esc(&x.todo)
        );
    }
    p.push_str("</ol>\n");
}

fn flags(problems: &[super::Problem]) -> String {
    if problems.is_empty() {
        return "<span class=\"ok\">none</span>".into();
    }
    problems
        .iter()
        .map(|x| {
            format!(
                "<span class=\"flag s{}\">{}</span>",
                x.severity,
                esc(&x.what)
            )
        })
        .collect()
}

fn stations(p: &mut String, stations: &[StationFacts]) {
    p.push_str("<h2 id=\"stations\">Stations</h2>\n");
    if stations.is_empty() {
        p.push_str("<p>No station has enrolled, sent health or sent a record yet.</p>\n");
        return;
    }
    p.push_str("<table><tr><th>station</th><th>status</th><th>camera</th><th>microphone</th><th>disk free</th><th>outbox pending</th><th>last session</th><th>sessions shown</th><th>problems</th></tr>\n");
    for s in stations {
        let worst = s.problems.iter().map(|p| p.severity).max().unwrap_or(0);
        let m = s.health.clone().unwrap_or_default();
        let device = |d: &serde_json::Value| match d["present"].as_bool() {
            Some(true) => "ok",
            Some(false) => "MISSING",
            None => "-",
        };
        let status = match (&s.revoked_at, &s.status, &s.status_since) {
            (Some(r), ..) => format!("decommissioned (revoked {})", short(r)),
            (None, Some(st), Some(at)) => format!("{st} since {}", short(at)),
            _ => "never heard".into(),
        };
        let _ = writeln!(
            p,
            "<tr class=\"s{worst}\"><td><b>{}</b>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.station),
            if s.enrolled || s.revoked_at.is_some() { "" } else { " (not enrolled)" },
            esc(&status),
            device(&m["camera"]),
            device(&m["microphone"]),
            m["disk_free_mib"].as_u64().map_or("-".into(), |v| format!("{v} MiB")),
            s.outbox_pending().map_or("-".into(), |v| v.to_string()),
            esc(&format!(
                "{} {}",
                m["last_session_status"].as_str().unwrap_or("-"),
                m["last_session_ended_at"].as_str().map(short).unwrap_or_default()
            )),
            s.sessions,
            flags(&s.problems)
        );
    }
    p.push_str("</table>\n");
}

fn participants(p: &mut String, participants: &[ParticipantFacts]) {
    p.push_str("<h2 id=\"participants\">Participants</h2>\n");
    if participants.is_empty() {
        p.push_str("<p>No participant yet: no session has reached this database.</p>\n");
        return;
    }
    p.push_str("<table><tr><th>participant</th><th>consent</th><th>stations</th><th>sessions complete / stored</th><th>against the plan</th><th>first session</th><th>last session</th><th class=\"num\">days since</th><th class=\"num\">ratings</th><th>surveys</th><th>problems</th></tr>\n");
    for x in participants {
        let worst = x.problems.iter().map(|p| p.severity).max().unwrap_or(0);
        let plan = match (x.planned, x.expected_by_now) {
            _ if x.withdrawn_at.is_some() => "withdrawn".to_string(),
            (Some(n), Some(e)) => format!(
                "{} of {n}; {e} expected by now{}",
                x.complete,
                if x.complete + 1 < e { " (behind)" } else { "" }
            ),
            (Some(n), None) => format!("{} of {n}", x.complete),
            _ => "-".into(),
        };
        let consent = match &x.withdrawn_at {
            Some(at) => format!("withdrawn {} (data purged)", short(at)),
            None => x.consent.clone(),
        };
        let _ = writeln!(
            p,
            "<tr class=\"s{worst}\"><td><b>{}</b></td><td>{}</td><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&x.participant),
            esc(&consent),
            esc(&x.stations.join(", ")),
            x.complete,
            x.sessions,
            esc(&plan),
            x.first_session.as_deref().map(short).unwrap_or("-".into()),
            x.last_session.as_deref().map(short).unwrap_or("-".into()),
            x.days_since_last.map_or("-".into(), |d| format!("{:.0}", d.floor())),
            x.ratings,
            if x.surveys.is_empty() { "-".into() } else { esc(&x.surveys.join(", ")) },
            flags(&x.problems)
        );
    }
    p.push_str("</table>\n");
}

/// One station's sessions over the study's span: a lane per measure, a dot per session in
/// its verdict's colour, at its value (0-1, higher up).
fn station_multiple(sessions: &[&SessionQuality], span: (f64, f64)) -> String {
    const W: f64 = 300.0;
    const LANE: f64 = 34.0;
    const LEFT: f64 = 112.0;
    let lanes = [
        "face present",
        "clipping (x100)",
        "silence",
        "brightness",
        "bystanders",
    ];
    let h = LANE * lanes.len() as f64 + 6.0;
    let mut s = format!("<svg width=\"{}\" height=\"{h}\" role=\"img\">", W + LEFT);
    let x_of = |t: f64| {
        let (lo, hi) = span;
        LEFT + 6.0
            + if hi > lo {
                (t - lo) / (hi - lo) * (W - 12.0)
            } else {
                (W - 12.0) / 2.0
            }
    };
    for (k, name) in lanes.iter().enumerate() {
        let top = k as f64 * LANE + 3.0;
        let _ = write!(
            s,
            "<rect x=\"{LEFT}\" y=\"{top}\" width=\"{W}\" height=\"{}\" fill=\"#f6f8fa\"/><text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"end\" fill=\"#3b4a57\">{name}</text>",
            LANE - 6.0,
            LEFT - 6.0,
            top + LANE / 2.0
        );
        for q in sessions {
            let value = match k {
                0 => q.face_presence,
                1 => Some((q.clipping * 100.0).min(1.0)),
                2 => Some(q.silence),
                3 => Some(q.brightness),
                _ => Some(q.bystanders),
            };
            let Some(v) = value else { continue };
            let t = secs(&q.start);
            let y = top + (LANE - 10.0) * (1.0 - v.clamp(0.0, 1.0)) + 2.0;
            let _ = write!(
                s,
                "<circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{}\"><title>{} {}: {:.3} ({})</title></circle>",
                x_of(t),
                colour(q.verdicts[k]),
                esc(&q.session_id),
                name,
                v,
                q.verdicts[k].class()
            );
        }
    }
    s.push_str("</svg>");
    s
}

fn secs(t: &str) -> f64 {
    parse_utc_ms(t)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn quality(p: &mut String, f: &StudyFacts) {
    p.push_str("<h2 id=\"quality\">Data quality over time</h2>\n");
    if f.quality.is_empty() {
        p.push_str("<p>No session with a quality report yet.</p>\n");
        return;
    }
    let times: Vec<f64> = f.quality.iter().map(|q| secs(&q.start)).collect();
    let span = (
        times.iter().copied().fold(f64::INFINITY, f64::min),
        times.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    let _ = writeln!(
        p,
        "<p class=\"meta\">One panel per station, one dot per session from {} to {}, in the session report's verdict colours: <span style=\"color:{}\">good</span>, <span style=\"color:{}\">check</span>, <span style=\"color:{}\">bad</span>. Higher is more (0-1; clipping times 100; bystanders: the share of frames with someone other than the participant in view, masked).</p><div class=\"grid\">",
        esc(&short(f.quality.first().map_or("", |q| q.start.as_str()))),
        esc(&short(f.quality.last().map_or("", |q| q.start.as_str()))),
        colour(Verdict::Good),
        colour(Verdict::Check),
        colour(Verdict::Bad)
    );
    let mut names: Vec<&str> = f.quality.iter().map(|q| q.station.as_str()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let theirs: Vec<&SessionQuality> = f.quality.iter().filter(|q| q.station == name).collect();
        let bad = theirs.iter().filter(|q| q.worst == Verdict::Bad).count();
        let _ = writeln!(
            p,
            "<div class=\"cell\"><h3>{} <span class=\"meta\">{} session(s), {bad} bad</span></h3>{}</div>",
            esc(name),
            theirs.len(),
            station_multiple(&theirs, span)
        );
    }
    p.push_str("</div>\n");
}

/// A 1-5 histogram as bars, the values under them.
fn bars(bins: &[u64; 5], colour: &str) -> String {
    let max = bins.iter().copied().max().unwrap_or(0).max(1) as f64;
    let mut s = String::from("<svg width=\"150\" height=\"62\" role=\"img\">");
    for (k, n) in bins.iter().enumerate() {
        let h = 40.0 * *n as f64 / max;
        let x = 5.0 + k as f64 * 28.0;
        let _ = write!(
            s,
            "<rect x=\"{x}\" y=\"{:.1}\" width=\"22\" height=\"{h:.1}\" fill=\"{colour}\"><title>{}: {n}</title></rect><text x=\"{}\" y=\"58\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
            44.0 - h,
            k + 1,
            x + 11.0,
            k + 1
        );
    }
    s.push_str("</svg>");
    s
}

fn ratings(p: &mut String, f: &StudyFacts) {
    let r = &f.ratings;
    p.push_str("<h2 id=\"ratings\">Empathy ratings and predictions</h2>\n");
    let total: u64 = r.ratings.iter().sum();
    let _ = writeln!(
        p,
        "<p>Self-ratings so far ({total}, 1 = none, 5 = very much): {}</p>",
        bars(&r.ratings, "#3f6fb5")
    );
    if r.predictions.is_empty() {
        p.push_str("<p>No predictions yet.</p>\n");
    } else {
        p.push_str("<p class=\"meta\">Window predictions (calibrated 1-5, rounded) per phase and predictor. Synthetic predictors were trained on synthetic data: they test the pipeline, they do not measure empathy.</p>\n<table><tr><th>phase</th><th>predictor</th><th class=\"num\">windows</th><th>scores 1-5</th></tr>\n");
        for b in &r.predictions {
            let _ = writeln!(
                p,
                "<tr><td>{}</td><td>{}{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(b.phase.as_deref().unwrap_or("(no phase)")),
                esc(&b.predictor),
                if b.synthetic {
                    " <span class=\"syn\">synthetic</span>"
                } else {
                    ""
                },
                b.bins.iter().sum::<u64>(),
                bars(&b.bins, if b.synthetic { "#b9a47a" } else { "#6a4fb5" })
            );
        }
        p.push_str("</table>\n");
    }
    agreement(p, &r.agreement);
}

fn agreement(p: &mut String, rows: &[Agreement]) {
    p.push_str("<h3>Agreement with the self-ratings so far</h3>\n");
    if rows.is_empty() {
        p.push_str("<p>No rated story has a prediction yet (complete sessions only).</p>\n");
        return;
    }
    let num = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    p.push_str("<table><tr><th>predictor</th><th class=\"num\">rated stories</th><th class=\"num\">participants</th><th class=\"num\">Spearman rho</th><th class=\"num\">Pearson r</th><th class=\"num\">MSE</th></tr>\n");
    for a in rows {
        let _ = writeln!(
            p,
            "<tr><td>{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(&a.predictor),
            if a.synthetic {
                " <span class=\"syn\">synthetic</span>"
            } else {
                ""
            },
            a.rated,
            a.participants,
            num(a.spearman_rho),
            num(a.pearson_r),
            num(a.mse)
        );
    }
    p.push_str("</table>\n<p class=\"meta\">Session level, as `empathic evaluate` measures it; with few participants these say little (`empathic evaluate` gives the intervals).</p>\n");
}
