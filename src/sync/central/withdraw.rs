//! A participant's withdrawal decided on the central side (`empathic participant purge P
//! --db CENTRAL`): for a participant whose station is lost, broken or revoked, or a purge
//! staff run where the data is.
//!
//! Contract: [`Central::withdraw`] removes, in one transaction, every record of the
//! participant (from every station of the study: their sessions, tombstones of those
//! sessions, and the station's own purge messages naming them), every chunk and quarantined
//! copy of those messages, and their rows in the station-schema view; it keeps one audit
//! line (`collect_purges`, station `*`: every station), which also drops any record of the
//! participant that arrives later (`rules::store_session`). Then the deleted bytes are
//! erased from the database files (SQLite `VACUUM`, PostgreSQL `VACUUM FULL`), and every
//! table is searched again for the participant's id and their sessions' ids: the
//! [`Withdrawn`] report says what is left, and the command exits 0 only when nothing is.

use super::{Central, Val};
use crate::store::CentralError;

/// What [`Central::withdraw`] removed and what it still found.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Withdrawn {
    pub participant: String,
    pub study: String,
    /// Their sessions, by id.
    pub sessions: Vec<String>,
    /// Rows deleted: records, chunks, quarantined messages.
    pub records: u64,
    pub chunks: u64,
    pub quarantined: u64,
    /// Tables where the participant's id or one of their sessions' ids is still found
    /// after the purge (empty: none).
    pub left_in: Vec<String>,
    /// The deleted bytes could not be erased from the files (the reason), when so.
    pub not_erased: Option<String>,
}

/// The collector's tables a withdrawal searches and cleans.
const TABLES: [&str; 3] = ["collect_records", "collect_chunks", "collect_quarantine"];

