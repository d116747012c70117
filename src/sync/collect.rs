//! Study sync, staff side: `empathic collect` receives the stations' messages into a
//! central SQLite file, exactly once.
//!
//! Contract: subscribes to `empathic/v1/{study}/+/+` at QoS 1 with a persistent session
//! (stable client id, clean session off) and manual acknowledgements: a chunk is
//! acknowledged only after the transaction that stored it committed, so a collector killed
//! at any moment loses nothing (the broker redelivers what was not acknowledged) and stores
//! nothing twice (`message_id` and `(message_id, chunk)` are keys). Chunks are held in
//! `collect_chunks` until all of a message's have arrived; the reassembled payload is checked
//! against its sha256 and stored in `collect_records`. A tombstone marks every earlier
//! record of its subject from that station `voided`; every whole message (new or a
//! duplicate) is answered, after the commit, with a receipt on
//! `empathic/v1/{study}/{station}/receipt` (`{"message_id": ...}`), which is what makes the
//! station call it synced; a purge (a participant's withdrawal)
//! deletes every record of that participant from that station and leaves an audit line in
//! `collect_purges`. Anything malformed (not JSON, wrong
//! envelope version, chunk numbers out of range, checksum mismatch, topic and envelope
//! disagreeing) goes to `collect_quarantine` with the reason and is acknowledged (a
//! redelivery would be just as bad); the collector never stops on a bad message. Central
//! format version 1 (tables below); applying records into the station schema, so that
//! `sessions`, `report` and `evaluate` read the central file, comes with the next step.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rumqttc::{Client, Event, MqttOptions, Packet, Publish, QoS};
use rusqlite::{params, Connection, OptionalExtension};
use sha2::{Digest, Sha256};

