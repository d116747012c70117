//! History for a new or second central database (`collect copy --from A --into B`): what
//! one central database holds, replayed into another through the same rules.
//!
//! Contract: enrolments (and their revocations) are copied first, then central withdrawals
//! (`collect_purges` lines of station `*`: the participant is withdrawn in the target too,
//! with [`Central::withdraw`]), then every record the source holds, station by station in
//! `seq` order, each in its own transaction through the rule of its kind (`store_session`,
//! `store_tombstone`, `store_purge`, `store_consent`): the target ends with the same
//! records, the same one applied per subject, and what it held of its own is kept. A record
//! the target already holds (same `message_id`) is skipped, so a copy run twice, or into a
//! database that also received the messages live, stores nothing twice. A record the
//! source kept without its payload (one of a withdrawn participant, dropped) is copied as
//! such. The source is only read.
//!
//! Nothing of the source is trusted (issue 56): every record is verified before its rule
//! runs: its payload must match its sha256, and a sealed record's kept [`Proof`] must
//! verify with a key enrolled *in the target* for the station it names (a key revoked
//! there only for records received before the revocation). A record that does not verify
//! is not copied and not quarantined (enrolling its station and copying again takes it),
//! counted in `unverified` with the reasons. Unsigned (plain) records, and sealed ones an
//! older build stored without a proof, carry nothing to verify: they are copied only with
//! `accept_unsigned`, said in the count. Enrolments are
//! copied only with `with_enrolments` (a source's enrolment is its word, not a proof);
//! central withdrawals are always copied, so a withdrawn participant's data never comes
//! back (a hostile source can withdraw a participant in the target: said per copy).

use super::*;
use crate::store::CentralError;

/// What a copy is allowed to take on the source's word.
#[derive(Debug, Default, Clone)]
pub struct CopyOptions {
    /// Only this study (every study when `None`).
    pub study: Option<String>,
    /// Copy the source's enrolments (and revocations) too.
    pub with_enrolments: bool,
    /// Copy unsigned (plain sync) records, which nothing can verify.
    pub accept_unsigned: bool,
}

/// What a copy did.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct Copied {
    /// Records stored in the target, and those it already held.
    pub records: u64,
    pub already_held: u64,
    /// Records the target's rules refused (quarantined there, with the reason).
    pub refused: u64,
    /// Records that did not verify (not copied, not quarantined), and the first reasons.
    pub unverified: u64,
    pub unverified_reasons: Vec<String>,
    /// Unsigned records copied on the source's word (`accept_unsigned`).
    pub unsigned_copied: u64,
    pub enrolments: u64,
    /// Enrolments the source holds that were not copied (no `with_enrolments`).
    pub enrolments_not_copied: u64,
    pub withdrawals: u64,
}

/// How many reasons [`Copied::unverified_reasons`] keeps.
const REASONS_KEPT: usize = 5;

/// One source record's identity, read before its payload.
struct Row {
    id: String,
    study: String,
    station: String,
    kind: String,
    subject: String,
    sha: String,
    seq: Option<i64>,
    sealed: bool,
    proof: Option<String>,
    received_at: Option<String>,
}