impl Central {
    /// Every study the database holds anything of (records, enrolments, health, status).
    pub fn studies(&mut self) -> Result<Vec<String>, CentralError> {
        let mut tx = self.begin()?;
        let rows = tx.rows(
            "SELECT study FROM collect_records UNION SELECT study FROM collect_stations
             UNION SELECT study FROM collect_health UNION SELECT study FROM collect_status",
            &[],
        )?;
        let mut out: Vec<String> = rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().and_then(Val::into_text))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The studies holding a record of `participant`, or a withdrawal of theirs.
    pub fn studies_of(&mut self, participant: &str) -> Result<Vec<String>, CentralError> {
        let mut tx = self.begin()?;
        let mut out: Vec<String> = Vec::new();
        for r in tx.rows(
            "SELECT DISTINCT study FROM collect_records WHERE participant = ?1",
            &[Val::text(participant)],
        )? {
            if let Some(s) = r.into_iter().next().and_then(Val::into_text) {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        Ok(out)
    }

    /// Every participant's consent in `study` as their stations' latest consent messages
    /// say (`consent` records; with several stations, the latest `consent_at` wins).
    pub fn consents(
        &mut self,
        study: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, CentralError> {
        let mut tx = self.begin()?;
        let mut latest: std::collections::BTreeMap<String, (String, String)> = Default::default();
        for r in tx.rows(
            "SELECT subject, payload FROM collect_records
             WHERE study = ?1 AND kind = 'consent' AND applied = 1",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let subject = r.next().and_then(Val::into_text).unwrap_or_default();
            let payload = r.next().and_then(Val::into_text).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&payload).unwrap_or_default();
            let (Some(consent), at) = (v["consent"].as_str(), v["consent_at"].as_str()) else {
                continue;
            };
            let at = at.unwrap_or("").to_string();
            if latest.get(&subject).is_none_or(|(_, held)| *held <= at) {
                latest.insert(subject, (consent.to_string(), at));
            }
        }
        Ok(latest.into_iter().map(|(p, (c, _))| (p, c)).collect())
    }

    /// Withdraws `participant` from `study` (see the module's contract).
    pub fn withdraw(&mut self, study: &str, participant: &str) -> Result<Withdrawn, CentralError> {
        let sqlite = matches!(self, Central::Sqlite(_));
        let mut tx = self.begin()?;
        let p = Val::text(participant);
        let s = Val::text(study);
        let mut sessions: Vec<String> = Vec::new();
        for r in tx.rows(
            "SELECT DISTINCT subject, applied FROM collect_records
             WHERE study = ?1 AND participant = ?2 AND kind = 'session'",
            &[s.clone(), p.clone()],
        )? {
            let mut r = r.into_iter();
            let subject = r.next().and_then(Val::into_text).unwrap_or_default();
            if r.next().and_then(|v| v.int()) == Some(1) {
                tx.set_session(&subject, None, None)?;
            }
            if !sessions.contains(&subject) {
                sessions.push(subject);
            }
        }
        // Sessions the SQLite view holds for them that no record names (applied from an
        // older central format). PostgreSQL keeps records only: its view is built from them.
        let unnamed = if sqlite {
            tx.rows(
                "SELECT id FROM sessions WHERE participant_id = ?1",
                std::slice::from_ref(&p),
            )?
        } else {
            Vec::new()
        };
        for r in unnamed {
            let id = r
                .into_iter()
                .next()
                .and_then(Val::into_text)
                .unwrap_or_default();
            if !sessions.contains(&id) {
                tx.set_session(&id, None, None)?;
                sessions.push(id);
            }
        }
        // Their messages' ids, before the records go: chunks of them refused at the gate
        // (kept under `refused_id`, their payload cut before any id) go with them.
        let mut ids: Vec<String> = Vec::new();
        for r in tx.rows(
            "SELECT message_id, subject FROM collect_records WHERE study = ?1",
            std::slice::from_ref(&s),
        )? {
            let mut r = r.into_iter();
            let (id, subject) = (
                r.next().and_then(Val::into_text).unwrap_or_default(),
                r.next().and_then(Val::into_text).unwrap_or_default(),
            );
            if subject == participant || sessions.contains(&subject) {
                ids.push(id);
            }
        }
        for r in tx.rows(
            "SELECT message_id FROM collect_records WHERE study = ?1 AND participant = ?2",
            &[s.clone(), p.clone()],
        )? {
            if let Some(id) = r.into_iter().next().and_then(Val::into_text) {
                ids.push(id);
            }
        }
        let mut records = tx.exec(
            "DELETE FROM collect_records WHERE study = ?1 AND participant = ?2",
            &[s.clone(), p.clone()],
        )?;
        let (mut chunks, mut quarantined) = (0, 0);
        // Chunks of their consent and purge messages (subject: the participant).
        chunks += tx.exec(
            "DELETE FROM collect_chunks WHERE subject = ?1",
            std::slice::from_ref(&p),
        )?;
        for id in &sessions {
            records += tx.exec(
                "DELETE FROM collect_records WHERE study = ?1 AND subject = ?2",
                &[s.clone(), Val::text(id)],
            )?;
            chunks += tx.exec(
                "DELETE FROM collect_chunks WHERE subject = ?1",
                &[Val::text(id)],
            )?;
        }
        // Quarantined copies: one pass over the table for the participant and every session.
        let mut needles = vec![participant.to_string()];
        needles.extend(sessions.iter().cloned());
        let (matches, params) = mentions("topic || payload", &needles);
        quarantined += tx.exec(
            &format!("DELETE FROM collect_quarantine WHERE {matches}"),
            &params,
        )?;
        ids.sort();
        ids.dedup();
        for id in &ids {
            quarantined += tx.exec(
                "DELETE FROM collect_quarantine WHERE refused_id = ?1 OR message_id = ?1",
                &[Val::text(id)],
            )?;
        }
        tx.remove_participant(participant)?;
        tx.exec(
            "INSERT INTO collect_purges (study, station, participant_id, records, seq, purged_at)
             VALUES (?1, '*', ?2, ?3, NULL, ?4)",
            &[
                s.clone(),
                p.clone(),
                Val::Int(Some(records as i64)),
                Val::text(&crate::clock::utc_now()),
            ],
        )?;
        tx.commit()?;
        let not_erased = self.erase().err().map(|e| e.to_string());
        let left_in = self.still_holding(participant, &sessions, sqlite)?;
        Ok(Withdrawn {
            participant: participant.to_string(),
            study: study.to_string(),
            sessions,
            records,
            chunks,
            quarantined,
            left_in,
            not_erased,
        })
    }

    /// The deleted rows' bytes out of the database files.
    pub(super) fn erase(&mut self) -> Result<(), CentralError> {
        match self {
            Central::Sqlite(store) => Ok(store.erase_deleted().map(|_| ())?),
            Central::Postgres(client, _) => client
                .batch_execute("VACUUM FULL collect_records, collect_chunks, collect_quarantine")
                .map_err(|e| {
                    CentralError::database("erasing the deleted rows", super::postgres::pg(&e))
                }),
        }
    }

    /// The tables that still mention `participant` or one of `sessions` (outside the audit
    /// line, which names the participant by design).
    fn still_holding(
        &mut self,
        participant: &str,
        sessions: &[String],
        sqlite: bool,
    ) -> Result<Vec<String>, CentralError> {
        let mut tx = self.begin()?;
        let mut left = Vec::new();
        let mut needles = vec![participant.to_string()];
        needles.extend(sessions.iter().cloned());
        // One pass per table, whatever the number of sessions.
        for table in TABLES {
            let columns = match table {
                "collect_records" => {
                    "message_id || subject || COALESCE(participant, '') || payload"
                }
                "collect_chunks" => "message_id || COALESCE(subject, '') || data",
                _ => "topic || reason || payload",
            };
            let (matches, params) = mentions(columns, &needles);
            let found = tx.rows(
                &format!("SELECT 1 FROM {table} WHERE {matches} LIMIT 1"),
                &params,
            )?;
            if !found.is_empty() {
                left.push(table.to_string());
            }
        }
        let view: &[(&str, &str)] = if sqlite {
            &[
                (
                    "sessions",
                    "SELECT 1 FROM sessions WHERE participant_id = ?1 LIMIT 1",
                ),
                (
                    "participants",
                    "SELECT 1 FROM participants WHERE id = ?1 LIMIT 1",
                ),
            ]
        } else {
            &[]
        };
        for (table, sql) in view {
            if !tx.rows(sql, &[Val::text(participant)])?.is_empty() {
                left.push(table.to_string());
            }
        }
        Ok(left)
    }
}

/// A condition true when `expr` holds any of `needles` literally, with its parameters.
fn mentions(expr: &str, needles: &[String]) -> (String, Vec<Val>) {
    let condition = (1..=needles.len())
        .map(|i| format!("({expr}) LIKE ?{i} ESCAPE '\\'"))
        .collect::<Vec<_>>()
        .join(" OR ");
    let params = needles
        .iter()
        .map(|n| Val::text(&format!("%{}%", like_escaped(n))))
        .collect();
    (condition, params)
}

/// `text` taken literally in a `LIKE ... ESCAPE '\'` pattern (both databases read the
/// clause alike): an id may hold `_`, which would otherwise match any character.
fn like_escaped(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_")
}
