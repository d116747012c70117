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
//! the applied records by the same code ([`Central::read_view`]). The central database's
//! tables (format 8) are specified in docs/formats.md.

mod postgres;

mod alerts;
mod copy;
mod enrol;
mod envelope;
mod health;
mod quarantine;
mod rules;
mod withdraw;
use crate::store::CentralError;
use envelope::*;
use rules::*;

use crate::sync::health as health_message;
pub use alerts::Withdrawal;
pub use copy::{Copied, CopyOptions};
pub use enrol::INVALID_NAME;
pub use health::{StationHealth, STRANGERS_KEPT, STRANGER_EXPIRY_DAYS};
pub use postgres::redacted;
pub use quarantine::Quarantined;
pub use withdraw::Withdrawn;

use super::keys;
use super::{ENVELOPE_VERSION, SEALED_ENVELOPE_VERSION};
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

/// Quarantined chunks refused before a whole message was read, kept at most (the newest)...
pub const REFUSED_KEPT: i64 = 5_000;
/// ... and for at most this long.
pub const REFUSED_EXPIRY_DAYS: u64 = 30;

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
    /// received and sending it again cannot help (answered so the station stops resending);
    /// `refusal` what the station is told of it, when it is told (see [`Refusal`]).
    Quarantined {
        reason: String,
        receipt: Option<(String, String, String)>,
        refusal: Option<Refusal>,
    },
    /// A station's health message, kept (`health`).
    Health {
        station: String,
    },
    /// A station's `status` word, kept.
    Status {
        station: String,
    },
}

/// A refusal the collector owes a station (on `empathic/v1/{study}/{station}/refusal`, as a
/// signed [`crate::sync::Refusal`]): the message it refused and why. `settled`: the whole
/// message was read and is kept in quarantine (its receipt goes too: sending it again
/// cannot help); otherwise the chunk was refused at the gate or could not be opened, which
/// a change of configuration cures (the station enrolled, a key put right), and the station
/// holds the message until then.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub topic: String,
    pub message_id: String,
    pub sha256: String,
    /// What kind of refusal (see [`Refused`]'s codes).
    pub code: &'static str,
    pub reason: String,
    pub settled: bool,
}

/// Why a chunk or message is refused: a short code the station can act on, and the text
/// for people. Codes: `not_enrolled`, `wrong_station`, `revoked`, `bad_signature`,
/// `plain_refused`, `too_new` (a message of a version this collector does not read yet: held by the station, not settled), `cannot_open` (a sealed message this collector cannot open: no study
/// key, or sealed to another one), `content` (read, and unusable: final).
#[derive(Debug, Clone, PartialEq)]
pub struct Refused {
    pub code: &'static str,
    pub reason: String,
}

impl Refused {
    fn new(code: &'static str, reason: String) -> Self {
        Refused { code, reason }
    }
}

impl Stored {
    /// The refusal the station is to get, if any.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Stored::Quarantined {
                refusal: Some(r), ..
            } => Some(r),
            _ => None,
        }
    }

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

/// What a collector lets in: sealed messages from enrolled stations always (they are
/// opened with `study_key`); plain ones from any station (`accept_plain`: a first try, or
/// a study still on plain sync) or only from stations enrolled with `--allow-plain` (a
/// changeover).
#[derive(Default)]
pub struct Gate {
    pub accept_plain: bool,
    pub study_key: Option<keys::StudySecretKey>,
}

impl Gate {
    /// Today's first try: plain from anyone, no study key.
    pub fn plain() -> Self {
        Gate {
            accept_plain: true,
            study_key: None,
        }
    }
}

/// One enrolment of a station (`collect stations`), with what arrived from it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Enrolment {
    pub station: String,
    /// `ed25519:...`, or empty for a plain-only enrolment (`--allow-plain` without a key).
    pub key: String,
    pub allow_plain: bool,
    pub enrolled_at: String,
    pub revoked_at: Option<String>,
}