impl Central {
    /// Copies what `source` holds of `study` (every study when `None`) into this database;
    /// `progress` is called with (records done, records in all) after each.
    pub fn copy_from(
        &mut self,
        source: &mut Central,
        opts: &CopyOptions,
        mut progress: impl FnMut(u64, u64),
    ) -> Result<Copied, CentralError> {
        let study = opts.study.as_deref();
        let mut out = Copied::default();
        let of_study = |s: &str| study.is_none_or(|want| want == s);
        // Enrolments: a station the source lets in is let in here (and a revocation holds).
        let mut src = source.begin()?;
        let enrolments = src.rows(
            "SELECT study, station, key, allow_plain, enrolled_at, revoked_at
             FROM collect_stations ORDER BY enrolled_at",
            &[],
        )?;
        let withdrawals = src.rows(
            "SELECT study, participant_id FROM collect_purges WHERE station = '*' ORDER BY purged_at",
            &[],
        )?;
        let mut rows: Vec<Row> = Vec::new();
        for r in src.rows(
            "SELECT message_id, study, station, kind, subject, sha256, seq, sealed, proof,
                 received_at
             FROM collect_records ORDER BY study, station, seq, received_at",
            &[],
        )? {
            let mut r = r.into_iter();
            let mut text = || r.next().and_then(Val::into_text).unwrap_or_default();
            let (id, study, station, kind, subject, sha) =
                (text(), text(), text(), text(), text(), text());
            let seq = r.next().and_then(|v| v.int());
            let sealed = r.next().and_then(|v| v.int()).unwrap_or(0) != 0;
            let proof = r.next().and_then(Val::into_text);
            let received_at = r.next().and_then(Val::into_text);
            rows.push(Row {
                proof,
                received_at,
                id,
                study,
                station,
                kind,
                subject,
                sha,
                seq,
                sealed,
            });
        }
        drop(src);
        rows.retain(|r| of_study(&r.study));

        for e in enrolments {
            let mut e = e.into_iter();
            let mut text = || e.next().and_then(Val::into_text);
            let (Some(st), Some(station), Some(key)) = (text(), text(), text()) else {
                continue;
            };
            if !of_study(&st) {
                continue;
            }
            if !opts.with_enrolments {
                out.enrolments_not_copied += 1;
                continue;
            }
            let allow_plain = e.next().and_then(|v| v.int()).unwrap_or(0);
            let enrolled_at = e.next().and_then(Val::into_text).unwrap_or_default();
            let revoked_at = e.next().and_then(Val::into_text);
            let mut tx = self.begin()?;
            out.enrolments += tx.exec(
                "INSERT INTO collect_stations (study, station, key, allow_plain, enrolled_at, revoked_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
                &[
                    Val::text(&st),
                    Val::text(&station),
                    Val::text(&key),
                    Val::Int(Some(allow_plain)),
                    Val::text(&enrolled_at),
                    Val::Text(revoked_at.clone()),
                ],
            )?;
            if let Some(at) = revoked_at {
                tx.exec(
                    "UPDATE collect_stations SET revoked_at = ?4
                     WHERE study = ?1 AND station = ?2 AND key = ?3 AND revoked_at IS NULL",
                    &[
                        Val::text(&st),
                        Val::text(&station),
                        Val::text(&key),
                        Val::text(&at),
                    ],
                )?;
            }
            tx.commit()?;
        }

        for w in withdrawals {
            let mut w = w.into_iter();
            let (Some(st), Some(participant)) = (
                w.next().and_then(Val::into_text),
                w.next().and_then(Val::into_text),
            ) else {
                continue;
            };
            if !of_study(&st) {
                continue;
            }
            let mut tx = self.begin()?;
            let held = tx.rows(
                "SELECT 1 FROM collect_purges WHERE study = ?1 AND station = '*' AND participant_id = ?2",
                &[Val::text(&st), Val::text(&participant)],
            )?;
            drop(tx);
            if held.is_empty() {
                let done = self.withdraw(&st, &participant)?;
                if !done.left_in.is_empty() {
                    return Err(CentralError::database_says(
                        format!("withdrawing participant {participant} in the target"),
                        format!("data left in {}", done.left_in.join(", ")),
                    ));
                }
                out.withdrawals += 1;
            }
        }

        let all = rows.len() as u64;
        for (done, row) in rows.into_iter().enumerate() {
            self.copy_record(source, row, opts, &mut out)?;
            progress(done as u64 + 1, all);
        }
        Ok(out)
    }

