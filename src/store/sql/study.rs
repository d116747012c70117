//! Reads for the study page (`report::study`): every participant with consent, ratings and
//! survey time points, each session's start, the distributions of self-ratings and of
//! predicted scores per phase, and each rated story's session-level prediction.
//! Whole-database aggregates, so one query each; the predictions through one fold
//! ([`page_predictions`]) that a page view keeps instead of its raw rows.

use std::collections::BTreeMap;

use rusqlite::Connection;
use serde::Serialize;

use super::ctx;
use crate::store::StoreError;

/// One participant as the study page counts them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParticipantRow {
    pub id: String,
    /// `unknown`, `given` or `withdrawn`.
    pub consent: String,
    /// Self-ratings given (one per story rated).
    pub ratings: u64,
    /// Survey time points with at least one answer (`pre_study`, `mid_study`, `post_study`).
    pub survey_time_points: Vec<String>,
}

/// Every participant, by id.
pub fn participants(conn: &Connection) -> Result<Vec<ParticipantRow>, StoreError> {
    let mut points: BTreeMap<String, Vec<String>> = BTreeMap::new();
    conn.prepare(
        "SELECT DISTINCT participant_id, time_point FROM survey_responses
         ORDER BY participant_id,
                  CASE time_point WHEN 'pre_study' THEN 0 WHEN 'mid_study' THEN 1 ELSE 2 END",
    )
    .and_then(|mut s| {
        for r in s.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))? {
            let (p, t) = r?;
            points.entry(p).or_default().push(t);
        }
        Ok(())
    })
    .map_err(ctx("reading survey time points"))?;
    conn.prepare(
        "SELECT p.id, p.consent,
                (SELECT COUNT(*) FROM self_ratings r JOIN sessions s ON s.id = r.session_id
                  WHERE s.participant_id = p.id)
         FROM participants p ORDER BY p.id",
    )
    .and_then(|mut s| {
        s.query_map([], |r| {
            let id: String = r.get(0)?;
            Ok(ParticipantRow {
                survey_time_points: points.get(&id).cloned().unwrap_or_default(),
                id,
                consent: r.get(1)?,
                ratings: r.get::<_, i64>(2)?.max(0) as u64,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading participants"))
}

/// Each session's start: its recorded start time, else when it was stored.
pub fn session_starts(conn: &Connection) -> Result<BTreeMap<String, String>, StoreError> {
    conn.prepare("SELECT id, COALESCE(start_time, created_at) FROM sessions")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<BTreeMap<_, _>, _>>()
        })
        .map_err(ctx("reading session starts"))
}

/// How many window predictions of one predictor in one phase fell in each score bin (the
/// calibrated 1-5 score rounded to the nearest whole point).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScoreBins {
    /// None for windows outside any phase.
    pub phase: Option<String>,
    pub predictor: String,
    pub synthetic: bool,
    /// Counts of scores 1, 2, 3, 4, 5.
    pub bins: [u64; 5],
}

/// The bin (0-4) of a 1-5 score: rounded, clamped.
const BIN: &str = "MIN(4, MAX(0, CAST(p.score + 0.5 AS INTEGER) - 1))";

/// What the study page needs of the window predictions: per session, phase, predictor,
/// story and role, how many windows, their summed score and their 1-5 bins. Read through
/// [`page_predictions`]: a grouped query over the raw tables in a database file, or the
/// `page_predictions` table of a page view ([`make_page_table`]), where each record's raw
/// predictions and windows are folded into it as it is applied ([`fold_predictions`]), so
/// a view of a whole study holds a few rows a session instead of one a window.
fn page_predictions_select(filter: &str) -> String {
    let bins: Vec<String> = (0..5)
        .map(|k| format!("SUM(CASE WHEN {BIN} = {k} THEN 1 ELSE 0 END) AS b{}", k + 1))
        .collect();
    format!(
        "SELECT p.session_id AS session_id, w.phase AS phase, p.predictor AS predictor,
                p.synthetic AS synthetic, p.story_id AS story_id, p.in_play AS in_play,
                COUNT(*) AS n, SUM(p.score) AS score_sum, {}
         FROM predictions p
         LEFT JOIN windows w ON w.session_id = p.session_id AND w.window_index = p.window_index
         {filter}
         GROUP BY p.session_id, w.phase, p.predictor, p.synthetic, p.story_id, p.in_play",
        bins.join(", ")
    )
}

const PAGE_COLUMNS: &str =
    "session_id, phase, predictor, synthetic, story_id, in_play, n, score_sum, b1, b2, b3, b4, b5";

/// Makes the page view's `page_predictions` table (its rows go with their session).
pub fn make_page_table(conn: &Connection) -> Result<(), StoreError> {
    conn.execute_batch(
        "CREATE TABLE page_predictions (
            session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
            phase TEXT, predictor TEXT NOT NULL, synthetic INTEGER NOT NULL,
            story_id TEXT NOT NULL, in_play TEXT NOT NULL, n INTEGER NOT NULL,
            score_sum REAL NOT NULL, b1 INTEGER NOT NULL, b2 INTEGER NOT NULL,
            b3 INTEGER NOT NULL, b4 INTEGER NOT NULL, b5 INTEGER NOT NULL);
         CREATE INDEX page_predictions_session ON page_predictions (session_id);",
    )
    .map_err(ctx("making the page view"))
}

/// Folds session `id`'s window predictions into `page_predictions`, then drops them and
/// its windows (the page view keeps only the fold).
pub fn fold_predictions(conn: &Connection, id: &str) -> Result<(), StoreError> {
    conn.execute(
        &format!(
            "INSERT INTO page_predictions ({PAGE_COLUMNS}) {}",
            page_predictions_select("WHERE p.session_id = ?1")
        ),
        [id],
    )
    .and_then(|_| conn.execute("DELETE FROM predictions WHERE session_id = ?1", [id]))
    .and_then(|_| conn.execute("DELETE FROM windows WHERE session_id = ?1", [id]))
    .map_err(ctx("folding a session's predictions"))?;
    Ok(())
}

/// Where the page reads its predictions from: the page view's table, or the grouped
/// query over a database file's raw tables.
fn page_predictions(conn: &Connection) -> Result<String, StoreError> {
    let folded: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'page_predictions'",
            [],
            |r| r.get(0),
        )
        .map_err(ctx("reading the schema"))?;
    Ok(if folded > 0 {
        "page_predictions".into()
    } else {
        format!("({})", page_predictions_select(""))
    })
}