/// Per station: messages stored sealed and plain (sessions, tombstones and purges, older
/// versions of a session included), the sessions they show, and messages quarantined that
/// are still open (not stored since, not dropped).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StationCounts {
    pub station: String,
    pub sealed: i64,
    pub plain: i64,
    pub sessions: i64,
    pub quarantined: i64,
    /// When a record chunk of it was last refused at the gate (a revoked station that keeps
    /// sending shows here).
    pub refused_latest: Option<String>,
}

/// Tables the study page's view of a PostgreSQL database leaves out: the per-window and
/// per-frame feature vectors, most of a record's bytes, which the page does not show.
pub const PAGE_VIEW_SKIPS: [&str; 3] = ["window_features", "frame_features", "frames"];

/// A read view of a PostgreSQL central database kept between reads
/// ([`Central::with_page_view`]): the records in it, and the view.
#[derive(Default)]
pub struct PageView {
    store: Option<Store>,
    /// message id -> session id of every record applied in `store`.
    applied: std::collections::BTreeMap<String, String>,
}

/// Whether `target` names a PostgreSQL database rather than a file.
pub fn is_postgres(target: &str) -> bool {
    target.starts_with("postgres://") || target.starts_with("postgresql://")
}

impl Central {
    /// Opens (creating the tables of) the central database: a `postgres://` URL, or a
    /// SQLite file (created when missing; it is also a store with the station schema).
    pub fn open(target: &str) -> Result<Central, CentralError> {
        if is_postgres(target) {
            postgres::open(target).map(|c| Central::Postgres(Box::new(c), target.to_string()))
        } else {
            central::open(std::path::Path::new(target)).map(Central::Sqlite)
        }
    }

    fn begin(&mut self) -> Result<Box<dyn CentralTx + '_>, CentralError> {
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
    pub fn read_view(self) -> Result<Store, CentralError> {
        match self {
            Central::Sqlite(store) => Ok(store),
            Central::Postgres(mut client, url) => Ok(postgres::snapshot(&mut client)?
                .named(format!("{} (read into memory)", postgres::redacted(&url)))),
        }
    }

    /// Runs `read` on a station-schema view of what the database holds, for a reader that
    /// comes back (the study page, once a minute), keeping the connection: the file itself
    /// for SQLite; for PostgreSQL, `cache` keeps a light in-memory view between calls
    /// (without [`PAGE_VIEW_SKIPS`]) and only the records that changed since are read
    /// into it.
    pub fn with_page_view<T>(
        &mut self,
        cache: &mut PageView,
        read: impl FnOnce(&Store) -> Result<T, CentralError>,
    ) -> Result<T, CentralError> {
        match self {
            Central::Sqlite(store) => read(store),
            Central::Postgres(client, url) => {
                if client.is_closed() {
                    **client = postgres::open(url)?;
                }
                postgres::refresh(client, cache)?;
                match &cache.store {
                    Some(store) => read(store),
                    None => Err(CentralError::database_says("reading", "no read view")),
                }
            }
        }
    }

    /// After a purge: no deleted byte stays in the database's files. SQLite is rebuilt
    /// from its live content and its log emptied; PostgreSQL's collector tables are
    /// rewritten (`VACUUM FULL`: the old table files, with the dead rows, are unlinked; the
    /// server's own write-ahead log recycles its segments on its schedule). The purge is
    /// committed already: a failure here is logged, not undone.
    fn erase_deleted(&mut self) {
        if let Err(e) = self.erase() {
            tracing::warn!("collect: purge stored, but the deleted rows' bytes may stay in the database files until the next purge: {e}");
        }
    }

