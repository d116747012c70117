//! The study page: what study staff need every morning from the central database, as facts
//! (`--json`) and as one self-contained page (no script, no URL, inline SVG).
//!
//! Contract: [`StudyFacts::gather`] reads, at `now`:
//! - the stations: enrolments, status, latest health, record counts (`sync::central`);
//! - the participants, sessions, ratings and predictions from the station-schema view of the
//!   database (`Central::with_page_view`: the SQLite file itself, or a light PostgreSQL view kept in `PageView`),
//!   measured against the study's plan (`[study]`); withdrawals from the purge audit;
//! - each session's data quality (face presence, clipping, silence, brightness) with the
//!   session report's own verdicts (`report::verdict`);
//! - self-ratings and predicted scores per phase, and each predictor's agreement with the
//!   ratings so far (`fusion::evaluate`), synthetic predictors marked.
//!
//! Every open problem (`problems`) has a stable [`Problem::key`] (what and whose, not
//! the wording, which carries counts and times) so alerts tell each once until it clears.
//! Stations and problems are sorted worst first. The page ([`page::html`]) says when it was
//! made and from which database (a PostgreSQL URL without its password). A database with no
//! sessions, a station that never sent health, and a participant with no session are shown
//! as such, never as a blank page.

mod alert_command;
pub mod fresh;
mod page;
mod problems;

pub use page::html;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::config::StudyConfig;
use crate::report::verdict::{quality_rows, Verdict, MEASURES};
use crate::report::QualityReport;
use crate::store::CentralError;
use crate::store::{ScoreBins, Store};
use crate::sync::central::{Central, PageView};
use crate::sync::health::parse_utc_ms;

/// A message pending this long is a backlog.
pub const BACKLOG_HOURS: f64 = 24.0;
/// No health this long from an online station that does not say its interval (older
/// stations; they send one every 15 min by default).
pub const STALE_HEALTH_HOURS: f64 = 1.0;
/// A station whose health says its interval is offline once no health came for this many
/// intervals plus [`OFFLINE_GRACE_SECS`] (a failed publish is tried again every 30 s, and a
/// broker outage of a few minutes is no station's fault), whatever its status word says.
pub const OFFLINE_INTERVALS: f64 = 2.0;
pub const OFFLINE_GRACE_SECS: f64 = 300.0;

/// One open problem of a station or a participant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Problem {
    pub station: String,
    /// Set for a participant's problem (missed days, repeated bad data quality).
    pub participant: Option<String>,
    /// What kind of problem (`offline`, `camera_missing`, `missed_days`, ...): with the
    /// station and participant, its identity while it stays open.
    pub kind: &'static str,
    /// 3: the station cannot record usable sessions; 2: it will soon, or the study is losing
    /// data; 1: worth a look.
    pub severity: u8,
    pub what: String,
    pub todo: String,
}

impl Problem {
    /// The same while the problem stays open, whatever its counts and times say.
    pub fn key(&self) -> String {
        format!(
            "{}/{}/{}",
            self.kind,
            self.station,
            self.participant.as_deref().unwrap_or("")
        )
    }

    /// One line for an alert: `station (urgent): what. What to do: todo.`
    pub fn line(&self) -> String {
        let who = match &self.participant {
            Some(p) => format!("{} / participant {p}", self.station),
            None => self.station.clone(),
        };
        // One line, whatever a field held (a station's text is checked where it enters;
        // this is the last door before an alert command's input).
        crate::sync::health::printable(
            &format!(
                "{who} ({}): {}. What to do: {}.",
                severity_word(self.severity),
                self.what,
                self.todo
            ),
            2000,
        )
    }
}

/// The word for a severity on the page and in alerts.
pub fn severity_word(s: u8) -> &'static str {
    match s {
        3 => "urgent",
        2 => "soon",
        _ => "look",
    }
}