    /// One record of `source` into this database, through its kind's rule.
    fn copy_record(
        &mut self,
        source: &mut Central,
        row: Row,
        opts: &CopyOptions,
        out: &mut Copied,
    ) -> Result<(), CentralError> {
        let mut tx = self.begin()?;
        if handled(tx.as_mut(), &row.id)? {
            out.already_held += 1;
            return Ok(());
        }
        let mut src = source.begin()?;
        let found = src.rows(
            "SELECT payload, participant, voided FROM collect_records WHERE message_id = ?1",
            &[Val::text(&row.id)],
        )?;
        drop(src);
        let Some(found) = found.into_iter().next() else {
            // Gone from the source meanwhile (a purge there): nothing to copy.
            return Ok(());
        };
        let mut found = found.into_iter();
        let payload = found.next().and_then(Val::into_text).unwrap_or_default();
        let participant = found.next().and_then(Val::into_text);
        let voided = found.next().and_then(|v| v.int()).unwrap_or(0) != 0;
        let proof: Option<Proof> = row
            .proof
            .as_deref()
            .and_then(|p| serde_json::from_str(p).ok());
        let env = Envelope {
            id: row.id.clone(),
            kind: row.kind.clone(),
            study: row.study,
            station: row.station,
            subject: row.subject,
            sha: row.sha,
            data: String::new(),
            chunk: 0,
            chunks: 1,
            seq: row.seq,
            signed: proof.as_ref().map(|p| (p.signer.clone(), p.sig.clone())),
            proof,
        };
        // A sealed record an older build stored kept no proof: like an unsigned one, it
        // has nothing to verify it with (copied only with `accept_unsigned`).
        let mut env = env;
        if row.sealed && env.proof.is_none() {
            env.signed = Some((String::new(), String::new()));
        }
        let verified = verify_copied(
            tx.as_mut(),
            &env,
            &payload,
            row.received_at.as_deref(),
            opts,
        )?;
        if let Err(reason) = verified {
            drop(tx);
            tracing::warn!(record = %env.id, station = %env.station, "collect copy: not copied: {reason}");
            out.unverified += 1;
            if out.unverified_reasons.len() < REASONS_KEPT {
                out.unverified_reasons.push(format!(
                    "{} ({} {}): {reason}",
                    env.id, env.kind, env.subject
                ));
            }
            return Ok(());
        }
        if env.proof.is_none() {
            out.unsigned_copied += 1;
        }
        let outcome = if payload.is_empty() {
            // Kept without its payload at the source (a withdrawn participant's record).
            insert_record(
                tx.as_mut(),
                &env,
                "",
                Flags {
                    participant,
                    voided,
                    applied: false,
                },
            )?;
            Ok(())
        } else {
            match env.kind.as_str() {
                "session" => store_session(tx.as_mut(), &env, &payload)?,
                "tombstone" => store_tombstone(tx.as_mut(), &env, &payload)?,
                "purge" => store_purge(tx.as_mut(), &env, &payload)?,
                "consent" => store_consent(tx.as_mut(), &env, &payload)?,
                other => Err(format!("a record of unknown kind `{other}`")),
            }
        };
        match outcome {
            Ok(()) => {
                tx.commit()?;
                out.records += 1;
            }
            Err(reason) => {
                drop(tx);
                let topic = format!("empathic/v1/{}/{}/{}", env.study, env.station, env.kind);
                let receipt = Some((String::new(), env.id.clone(), env.sha.clone()));
                self.quarantine(
                    &topic,
                    payload.as_bytes(),
                    format!("copied from another central database: {reason}"),
                    receipt,
                    None,
                )?;
                out.refused += 1;
            }
        }
        Ok(())
    }
}

/// Whether a source record may be copied: its payload matches its sha256 (a record kept
/// without its payload, a withdrawn participant's, has none to match) and its proof
/// verifies with a key the target enrols for its station; an unsigned record only with
/// `accept_unsigned`. The inner `Err` says why not.
fn verify_copied(
    tx: &mut dyn CentralTx,
    env: &Envelope,
    payload: &str,
    received_at: Option<&str>,
    opts: &CopyOptions,
) -> Result<Result<(), String>, CentralError> {
    if !payload.is_empty() && crate::digest::sha256_hex(payload.as_bytes()) != env.sha {
        return Ok(Err(format!(
            "its payload does not match its sha256 {}",
            env.sha
        )));
    }
    let Some(p) = &env.proof else {
        return Ok(if opts.accept_unsigned {
            Ok(())
        } else {
            Err(if env.signed.is_some() {
                "sealed, but stored by an older build without its proof: nothing verifies it; copy such records only on the source's word with --accept-unsigned".into()
            } else {
                "unsigned (plain sync): nothing verifies it; copy unsigned records only on the source's word with --accept-unsigned".into()
            })
        });
    };
    let enrolled = tx.rows(
        "SELECT station, revoked_at FROM collect_stations WHERE study = ?1 AND key = ?2",
        &[Val::text(&env.study), Val::text(&p.signer)],
    )?;
    let Some(row) = enrolled.into_iter().next() else {
        return Ok(Err(format!(
            "signed by {}, a key the target does not enrol for study {} (enrol station {} there, or copy with --with-enrolments)",
            p.signer, env.study, env.station
        )));
    };
    let mut row = row.into_iter();
    let owner = row.next().and_then(Val::into_text).unwrap_or_default();
    let revoked = row.next().and_then(Val::into_text);
    if owner != env.station {
        return Ok(Err(format!(
            "signed by station {owner}'s key but names station {}",
            env.station
        )));
    }
    if let Some(at) = revoked {
        // Received before the revocation: the key was good then.
        if received_at.is_none_or(|r| r >= at.as_str()) {
            return Ok(Err(format!(
                "signed by station {owner}'s key, revoked in the target at {at}, and received after it"
            )));
        }
    }
    let verifies = env.proof_verifies(p);
    Ok(if verifies {
        Ok(())
    } else {
        Err(format!(
            "the signature by station {owner}'s key does not verify over the record"
        ))
    })
}
