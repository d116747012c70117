//! Keeping the study page fresh and telling staff of new problems, beside a running
//! collector (`empathic collect --study-page FILE`, `[collect] on_problem`).
//!
//! Contract: [`keep_fresh`] runs on its own thread until `stop`. It rebuilds the facts
//! ([`StudyFacts::gather`]) at start, then after the collector stored something (its
//! `changes` counter moved) but at most once per [`MIN_INTERVAL`], and at least every
//! [`MAX_INTERVAL`] (problems that come with time, like an offline station's hours, need no
//! message). The page is written beside and renamed, so a reader never sees half of one
//! and a failed build leaves the last one. After each build the open problems are compared
//! with those told (`collect_alerts`): new ones are claimed (so collectors sharing a
//! database tell each once) and go to `on_problem` together (on its standard input, one a
//! line), at most once per `alert_interval_min`; a problem is told once until it clears,
//! across restarts; a failed or hung command (killed after [`COMMAND_TIMEOUT`]) gives its
//! claims back and is retried at the next chance. The
//! collector's own work never waits for any of this: it only counts what it stored.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Problem, StudyFacts};
use crate::config::{CollectConfig, StudyConfig};
use crate::store::CentralError;
use crate::sync::central::{Central, PageView};

/// The page is rebuilt at most this often after new messages.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);
/// ... and at least this often (time-made problems, the "made" line).
pub const MAX_INTERVAL: Duration = Duration::from_secs(600);
pub use super::alert_command::{run_alert, COMMAND_TIMEOUT};

/// What to keep fresh, from where.
pub struct Keeper {
    /// The central database (a file or a `postgres://` URL).
    pub central: String,
    pub study: String,
    pub plan: StudyConfig,
    pub collect: CollectConfig,
    /// Where the page goes (None: alerts only).
    pub page: Option<PathBuf>,
    /// Counts what the collector stored.
    pub changes: Arc<AtomicU64>,
}

/// What one build did, for the log and the tests.
#[derive(Debug, Default, PartialEq)]
pub struct Built {
    pub problems: usize,
    pub told: usize,
    pub cleared: usize,
}

