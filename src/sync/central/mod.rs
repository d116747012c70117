//! The central database of a study: where `empathic collect` stores what the stations sent,
//! exactly once, in SQLite (one file) or PostgreSQL (several collectors, many stations).
//!
//! Contract: [`Central::store_publish`] stores one received chunk in one transaction and
//! says what it was ([`Stored`]); the collector acknowledges the broker only after it
//! returns. The rules are written once, over [`CentralTx`], and hold for both databases:
//! - Records are keyed by `message_id`, chunks by `(message_id, chunk)`: a redelivery stores
//!   nothing twice, and is answered with a receipt again.
//! - A subject's state is its station's latest message by outbox `seq` (the envelope's
//!   sequence number), whatever order messages arrive in: a `session` record replaces every
//!   older record of its session (they become `voided`); a `tombstone` voids the older
//!   ones; a message older than one already held for its subject is kept `voided` and
//!   changes nothing. The one record a session is shown from is `applied`. A session id
//!   already shown from another station (one recording replayed on two machines) is kept
//!   but not shown: session ids must be unique in a central database.
//! - A `purge` (a participant's withdrawal) deletes every record of that participant from
//!   that station older than the purge, and any that arrives later still; an audit line
//!   (`collect_purges`: who, when, how many; nothing of the data) is all that stays.
//! - Anything malformed goes to `collect_quarantine` with the reason and is acknowledged; a
//!   whole message whose content is bad is also answered with a receipt (sending it again
//!   cannot help), one whose checksum fails is not (a clean resend can).
//!
//! The station-schema tables (sessions, phases, predictions, window features, ...) follow the
//! applied records: in SQLite they are written in the same transaction
//! (`store::replica`), so the central file is read by `sessions`, `report`, `evaluate` and `export`
//! exactly like a station's; from PostgreSQL the same commands read a snapshot built from
//! the applied records by the same code ([`Central::read_view`]). Central format version 2
//! (tables in ARCHITECTURE.md).

mod postgres;

pub use postgres::redacted;

use sha2::{Digest, Sha256};

use super::ENVELOPE_VERSION;
use crate::store::central::{self, CentralTx, Val};
use crate::store::replica;
use crate::store::Store;

/// Largest chunk envelope accepted (the publisher's chunks are far smaller).
pub const MAX_ENVELOPE_BYTES: usize = 1 << 20;
/// Chunks of a message whose other chunks did not come within this long are dropped (a
/// station resends a message it has no receipt for, whole).
pub const CHUNK_EXPIRY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Bytes of incomplete messages kept per station at most; past it, that station's oldest
/// incomplete messages are dropped (noted in quarantine).
pub const CHUNK_BYTES_PER_STATION: i64 = 64 << 20;

/// A central database, SQLite or PostgreSQL.
pub enum Central {
    Sqlite(Store),
    /// The client, and the URL to reconnect with when the server went away.
    Postgres(Box<::postgres::Client>, String),
}

/// What happened to one received chunk.
#[derive(Debug, PartialEq)]
pub enum Stored {
    Chunk,
    /// A whole message stored (or, for a message older than what its subject holds,
    /// kept voided): its receipt goes to `receipt_topic`.
    Record {
        receipt_topic: String,
        message_id: String,
        sha256: String,
    },
    /// Already handled: answered with a receipt again (the station may have missed it).
    Duplicate {
        receipt_topic: String,
        message_id: String,
        sha256: String,
    },
    /// Put in quarantine; `receipt` (topic, message id, sha256) when the whole message was
    /// received and sending it again cannot help (answered so the station stops resending).
    Quarantined {
        reason: String,
        receipt: Option<(String, String, String)>,
    },
}

impl Stored {
    /// Where the receipt goes, the message it names and that message's sha256 (which the
    /// station checks against what it sent), if the station is to get one.
    pub fn receipt(&self) -> Option<(&str, &str, &str)> {
        match self {
            Stored::Record {
                receipt_topic,
                message_id,
                sha256,
            }
            | Stored::Duplicate {
                receipt_topic,
                message_id,
                sha256,
            } => Some((receipt_topic, message_id, sha256)),
            Stored::Quarantined {
                receipt: Some((t, m, h)),
                ..
            } => Some((t, m, h)),
            _ => None,
        }
    }
}