/// One station as the page shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StationFacts {
    pub station: String,
    pub enrolled: bool,
    /// When its last enrolment was revoked (decommissioned): it has no problems then.
    pub revoked_at: Option<String>,
    pub status: Option<String>,
    pub status_since: Option<String>,
    pub health: Option<serde_json::Value>,
    /// Sessions shown from it (its latest record of each).
    pub sessions: i64,
    /// Messages stored from it: sessions (and their older versions), tombstones, purges.
    pub messages: i64,
    /// Quarantined messages still open.
    pub quarantined: i64,
    /// When a record of it was last refused at the gate.
    pub refused_latest: Option<String>,
    /// Its records stored since its latest health message (see `outbox_pending`).
    pub delivered_since_health: u64,
    pub problems: Vec<Problem>,
}

impl StationFacts {
    /// The outbox's pending messages as the newest news says: the latest health message's
    /// figure less the records stored from the station since it came (a figure sent before
    /// the receipts stayed on the page for 15 minutes). `None` without health.
    pub fn outbox_pending(&self) -> Option<u64> {
        let reported = self.health.as_ref()?["outbox_pending"].as_u64()?;
        Some(reported.saturating_sub(self.delivered_since_health))
    }
}

/// One participant (a pseudonym) against the study's plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParticipantFacts {
    pub participant: String,
    /// `given`, `unknown` or `withdrawn`.
    pub consent: String,
    /// When a purge removed their data (their rows are gone; this line stays).
    pub withdrawn_at: Option<String>,
    pub stations: Vec<String>,
    pub sessions: u64,
    pub complete: u64,
    /// `[study] sessions_per_participant`, when set.
    pub planned: Option<u32>,
    /// Sessions the plan expects by now (from their first session, evenly over
    /// `[study] days`), when the plan is set.
    pub expected_by_now: Option<u64>,
    pub first_session: Option<String>,
    pub last_session: Option<String>,
    pub days_since_last: Option<f64>,
    pub ratings: u64,
    /// Survey time points answered (`pre_study`, `mid_study`, `post_study`).
    pub surveys: Vec<String>,
    /// Their latest sessions in a row with a "bad" data-quality verdict.
    pub bad_in_a_row: u32,
    pub problems: Vec<Problem>,
}

/// One session's data quality, as the session report judges it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionQuality {
    pub station: String,
    pub participant: Option<String>,
    pub session_id: String,
    pub start: String,
    /// Fraction of decoded frames with a face (None: facial stage off).
    pub face_presence: Option<f64>,
    pub clipping: f64,
    pub silence: f64,
    pub brightness: f64,
    /// Fraction of screened frames with someone other than the participant in view (0 when
    /// the screen saw no one else, or did not run).
    pub bystanders: f64,
    /// Verdicts of the five measures above, in that order; the worst of the first four and
    /// of "media captured" (a bystander in view is a check on what was recorded, not on the
    /// data's quality).
    pub verdicts: [Verdict; 5],
    pub worst: Verdict,
}

/// One predictor's agreement with the self-ratings so far (session level, as `empathic
/// evaluate` measures it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    pub predictor: String,
    pub synthetic: bool,
    pub rated: usize,
    pub participants: usize,
    pub spearman_rho: Option<f64>,
    pub pearson_r: Option<f64>,
    pub mse: Option<f64>,
}

/// Ratings and predictions across the study.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatingFacts {
    /// Self-ratings by value 1-5.
    pub ratings: [u64; 5],
    /// Window predictions per phase and predictor, binned 1-5.
    pub predictions: Vec<ScoreBins>,
    pub agreement: Vec<Agreement>,
}

