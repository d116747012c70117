//! The outbox's delivery states (schema v4, v6, v9): a message `pending` until the broker
//! acknowledged every chunk (`sent`), `synced` once the collectors required sent receipts
//! naming it (`outbox_receipts`); its sealed payload kept for resends; the broker's last
//! state; the counts `sync status` shows. What is enqueued, and in which record format, is
//! `outbox.rs`.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::outbox::{get_setting, put_setting};
use super::{ctx, NOW};
use crate::store::StoreError;

/// A message waiting to be sent (or re-sent).
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub seq: i64,
    pub message_id: String,
    pub kind: String,
    pub subject: String,
    pub payload: String,
    pub sha256: String,
}

/// How long a message the broker took may wait for a collector's receipt before it is
/// sent again (a broker that lost its state may have dropped it).
pub const RESEND_AFTER_SECS: i64 = 60;

/// The store's clock now (the form `sent_at` has), e.g. to mark a connection's start.
pub fn now(conn: &Connection) -> Result<String, StoreError> {
    conn.query_row(&format!("SELECT {NOW}"), [], |r| r.get(0))
        .map_err(ctx("reading the clock"))
}

/// The oldest `limit` messages to send, in order: never acknowledged by the broker, or
/// acknowledged without a collector's receipt, either before `connected_at` (an earlier
/// connection: the receipt may have come while nobody listened) or [`RESEND_AFTER_SECS`]
/// ago.
pub fn pending(
    conn: &Connection,
    limit: usize,
    connected_at: &str,
) -> Result<Vec<Pending>, StoreError> {
    conn.prepare(
        "SELECT seq, message_id, kind, subject, payload, sha256 FROM outbox
         WHERE state = 'pending'
            OR (state = 'sent' AND sent_at < max(?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?3)))
         ORDER BY seq LIMIT ?1",
    )
    .and_then(|mut s| {
        s.query_map(
            params![
                limit as i64,
                connected_at,
                format!("-{RESEND_AFTER_SECS} seconds")
            ],
            |r| {
                Ok(Pending {
                    seq: r.get(0)?,
                    message_id: r.get(1)?,
                    kind: r.get(2)?,
                    subject: r.get(3)?,
                    payload: r.get(4)?,
                    sha256: r.get(5)?,
                })
            },
        )?
        .collect::<Result<Vec<_>, _>>()
    })
    .map_err(ctx("reading the outbox"))
}

/// Marks message `seq` acknowledged by the broker (its receipt still to come).
pub fn mark_sent(conn: &Connection, seq: i64) -> Result<(), StoreError> {
    conn.execute(
        &format!(
            "UPDATE outbox SET state = 'sent', sent_at = {NOW}, last_error = NULL
             WHERE seq = ?1 AND state != 'synced'"
        ),
        [seq],
    )
    .map_err(ctx("marking an outbox message sent"))?;
    Ok(())
}

/// Message `seq`'s payload as sealed to `study_key`, when it was sealed to that key before.
pub fn sealed(conn: &Connection, seq: i64, study_key: &str) -> Result<Option<String>, StoreError> {
    conn.query_row(
        "SELECT sealed FROM outbox WHERE seq = ?1 AND sealed_to = ?2",
        rusqlite::params![seq, study_key],
        |r| r.get(0),
    )
    .optional()
    .map(Option::flatten)
    .map_err(ctx("reading a sealed outbox payload"))
}

/// Keeps message `seq`'s payload as sealed to `study_key`, for its resends.
pub fn keep_sealed(
    conn: &Connection,
    seq: i64,
    study_key: &str,
    sealed: &str,
) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE outbox SET sealed_to = ?2, sealed = ?3 WHERE seq = ?1",
        rusqlite::params![seq, study_key, sealed],
    )
    .map_err(ctx("keeping a sealed outbox payload"))?;
    Ok(())
}

