//! The story bank (stories and their embeddings) and what a session's retrieval needs.

use rusqlite::{params, Connection, OptionalExtension};

use super::{ctx, NOW};
use crate::store::rows::Story;
use crate::store::rows::{blob_to_vec, vec_to_blob};
use crate::store::StoreError;

/// Stores each story with its embedding under `model`, in one transaction (an id already
/// stored is replaced).
pub fn upsert(
    conn: &mut Connection,
    stories: &[Story],
    vectors: &[Vec<f32>],
    model: &str,
) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(ctx("starting the import"))?;
    for (s, v) in stories.iter().zip(vectors) {
        tx.execute(
            &format!(
                "INSERT INTO stories (id, title, text, source, licence, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, {NOW})
                 ON CONFLICT(id) DO UPDATE SET title = excluded.title, text = excluded.text,
                   source = excluded.source, licence = excluded.licence"
            ),
            params![s.id, s.title, s.text, s.source, s.licence],
        )
        .map_err(ctx("writing stories"))?;
        tx.execute(
            "INSERT OR REPLACE INTO story_embeddings (story_id, model, dims, vec) VALUES (?1, ?2, ?3, ?4)",
            params![s.id, model, v.len() as i64, vec_to_blob(v)],
        )
        .map_err(ctx("writing story embeddings"))?;
    }
    tx.commit().map_err(ctx("committing the import"))?;
    Ok(())
}

/// One stored story embedding with what retrieval shows of its story.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEmbedding {
    pub story_id: String,
    pub title: String,
    /// The width recorded at import (checked against the vector when loaded).
    pub dims: usize,
    pub vec: Vec<f32>,
}

/// Every story embedded with `model`, by id.
pub fn embeddings(conn: &Connection, model: &str) -> Result<Vec<StoredEmbedding>, StoreError> {
    let mut stmt = conn
        .prepare(
            "SELECT s.id, s.title, e.dims, e.vec FROM story_embeddings e
             JOIN stories s ON s.id = e.story_id WHERE e.model = ?1 ORDER BY s.id",
        )
        .map_err(ctx("reading story embeddings"))?;
    let rows = stmt
        .query_map([model], |r| {
            Ok(StoredEmbedding {
                story_id: r.get(0)?,
                title: r.get(1)?,
                dims: r.get::<_, i64>(2)?.max(0) as usize,
                vec: blob_to_vec(&r.get::<_, Vec<u8>>(3)?),
            })
        })
        .map_err(ctx("reading story embeddings"))?;
    rows.collect::<Result<_, _>>()
        .map_err(ctx("reading story embeddings"))
}

/// What retrieval for a session needs.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalContext {
    /// The speaker's utterances in the `story_share` phase (all of theirs when the session
    /// has no such phase), in time order.
    pub shared: Vec<String>,
    /// Stories the session's participant was shown in earlier sessions.
    pub seen: Vec<String>,
}

/// The retrieval context of session `id`, or `None` when there is no such session.
pub fn retrieval_context(
    conn: &Connection,
    id: &str,
    speaker: &str,
) -> Result<Option<RetrievalContext>, StoreError> {
    let participant: Option<Option<String>> = conn
        .query_row(
            "SELECT participant_id FROM sessions WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .map_err(ctx("reading the session"))?;
    let Some(participant) = participant else {
        return Ok(None);
    };
    let has_phases: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM phases WHERE session_id = ?1 AND phase = 'story_share'",
            [id],
            |r| r.get(0),
        )
        .map_err(ctx("reading phases"))?;
    // The utterances of the source that fed the session's text modality (with `[asr]
    // source = "both"` both are stored; counting both would say everything twice). An
    // utterance is in the story share when it overlaps it: one begun a moment before the
    // phase (the participant started as the robot asked) is part of what they shared.
    let query = if has_phases {
        "SELECT DISTINCT u.seq, u.text FROM utterances u JOIN phases p ON p.session_id = u.session_id
         WHERE u.session_id = ?1 AND u.speaker = ?2 AND p.phase = 'story_share'
           AND u.end_ns > p.start_ns AND (p.end_ns IS NULL OR u.start_ns < p.end_ns)
           AND u.source = (SELECT coalesce(text_source, 'dialogue_app') FROM sessions WHERE id = ?1)
         ORDER BY u.start_ns"
    } else {
        "SELECT seq, text FROM utterances WHERE session_id = ?1 AND speaker = ?2
           AND source = (SELECT coalesce(text_source, 'dialogue_app') FROM sessions WHERE id = ?1)
         ORDER BY start_ns"
    };
    let shared: Vec<String> = conn
        .prepare(query)
        .and_then(|mut s| {
            s.query_map(params![id, speaker], |r| r.get(1))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(ctx("reading utterances"))?;
    // Earlier sessions of the same participant: by start time when both have one, else by
    // when they were stored.
    let seen: Vec<String> = match participant {
        None => Vec::new(),
        Some(p) => conn
            .prepare(
                "SELECT DISTINCT e.story_id FROM story_exposures e
                 JOIN sessions s ON s.id = e.session_id
                 JOIN sessions me ON me.id = ?1
                 WHERE s.participant_id = ?2 AND s.id != me.id
                   AND coalesce(s.start_time, s.created_at) < coalesce(me.start_time, me.created_at)
                 ORDER BY e.story_id",
            )
            .and_then(|mut s| {
                s.query_map(params![id, p], |r| r.get(0))?
                    .collect::<Result<Vec<String>, _>>()
            })
            .map_err(ctx("reading earlier exposures"))?,
    };
    Ok(Some(RetrievalContext { shared, seen }))
}

/// Every story `participant` was shown in any session (the current one included).
pub fn shown_to(conn: &Connection, participant: &str) -> Result<Vec<String>, StoreError> {
    conn.prepare(
        "SELECT DISTINCT e.story_id FROM story_exposures e JOIN sessions s ON s.id = e.session_id
         WHERE s.participant_id = ?1 ORDER BY e.story_id",
    )
    .and_then(|mut s| {
        s.query_map([participant], |r| r.get(0))?
            .collect::<Result<Vec<String>, _>>()
    })
    .map_err(ctx("reading the stories shown to a participant"))
}

/// The participant's latest session (by start time, else when it was stored), if any.
pub fn latest_session_of(
    conn: &Connection,
    participant: &str,
) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT id FROM sessions WHERE participant_id = ?1 AND id NOT LIKE '%~%'
         ORDER BY coalesce(start_time, created_at) DESC, created_at DESC LIMIT 1",
        [participant],
        |r| r.get(0),
    )
    .optional()
    .map_err(ctx("reading the participant's sessions"))
}
