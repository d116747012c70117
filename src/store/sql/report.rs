//! Reads for `empathic report`: window predictions over time, utterances, survey answers,
//! and a participant's sessions. Everything else the page shows comes from the existing
//! reads (session detail, modalities, frame vectors).

use rusqlite::Connection;
use serde::Serialize;

use super::ctx;
use crate::store::StoreError;

/// One window's prediction toward one story.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictionPoint {
    pub predictor: String,
    pub story_id: String,
    pub retrieved: bool,
    /// End of the window, in session seconds.
    pub end_secs: f64,
    pub score: f64,
    pub synthetic: bool,
    /// `predictions.calibration` (see `fusion::uncalibrated`).
    pub calibration: String,
}

/// Every stored window prediction of session `id`, by predictor, story and time.
pub fn prediction_series(conn: &Connection, id: &str) -> Result<Vec<PredictionPoint>, StoreError> {
    conn.prepare(
        "SELECT p.predictor, p.story_id, p.in_play = 'retrieved', w.end_ns, p.score, p.synthetic, p.calibration
         FROM predictions p
         JOIN windows w ON w.session_id = p.session_id AND w.window_index = p.window_index
         WHERE p.session_id = ?1 ORDER BY p.predictor, p.story_id, w.end_ns",
    )
    .and_then(|mut s| {
        s.query_map([id], |r| {
            Ok(PredictionPoint {
                predictor: r.get(0)?,
                story_id: r.get(1)?,
                retrieved: r.get(2)?,
                end_secs: r.get::<_, i64>(3)? as f64 / 1e9,
                score: r.get(4)?,
                synthetic: r.get::<_, i64>(5)? != 0,
                calibration: r.get(6)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading window predictions"))
}

/// An utterance, in session seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UtteranceRow {
    pub speaker: String,
    pub start_secs: f64,
    pub end_secs: f64,
    pub text: String,
    /// Who transcribed it: `dialogue_app` or `asr` (the station's recogniser).
    pub source: String,
}

pub fn utterances(conn: &Connection, id: &str) -> Result<Vec<UtteranceRow>, StoreError> {
    conn.prepare(
        "SELECT speaker, start_ns, end_ns, text, source FROM utterances WHERE session_id = ?1 ORDER BY seq",
    )
    .and_then(|mut s| {
        s.query_map([id], |r| {
            Ok(UtteranceRow {
                speaker: r.get(0)?,
                start_secs: r.get::<_, i64>(1)? as f64 / 1e9,
                end_secs: r.get::<_, i64>(2)? as f64 / 1e9,
                text: r.get(3)?,
                source: r.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading utterances"))
}

/// A survey answer of a participant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SurveyRow {
    pub instrument: String,
    pub item: String,
    pub time_point: String,
    pub value: f64,
    pub session_id: Option<String>,
}

pub fn surveys(conn: &Connection, participant: &str) -> Result<Vec<SurveyRow>, StoreError> {
    conn.prepare(
        "SELECT instrument, item, time_point, value, session_id FROM survey_responses
         WHERE participant_id = ?1
         ORDER BY instrument, item,
                  CASE time_point WHEN 'pre_study' THEN 0 WHEN 'mid_study' THEN 1 ELSE 2 END",
    )
    .and_then(|mut s| {
        s.query_map([participant], |r| {
            Ok(SurveyRow {
                instrument: r.get(0)?,
                item: r.get(1)?,
                time_point: r.get(2)?,
                value: r.get(3)?,
                session_id: r.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading survey answers"))
}

/// The sessions of a participant, oldest first (by start time, then creation).
pub fn participant_sessions(
    conn: &Connection,
    participant: &str,
) -> Result<Vec<String>, StoreError> {
    conn.prepare(
        "SELECT id FROM sessions WHERE participant_id = ?1 ORDER BY start_time, created_at, id",
    )
    .and_then(|mut s| {
        s.query_map([participant], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()
    })
    .map_err(ctx("listing the participant's sessions"))
}

/// The recorded start time of session `id` (ISO 8601, as `session.json` gave it).
pub fn start_time(conn: &Connection, id: &str) -> Result<Option<String>, StoreError> {
    conn.query_row("SELECT start_time FROM sessions WHERE id = ?1", [id], |r| {
        r.get(0)
    })
    .map_err(ctx("reading a session's start time"))
}
