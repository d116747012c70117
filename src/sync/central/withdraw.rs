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

    /// The studies holding a record of `participant` (their sessions, consent, or a
    /// station's purge of them).
    pub fn studies_of(&mut self, participant: &str) -> Result<Vec<String>, CentralError> {
        let mut tx = self.begin()?;
        let mut out: Vec<String> = Vec::new();
        for r in tx.rows(
            "SELECT DISTINCT study FROM collect_records
             WHERE participant = ?1 OR (subject = ?1 AND kind IN ('consent', 'purge'))",
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
        // Quarantined copies that name the participant or a session of theirs in a field
        // (never a substring of another participant's encoded data): candidates found by
        // the database, confirmed here (`names_any`), deleted by row.
        let mut needles = vec![participant.to_string()];
        needles.extend(sessions.iter().cloned());
        let (matches, params) = mentions("topic || payload", &needles);
        for r in tx.rows(
            &format!("SELECT id, topic, reason, payload FROM collect_quarantine WHERE {matches}"),
            &params,
        )? {
            let mut r = r.into_iter();
            let id = r.next().and_then(|v| v.int());
            let topic = r.next().and_then(Val::into_text).unwrap_or_default();
            let reason = r.next().and_then(Val::into_text).unwrap_or_default();
            let payload = r.next().and_then(Val::into_text).unwrap_or_default();
            if quarantine_names(&topic, &reason, &payload, &needles) {
                quarantined += tx.exec(
                    "DELETE FROM collect_quarantine WHERE id = ?1",
                    &[Val::Int(id)],
                )?;
            }
        }
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
                    CentralError::database_with(
                        "erasing the deleted rows",
                        super::postgres::pg(&e),
                        e,
                    )
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
        // One pass per table, whatever the number of sessions: the database finds the rows
        // holding a needle anywhere (cheap, on its side), and each candidate is kept only
        // when a field names it (`names_any`): a pseudonym such as `P01` occurs by chance
        // inside another participant's base64 features, and a substring is no evidence.
        for table in TABLES {
            let (columns, select) = match table {
                "collect_records" => (
                    "message_id || subject || COALESCE(participant, '') || payload",
                    "subject, COALESCE(participant, ''), payload",
                ),
                "collect_chunks" => (
                    "COALESCE(subject, '') || data",
                    "COALESCE(subject, ''), '', data",
                ),
                _ => ("topic || reason || payload", "topic, reason, payload"),
            };
            let (matches, params) = mentions(columns, &needles);
            let candidates = tx.rows(
                &format!("SELECT {select} FROM {table} WHERE {matches}"),
                &params,
            )?;
            let holds = candidates.into_iter().any(|r| {
                let mut r = r.into_iter().map(|v| v.into_text().unwrap_or_default());
                let (a, b, text) = (
                    r.next().unwrap_or_default(),
                    r.next().unwrap_or_default(),
                    r.next().unwrap_or_default(),
                );
                if table == "collect_quarantine" {
                    quarantine_names(&a, &b, &text, &needles)
                } else {
                    needles.iter().any(|n| *n == a || *n == b) || names_any(&text, &needles)
                }
            });
            if holds {
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

/// Whether a quarantined row names a needle: a segment of its topic, a word of the
/// collector's reason, or a field of its (possibly cut) payload.
fn quarantine_names(topic: &str, reason: &str, payload: &str, needles: &[String]) -> bool {
    let is_needle = |w: &str| needles.iter().any(|n| n == w);
    topic.split('/').any(is_needle)
        || reason
            .split(|c: char| c.is_whitespace() || "()[]{},;:'\"`".contains(c))
            .any(|w| is_needle(w.trim_end_matches('.')))
        || names_any(payload, needles)
}

/// Whether `text` names one of `needles` as a whole JSON string (a field's value, a key or
/// an array's element), looking inside strings that hold JSON themselves (an envelope's
/// payload). Text that is not whole JSON (a chunk of a message, a quarantined payload cut at
/// 4 KiB) is read as far as its string literals go. A needle inside a longer string (a
/// base64 block, an utterance) is not named by it.
pub(super) fn names_any(text: &str, needles: &[String]) -> bool {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => value_names(&v, needles),
        Err(_) => string_literals(text).any(|s| string_names(&s, needles)),
    }
}

fn value_names(v: &serde_json::Value, needles: &[String]) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => string_names(s, needles),
        Value::Array(a) => a.iter().any(|e| value_names(e, needles)),
        Value::Object(o) => o
            .iter()
            .any(|(k, e)| needles.iter().any(|n| n == k) || value_names(e, needles)),
        _ => false,
    }
}

fn string_names(s: &str, needles: &[String]) -> bool {
    needles.iter().any(|n| n == s)
        || (s.trim_start().starts_with(['{', '[']) && names_any(s, needles))
}

/// The string literals of JSON text that may be cut anywhere, decoded (a literal cut by
/// the end of the text is taken as far as it goes, its quotes unescaped; one that does not
/// decode is taken as written).
fn string_literals(text: &str) -> impl Iterator<Item = String> + '_ {
    let bytes = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at + bytes.get(at..)?.iter().position(|&b| b == b'"')?;
        let mut end = start + 1;
        let mut escaped = false;
        while end < bytes.len() && (escaped || bytes[end] != b'"') {
            escaped = !escaped && bytes[end] == b'\\';
            end += 1;
        }
        if end >= bytes.len() {
            // Cut by the end of the text: taken as far as it goes (it may hold JSON of
            // its own, an envelope's payload cut by a chunk), and the scan ends.
            at = bytes.len();
            let raw = text.get(start + 1..)?;
            return Some(raw.replace("\\\"", "\"").replace("\\\\", "\\"));
        }
        at = end + 1;
        let literal = &text[start..=end];
        Some(
            serde_json::from_str::<String>(literal)
                .unwrap_or_else(|_| text[start + 1..end].to_string()),
        )
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn n(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_pseudonym_inside_encoded_data_is_not_a_mention() {
        let record =
            r#"{"participant_id":"P02","windows":"QUJDUDAxWFla","sessions":[{"id":"S9"}]}"#;
        assert!(!names_any(record, &n(&["P01"])));
        assert!(names_any(record, &n(&["P02"])));
        assert!(names_any(record, &n(&["S9"])));
        // An utterance that mentions the id in a sentence is not a field naming it.
        assert!(!names_any(r#"{"text":"I am P01 today"}"#, &n(&["P01"])));
    }

    #[test]
    fn json_held_in_a_string_and_cut_text_are_read_as_far_as_they_go() {
        let envelope = r#"{"kind":"session","payload":"{\"participant_id\":\"P01\"}"}"#;
        assert!(names_any(envelope, &n(&["P01"])));
        let cut = r#"{"subject":"S1","data":"{\"participant_id\":\"P01\",\"x\":\"AAAP0"#;
        assert!(names_any(cut, &n(&["P01"])));
        assert!(names_any(cut, &n(&["S1"])));
        assert!(!names_any(r#"{"data":"xxP01xx","p":"P0"#, &n(&["P01"])));
        assert!(!names_any("not json at all P01", &n(&["P01"])));
    }

    #[test]
    fn quarantined_rows_name_by_topic_segment_reason_word_or_field() {
        let ids = n(&["P01"]);
        assert!(quarantine_names("empathic/v1/s/st/purge/P01", "", "", &ids));
        assert!(!quarantine_names(
            "empathic/v1/s/st/purge/P011",
            "",
            "",
            &ids
        ));
        assert!(quarantine_names("t", "consent of `P01` refused.", "", &ids));
        assert!(!quarantine_names("t", "bad signature", "QUJDUDAx", &ids));
    }
}
