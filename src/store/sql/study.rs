//! Reads for the study page (`report::study`): every participant with consent, ratings and
//! survey time points, each session's start, and the distributions of self-ratings and of
//! predicted scores per phase. Whole-database aggregates, so one query each.

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

/// Predicted scores per phase and predictor, in the protocol's phase order.
pub fn prediction_bins(conn: &Connection) -> Result<Vec<ScoreBins>, StoreError> {
    let mut out: Vec<ScoreBins> = Vec::new();
    conn.prepare(&format!(
        "SELECT w.phase, p.predictor, p.synthetic, {BIN}, COUNT(*)
         FROM predictions p
         LEFT JOIN windows w ON w.session_id = p.session_id AND w.window_index = p.window_index
         GROUP BY 1, 2, 3, 4
         ORDER BY CASE w.phase WHEN 'warm_up' THEN 0 WHEN 'story_share' THEN 1
                  WHEN 'story_receive' THEN 2 WHEN 'reflection' THEN 3 WHEN 'cool_down' THEN 4
                  ELSE 5 END, 2, 3, 4"
    ))
    .and_then(|mut s| {
        for r in s.query_map([], |r| {
            Ok((
                r.get::<_, Option<String>>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)? != 0,
                r.get::<_, i64>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })? {
            let (phase, predictor, synthetic, bin, n) = r?;
            let same = out.last().is_some_and(|b: &ScoreBins| {
                b.phase == phase && b.predictor == predictor && b.synthetic == synthetic
            });
            if !same {
                out.push(ScoreBins {
                    phase,
                    predictor,
                    synthetic,
                    bins: [0; 5],
                });
            }
            if let Some(b) = out.last_mut() {
                b.bins[bin.clamp(0, 4) as usize] += n.max(0) as u64;
            }
        }
        Ok(())
    })
    .map_err(ctx("reading predicted scores per phase"))?;
    Ok(out)
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