    /// Puts a message in quarantine (its own transaction) and says so as [`Stored`]:
    /// `receipt` (topic, message id, sha256) when the whole message was read and sending it
    /// again cannot help; `refusal` what the station is told (a refusal at the gate keeps
    /// the message id it names as `refused_id`, so `collect quarantine` lists it per message
    /// and its problem clears once that message is stored after all).
    fn quarantine(
        &mut self,
        topic: &str,
        payload: &[u8],
        reason: String,
        receipt: Option<(String, String, String)>,
        refusal: Option<Refusal>,
    ) -> Result<Stored, CentralError> {
        // Cleaned where it enters: a reason quotes what a stranger sent (a kind, a field),
        // and goes to the log, the table, `collect quarantine list` and the study page.
        let reason = health_message::printable(&reason, 2000);
        let message_id = receipt.as_ref().map(|(_, id, _)| id.as_str());
        let refused_id = refusal
            .as_ref()
            .filter(|_| message_id.is_none())
            .map(|r| r.message_id.as_str());
        let mut tx = self.begin()?;
        tx.exec(
            "INSERT INTO collect_quarantine (topic, reason, payload, message_id, received_at, refused_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            &[
                Val::text(topic),
                Val::text(&reason),
                Val::text(&String::from_utf8_lossy(
                    &payload[..payload.len().min(4096)],
                )),
                Val::Text(message_id.map(str::to_string)),
                Val::text(&crate::clock::utc_now()),
                Val::Text(refused_id.map(str::to_string)),
            ],
        )?;
        if message_id.is_none() {
            // Refused before a whole message was read (unsigned, unknown, malformed): all a
            // stranger can make. Bounded and expiring; refused messages keep their row, as
            // it answers their redelivery.
            let expired = crate::clock::utc_at(
                std::time::SystemTime::now()
                    - std::time::Duration::from_secs(REFUSED_EXPIRY_DAYS * 86_400),
            );
            tx.exec(
                "DELETE FROM collect_quarantine WHERE message_id IS NULL AND (received_at < ?1
                   OR id <= (SELECT id FROM collect_quarantine WHERE message_id IS NULL
                             ORDER BY id DESC LIMIT 1 OFFSET ?2))",
                &[Val::text(&expired), Val::Int(Some(REFUSED_KEPT))],
            )?;
        }
        tx.commit()?;
        tracing::warn!(topic = %health_message::printable(topic, 200), %reason, "collect: message quarantined");
        Ok(Stored::Quarantined {
            reason,
            receipt,
            refusal,
        })
    }

    /// [`Central::store_publish_with`] through [`Gate::plain`] (plain sync, any station).
    pub fn store_publish(&mut self, topic: &str, payload: &[u8]) -> Result<Stored, CentralError> {
        self.store_publish_with(topic, payload, &Gate::plain())
    }

    /// Stores one received publish that `gate` lets in; returns what it was. An `Err`
    /// means nothing was stored (the database failed): the message must not be
    /// acknowledged. A chunk the gate refuses (unsigned where a signature is needed, signed
    /// by a key not enrolled for the station it names, revoked, or with a signature that
    /// does not verify) is quarantined before anything of it is kept, with no receipt.
    pub fn store_publish_with(
        &mut self,
        topic: &str,
        payload: &[u8],
        gate: &Gate,
    ) -> Result<Stored, CentralError> {
        let env = match parse_envelope(topic, payload) {
            Ok(e) => e,
            Err(reason) => return self.quarantine(topic, payload, reason, None, None),
        };
        // The gate reads the enrolments in the transaction that stores the chunk.
        let mut tx = self.begin()?;
        if let Err(refused) = admit(tx.as_mut(), &env, gate)? {
            drop(tx);
            let refusal = env.refusal(&refused, false);
            let summary = env.summary();
            return self.quarantine(
                topic,
                summary.as_bytes(),
                refused.reason,
                None,
                Some(refusal),
            );
        }
        if handled(tx.as_mut(), &env.id)? {
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
        let wire: String = parts
            .into_iter()
            .filter_map(|mut r| r.pop().and_then(Val::into_text))
            .collect();
        tx.exec(
            "DELETE FROM collect_chunks WHERE message_id = ?1",
            &[Val::text(&env.id)],
        )?;
        let whole = match open_payload(&env, wire, gate) {
            Ok(w) => w,
            Err((refused, cured_by_config)) => {
                tx.commit()?;
                // A message this collector cannot open is held at the station until a key
                // is put right; a corrupt one (its digest wrong) is not answered: a clean
                // resend can help.
                let refusal = cured_by_config.then(|| env.refusal(&refused, false));
                let summary = env.summary();
                return self.quarantine(topic, summary.as_bytes(), refused.reason, None, refusal);
            }
        };
        if let Some(reason) = newer_than_known(&env, &whole) {
            // Not this collector's to judge: no receipt and not settled, so the station
            // holds it and sends it again (its hourly probe) until an upgraded collector
            // stores it; the quarantine entry names it by `refused_id`, so that resend is
            // judged again, not answered as a duplicate.
            tx.commit()?;
            let refusal = env.refusal(&Refused::new("too_new", reason.clone()), false);
            let summary = env.summary();
            return self.quarantine(topic, summary.as_bytes(), reason, None, Some(refusal));
        }
        let outcome = match check_seq(tx.as_mut(), &env)? {
            Err(reason) => Err(reason),
            Ok(()) => match env.kind.as_str() {
                "session" => store_session(tx.as_mut(), &env, &whole),
                "tombstone" => store_tombstone(tx.as_mut(), &env, &whole),
                "consent" => store_consent(tx.as_mut(), &env, &whole),
                _ => store_purge(tx.as_mut(), &env, &whole),
            }?,
        };
        if let Err(reason) = outcome {
            drop(tx);
            let receipt = Some((env.receipt_topic(), env.id.clone(), env.sha.clone()));
            let refusal = env.refusal(&Refused::new("content", reason.clone()), true);
            return self.quarantine(topic, whole.as_bytes(), reason, receipt, Some(refusal));
        }
        tx.commit()?;
        if env.kind == "purge" {
            self.erase_deleted();
        }
        if env.signed.is_some() {
            tracing::info!(
                station = %env.station,
                seq = env.seq,
                bytes = whole.len(),
                "collect: stored sealed {} {}",
                env.kind,
                env.subject
            );
        } else {
            tracing::warn!(
                station = %env.station,
                seq = env.seq,
                bytes = whole.len(),
                "collect: stored PLAIN {} {} (unsigned, readable by the broker)",
                env.kind,
                env.subject
            );
        }
        Ok(Stored::Record {
            receipt_topic: env.receipt_topic(),
            message_id: env.id,
            sha256: env.sha,
        })
    }
}