/// Predicted scores per phase and predictor, in the protocol's phase order.
pub fn prediction_bins(conn: &Connection) -> Result<Vec<ScoreBins>, StoreError> {
    let source = page_predictions(conn)?;
    conn.prepare(&format!(
        "SELECT phase, predictor, synthetic, SUM(b1), SUM(b2), SUM(b3), SUM(b4), SUM(b5)
         FROM {source}
         GROUP BY 1, 2, 3
         ORDER BY CASE phase WHEN 'warm_up' THEN 0 WHEN 'story_share' THEN 1
                  WHEN 'story_receive' THEN 2 WHEN 'reflection' THEN 3 WHEN 'cool_down' THEN 4
                  ELSE 5 END, 2, 3"
    ))
    .and_then(|mut s| {
        s.query_map([], |r| {
            let mut bins = [0u64; 5];
            for (k, b) in bins.iter_mut().enumerate() {
                *b = r.get::<_, i64>(3 + k)?.max(0) as u64;
            }
            Ok(ScoreBins {
                phase: r.get(0)?,
                predictor: r.get(1)?,
                synthetic: r.get::<_, i64>(2)? != 0,
                bins,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading predicted scores per phase"))
}

/// One predictor's session-level prediction toward a story the participant rated: the
/// mean score over the story's windows once shown, in complete sessions (what `empathic
/// evaluate` compares with the rating).
#[derive(Debug, Clone, PartialEq)]
pub struct RatedStory {
    pub predictor: String,
    pub synthetic: bool,
    pub participant: String,
    pub session_id: String,
    pub story_id: String,
    pub predicted: f64,
    pub rating: f64,
}

/// Every rated story's session-level prediction, by predictor, oldest session first.
pub fn rated_stories(conn: &Connection) -> Result<Vec<RatedStory>, StoreError> {
    let source = page_predictions(conn)?;
    conn.prepare(&format!(
        "SELECT pp.predictor, MAX(pp.synthetic), COALESCE(s.participant_id, s.id),
                pp.session_id, pp.story_id, SUM(pp.score_sum) / SUM(pp.n), r.value
         FROM {source} pp
         JOIN sessions s ON s.id = pp.session_id AND s.status = 'complete'
         JOIN self_ratings r ON r.session_id = pp.session_id AND r.story_id = pp.story_id
         WHERE pp.in_play = 'shown'
         GROUP BY pp.predictor, pp.session_id, pp.story_id
         ORDER BY pp.predictor, s.created_at, pp.session_id, pp.story_id"
    ))
    .and_then(|mut s| {
        s.query_map([], |r| {
            Ok(RatedStory {
                predictor: r.get(0)?,
                synthetic: r.get::<_, i64>(1)? != 0,
                participant: r.get(2)?,
                session_id: r.get(3)?,
                story_id: r.get(4)?,
                predicted: r.get(5)?,
                rating: r.get::<_, i64>(6)? as f64,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading rated predictions"))
}

/// Self-ratings given, by value 1-5.
pub fn rating_bins(conn: &Connection) -> Result<[u64; 5], StoreError> {
    let mut bins = [0u64; 5];
    conn.prepare("SELECT value, COUNT(*) FROM self_ratings GROUP BY value")
        .and_then(|mut s| {
            for r in s.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))? {
                let (v, n) = r?;
                if (1..=5).contains(&v) {
                    bins[(v - 1) as usize] += n.max(0) as u64;
                }
            }
            Ok(())
        })
        .map_err(ctx("reading self-ratings"))?;
    Ok(bins)
}
