//! Reads for `empathic export windows`: a session's modalities with their producers, its
//! per-frame vectors, and its windows with the stories in play and their self-ratings.

use rusqlite::Connection;
use serde::Serialize;

use super::ctx;
use crate::store::rows::blob_to_vec;
use crate::store::StoreError;

/// A modality as a session stored it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportModality {
    pub name: String,
    pub stream: String,
    pub dims: usize,
    pub producer: Option<String>,
    pub layout_version: Option<i64>,
    pub columns: Vec<String>,
}

/// A story in play in a window, with the participant's rating of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportStory {
    pub story_id: String,
    pub shown_secs: f64,
    pub rating: Option<u8>,
}

/// A stored window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportWindow {
    pub window_index: u64,
    pub start_frame: u64,
    pub end_frame: u64,
    pub start_secs: f64,
    pub end_secs: f64,
    pub phase: Option<String>,
    /// Stories shown before the window ended, in the order shown.
    pub stories: Vec<ExportStory>,
}

/// Complete sessions (optionally one), oldest first: (id, participant, whose utterances fed
/// the text modality: `dialogue_app` (also for sessions stored before schema v10) or `asr`).
pub fn sessions(
    conn: &Connection,
    only: Option<&str>,
) -> Result<Vec<(String, Option<String>, String)>, StoreError> {
    conn.prepare(
        "SELECT id, participant_id, coalesce(text_source, 'dialogue_app') FROM sessions
         WHERE status = 'complete' AND (?1 IS NULL OR id = ?1) ORDER BY created_at, id",
    )
    .and_then(|mut s| {
        s.query_map([only], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("listing sessions to export"))
}

pub fn modalities(conn: &Connection, id: &str) -> Result<Vec<ExportModality>, StoreError> {
    // Columns as stored (a JSON list), parsed after the query.
    let rows: Vec<(ExportModality, String)> = conn
        .prepare(
            "SELECT name, stream, dims, producer, layout_version, columns FROM modalities
             WHERE session_id = ?1 ORDER BY name",
        )
        .and_then(|mut s| {
            s.query_map([id], |r| {
                Ok((
                    ExportModality {
                        name: r.get(0)?,
                        stream: r.get(1)?,
                        dims: r.get::<_, i64>(2)?.max(0) as usize,
                        producer: r.get(3)?,
                        layout_version: r.get(4)?,
                        columns: Vec::new(),
                    },
                    r.get(5)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(ctx("reading modalities to export"))?;
    rows.into_iter()
        .map(|(mut m, columns)| {
            m.columns = serde_json::from_str(&columns).map_err(|e| StoreError::Invalid {
                message: format!("session {id}: modality {}: stored columns: {e}", m.name),
            })?;
            Ok(m)
        })
        .collect()
}

/// The number of frame slots of session `id`.
pub fn frame_count(conn: &Connection, id: &str) -> Result<u64, StoreError> {
    conn.query_row(
        "SELECT count(*) FROM frames WHERE session_id = ?1",
        [id],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .map_err(ctx("counting frames to export"))
}

/// Calls `each(frame_index, vector)` for every present vector of `modality`, in order.
pub fn frame_vectors(
    conn: &Connection,
    id: &str,
    modality: &str,
    mut each: impl FnMut(u64, Vec<f32>),
) -> Result<(), StoreError> {
    let mut s = conn
        .prepare(
            "SELECT frame_index, vec FROM frame_features
             WHERE session_id = ?1 AND modality = ?2 AND present = 1 ORDER BY frame_index",
        )
        .map_err(ctx("reading frame features to export"))?;
    let mut rows = s
        .query([id, modality])
        .map_err(ctx("reading frame features to export"))?;
    while let Some(r) = rows
        .next()
        .map_err(ctx("reading frame features to export"))?
    {
        let index: i64 = r.get(0).map_err(ctx("reading frame features to export"))?;
        let blob: Vec<u8> = r.get(1).map_err(ctx("reading frame features to export"))?;
        each(index.max(0) as u64, blob_to_vec(&blob));
    }
    Ok(())
}

/// The stored event log of session `id`, in order: (session time, type, the JSON line).
pub fn events(conn: &Connection, id: &str) -> Result<Vec<(u64, String, String)>, StoreError> {
    let mut s = conn
        .prepare("SELECT t_ns, type, payload FROM events WHERE session_id = ?1 ORDER BY seq")
        .map_err(ctx("reading events"))?;
    let rows = s
        .query_map([id], |r| {
            Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?, r.get(2)?))
        })
        .map_err(ctx("reading events"))?;
    rows.collect::<Result<Vec<_>, _>>()
        .map_err(ctx("reading events"))
}

/// Every stored frame's session time (`frame_index`, `t_ns`), in frame order: the times
/// per-frame plots are drawn at (a frame's index over the frame rate is not its time when
/// frames are missing, the video ended early or the session was interrupted).
pub fn frame_times(conn: &Connection, id: &str) -> Result<Vec<(u64, u64)>, StoreError> {
    let mut s = conn
        .prepare("SELECT frame_index, t_ns FROM frames WHERE session_id = ?1 ORDER BY frame_index")
        .map_err(ctx("reading frame times"))?;
    let rows = s
        .query_map([id], |r| {
            Ok((
                r.get::<_, i64>(0)?.max(0) as u64,
                r.get::<_, i64>(1)?.max(0) as u64,
            ))
        })
        .map_err(ctx("reading frame times"))?;
    rows.collect::<Result<Vec<_>, _>>()
        .map_err(ctx("reading frame times"))
}

/// Calls `each(window_index, present_frames, mean)` for every window of `modality` that
/// has window features (`mean` is `None` when the modality was never present), in order.
pub fn window_means(
    conn: &Connection,
    id: &str,
    modality: &str,
    mut each: impl FnMut(u64, u64, Option<Vec<f32>>),
) -> Result<(), StoreError> {
    let what = "reading window features to export";
    let mut s = conn
        .prepare(
            "SELECT window_index, present_frames, mean FROM window_features
             WHERE session_id = ?1 AND modality = ?2 ORDER BY window_index",
        )
        .map_err(ctx(what))?;
    let mut rows = s.query([id, modality]).map_err(ctx(what))?;
    while let Some(r) = rows.next().map_err(ctx(what))? {
        let index: i64 = r.get(0).map_err(ctx(what))?;
        let present: i64 = r.get(1).map_err(ctx(what))?;
        let mean: Option<Vec<u8>> = r.get(2).map_err(ctx(what))?;
        each(
            index.max(0) as u64,
            present.max(0) as u64,
            mean.map(|b| blob_to_vec(&b)),
        );
    }
    Ok(())
}

/// Windows of session `id` (optionally of one phase) with the stories in play.
pub fn windows(
    conn: &Connection,
    id: &str,
    phase: Option<&str>,
) -> Result<Vec<ExportWindow>, StoreError> {
    let stories: Vec<(String, i64, Option<u8>)> = conn
        .prepare(
            "SELECT e.story_id, e.shown_ns, r.value FROM story_exposures e
             LEFT JOIN self_ratings r ON r.session_id = e.session_id AND r.story_id = e.story_id
             WHERE e.session_id = ?1 ORDER BY e.position",
        )
        .and_then(|mut s| {
            s.query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(ctx("reading stories to export"))?;
    let secs = |ns: i64| ns as f64 / 1e9;
    conn.prepare(
        "SELECT window_index, start_frame, end_frame, start_ns, end_ns, phase FROM windows
         WHERE session_id = ?1 AND (?2 IS NULL OR phase = ?2) ORDER BY window_index",
    )
    .and_then(|mut s| {
        s.query_map(rusqlite::params![id, phase], |r| {
            let end_ns: i64 = r.get(4)?;
            Ok(ExportWindow {
                window_index: r.get::<_, i64>(0)?.max(0) as u64,
                start_frame: r.get::<_, i64>(1)?.max(0) as u64,
                end_frame: r.get::<_, i64>(2)?.max(0) as u64,
                start_secs: secs(r.get(3)?),
                end_secs: secs(end_ns),
                phase: r.get(5)?,
                stories: stories
                    .iter()
                    .filter(|(_, shown, _)| *shown < end_ns)
                    .map(|(story_id, shown, rating)| ExportStory {
                        story_id: story_id.clone(),
                        shown_secs: secs(*shown),
                        rating: *rating,
                    })
                    .collect(),
            })
        })?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading windows to export"))
}

/// The sentence encoders the story bank was embedded with, by name.
pub fn story_encoders(conn: &Connection) -> Result<Vec<String>, StoreError> {
    conn.prepare("SELECT DISTINCT model FROM story_embeddings ORDER BY model")
        .and_then(|mut s| {
            s.query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(ctx("listing story encoders to export"))
}

/// Every story of the bank (id, title, text), by id: what an export embeds itself when the
/// database holds a story's text but no embedding (a central database).
pub fn stories(conn: &Connection) -> Result<Vec<(String, String, String)>, StoreError> {
    conn.prepare("SELECT id, title, text FROM stories ORDER BY id")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(ctx("reading the stories to export"))
}