/// Why a whole message is of a version newer than this collector reads, when it is (its
/// `version` above the highest this build reads for its kind).
fn newer_than_known(env: &Envelope, whole: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(whole).ok()?;
    let version = v["version"].as_u64()?;
    let known = u64::from(match env.kind.as_str() {
        "consent" => crate::store::CONSENT_VERSION,
        _ => crate::store::PAYLOAD_VERSION,
    });
    (version > known).then(|| {
        format!(
            "a {} message of version {version}: this collector reads up to version {known}; upgrade it (the station holds the message and sends it again)",
            env.kind
        )
    })
}

/// Whether `gate` lets chunk `env` in (`Ok(Err(refused))`: quarantine it).
fn admit(
    tx: &mut dyn CentralTx,
    env: &Envelope,
    gate: &Gate,
) -> Result<Result<(), Refused>, CentralError> {
    let Some((signer, _)) = &env.signed else {
        return plain_admitted(tx, gate, &env.study, &env.station);
    };
    let owner = match signer_enrolled(tx, &env.study, &env.station, signer)? {
        Ok(owner) => owner,
        Err(reason) => return Ok(Err(reason)),
    };
    if env.seq.is_none() {
        return Ok(Err(Refused::new(
            "bad_signature",
            "a sealed envelope without `seq`".into(),
        )));
    }
    let verifies = env.proof.as_ref().is_some_and(|p| env.proof_verifies(p));
    Ok(if verifies {
        Ok(())
    } else {
        Err(Refused::new(
            "bad_signature",
            format!("the signature by station {owner}'s key does not verify over this envelope"),
        ))
    })
}