use super::ENVELOPE_VERSION;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS collect_records (
    message_id  TEXT PRIMARY KEY,
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    voided      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS collect_chunks (
    message_id TEXT NOT NULL,
    chunk      INTEGER NOT NULL,
    chunks     INTEGER NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (message_id, chunk)
);
CREATE TABLE IF NOT EXISTS collect_purges (
    study          TEXT NOT NULL,
    station        TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    records        INTEGER NOT NULL,
    purged_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE TABLE IF NOT EXISTS collect_quarantine (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    topic       TEXT NOT NULL,
    reason      TEXT NOT NULL,
    payload     TEXT NOT NULL,
    received_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
";

/// Largest chunk envelope accepted (the publisher's chunks are far smaller).
pub const MAX_ENVELOPE_BYTES: usize = 1 << 20;

/// Opens (creating) the central file.
pub fn open_central(path: &Path) -> Result<Connection, String> {
    let conn = Connection::open(path)
        .map_err(|e| format!("cannot open the central database {}: {e}", path.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .and_then(|()| conn.pragma_update(None, "journal_mode", "WAL"))
        .and_then(|_| conn.pragma_update(None, "synchronous", "FULL"))
        .and_then(|_| conn.execute_batch(SCHEMA))
        .map_err(|e| {
            format!(
                "cannot prepare the central database {}: {e}",
                path.display()
            )
        })?;
    Ok(conn)
}

/// What happened to one received chunk.
#[derive(Debug, PartialEq)]
pub enum Stored {
    Chunk,
    /// A whole message stored: its receipt goes to `topic`.
    Record {
        receipt_topic: String,
        message_id: String,
    },
    /// Already stored: answered with a receipt again (the station may have missed it).
    Duplicate {
        receipt_topic: String,
        message_id: String,
    },
    Quarantined(String),
}

/// Stores one received publish in one transaction; returns what it was.
pub fn store_publish(conn: &mut Connection, topic: &str, payload: &[u8]) -> Result<Stored, String> {
    let quarantine = |conn: &mut Connection, reason: String| -> Result<Stored, String> {
        conn.execute(
            "INSERT INTO collect_quarantine (topic, reason, payload) VALUES (?1, ?2, ?3)",
            params![
                topic,
                reason,
                String::from_utf8_lossy(&payload[..payload.len().min(4096)])
            ],
        )
        .map_err(|e| format!("cannot quarantine a message: {e}"))?;
        tracing::warn!(topic, %reason, "collect: message quarantined");
        Ok(Stored::Quarantined(reason))
    };
    if payload.len() > MAX_ENVELOPE_BYTES {
        return quarantine(
            conn,
            format!(
                "{} bytes, over the {MAX_ENVELOPE_BYTES} limit",
                payload.len()
            ),
        );
    }
    let v: serde_json::Value = match serde_json::from_slice(payload) {
        Ok(v) => v,
        Err(e) => return quarantine(conn, format!("not JSON: {e}")),
    };
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
        return quarantine(conn, "an envelope field is missing or not text".into());
    };
    if v["v"].as_u64() != Some(u64::from(ENVELOPE_VERSION)) {
        return quarantine(
            conn,
            format!(
                "envelope version {} (this build reads {ENVELOPE_VERSION})",
                v["v"]
            ),
        );
    }
    let (Some(chunk), Some(chunks)) = (v["chunk"].as_u64(), v["chunks"].as_u64()) else {
        return quarantine(conn, "chunk numbers missing".into());
    };
    if chunks == 0 || chunk >= chunks || chunks > 100_000 {
        return quarantine(conn, format!("chunk {chunk} of {chunks}"));
    }
    if topic != format!("empathic/v1/{study}/{station}/{kind}") {
        return quarantine(
            conn,
            format!("topic {topic} does not match the envelope ({study}/{station}/{kind})"),
        );
    }
    let tx = conn
        // Immediate: several collectors may share the file; the write lock is taken up
        // front (waiting up to the busy timeout), never upgraded mid-transaction.
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| format!("cannot store a message: {e}"))?;
    let done: Option<i64> = tx
        .query_row(
            "SELECT 1 FROM collect_records WHERE message_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| format!("cannot store a message: {e}"))?;
    let receipt_topic = format!("empathic/v1/{study}/{station}/receipt");
    if done.is_some() {
        return Ok(Stored::Duplicate {
            receipt_topic,
            message_id: id,
        });
    }
    tx.execute(
        "INSERT OR IGNORE INTO collect_chunks (message_id, chunk, chunks, data) VALUES (?1, ?2, ?3, ?4)",
        params![id, chunk as i64, chunks as i64, data],
    )
    .map_err(|e| format!("cannot store a chunk: {e}"))?;
    let have: i64 = tx
        .query_row(
            "SELECT count(*) FROM collect_chunks WHERE message_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .map_err(|e| format!("cannot store a chunk: {e}"))?;
    if have < chunks as i64 {
        tx.commit()
            .map_err(|e| format!("cannot store a chunk: {e}"))?;
        return Ok(Stored::Chunk);
    }
    let whole: String = tx
        .prepare("SELECT data FROM collect_chunks WHERE message_id = ?1 ORDER BY chunk")
        .and_then(|mut s| {
            s.query_map([&id], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| format!("cannot reassemble a message: {e}"))?
        .concat();
    tx.execute("DELETE FROM collect_chunks WHERE message_id = ?1", [&id])
        .map_err(|e| format!("cannot reassemble a message: {e}"))?;
    let digest: String = Sha256::digest(whole.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if digest != sha {
        tx.commit()
            .map_err(|e| format!("cannot store a message: {e}"))?;
        return quarantine(
            conn,
            format!("message {id}: reassembled sha256 {digest}, announced {sha}"),
        );
    }
    if kind == "purge" {
        // Withdrawal: every record of the participant from that station goes; an audit
        // line (who, when, how many; nothing of the data) stays.
        let removed = tx
            .execute(
                "DELETE FROM collect_records WHERE station = ?1 AND study = ?2 AND kind = 'session'
                   AND json_extract(payload, '$.session.participant_id') = ?3",
                params![station, study, subject],
            )
            .map_err(|e| format!("cannot apply a purge: {e}"))?;
        tx.execute(
            "INSERT INTO collect_purges (study, station, participant_id, records) VALUES (?1, ?2, ?3, ?4)",
            params![study, station, subject, removed as i64],
        )
        .map_err(|e| format!("cannot apply a purge: {e}"))?;
    }
    if kind == "tombstone" {
        tx.execute(
            "UPDATE collect_records SET voided = 1 WHERE station = ?1 AND study = ?2 AND subject = ?3",
            params![station, study, subject],
        )
        .map_err(|e| format!("cannot apply a tombstone: {e}"))?;
    }
    tx.execute(
        "INSERT INTO collect_records (message_id, study, station, kind, subject, payload, sha256)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![id, study, station, kind, subject, whole, sha],
    )
    .map_err(|e| format!("cannot store a message: {e}"))?;
    tx.commit()
        .map_err(|e| format!("cannot store a message: {e}"))?;
    Ok(Stored::Record {
        receipt_topic,
        message_id: id,
    })
}

/// Where and as whom a collector subscribes.
#[derive(Debug, Clone)]
pub struct CollectOptions {
    pub host: String,
    pub port: u16,
    pub auth: super::BrokerAuth,
    pub study: String,
    /// Stable: the broker keeps the collector's session under it.
    pub client_id: String,
    /// A shared-subscription group: the group's collectors split the messages.
    pub share_group: Option<String>,
}

/// Receives until `stop`; reconnects with backoff.
pub fn collect(central: &Path, c: &CollectOptions, stop: &AtomicBool) -> Result<u64, String> {
    let CollectOptions {
        host,
        port,
        auth,
        study,
        client_id,
        share_group,
    } = c;
    let (host, port) = (host.as_str(), *port);
    let mut conn = open_central(central)?;
    let mut opts = MqttOptions::new(client_id.as_str(), host, port);
    auth.apply(&mut opts).map_err(|e| e.to_string())?;
    opts.set_clean_session(false)
        .set_manual_acks(true)
        .set_keep_alive(Duration::from_secs(15))
        .set_max_packet_size(MAX_ENVELOPE_BYTES + 4096, 4096);
    let (client, mut connection) = Client::new(opts, 64);
    // A shared subscription splits the study's messages among the collectors of a group
    // (each message goes to one of them); they may share one central file.
    let filter = match share_group {
        Some(g) => format!("$share/{g}/empathic/v1/{study}/+/+"),
        None => format!("empathic/v1/{study}/+/+"),
    };
    let mut records = 0u64;
    let mut backoff = Duration::from_millis(500);
    while !stop.load(Ordering::Relaxed) {
        match connection.recv_timeout(Duration::from_millis(200)) {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                backoff = Duration::from_millis(500);
                // Renewed on every connection: a broker that lost its state forgets it.
                client
                    .try_subscribe(filter.clone(), QoS::AtLeastOnce)
                    .map_err(|e| format!("cannot subscribe: {e}"))?;
                tracing::info!(host, port, %filter, "collect: connected");
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                if p.topic.ends_with("/status") || p.topic.ends_with("/receipt") {
                    ack(&client, &p)?;
                    continue;
                }
                match store_publish(&mut conn, &p.topic, &p.payload) {
                    Ok(stored) => {
                        if let Stored::Record {
                            receipt_topic,
                            message_id,
                        }
                        | Stored::Duplicate {
                            receipt_topic,
                            message_id,
                        } = &stored
                        {
                            // After the commit: the station may now call it synced.
                            client
                                .try_publish(
                                    receipt_topic.clone(),
                                    QoS::AtLeastOnce,
                                    false,
                                    serde_json::json!({ "message_id": message_id }).to_string(),
                                )
                                .map_err(|e| format!("cannot send a receipt: {e}"))?;
                        }
                        if matches!(stored, Stored::Record { .. }) {
                            records += 1;
                        }
                        ack(&client, &p)?;
                    }
                    // Not stored: not acknowledged, so the broker delivers it again.
                    Err(e) => tracing::error!(error = %e, "collect: could not store a message"),
                }
            }
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "collect: broker connection failed");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
    Ok(records)
}

fn ack(client: &Client, p: &Publish) -> Result<(), String> {
    client
        .try_ack(p)
        .map_err(|e| format!("cannot acknowledge a message: {e}"))
}