/// Everything on the page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyFacts {
    pub study: String,
    pub made_at: String,
    pub database: String,
    pub plan: StudyConfig,
    pub stations: Vec<StationFacts>,
    pub participants: Vec<ParticipantFacts>,
    pub sessions: u64,
    /// Per session, oldest first.
    pub quality: Vec<SessionQuality>,
    pub ratings: RatingFacts,
    /// Every station's and participant's problems, worst first.
    pub problems: Vec<Problem>,
    /// Senders that are no station of the study (neither enrolled nor with a record,
    /// health or status kept) whose messages were refused: counted, never listed one by
    /// one, never a problem (a made-up name per message must not flood the page or alerts).
    pub strangers: Strangers,
}

/// Refused messages from senders that are no station of the study.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Strangers {
    pub senders: u64,
    pub messages: i64,
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

/// What the station-schema view holds, read at once.
struct ViewFacts {
    participants: Vec<ParticipantFacts>,
    sessions: u64,
    quality: Vec<SessionQuality>,
    ratings: RatingFacts,
}

impl StudyFacts {
    /// The facts of `study` in `central` (named `database` on the page) at `now`, measured
    /// against `plan`; `view` keeps a PostgreSQL database's read view for the next call.
    pub fn gather(
        central: &mut Central,
        view: &mut PageView,
        study: &str,
        plan: &StudyConfig,
        database: &str,
        now: &str,
    ) -> Result<Self, CentralError> {
        let enrolments = central.enrolments(study)?;
        let enrolled: BTreeSet<String> = enrolments
            .iter()
            .filter(|e| e.revoked_at.is_none())
            .map(|e| e.station.clone())
            .collect();
        // Every enrolment revoked: a decommissioned (or stolen) station. What it left
        // retained on the broker is refused; the page shows it without alarms.
        let revoked: BTreeMap<String, String> = enrolments
            .iter()
            .filter(|e| !enrolled.contains(&e.station))
            .filter_map(|e| Some((e.station.clone(), e.revoked_at.clone()?)))
            .collect();
        let counts = central.station_counts(study)?;
        let health = central.station_health(study)?;
        let withdrawals = central.withdrawals(study)?;
        let senders = central.session_stations(study)?;
        let consents = central.consents(study)?;
        let view = central.with_page_view(view, |store| {
            read_view(store, plan, &withdrawals, &consents, &senders, now)
        })?;
        let mut names: BTreeSet<String> = enrolled.clone();
        names.extend(health.iter().map(|h| h.station.clone()));
        let mut strangers = Strangers::default();
        for c in &counts {
            let known = enrolments.iter().any(|e| e.station == c.station);
            if known || names.contains(&c.station) || c.sealed + c.plain > 0 {
                names.insert(c.station.clone());
            } else {
                strangers.senders += 1;
                strangers.messages += c.quarantined;
            }
        }
        let mut stations: Vec<StationFacts> = Vec::new();
        for name in names {
            let h = health.iter().find(|h| h.station == name);
            let c = counts.iter().find(|c| c.station == name);
            let mut s = StationFacts {
                station: name.clone(),
                enrolled: enrolled.contains(&name),
                revoked_at: revoked.get(&name).cloned(),
                status: h.and_then(|h| h.status.clone()),
                status_since: h.and_then(|h| h.status_received_at.clone()),
                health: h.and_then(|h| h.health.clone()),
                sessions: c.map_or(0, |c| c.sessions),
                messages: c.map_or(0, |c| c.sealed + c.plain),
                quarantined: c.map_or(0, |c| c.quarantined),
                refused_latest: c.and_then(|c| c.refused_latest.clone()),
                delivered_since_health: h.map_or(0, |h| h.delivered_since_health),
                problems: Vec::new(),
            };
            s.problems = problems::of_station(&s, now);
            stations.push(s);
        }
        let worst = |s: &StationFacts| s.problems.iter().map(|p| p.severity).max().unwrap_or(0);
        stations.sort_by(|a, b| {
            worst(b)
                .cmp(&worst(a))
                .then(b.problems.len().cmp(&a.problems.len()))
                .then(a.station.cmp(&b.station))
        });
        let mut problems: Vec<Problem> = stations
            .iter()
            .flat_map(|s| s.problems.clone())
            .chain(view.participants.iter().flat_map(|p| p.problems.clone()))
            .collect();
        problems.sort_by_key(|p| std::cmp::Reverse(p.severity));
        Ok(Self {
            study: study.to_string(),
            made_at: now.to_string(),
            database: database.to_string(),
            plan: plan.clone(),
            stations,
            participants: view.participants,
            sessions: view.sessions,
            quality: view.quality,
            ratings: view.ratings,
            problems,
            strangers,
        })
    }
}