/// Records `collector`'s receipt for message `message_id` (a collector committed it) and
/// marks the message synced once every collector in `required` has answered (any one
/// receipt when `required` is empty). A receipt that names no collector (`None`, an older
/// collector) counts only when `required` is empty. Returns whether this receipt made a
/// message of this outbox synced.
/// Whether a receipt can be one for message `message_id` as this station sent it: the
/// message exists, was handed to the broker (`sent`, already `synced` since a receipt may
/// come again, or `in_flight`: published, its broker acknowledgement not yet read), and
/// the receipt names its sha256. `Err` says why not.
pub fn receipt_matches(
    conn: &Connection,
    message_id: &str,
    sha256: Option<&str>,
    in_flight: Option<&str>,
) -> Result<Result<(), String>, StoreError> {
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT state, sha256 FROM outbox WHERE message_id = ?1",
            [message_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(ctx("reading the outbox for a receipt"))?;
    Ok(match row {
        None => Err("no such message in the outbox".into()),
        Some((state, _)) if state == "pending" && in_flight != Some(message_id) => {
            Err("the message was never handed to the broker".into())
        }
        Some((_, sent)) => match sha256 {
            Some(h) if h == sent => Ok(()),
            Some(h) => Err(format!("it names sha256 {h}, the message sent has {sent}")),
            None => Err("it names no sha256 (a collector older than this station?)".into()),
        },
    })
}

pub fn mark_synced(
    conn: &Connection,
    message_id: &str,
    collector: Option<&str>,
    required: &[String],
) -> Result<bool, StoreError> {
    if let Some(c) = collector {
        conn.execute(
            &format!(
                "INSERT OR IGNORE INTO outbox_receipts (message_id, collector, received_at)
                 SELECT message_id, ?2, {NOW} FROM outbox WHERE message_id = ?1"
            ),
            params![message_id, c],
        )
        .map_err(ctx("recording a collector's receipt"))?;
    }
    if !required.is_empty() {
        let mut answered = conn
            .prepare_cached(
                "SELECT 1 FROM outbox_receipts WHERE message_id = ?1 AND collector = ?2",
            )
            .map_err(ctx("reading the collectors' receipts"))?;
        for c in required {
            if !answered
                .exists(params![message_id, c])
                .map_err(ctx("reading the collectors' receipts"))?
            {
                return Ok(false);
            }
        }
    }
    let n = conn
        .execute(
            &format!(
                "UPDATE outbox SET state = 'synced', synced_at = {NOW}, last_error = NULL
                 WHERE message_id = ?1 AND state != 'synced'"
            ),
            [message_id],
        )
        .map_err(ctx("marking an outbox message synced"))?;
    Ok(n > 0)
}

/// Records an attempt (and its error) for message `seq`.
pub fn note_attempt(conn: &Connection, seq: i64, error: Option<&str>) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE outbox SET attempts = attempts + 1, last_error = coalesce(?2, last_error) WHERE seq = ?1",
        params![seq, error],
    )
    .map_err(ctx("recording an outbox attempt"))?;
    Ok(())
}

/// The publisher's last word about its broker, kept in `sync_settings` (key `broker`) so
/// `sync status` can say it after the publisher exited.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BrokerState {
    /// `connected`, `unreachable` (retrying) or `disconnected` (the publisher ended).
    pub state: String,
    /// `HOST:PORT`.
    pub broker: String,
    /// Since when (the store's clock).
    pub since: String,
    /// Why it is unreachable.
    pub error: Option<String>,
}

/// Records the broker's state (the `since` of a state that does not change is kept).
pub fn set_broker_state(
    conn: &Connection,
    state: &str,
    broker: &str,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let before = broker_state(conn)?;
    let since = match &before {
        Some(b) if b.state == state && b.broker == broker => b.since.clone(),
        _ => now(conn)?,
    };
    put_setting(
        conn,
        "broker",
        "the broker state",
        &BrokerState {
            state: state.into(),
            broker: broker.into(),
            since,
            error: error.map(str::to_string),
        },
    )
}

/// The broker's state as the publisher last recorded it.
pub fn broker_state(conn: &Connection) -> Result<Option<BrokerState>, StoreError> {
    get_setting(conn, "broker")
}

/// What the outbox holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutboxStatus {
    /// Not yet acknowledged by the broker.
    pub pending: u64,
    /// Acknowledged by the broker, no collector receipt yet.
    pub sent: u64,
    pub synced: u64,
    pub pending_bytes: u64,
    pub oldest_pending: Option<String>,
    pub last_synced: Option<String>,
    pub last_error: Option<String>,
    /// The publisher's last word about its broker (none before the first sync).
    pub broker: Option<BrokerState>,
    /// Receipts held per collector (client id or share group), by name.
    pub receipts: std::collections::BTreeMap<String, u64>,
}

pub fn status(conn: &Connection) -> Result<OutboxStatus, StoreError> {
    let broker = broker_state(conn)?;
    let receipts = conn
        .prepare(
            "SELECT collector, count(*) FROM outbox_receipts GROUP BY collector ORDER BY collector",
        )
        .and_then(|mut s| {
            s.query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?
            .collect::<Result<std::collections::BTreeMap<_, _>, _>>()
        })
        .map_err(ctx("reading the collectors' receipts"))?;
    conn.query_row(
        "SELECT
            (SELECT count(*) FROM outbox WHERE state = 'pending'),
            (SELECT count(*) FROM outbox WHERE state = 'sent'),
            (SELECT count(*) FROM outbox WHERE state = 'synced'),
            (SELECT coalesce(sum(length(payload)), 0) FROM outbox WHERE state != 'synced'),
            (SELECT min(created_at) FROM outbox WHERE state = 'pending'),
            (SELECT max(synced_at) FROM outbox WHERE state = 'synced'),
            (SELECT last_error FROM outbox WHERE last_error IS NOT NULL ORDER BY seq DESC LIMIT 1)",
        [],
        |r| {
            Ok(OutboxStatus {
                pending: r.get::<_, i64>(0)?.max(0) as u64,
                sent: r.get::<_, i64>(1)?.max(0) as u64,
                synced: r.get::<_, i64>(2)?.max(0) as u64,
                pending_bytes: r.get::<_, i64>(3)?.max(0) as u64,
                oldest_pending: r.get(4)?,
                last_synced: r.get(5)?,
                last_error: r.get(6)?,
                broker,
                receipts,
            })
        },
    )
    .map_err(ctx("reading the outbox status"))
}