/// Whether an unsigned message from `station` is let in: from any station with
/// `gate.accept_plain`, else only from one enrolled with `--allow-plain`.
fn plain_admitted(
    tx: &mut dyn CentralTx,
    gate: &Gate,
    study: &str,
    station: &str,
) -> Result<Result<(), Refused>, CentralError> {
    if gate.accept_plain {
        return Ok(Ok(()));
    }
    let allowed = tx.rows(
        "SELECT 1 FROM collect_stations WHERE study = ?1 AND station = ?2
           AND allow_plain = 1 AND revoked_at IS NULL",
        &[Val::text(study), Val::text(station)],
    )?;
    Ok(if allowed.is_empty() {
        Err(Refused::new("plain_refused", format!(
            "unsigned (plain) message from station {station}: this collector takes only sealed messages from it (`collect enrol {station} --allow-plain` admits plain ones during a changeover)"
        )))
    } else {
        Ok(())
    })
}

/// Whether `signer` is the key enrolled, and not revoked, for `station` of `study`; the
/// owner's name when it is.
fn signer_enrolled(
    tx: &mut dyn CentralTx,
    study: &str,
    station: &str,
    signer: &str,
) -> Result<Result<String, Refused>, CentralError> {
    let enrolled = tx.rows(
        "SELECT station, revoked_at FROM collect_stations WHERE study = ?1 AND key = ?2",
        &[Val::text(study), Val::text(signer)],
    )?;
    let Some(row) = enrolled.into_iter().next() else {
        return Ok(Err(Refused::new(
            "not_enrolled",
            format!("signed by {signer}, a key no station of study {study} is enrolled with (staff: `empathic collect enrol {station} {signer}`)"),
        )));
    };
    let mut row = row.into_iter();
    let owner = row.next().and_then(Val::into_text).unwrap_or_default();
    let revoked = row.next().and_then(Val::into_text);
    if owner != station {
        return Ok(Err(Refused::new(
            "wrong_station",
            format!("signed by station {owner}'s key but names station {station}"),
        )));
    }
    if let Some(at) = revoked {
        return Ok(Err(Refused::new(
            "revoked",
            format!("signed by station {owner}'s key revoked at {at}"),
        )));
    }
    Ok(Ok(owner))
}

/// The payload of a whole message: plain as received, or sealed opened with the study's
/// key; checked against the envelope's sha256 (the plaintext's) either way. An error says
/// whether a change of configuration cures it (no study key here, or the message sealed
/// to another study key) or not (a corrupt message: a clean resend may).
fn open_payload(env: &Envelope, wire: String, gate: &Gate) -> Result<String, (Refused, bool)> {
    let whole = if env.signed.is_some() {
        let Some(key) = &gate.study_key else {
            return Err((
                Refused::new(
                    "cannot_open",
                    format!(
                        "message {}: sealed, and this collector has no study key to open it (collect --study-key FILE)",
                        env.id
                    ),
                ),
                true,
            ));
        };
        let bytes = key.open(&wire).map_err(|e| {
            (
                Refused::new(
                    "cannot_open",
                    format!(
                        "message {}: {e} (sealed to another study key than this collector's: check the station's [sync] study_key)",
                        env.id
                    ),
                ),
                true,
            )
        })?;
        String::from_utf8(bytes).map_err(|_| {
            (
                Refused::new(
                    "corrupt",
                    format!("message {}: the opened payload is not UTF-8", env.id),
                ),
                false,
            )
        })?
    } else {
        wire
    };
    let digest = crate::digest::sha256_hex(whole.as_bytes());
    if digest != env.sha {
        return Err((
            Refused::new(
                "corrupt",
                format!(
                    "message {}: reassembled sha256 {digest}, announced {}",
                    env.id, env.sha
                ),
            ),
            false,
        ));
    }
    Ok(whole)
}