/// The view's participants, session quality and ratings.
fn read_view(
    store: &Store,
    plan: &StudyConfig,
    withdrawals: &[crate::sync::central::Withdrawal],
    consents: &BTreeMap<String, String>,
    senders: &BTreeMap<String, String>,
    now: &str,
) -> Result<ViewFacts, CentralError> {
    let e = CentralError::Store;
    let mut sessions = store.list_sessions().map_err(e)?;
    // Each session under the station that sent it (its own `station_id` when not synced).
    for s in &mut sessions {
        if let Some(sender) = senders.get(&s.id) {
            s.station_id = sender.clone();
        }
    }
    let starts = store.session_starts().map_err(e)?;
    let start_of = |id: &str| starts.get(id).cloned().unwrap_or_default();
    let mut quality: Vec<SessionQuality> = sessions
        .iter()
        .filter_map(|s| {
            let q: QualityReport = serde_json::from_value(s.quality.clone()?).ok()?;
            Some(session_quality(
                &q,
                &s.station_id,
                s.participant_id.clone(),
                &s.id,
                start_of(&s.id),
            ))
        })
        .collect();
    quality.sort_by(|a, b| a.start.cmp(&b.start).then(a.session_id.cmp(&b.session_id)));

    let mut rows = store.study_participants().map_err(e)?;
    // A withdrawn participant's rows are purged: the audit line is what is left of them.
    for w in withdrawals {
        if !rows.iter().any(|r| r.id == w.participant) {
            rows.push(crate::store::ParticipantRow {
                id: w.participant.clone(),
                consent: "withdrawn".into(),
                ratings: 0,
                survey_time_points: Vec::new(),
            });
        }
    }
    // Consent as the stations' consent messages say (newer than any session record's copy;
    // a participant consented but not yet recorded is listed too).
    for (id, consent) in consents {
        match rows.iter_mut().find(|r| &r.id == id) {
            Some(r) => r.consent = consent.clone(),
            None => rows.push(crate::store::ParticipantRow {
                id: id.clone(),
                consent: consent.clone(),
                ratings: 0,
                survey_time_points: Vec::new(),
            }),
        }
    }
    let mut participants = Vec::new();
    for row in rows {
        let mut theirs: Vec<&crate::store::SessionSummary> = sessions
            .iter()
            .filter(|s| s.participant_id.as_deref() == Some(row.id.as_str()))
            .collect();
        theirs.sort_by_key(|s| start_of(&s.id));
        let first = theirs.first().map(|s| start_of(&s.id));
        let last = theirs.last().map(|s| start_of(&s.id));
        let complete = theirs.iter().filter(|s| s.status == "complete").count() as u64;
        let bad_in_a_row = quality
            .iter()
            .rev()
            .filter(|q| q.participant.as_deref() == Some(row.id.as_str()))
            .take_while(|q| q.worst == Verdict::Bad)
            .count() as u32;
        let planned = (plan.sessions_per_participant > 0).then_some(plan.sessions_per_participant);
        let expected_by_now = match (&first, planned, plan.days) {
            (Some(f), Some(n), days) if days > 0 => {
                let day = (hours_between(f, now) / 24.0).floor() + 1.0;
                let share = (day / f64::from(days)).min(1.0);
                Some((f64::from(n) * share).ceil() as u64)
            }
            _ => None,
        };
        let mut stations: Vec<String> = theirs.iter().map(|s| s.station_id.clone()).collect();
        stations.sort();
        stations.dedup();
        let withdrawn_at = withdrawals
            .iter()
            .filter(|w| w.participant == row.id)
            .map(|w| w.purged_at.clone())
            .next_back();
        let mut p = ParticipantFacts {
            consent: if withdrawn_at.is_some() {
                "withdrawn".into()
            } else {
                row.consent.clone()
            },
            participant: row.id,
            withdrawn_at,
            stations,
            sessions: theirs.len() as u64,
            complete,
            planned,
            expected_by_now,
            days_since_last: last.as_deref().map(|l| hours_between(l, now) / 24.0),
            first_session: first,
            last_session: last,
            ratings: row.ratings,
            surveys: row.survey_time_points,
            bad_in_a_row,
            problems: Vec::new(),
        };
        p.problems = problems::of_participant(&p, plan);
        participants.push(p);
    }

    // Each predictor's rated stories, at session level, as `empathic evaluate` takes them;
    // the point values only (its bootstrap intervals are `empathic evaluate`'s to give).
    let mut by_predictor: BTreeMap<(String, bool), Vec<crate::store::RatedStory>> = BTreeMap::new();
    for r in store.rated_stories().map_err(e)? {
        by_predictor
            .entry((r.predictor.clone(), r.synthetic))
            .or_default()
            .push(r);
    }
    let agreement = by_predictor
        .into_iter()
        .map(|((predictor, synthetic), rows)| {
            use crate::fusion::evaluate::{mse, pearson, spearman};
            let predicted: Vec<f64> = rows.iter().map(|r| r.predicted).collect();
            let rating: Vec<f64> = rows.iter().map(|r| r.rating).collect();
            let participants: BTreeSet<&str> =
                rows.iter().map(|r| r.participant.as_str()).collect();
            Agreement {
                predictor,
                synthetic,
                rated: rows.len(),
                participants: participants.len(),
                spearman_rho: spearman(&predicted, &rating),
                pearson_r: pearson(&predicted, &rating),
                mse: mse(&predicted, &rating),
            }
        })
        .collect();
    Ok(ViewFacts {
        participants,
        sessions: sessions.len() as u64,
        quality,
        ratings: RatingFacts {
            ratings: store.rating_bins().map_err(e)?,
            predictions: store.prediction_bins().map_err(e)?,
            agreement,
        },
    })
}