/// A chunk envelope, checked.
struct Envelope {
    id: String,
    kind: String,
    study: String,
    station: String,
    subject: String,
    sha: String,
    data: String,
    chunk: i64,
    chunks: i64,
    /// The station's outbox sequence number (absent from older publishers: then arrival
    /// order stands in for it).
    seq: Option<i64>,
}

impl Envelope {
    fn receipt_topic(&self) -> String {
        format!("empathic/v1/{}/{}/receipt", self.study, self.station)
    }
}

fn parse_envelope(topic: &str, payload: &[u8]) -> Result<Envelope, String> {
    if payload.len() > MAX_ENVELOPE_BYTES {
        return Err(format!(
            "{} bytes, over the {MAX_ENVELOPE_BYTES} limit",
            payload.len()
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
    let text = |k: &str| v[k].as_str().map(str::to_string);
    let (Some(id), Some(kind), Some(study), Some(station), Some(subject), Some(sha), Some(data)) = (
        text("message_id"),
        text("kind"),
        text("study"),
        text("station"),
        text("subject"),
        text("sha256"),
        text("data"),
    ) else {
        return Err("an envelope field is missing or not text".into());
    };
    if v["v"].as_u64() != Some(u64::from(ENVELOPE_VERSION)) {
        return Err(format!(
            "envelope version {} (this build reads {ENVELOPE_VERSION})",
            v["v"]
        ));
    }
    let (Some(chunk), Some(chunks)) = (v["chunk"].as_u64(), v["chunks"].as_u64()) else {
        return Err("chunk numbers missing".into());
    };
    if chunks == 0 || chunk >= chunks || chunks > 100_000 {
        return Err(format!("chunk {chunk} of {chunks}"));
    }
    if !matches!(kind.as_str(), "session" | "tombstone" | "purge") {
        return Err(format!("kind `{kind}` is not session, tombstone or purge"));
    }
    if topic != format!("empathic/v1/{study}/{station}/{kind}") {
        return Err(format!(
            "topic {topic} does not match the envelope ({study}/{station}/{kind})"
        ));
    }
    let seq = match &v["seq"] {
        serde_json::Value::Null => None,
        s => Some(
            s.as_i64()
                .filter(|s| *s > 0)
                .ok_or_else(|| format!("seq {s} is not a positive integer"))?,
        ),
    };
    Ok(Envelope {
        id,
        kind,
        study,
        station,
        subject,
        sha,
        data,
        chunk: chunk as i64,
        chunks: chunks as i64,
        seq,
    })
}

/// Whether `target` names a PostgreSQL database rather than a file.
pub fn is_postgres(target: &str) -> bool {
    target.starts_with("postgres://") || target.starts_with("postgresql://")
}

impl Central {
    /// Opens (creating the tables of) the central database: a `postgres://` URL, or a
    /// SQLite file (created when missing; it is also a store with the station schema).
    pub fn open(target: &str) -> Result<Central, String> {
        if is_postgres(target) {
            postgres::open(target).map(|c| Central::Postgres(Box::new(c), target.to_string()))
        } else {
            central::open(std::path::Path::new(target)).map(Central::Sqlite)
        }
    }

    fn begin(&mut self) -> Result<Box<dyn CentralTx + '_>, String> {
        match self {
            Central::Sqlite(store) => store.central_transaction(),
            Central::Postgres(client, url) => {
                if client.is_closed() {
                    // The server restarted or the connection broke: a new one.
                    **client = postgres::open(url)?;
                }
                postgres::begin(client)
            }
        }
    }

    /// A store with the station schema holding what the central database holds: the file
    /// itself for SQLite; for PostgreSQL, an in-memory snapshot built from the applied
    /// records (the same `store::replica` as SQLite's collector uses).
    pub fn read_view(self) -> Result<Store, String> {
        match self {
            Central::Sqlite(store) => Ok(store),
            Central::Postgres(mut client, _) => postgres::snapshot(&mut client),
        }
    }

    /// After a purge: no deleted byte stays in the database's files. SQLite is rebuilt
    /// from its live content and its log emptied; PostgreSQL's collector tables are
    /// rewritten (`VACUUM FULL`: the old table files, with the dead rows, are unlinked; the
    /// server's own write-ahead log recycles its segments on its schedule). The purge is
    /// committed already: a failure here is logged, not undone.
    fn erase_deleted(&mut self) {
        let erased = match self {
            Central::Sqlite(store) => store.erase_deleted().map(|_| ()).map_err(|e| e.to_string()),
            Central::Postgres(client, _) => client
                .batch_execute("VACUUM FULL collect_records, collect_chunks, collect_quarantine")
                .map_err(|e| e.to_string()),
        };
        if let Err(e) = erased {
            tracing::warn!("collect: purge stored, but the deleted rows' bytes may stay in the database files until the next purge: {e}");
        }
    }

    /// Puts a message in quarantine (its own transaction).
    fn quarantine(
        &mut self,
        topic: &str,
        payload: &[u8],
        reason: String,
        message_id: Option<&str>,
    ) -> Result<(), String> {
        let mut tx = self.begin()?;
        tx.exec(
            "INSERT INTO collect_quarantine (topic, reason, payload, message_id, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            &[
                Val::text(topic),
                Val::text(&reason),
                Val::text(&String::from_utf8_lossy(
                    &payload[..payload.len().min(4096)],
                )),
                Val::Text(message_id.map(str::to_string)),
                Val::text(&crate::clock::utc_now()),
            ],
        )?;
        tx.commit()?;
        tracing::warn!(topic, %reason, "collect: message quarantined");
        Ok(())
    }

    /// Stores one received publish; returns what it was. An `Err` means nothing was
    /// stored (the database failed): the message must not be acknowledged.
    pub fn store_publish(&mut self, topic: &str, payload: &[u8]) -> Result<Stored, String> {
        let env = match parse_envelope(topic, payload) {
            Ok(e) => e,
            Err(reason) => {
                self.quarantine(topic, payload, reason.clone(), None)?;
                return Ok(Stored::Quarantined {
                    reason,
                    receipt: None,
                });
            }
        };
        let mut tx = self.begin()?;
        let handled = tx.rows(
            "SELECT 1 FROM collect_records WHERE message_id = ?1
             UNION ALL SELECT 1 FROM collect_quarantine WHERE message_id = ?1",
            &[Val::text(&env.id)],
        )?;
        if !handled.is_empty() {
            return Ok(Stored::Duplicate {
                receipt_topic: env.receipt_topic(),
                message_id: env.id,
                sha256: env.sha,
            });
        }
        tx.exec(
            "INSERT INTO collect_chunks (message_id, chunk, chunks, data, station, subject, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT DO NOTHING",
            &[
                Val::text(&env.id),
                Val::Int(Some(env.chunk)),
                Val::Int(Some(env.chunks)),
                Val::text(&env.data),
                Val::text(&env.station),
                Val::text(&env.subject),
                Val::text(&crate::clock::utc_now()),
            ],
        )?;
        bound_chunks(tx.as_mut(), &env.station, &env.id)?;
        let parts = tx.rows(
            "SELECT data FROM collect_chunks WHERE message_id = ?1 ORDER BY chunk",
            &[Val::text(&env.id)],
        )?;
        if (parts.len() as i64) < env.chunks {
            tx.commit()?;
            return Ok(Stored::Chunk);
        }
        let whole: String = parts
            .into_iter()
            .filter_map(|mut r| r.pop().and_then(Val::into_text))
            .collect();
        tx.exec(
            "DELETE FROM collect_chunks WHERE message_id = ?1",
            &[Val::text(&env.id)],
        )?;
        let digest: String = Sha256::digest(whole.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if digest != env.sha {
            tx.commit()?;
            let reason = format!(
                "message {}: reassembled sha256 {digest}, announced {}",
                env.id, env.sha
            );
            self.quarantine(topic, payload, reason.clone(), None)?;
            return Ok(Stored::Quarantined {
                reason,
                receipt: None,
            });
        }
        let outcome = match check_seq(tx.as_mut(), &env)? {
            Err(reason) => Err(reason),
            Ok(()) => match env.kind.as_str() {
                "session" => store_session(tx.as_mut(), &env, &whole),
                "tombstone" => store_tombstone(tx.as_mut(), &env, &whole),
                _ => store_purge(tx.as_mut(), &env, &whole),
            }?,
        };
        if let Err(reason) = outcome {
            drop(tx);
            self.quarantine(topic, whole.as_bytes(), reason.clone(), Some(&env.id))?;
            return Ok(Stored::Quarantined {
                reason,
                receipt: Some((env.receipt_topic(), env.id, env.sha)),
            });
        }
        tx.commit()?;
        if env.kind == "purge" {
            self.erase_deleted();
        }
        tracing::info!(
            station = %env.station,
            seq = env.seq,
            bytes = whole.len(),
            "collect: stored {} {}",
            env.kind,
            env.subject
        );
        Ok(Stored::Record {
            receipt_topic: env.receipt_topic(),
            message_id: env.id,
            sha256: env.sha,
        })
    }
}

/// The flags a stored record gets.
struct Flags {
    participant: Option<String>,
    voided: bool,
    applied: bool,
}

fn insert_record(
    tx: &mut dyn CentralTx,
    env: &Envelope,
    payload: &str,
    f: Flags,
) -> Result<(), String> {
    tx.exec(
        "INSERT INTO collect_records (message_id, study, station, kind, subject, participant,
             seq, payload, sha256, received_at, voided, applied)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
        &[
            Val::text(&env.id),
            Val::text(&env.study),
            Val::text(&env.station),
            Val::text(&env.kind),
            Val::text(&env.subject),
            Val::Text(f.participant),
            Val::Int(env.seq),
            Val::text(payload),
            Val::text(&env.sha),
            Val::text(&crate::clock::utc_now()),
            Val::Int(Some(i64::from(f.voided))),
            Val::Int(Some(i64::from(f.applied))),
        ],
    )?;
    Ok(())
}

/// The outer `Result` is the database failing (nothing stored); the inner `Err` is the
/// message's content being unusable (quarantined).
type Outcome = Result<Result<(), String>, String>;

fn subject_params(env: &Envelope) -> [Val; 4] {
    [
        Val::text(&env.study),
        Val::text(&env.station),
        Val::text(&env.subject),
        Val::Int(env.seq),
    ]
}

/// How far past the highest sequence number a station has sent a message's number may be
/// (its outbox numbers messages one by one; a month of sessions is a few hundred).
pub const MAX_SEQ_GAP: i64 = 1_000_000;

/// Refuses a sequence number no station's outbox could have given: not positive, or more
/// than [`MAX_SEQ_GAP`] past the highest this station has sent. A tombstone or purge with
/// an absurd number would otherwise void every later genuine record of its subject.
fn check_seq(tx: &mut dyn CentralTx, env: &Envelope) -> Outcome {
    let Some(seq) = env.seq else {
        return Ok(Ok(()));
    };
    if seq < 1 {
        return Ok(Err(format!("sequence number {seq} is not positive")));
    }
    let highest = tx
        .rows(
            "SELECT max(seq) FROM collect_records WHERE study = ?1 AND station = ?2",
            &[Val::text(&env.study), Val::text(&env.station)],
        )?
        .first()
        .and_then(|r| r.first().and_then(Val::int))
        .unwrap_or(0);
    if seq > highest.saturating_add(MAX_SEQ_GAP) {
        return Ok(Err(format!(
            "sequence number {seq} is more than {MAX_SEQ_GAP} past the highest station {} has sent ({highest})",
            env.station
        )));
    }
    Ok(Ok(()))
}

/// Keeps incomplete messages bounded: chunks older than [`CHUNK_EXPIRY`] go, and while
/// `station`'s incomplete chunks pass [`CHUNK_BYTES_PER_STATION`], its oldest incomplete
/// message (never `current`) goes, noted in quarantine.
fn bound_chunks(tx: &mut dyn CentralTx, station: &str, current: &str) -> Result<(), String> {
    let cutoff = crate::clock::utc_at(std::time::SystemTime::now() - CHUNK_EXPIRY);
    tx.exec(
        "DELETE FROM collect_chunks WHERE received_at IS NOT NULL AND received_at < ?1",
        &[Val::text(&cutoff)],
    )?;
    loop {
        let total = tx
            .rows(
                "SELECT CAST(coalesce(sum(length(data)), 0) AS BIGINT) FROM collect_chunks WHERE station = ?1",
                &[Val::text(station)],
            )?
            .first()
            .and_then(|r| r.first().and_then(Val::int))
            .unwrap_or(0);
        if total <= CHUNK_BYTES_PER_STATION {
            return Ok(());
        }
        let oldest = tx
            .rows(
                "SELECT message_id FROM collect_chunks WHERE station = ?1 AND message_id <> ?2
                 GROUP BY message_id ORDER BY min(received_at) LIMIT 1",
                &[Val::text(station), Val::text(current)],
            )?
            .into_iter()
            .next()
            .and_then(|r| r.into_iter().next().and_then(Val::into_text));
        let Some(oldest) = oldest else {
            return Ok(());
        };
        tx.exec(
            "DELETE FROM collect_chunks WHERE message_id = ?1",
            &[Val::text(&oldest)],
        )?;
        let reason = format!(
            "incomplete message {oldest} of station {station} dropped: its incomplete messages passed {} MiB",
            CHUNK_BYTES_PER_STATION >> 20
        );
        tracing::warn!("collect: {reason}");
        tx.exec(
            "INSERT INTO collect_quarantine (topic, reason, payload, message_id, received_at)
             VALUES (?1, ?2, '', ?3, ?4)",
            &[
                Val::text(&format!("(chunks of station {station})")),
                Val::text(&reason),
                Val::text(&oldest),
                Val::text(&crate::clock::utc_now()),
            ],
        )?;
    }
}

fn store_session(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
    let head = match replica::header(payload) {
        Ok(h) if h.session_id == env.subject => h,
        Ok(h) => {
            return Ok(Err(format!(
                "the record is of session {}, the envelope names {}",
                h.session_id, env.subject
            )))
        }
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = replica::check_belongs(payload, &env.station) {
        return Ok(Err(e));
    }
    // A withdrawal already received (newer than this record): the data is not kept.
    let purged = tx.rows(
        "SELECT 1 FROM collect_purges WHERE study = ?1 AND station = ?2 AND participant_id = ?3
           AND (CAST(?4 AS BIGINT) IS NULL OR seq IS NULL OR seq > ?4)",
        &[
            Val::text(&env.study),
            Val::text(&env.station),
            Val::Text(head.participant_id.clone()),
            Val::Int(env.seq),
        ],
    )?;
    if head.participant_id.is_some() && !purged.is_empty() {
        tracing::info!(message = %env.id, "collect: a record of a withdrawn participant dropped");
        insert_record(
            tx,
            env,
            "",
            Flags {
                participant: head.participant_id,
                voided: true,
                applied: false,
            },
        )?;
        return Ok(Ok(()));
    }
    let newer = tx.rows(
        "SELECT 1 FROM collect_records WHERE study = ?1 AND station = ?2 AND subject = ?3
           AND kind IN ('session', 'tombstone') AND CAST(?4 AS BIGINT) IS NOT NULL AND seq > ?4",
        &subject_params(env),
    )?;
    if !newer.is_empty() {
        insert_record(
            tx,
            env,
            payload,
            Flags {
                participant: head.participant_id,
                voided: true,
                applied: false,
            },
        )?;
        return Ok(Ok(()));
    }
    let elsewhere = tx.rows(
        "SELECT station, study FROM collect_records WHERE subject = ?3 AND kind = 'session'
           AND applied = 1 AND (station <> ?2 OR study <> ?1)",
        &subject_params(env)[..3],
    )?;
    if let Some(other) = elsewhere.into_iter().next() {
        // The same session id from another station (a recording replayed on two machines):
        // the record is kept, exactly once, but the tables show the one that came first.
        let mut other = other.into_iter().map(Val::into_text);
        tracing::warn!(
            session = %env.subject,
            station = %env.station,
            held_from = %other.next().flatten().unwrap_or_default(),
            study = %other.next().flatten().unwrap_or_default(),
            "collect: a session id already shown from another station; this record is kept, not shown"
        );
        insert_record(
            tx,
            env,
            payload,
            Flags {
                participant: head.participant_id,
                voided: false,
                applied: false,
            },
        )?;
        return Ok(Ok(()));
    }
    tx.exec(
        "UPDATE collect_records SET voided = 1, applied = 0
         WHERE study = ?1 AND station = ?2 AND subject = ?3 AND kind = 'session'",
        &subject_params(env)[..3],
    )?;
    if let Err(e) = tx.set_session(&env.subject, Some(payload), env.seq) {
        return Ok(Err(e));
    }
    insert_record(
        tx,
        env,
        payload,
        Flags {
            participant: head.participant_id,
            voided: false,
            applied: true,
        },
    )?;
    Ok(Ok(()))
}

fn store_tombstone(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
    let newer = tx.rows(
        "SELECT 1 FROM collect_records WHERE study = ?1 AND station = ?2 AND subject = ?3
           AND kind = 'session' AND CAST(?4 AS BIGINT) IS NOT NULL AND seq > ?4",
        &subject_params(env),
    )?;
    let voided = !newer.is_empty();
    if !voided {
        let applied = tx.rows(
            "SELECT 1 FROM collect_records WHERE study = ?1 AND station = ?2 AND subject = ?3
               AND kind = 'session' AND applied = 1",
            &subject_params(env)[..3],
        )?;
        tx.exec(
            "UPDATE collect_records SET voided = 1, applied = 0
             WHERE study = ?1 AND station = ?2 AND subject = ?3 AND kind = 'session'",
            &subject_params(env)[..3],
        )?;
        if !applied.is_empty() {
            tx.set_session(&env.subject, None, None)?;
        }
    }
    insert_record(
        tx,
        env,
        payload,
        Flags {
            participant: None,
            voided,
            applied: false,
        },
    )?;
    Ok(Ok(()))
}

fn store_purge(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
    let victims = tx.rows(
        "SELECT subject, applied FROM collect_records WHERE study = ?1 AND station = ?2
           AND participant = ?3 AND kind = 'session' AND (CAST(?4 AS BIGINT) IS NULL OR seq IS NULL OR seq < ?4)",
        &subject_params(env),
    )?;
    for v in &victims {
        if let [Val::Text(Some(subject)), applied] = v.as_slice() {
            if applied.int() == Some(1) {
                tx.set_session(subject, None, None)?;
            }
        }
    }
    tx.exec(
        "DELETE FROM collect_records WHERE study = ?1 AND station = ?2 AND participant = ?3
           AND kind = 'session' AND (CAST(?4 AS BIGINT) IS NULL OR seq IS NULL OR seq < ?4)",
        &subject_params(env),
    )?;
    tx.remove_participant(&env.subject)?;
    // Whatever else holds their sessions: chunks of records whose last chunk never came,
    // and quarantined messages about them.
    let purged: Vec<String> = serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| {
            v["sessions"].as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default();
    for session in victims
        .iter()
        .filter_map(|v| match v.first() {
            Some(Val::Text(Some(s))) => Some(s.clone()),
            _ => None,
        })
        .chain(purged)
    {
        tx.exec(
            "DELETE FROM collect_chunks WHERE station = ?1 AND subject = ?2",
            &[Val::text(&env.station), Val::text(&session)],
        )?;
        tx.exec(
            "DELETE FROM collect_quarantine WHERE topic LIKE ?1 AND payload LIKE ?2",
            &[
                Val::text(&format!("%/{}/%", env.station)),
                Val::text(&format!("%{session}%")),
            ],
        )?;
    }
    tx.exec(
        "INSERT INTO collect_purges (study, station, participant_id, records, seq, purged_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        &[
            Val::text(&env.study),
            Val::text(&env.station),
            Val::text(&env.subject),
            Val::Int(Some(victims.len() as i64)),
            Val::Int(env.seq),
            Val::text(&crate::clock::utc_now()),
        ],
    )?;
    insert_record(
        tx,
        env,
        payload,
        Flags {
            participant: Some(env.subject.clone()),
            voided: false,
            applied: false,
        },
    )?;
    Ok(Ok(()))
}