/// Runs until `stop` (see the module's contract).
pub fn keep_fresh(k: &Keeper, stop: &AtomicBool) {
    let mut db: Option<Central> = None;
    let mut view = PageView::default();
    let mut last_build: Option<Instant> = None;
    let mut seen = u64::MAX;
    let mut last_alert: Option<Instant> = None;
    let mut alerts_waiting = false;
    while !stop.load(Ordering::Relaxed) {
        let changes = k.changes.load(Ordering::Relaxed);
        let since = last_build.map(|t| t.elapsed());
        let due = match since {
            None => true,
            Some(e) => {
                (changes != seen && e >= MIN_INTERVAL)
                    || e >= MAX_INTERVAL
                    || (alerts_waiting && alert_allowed(last_alert, &k.collect))
            }
        };
        if due {
            seen = changes;
            last_build = Some(Instant::now());
            match build(k, &mut db, &mut view, &mut last_alert) {
                Ok((built, waiting)) => {
                    alerts_waiting = waiting;
                    tracing::info!(
                        problems = built.problems,
                        told = built.told,
                        cleared = built.cleared,
                        "collect: study page made"
                    );
                }
                Err(e) => {
                    // A database that went away is opened again next time.
                    db = None;
                    tracing::warn!(error = %e, "collect: could not make the study page; the last one stays");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn alert_allowed(last: Option<Instant>, c: &CollectConfig) -> bool {
    last.is_none_or(|t| t.elapsed() >= Duration::from_secs(u64::from(c.alert_interval_min) * 60))
}

/// Why a build of the study page failed (the keeper logs it and tries again).
#[derive(Debug, thiserror::Error)]
pub enum StudyPageError {
    #[error(transparent)]
    Central(#[from] CentralError),
    #[error("the study page: {0}")]
    Page(#[from] crate::files::OutputError),
}

/// One build: the facts, the page, the alerts. Also says whether new problems wait for
/// the rate limit.
fn build(
    k: &Keeper,
    db: &mut Option<Central>,
    view: &mut PageView,
    last_alert: &mut Option<Instant>,
) -> Result<(Built, bool), StudyPageError> {
    if db.is_none() {
        *db = Some(Central::open(&k.central)?);
    }
    let Some(central) = db.as_mut() else {
        return Err(CentralError::database_says("reading", "no database open").into());
    };
    let now = crate::clock::utc_now();
    let name = crate::sync::central::redacted(&k.central);
    let facts = StudyFacts::gather(central, view, &k.study, &k.plan, &name, &now)?;
    if let Some(page) = &k.page {
        crate::files::write_atomically(page, super::html(&facts).as_bytes())?;
    }
    let mut built = Built {
        problems: facts.problems.len(),
        ..Built::default()
    };
    if k.collect.on_problem.trim().is_empty() {
        return Ok((built, false));
    }
    let told = central.alerts_told(&k.study)?;
    let open: Vec<&Problem> = facts.problems.iter().collect();
    let cleared: Vec<String> = told
        .keys()
        .filter(|key| !open.iter().any(|p| &p.key() == *key))
        .cloned()
        .collect();
    let new: Vec<&Problem> = open
        .into_iter()
        .filter(|p| !told.contains_key(&p.key()))
        .collect();
    let mut told_now: Vec<String> = Vec::new();
    let mut waiting = false;
    if !new.is_empty() {
        if alert_allowed(*last_alert, &k.collect) {
            let pairs: Vec<(String, String)> =
                new.iter().map(|p| (p.key(), p.what.clone())).collect();
            // Claimed first: another collector on this database may be telling the same.
            let claimed = central.claim_alerts(&k.study, &pairs, &now)?;
            let mine: Vec<&&Problem> = new.iter().filter(|p| claimed.contains(&p.key())).collect();
            if !mine.is_empty() {
                *last_alert = Some(Instant::now());
                let lines: String = mine.iter().map(|p| p.line() + "\n").collect();
                match run_alert(&k.collect.on_problem, &k.study, mine.len(), &lines) {
                    Ok(()) => told_now = claimed,
                    Err(e) => {
                        waiting = true;
                        central.forget_alerts(&k.study, &claimed)?;
                        tracing::warn!(error = %e, "collect: [collect] on_problem failed; the problems will be told at the next chance");
                    }
                }
            }
        } else {
            waiting = true;
        }
    }
    central.forget_alerts(&k.study, &cleared)?;
    built.told = told_now.len();
    built.cleared = cleared.len();
    Ok((built, waiting))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keeper(dir: &std::path::Path, command: &str) -> Keeper {
        Keeper {
            central: dir.join("central.db").display().to_string(),
            study: "s".into(),
            plan: StudyConfig::default(),
            collect: CollectConfig {
                on_problem: command.into(),
                alert_interval_min: 1,
                ..CollectConfig::default()
            },
            page: Some(dir.join("study.html")),
            changes: Arc::new(AtomicU64::new(0)),
        }
    }

    #[test]
    fn each_problem_is_told_once_until_it_clears_and_again_when_it_returns() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("alerts.txt");
        let k = keeper(dir.path(), &format!("cat >> '{}'", log.display()));
        let mut c = Central::open(&k.central).unwrap();
        c.enrol("s", "st-a", None, true).unwrap();
        c.store_status(
            "empathic/v1/s/st-a/status",
            b"offline",
            &crate::sync::central::Gate::plain(),
        )
        .unwrap();
        let lines = || std::fs::read_to_string(&log).unwrap_or_default();
        let (mut db, mut last) = (None, None);
        let (b, waiting) = build(&k, &mut db, &mut PageView::default(), &mut last).unwrap();
        assert_eq!((b.told, b.cleared, waiting), (1, 0, false));
        assert!(
            lines().starts_with("st-a (urgent): offline since"),
            "{}",
            lines()
        );
        assert!(std::fs::read_to_string(dir.path().join("study.html"))
            .unwrap()
            .contains("offline since"));
        // Still open: not told again, even with the rate limit out of the way.
        let (b, _) = build(&k, &mut db, &mut PageView::default(), &mut None).unwrap();
        assert_eq!((b.told, b.cleared), (0, 0));
        assert_eq!(lines().lines().count(), 1);
        // Across a restart too (what was told is in the database).
        let (b, _) = build(&k, &mut None, &mut PageView::default(), &mut None).unwrap();
        assert_eq!(b.told, 0);
        // Back online: offline clears (and "no health" is new).
        c.store_status(
            "empathic/v1/s/st-a/status",
            b"online",
            &crate::sync::central::Gate::plain(),
        )
        .unwrap();
        let (b, _) = build(&k, &mut db, &mut PageView::default(), &mut None).unwrap();
        assert_eq!((b.told, b.cleared), (1, 1), "{}", lines());
        // Offline again within the rate limit: it waits, then goes.
        c.store_status(
            "empathic/v1/s/st-a/status",
            b"offline",
            &crate::sync::central::Gate::plain(),
        )
        .unwrap();
        let mut recent = Some(Instant::now());
        let (b, waiting) = build(&k, &mut db, &mut PageView::default(), &mut recent).unwrap();
        assert_eq!((b.told, waiting), (0, true));
        let (b, waiting) = build(&k, &mut db, &mut PageView::default(), &mut None).unwrap();
        assert_eq!((b.told, waiting), (1, false));
        let told: Vec<String> = lines().lines().map(str::to_string).collect();
        assert_eq!(told.len(), 3, "{told:?}");
        assert!(told[2].contains("offline since"), "{told:?}");
    }

    #[test]
    fn two_collectors_on_one_database_tell_a_problem_once() {
        // Both saw the problem as new; the one that claims it first tells it.
        let dir = tempfile::tempdir().unwrap();
        let k = keeper(dir.path(), "true");
        let mut a = Central::open(&k.central).unwrap();
        let mut b = Central::open(&k.central).unwrap();
        let new = [("offline/st-a/".to_string(), "offline".to_string())];
        let now = crate::clock::utc_now();
        assert_eq!(a.claim_alerts("s", &new, &now).unwrap(), ["offline/st-a/"]);
        assert!(b.claim_alerts("s", &new, &now).unwrap().is_empty());
        // Given back (its telling failed): the next to claim it tells it.
        a.forget_alerts("s", &["offline/st-a/".to_string()])
            .unwrap();
        assert_eq!(b.claim_alerts("s", &new, &now).unwrap().len(), 1);
    }

    #[test]
    fn a_failing_alert_command_marks_nothing_told_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let k = keeper(dir.path(), "exit 3");
        let mut c = Central::open(&k.central).unwrap();
        c.store_status(
            "empathic/v1/s/st-a/status",
            b"offline",
            &crate::sync::central::Gate::plain(),
        )
        .unwrap();
        let (b, waiting) = build(&k, &mut None, &mut PageView::default(), &mut None).unwrap();
        assert_eq!((b.told, waiting), (0, true));
        assert!(c.alerts_told("s").unwrap().is_empty());
    }
}
