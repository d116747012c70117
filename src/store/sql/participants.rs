//! A participant's lifecycle in the station's store: consent recorded and announced, a
//! withdrawal that removes them and what was derived from them and tells the collector.
//!
//! Contract: [`record_consent`] and [`purge_participant`] run inside the caller's transaction, so a withdrawal is
//! whole or not at all. It uses the sessions (`session_rows::delete`) and the outbox
//! (`announce::forget`, `announce::announce_purge`); neither of them uses it, which keeps the
//! sessions and the outbox free of each other's lifecycle.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{announce, ctx, session_rows, NOW};
use crate::store::StoreError;

/// Removes participant `id` from the store (a withdrawal): their sessions with everything
/// derived from them, their survey answers, their row, and the records of their sessions
/// still in the outbox (pending or sent: their data must not leave the station again); then
/// enqueues a `purge` message naming the participant and their sessions (no data) so the
/// collector removes them too, and keeps only an audit line (`purges`). Returns the
/// sessions removed, or `None` when the store has no such participant.
pub fn purge_participant(
    tx: &Transaction<'_>,
    id: &str,
) -> Result<Option<Vec<String>>, StoreError> {
    let known: Option<i64> = tx
        .query_row(
            "SELECT 1 FROM participants WHERE id = ?1
             UNION SELECT 1 FROM sessions WHERE participant_id = ?1 LIMIT 1",
            [id],
            |r| r.get(0),
        )
        .optional()
        .map_err(ctx("looking up the participant"))?;
    if known.is_none() {
        return Ok(None);
    }
    let removed: Vec<String> = tx
        .prepare("SELECT id FROM sessions WHERE participant_id = ?1 ORDER BY id")
        .and_then(|mut s| {
            s.query_map([id], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()
        })
        .map_err(ctx("listing the participant's sessions"))?;
    for s in &removed {
        session_rows::delete(tx, s)?;
        announce::forget(tx, "session", s)?;
    }
    // Their consent messages: the purge message withdraws whatever of them was sent.
    announce::forget(tx, "consent", id)?;
    tx.execute(
        "DELETE FROM survey_responses WHERE participant_id = ?1",
        [id],
    )
    .map_err(ctx("removing the participant's survey answers"))?;
    tx.execute("DELETE FROM participants WHERE id = ?1", [id])
        .map_err(ctx("removing the participant"))?;
    announce::announce_purge(tx, id, &removed)?;
    tx.execute(
        &format!("INSERT INTO purges (participant_id, sessions, purged_at) VALUES (?1, ?2, {NOW})"),
        params![id, removed.len() as i64],
    )
    .map_err(ctx("recording the purge"))?;
    Ok(Some(removed))
}

/// Records participant `id`'s consent as study staff took it (creating the participant)
/// and enqueues its `consent` message. `consent`: `given` or `withdrawn`.
pub fn record_consent(
    tx: &Transaction<'_>,
    id: &str,
    consent: &str,
    raw_media: bool,
) -> Result<(), StoreError> {
    tx.execute(
        &format!(
            "INSERT INTO participants (id, consent, consent_at, raw_media_consent, first_seen_at)
             VALUES (?1, ?2, {NOW}, ?3, {NOW})
             ON CONFLICT (id) DO UPDATE SET consent = ?2, consent_at = {NOW},
                 raw_media_consent = ?3"
        ),
        params![id, consent, i64::from(raw_media)],
    )
    .map_err(ctx("recording a participant's consent"))?;
    announce::announce_consent(tx, id)
}