/// The measures of the quality over time, by their name in `report::verdict`.
const QUALITY_MEASURES: [&str; 5] = [
    MEASURES[9],
    MEASURES[5],
    MEASURES[6],
    MEASURES[7],
    MEASURES[10],
];

fn session_quality(
    q: &QualityReport,
    station: &str,
    participant: Option<String>,
    id: &str,
    start: String,
) -> SessionQuality {
    let rows = quality_rows(q);
    let verdict = |m: &str| {
        rows.iter()
            .find(|r| r.measure == m)
            .map_or(Verdict::Check, |r| r.verdict)
    };
    let verdicts = QUALITY_MEASURES.map(verdict);
    let worst = verdicts[..4]
        .iter()
        .copied()
        .chain([verdict(MEASURES[0])])
        .max()
        .unwrap_or(Verdict::Good);
    SessionQuality {
        station: station.to_string(),
        participant,
        session_id: id.to_string(),
        start,
        face_presence: q
            .modality_presence
            .iter()
            .find(|m| m.modality == "face")
            .map(|m| m.present_frames as f64 / m.decoded_frames.max(1) as f64),
        clipping: q.audio_clipping_ratio,
        silence: q.silence_ratio,
        brightness: q.mean_brightness,
        bystanders: q.bystanders.as_ref().map_or(0.0, |b| {
            b.frames_with_bystanders as f64 / b.screened_frames.max(1) as f64
        }),
        verdicts,
        worst,
    }
}
