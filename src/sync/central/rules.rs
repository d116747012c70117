//! The collector's rules, one function per message kind, over one [`CentralTx`]: records
//! de-duplicated and ordered by `seq`, tombstones, purges, chunk bounds.

use super::*;
use crate::store::CentralError;

/// The flags a stored record gets.
pub(super) struct Flags {
    pub(super) participant: Option<String>,
    pub(super) voided: bool,
    pub(super) applied: bool,
}

pub(super) fn insert_record(
    tx: &mut dyn CentralTx,
    env: &Envelope,
    payload: &str,
    f: Flags,
) -> Result<(), CentralError> {
    tx.exec(
        "INSERT INTO collect_records (message_id, study, station, kind, subject, participant,
             seq, payload, sha256, received_at, voided, applied, sealed, proof)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
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
            Val::Int(Some(i64::from(env.signed.is_some()))),
            Val::Text(
                env.proof
                    .as_ref()
                    .and_then(|p| serde_json::to_string(p).ok()),
            ),
        ],
    )?;
    Ok(())
}

/// The outer `Result` is the database failing (nothing stored); the inner `Err` is the
/// message's content being unusable (quarantined).
type Outcome = Result<Result<(), String>, CentralError>;

pub(super) fn subject_params(env: &Envelope) -> [Val; 4] {
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
pub(super) fn check_seq(tx: &mut dyn CentralTx, env: &Envelope) -> Outcome {
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
pub(super) fn bound_chunks(
    tx: &mut dyn CentralTx,
    station: &str,
    current: &str,
) -> Result<(), CentralError> {
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

/// Whether `participant` was withdrawn after message `env` was written: a purge from its
/// station with a later `seq` (or none to compare), or a central withdrawal (station `*`).
fn withdrawn_after(
    tx: &mut dyn CentralTx,
    env: &Envelope,
    participant: &str,
) -> Result<bool, CentralError> {
    Ok(!tx
        .rows(
            "SELECT 1 FROM collect_purges WHERE study = ?1 AND (station = ?2 OR station = '*')
               AND participant_id = ?3 AND (CAST(?4 AS BIGINT) IS NULL OR seq IS NULL OR seq > ?4)",
            &[
                Val::text(&env.study),
                Val::text(&env.station),
                Val::text(participant),
                Val::Int(env.seq),
            ],
        )?
        .is_empty())
}

/// Whether message `id` was handled already (stored, or read whole and quarantined).
pub(super) fn handled(tx: &mut dyn CentralTx, id: &str) -> Result<bool, CentralError> {
    Ok(!tx
        .rows(
            "SELECT 1 FROM collect_records WHERE message_id = ?1
             UNION ALL SELECT 1 FROM collect_quarantine WHERE message_id = ?1",
            &[Val::text(id)],
        )?
        .is_empty())
}

pub(super) fn store_session(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
    let head = match replica::header(payload) {
        Ok(h) if h.session_id == env.subject => h,
        Ok(h) => {
            return Ok(Err(format!(
                "the record is of session {}, the envelope names {}",
                h.session_id, env.subject
            )))
        }
        Err(e) => return Ok(Err(e.to_string())),
    };
    if let Err(e) = replica::check_belongs(payload, &env.station) {
        return Ok(Err(e.to_string()));
    }
    // A withdrawal already received (newer than this record): the data is not kept.
    let purged = match &head.participant_id {
        Some(p) => withdrawn_after(tx, env, p)?,
        None => false,
    };
    if purged {
        tracing::info!(message = %env.id, "collect: a record of a withdrawn participant: acknowledged, nothing of it kept");
        // Only its message id, so it is acknowledged once: neither the pseudonym nor the
        // session id comes back after the withdrawal.
        tx.exec(
            "INSERT INTO collect_records (message_id, study, station, kind, subject, participant,
                 seq, payload, sha256, received_at, voided, applied, sealed, proof)
             VALUES (?1, ?2, ?3, ?4, '', NULL, ?5, '', ?6, ?7, 1, 0, ?8, NULL)",
            &[
                Val::text(&env.id),
                Val::text(&env.study),
                Val::text(&env.station),
                Val::text(&env.kind),
                Val::Int(env.seq),
                Val::text(&env.sha),
                Val::text(&crate::clock::utc_now()),
                Val::Int(Some(i64::from(env.signed.is_some()))),
            ],
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
    // A record that cannot be applied is quarantined with the reason (the view is as it
    // was: `set_session` applies inside a savepoint).
    if let Err(e) = tx.set_session(&env.subject, Some(payload), env.seq) {
        return Ok(Err(e.to_string()));
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

pub(super) fn store_tombstone(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
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

/// Whether a purge's payload is one (`empathic-purge`) and names the participant its
/// envelope does: a purge erases by its subject, so one whose payload says otherwise
/// (forged, or mangled) erases nothing.
fn check_purge(env: &Envelope, payload: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(payload)
        .map_err(|e| format!("a purge message that is not JSON: {e}"))?;
    if v["format"] != "empathic-purge" {
        return Err(format!(
            "a purge message of format {} (this collector reads empathic-purge)",
            v["format"]
        ));
    }
    if v["participant_id"].as_str() != Some(env.subject.as_str()) {
        return Err(format!(
            "the purge message is of participant {}, the envelope names {}: nothing erased",
            v["participant_id"], env.subject
        ));
    }
    if !v["sessions"]
        .as_array()
        .is_some_and(|a| a.iter().all(serde_json::Value::is_string))
    {
        return Err("the purge message's `sessions` is not a list of session ids".into());
    }
    Ok(())
}

pub(super) fn store_purge(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
    if let Err(reason) = check_purge(env, payload) {
        return Ok(Err(reason));
    }
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
    // Chunks of their messages refused at the gate (`refused_id`) go with the records.
    let refused = tx.rows(
        "SELECT message_id FROM collect_records WHERE study = ?1 AND station = ?2 AND participant = ?3
           AND kind IN ('session', 'consent')
           AND (CAST(?4 AS BIGINT) IS NULL OR seq IS NULL OR seq < ?4)",
        &subject_params(env),
    )?;
    for r in refused {
        if let Some(id) = r.into_iter().next().and_then(Val::into_text) {
            tx.exec(
                "DELETE FROM collect_quarantine WHERE refused_id = ?1",
                &[Val::text(&id)],
            )?;
        }
    }
    tx.exec(
        "DELETE FROM collect_records WHERE study = ?1 AND station = ?2 AND participant = ?3
           AND kind IN ('session', 'consent')
           AND (CAST(?4 AS BIGINT) IS NULL OR seq IS NULL OR seq < ?4)",
        &subject_params(env),
    )?;
    tx.remove_participant(&env.subject)?;
    tx.exec(
        "DELETE FROM collect_chunks WHERE station = ?1 AND subject = ?2",
        &[Val::text(&env.station), Val::text(&env.subject)],
    )?;
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

/// A participant's consent as their station now holds it (`empathic-consent` v1): the
/// latest by `seq` per station and participant is applied (shown on the study page), older
/// ones voided; one older than a purge of the participant is not kept.
pub(super) fn store_consent(tx: &mut dyn CentralTx, env: &Envelope, payload: &str) -> Outcome {
    let v: serde_json::Value = match serde_json::from_str(payload) {
        Ok(v) => v,
        Err(e) => return Ok(Err(format!("a consent message that is not JSON: {e}"))),
    };
    if v["format"] != "empathic-consent" || v["version"] != crate::store::CONSENT_VERSION {
        return Ok(Err(format!(
            "a consent message of format {} version {} (this collector reads empathic-consent version 1)",
            v["format"], v["version"]
        )));
    }
    if v["participant_id"].as_str() != Some(env.subject.as_str()) {
        return Ok(Err(format!(
            "the consent message is of participant {}, the envelope names {}",
            v["participant_id"], env.subject
        )));
    }
    if !matches!(v["consent"].as_str(), Some("given" | "withdrawn")) {
        return Ok(Err(format!(
            "consent {} is neither given nor withdrawn",
            v["consent"]
        )));
    }
    if let Some(at) = v["consent_at"].as_str() {
        if let Err(e) = crate::sync::health::check_stamp("consent_at", at) {
            return Ok(Err(e));
        }
    }
    if withdrawn_after(tx, env, &env.subject)? {
        insert_record(
            tx,
            env,
            "",
            Flags {
                participant: Some(env.subject.clone()),
                voided: true,
                applied: false,
            },
        )?;
        return Ok(Ok(()));
    }
    let newer = tx.rows(
        "SELECT 1 FROM collect_records WHERE study = ?1 AND station = ?2 AND subject = ?3
           AND kind = 'consent' AND CAST(?4 AS BIGINT) IS NOT NULL AND seq > ?4",
        &subject_params(env),
    )?;
    let voided = !newer.is_empty();
    if !voided {
        tx.exec(
            "UPDATE collect_records SET voided = 1, applied = 0
             WHERE study = ?1 AND station = ?2 AND subject = ?3 AND kind = 'consent'",
            &subject_params(env)[..3],
        )?;
    }
    insert_record(
        tx,
        env,
        payload,
        Flags {
            participant: Some(env.subject.clone()),
            voided,
            applied: !voided,
        },
    )?;
    Ok(Ok(()))
}
