//! The outbox's delivery states (schema v4, v6, v9, v11): a message `pending` until the broker
//! acknowledged every chunk (`sent`), `synced` once the collectors required sent receipts
//! naming it (`outbox_receipts`); its sealed payload kept for resends; the broker's last
//! state; the counts `sync status` shows. What is enqueued, and in which record format, is
//! `announce.rs`.

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use super::announce::{get_setting, put_setting};
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
/// ago. A message a collector refused under the configuration digest `config` is held (see
/// [`mark_refused`]) but for the oldest of them once every [`REFUSAL_PROBE_SECS`]: the
/// probe that finds out whether the collector's side changed (the station enrolled since).
pub fn pending(
    conn: &Connection,
    limit: usize,
    connected_at: &str,
    config: &str,
) -> Result<Vec<Pending>, StoreError> {
    conn.prepare(
        "SELECT seq, message_id, kind, subject, payload, sha256 FROM outbox
         WHERE (state = 'pending'
            OR (state = 'sent' AND sent_at < max(?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?3))))
           AND (refused_config IS NULL OR refused_config != ?4
                OR (refused_at < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?5)
                    AND seq = (SELECT min(seq) FROM outbox
                               WHERE refused_config = ?4 AND state != 'synced')))
         ORDER BY seq LIMIT ?1",
    )
    .and_then(|mut s| {
        s.query_map(
            params![
                limit as i64,
                connected_at,
                format!("-{RESEND_AFTER_SECS} seconds"),
                config,
                format!("-{REFUSAL_PROBE_SECS} seconds"),
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

/// How often one message held by a collector's refusal is sent again while the station's
/// configuration stays the same: what the station cannot see (staff enrolling it, or
/// lifting a revocation) is found out within this long.
pub const REFUSAL_PROBE_SECS: i64 = 3600;

/// A collector's refusal of a message, as the station keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RefusalNote {
    /// The collector (client id or share group) that refused.
    pub by: String,
    /// A short code (`sync::Refusal::code`) and the collector's reason.
    pub code: String,
    pub reason: String,
    pub at: String,
    /// What the collector said it reads (record versions), when it said.
    pub reads: Option<String>,
}

/// Records `by`'s refusal of message `message_id`. `held_under`: the digest of the sync
/// configuration it was refused under, when a change of configuration can cure it (the
/// message is then not sent again while that configuration stands, but for the hourly
/// probe); `None` for a final refusal (the collector keeps the message in quarantine and
/// answers it with a receipt too). A message already synced stays synced: the refusal only
/// says why. Returns whether a message of this outbox was refused.
pub fn mark_refused(
    conn: &Connection,
    message_id: &str,
    note: &RefusalNote,
    held_under: Option<&str>,
) -> Result<bool, StoreError> {
    let n = conn
        .execute(
            "UPDATE outbox SET refused_at = ?2, refused_by = ?3, refused_code = ?4,
                    refused_reason = ?5,
                    refused_config = CASE WHEN state = 'synced' THEN NULL ELSE ?6 END,
                    refused_reads = ?7
             WHERE message_id = ?1",
            params![
                message_id,
                note.at,
                note.by,
                note.code,
                note.reason,
                held_under,
                note.reads
            ],
        )
        .map_err(ctx("recording a collector's refusal"))?;
    Ok(n > 0)
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
    // A receipt for a message a collector had refused (a probe, or a resend after the
    // configuration changed): the collector's side changed, every held message goes again.
    let was_held: bool = conn
        .query_row(
            "SELECT refused_config IS NOT NULL FROM outbox WHERE message_id = ?1",
            [message_id],
            |r| r.get(0),
        )
        .optional()
        .map_err(ctx("reading an outbox message's refusal"))?
        .unwrap_or(false);
    let n = conn
        .execute(
            &format!(
                "UPDATE outbox SET state = 'synced', synced_at = {NOW}, last_error = NULL,
                        refused_config = NULL
                 WHERE message_id = ?1 AND state != 'synced'"
            ),
            [message_id],
        )
        .map_err(ctx("marking an outbox message synced"))?;
    if was_held && n > 0 {
        conn.execute(
            &format!("UPDATE outbox SET {REFUSAL_CLEARED} WHERE message_id = ?1"),
            [message_id],
        )
        .map_err(ctx("clearing a refusal the collector took back"))?;
        release_refused(conn)?;
    }
    Ok(n > 0)
}

/// What forgets a refusal: the message goes again, and nothing says it was refused.
const REFUSAL_CLEARED: &str = "refused_config = NULL, refused_at = NULL, refused_by = NULL,
    refused_code = NULL, refused_reason = NULL, refused_reads = NULL";

/// Messages held by a collector's refusal (under any configuration): what the service's
/// health reports, asked every second, so one count and nothing else.
pub fn held(conn: &Connection) -> Result<u64, StoreError> {
    conn.query_row(
        "SELECT count(*) FROM outbox WHERE state != 'synced' AND refused_config IS NOT NULL",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .map_err(ctx("counting the held outbox messages"))
}

/// Messages still owed under the sync configuration of digest `config`: not synced, and
/// not held by a refusal under that configuration.
pub fn owed(conn: &Connection, config: &str) -> Result<u64, StoreError> {
    conn.query_row(
        "SELECT count(*) FROM outbox WHERE state != 'synced'
           AND (refused_config IS NULL OR refused_config != ?1)",
        [config],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .map_err(ctx("counting the outbox"))
}

/// Releases every message held by a refusal (they go at the next sync); how many. For a
/// station engineer who knows the collector's side was put right (the station enrolled)
/// and will not wait for the hourly probe.
pub fn release_refused(conn: &Connection) -> Result<usize, StoreError> {
    conn.execute(
        &format!(
            "UPDATE outbox SET {REFUSAL_CLEARED}
             WHERE refused_config IS NOT NULL AND state != 'synced'"
        ),
        [],
    )
    .map_err(ctx("releasing refused outbox messages"))
}

/// Releases the messages collector `by` held as `too_new` while it read something other
/// than `reads` (it was upgraded since): they go at the next send. Returns how many.
pub fn release_too_new(conn: &Connection, by: &str, reads: &str) -> Result<usize, StoreError> {
    conn.execute(
        &format!(
            "UPDATE outbox SET {REFUSAL_CLEARED}
             WHERE refused_code = 'too_new' AND refused_by = ?1
               AND coalesce(refused_reads, '') != ?2 AND state != 'synced'"
        ),
        params![by, reads],
    )
    .map_err(ctx("releasing messages refused as too new"))
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
    /// Messages a collector refused and that are held (not sent again, but for an hourly
    /// probe) until the sync configuration changes; included in `pending` and `sent`.
    pub refused: u64,
    /// Synced messages a collector keeps in quarantine (its receipt came with a refusal).
    pub quarantined: u64,
    /// The latest refusal still standing (held or quarantined), with its reason.
    pub last_refusal: Option<RefusalNote>,
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
    let last_refusal = conn
        .query_row(
            "SELECT refused_by, refused_code, refused_reason, refused_at, refused_reads FROM outbox
             WHERE refused_at IS NOT NULL ORDER BY refused_at DESC, seq DESC LIMIT 1",
            [],
            |r| {
                Ok(RefusalNote {
                    by: r.get(0)?,
                    code: r.get(1)?,
                    reason: r.get(2)?,
                    at: r.get(3)?,
                    reads: r.get(4)?,
                })
            },
        )
        .optional()
        .map_err(ctx("reading the collectors' refusals"))?;
    conn.query_row(
        "SELECT
            (SELECT count(*) FROM outbox WHERE state = 'pending'),
            (SELECT count(*) FROM outbox WHERE state = 'sent'),
            (SELECT count(*) FROM outbox WHERE state = 'synced'),
            (SELECT coalesce(sum(length(payload)), 0) FROM outbox WHERE state != 'synced'),
            (SELECT min(created_at) FROM outbox WHERE state = 'pending'),
            (SELECT max(synced_at) FROM outbox WHERE state = 'synced'),
            (SELECT last_error FROM outbox WHERE last_error IS NOT NULL ORDER BY seq DESC LIMIT 1),
            (SELECT count(*) FROM outbox WHERE state != 'synced' AND refused_config IS NOT NULL),
            (SELECT count(*) FROM outbox WHERE state = 'synced' AND refused_at IS NOT NULL)",
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
                refused: r.get::<_, i64>(7)?.max(0) as u64,
                quarantined: r.get::<_, i64>(8)?.max(0) as u64,
                last_refusal,
            })
        },
    )
    .map_err(ctx("reading the outbox status"))
}
