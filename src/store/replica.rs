//! Session records into the station schema: what makes a central database readable by
//! `sessions`, `report`, `evaluate` and `export windows` exactly as a station's file is.
//!
//! Contract: `apply_record` inserts a session record's rows (payload `empathic-session`
//! version 2, or version 1) into a store with the station schema, table by table in the
//! record's foreign-key order; `remove_session` takes a session's rows out again (a
//! tombstone, a newer record, a purge). Every table and column named by a record is checked
//! against the store's own schema first (a record cannot name what the schema lacks), blob
//! columns are decoded from base64, and rows are upserted on the table's primary key, so a
//! record applied twice leaves one copy.

use std::collections::BTreeMap;

use base64::Engine as _;
use rusqlite::{types::Value, Transaction};

use super::CentralError;
use crate::config::SyncContent;
use crate::store::sql::announce::RECORD_TABLES;

/// What a session record is about.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordHeader {
    pub session_id: String,
    pub participant_id: Option<String>,
}

/// One table of a record: column names and rows of JSON values.
struct Table {
    name: String,
    columns: Vec<String>,
    rows: Vec<Vec<serde_json::Value>>,
}

/// Reads a record's header (its session and participant) without applying it.
pub fn header(payload: &str) -> Result<RecordHeader, CentralError> {
    let tables = tables(payload)?;
    let session = tables
        .iter()
        .find(|t| t.name == "sessions")
        .ok_or_else(|| CentralError::Record("the record has no sessions table".into()))?;
    let row = session
        .rows
        .first()
        .ok_or_else(|| CentralError::Record("the record's sessions table is empty".into()))?;
    let col = |name: &str| {
        session
            .columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| row.get(i))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    Ok(RecordHeader {
        session_id: col("id")
            .ok_or_else(|| CentralError::Record("the record's session has no id".into()))?,
        participant_id: col("participant_id"),
    })
}

/// Checks that a record writes only its own session and what that session owns, for the
/// station that sent it: one `sessions` row; every session-owned row of that session; the
/// `stations` row of `station` or of the session's own station alone; the `participants` row of the session's participant alone; survey answers of that
/// participant in that session; `stories` only those the record's rows refer to (and a
/// story already stored is never rewritten, see `apply_record`). Anything else names the
/// table and row, and the record is quarantined with it. (Broker ACLs cannot stop this: the
/// rows are inside the payload.)
pub fn check_belongs(payload: &str, station: &str) -> Result<(), CentralError> {
    let head = header(payload)?;
    let tables = tables(payload)?;
    let mut referenced_stories = std::collections::BTreeSet::new();
    let text = |row: &[serde_json::Value], columns: &[String], name: &str| {
        columns
            .iter()
            .position(|c| c == name)
            .and_then(|i| row.get(i))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let session_rows = tables
        .iter()
        .find(|t| t.name == "sessions")
        .map_or(0, |t| t.rows.len());
    if session_rows != 1 {
        return Err(CentralError::Record(format!(
            "sessions: the record carries {session_rows} rows; a record is of one session"
        )));
    }
    let session_station = tables.iter().find(|t| t.name == "sessions").and_then(|t| {
        t.rows
            .first()
            .and_then(|r| text(r, &t.columns, "station_id"))
    });
    for t in &tables {
        for (i, row) in t.rows.iter().enumerate() {
            let col = |name: &str| text(row, &t.columns, name);
            let bad = |what: String| {
                Err(CentralError::Record(format!("{} row {i}: {what}; a record of session {} from station {station} may not write it", t.name, head.session_id)))
            };
            match t.name.as_str() {
                // Where the session was recorded may differ from who publishes it (a
                // recording replayed on another machine); its id is the envelope's (checked
                // by the caller) and every row below hangs off it.
                "sessions" => {}
                "stations" => {
                    let id = col("id");
                    if id.as_deref() != Some(station) && id != session_station {
                        return bad(format!("station `{}`", id.unwrap_or_default()));
                    }
                }
                "participants" => {
                    if col("id") != head.participant_id {
                        return bad(format!("participant `{}`", col("id").unwrap_or_default()));
                    }
                }
                "stories" => {}
                _ => {
                    if col("session_id").as_deref() != Some(head.session_id.as_str()) {
                        return bad(format!(
                            "session `{}`",
                            col("session_id").unwrap_or_default()
                        ));
                    }
                    if t.name == "survey_responses" && col("participant_id") != head.participant_id
                    {
                        return bad(format!(
                            "participant `{}`",
                            col("participant_id").unwrap_or_default()
                        ));
                    }
                    if let Some(story) = col("story_id") {
                        referenced_stories.insert(story);
                    }
                }
            }
        }
    }
    if let Some(stories) = tables.iter().find(|t| t.name == "stories") {
        for (i, row) in stories.rows.iter().enumerate() {
            let id = text(row, &stories.columns, "id").unwrap_or_default();
            if !referenced_stories.contains(&id) {
                return Err(CentralError::Record(format!(
                    "stories row {i}: story `{id}`, which none of the record's rows refer to; a record of session {} may not write it",
                    head.session_id
                )));
            }
        }
    }
    Ok(())
}

/// The record's tables, in the order they are applied.
fn tables(payload: &str) -> Result<Vec<Table>, CentralError> {
    let v: serde_json::Value = serde_json::from_str(payload)
        .map_err(|e| CentralError::Record(format!("the record is not JSON: {e}")))?;
    if v["format"] != "empathic-session" {
        return Err(CentralError::Record(format!(
            "format {} is not empathic-session",
            v["format"]
        )));
    }
    match v["version"].as_u64() {
        Some(2) => {
            let given = v["tables"]
                .as_object()
                .ok_or_else(|| CentralError::Record("a version 2 record needs `tables`".into()))?;
            for name in given.keys() {
                if !RECORD_TABLES.iter().any(|t| t.name == name) {
                    return Err(CentralError::Record(format!(
                        "table `{name}` is not one a record may carry"
                    )));
                }
            }
            RECORD_TABLES
                .iter()
                .filter_map(|t| given.get(t.name).map(|j| (t.name, j)))
                .map(|(name, j)| {
                    let columns = j["columns"]
                        .as_array()
                        .ok_or_else(|| {
                            CentralError::Record(format!("table `{name}` has no columns"))
                        })?
                        .iter()
                        .map(|c| c.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| {
                            CentralError::Record(format!(
                                "table `{name}` has a column name not text"
                            ))
                        })?;
                    let rows = j["rows"]
                        .as_array()
                        .ok_or_else(|| CentralError::Record(format!("table `{name}` has no rows")))?
                        .iter()
                        .map(|r| {
                            r.as_array()
                                .filter(|r| r.len() == columns.len())
                                .cloned()
                                .ok_or_else(|| {
                                    CentralError::Record(format!(
                                        "table `{name}` has a row not of {} values",
                                        columns.len()
                                    ))
                                })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok(Table {
                        name: name.to_string(),
                        columns,
                        rows,
                    })
                })
                .collect()
        }
        Some(1) => v1_tables(&v),
        Some(newer) => Err(CentralError::Record(format!(
            "record version {newer} (this build reads 1 and 2: upgrade the collector)"
        ))),
        None => Err(CentralError::Record(
            "a record without a version (this build reads 1 and 2)".into(),
        )),
    }
}

/// A version 1 record (named lists of row objects, without the session id in each row)
/// in the version 2 shape. Version 1 carried no stories, windows or modalities: its stories
/// get a row with the id as title, so the exposures have what they refer to.
fn v1_tables(v: &serde_json::Value) -> Result<Vec<Table>, CentralError> {
    let session = v["session"]
        .as_object()
        .ok_or_else(|| CentralError::Record("a version 1 record needs `session`".into()))?;
    let id = session
        .get("id")
        .and_then(|i| i.as_str())
        .ok_or_else(|| CentralError::Record("the record's session has no id".into()))?
        .to_string();
    let objects = |key: &str| -> Vec<serde_json::Map<String, serde_json::Value>> {
        v[key]
            .as_array()
            .map(|a| a.iter().filter_map(|o| o.as_object().cloned()).collect())
            .unwrap_or_default()
    };
    let to_table = |name: &str,
                    mut rows: Vec<serde_json::Map<String, serde_json::Value>>,
                    with_session: bool| {
        if with_session {
            for r in &mut rows {
                r.insert("session_id".into(), id.clone().into());
            }
        }
        let columns: Vec<String> = rows
            .first()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default();
        let rows = rows
            .iter()
            .map(|r| {
                columns
                    .iter()
                    .map(|c| r.get(c).cloned().unwrap_or_default())
                    .collect()
            })
            .collect();
        Table {
            name: name.to_string(),
            columns,
            rows,
        }
    };
    let s = session.clone();
    let station = s.get("station_id").cloned().unwrap_or_default();
    let participant = s.get("participant_id").cloned().unwrap_or_default();
    let created = s.get("created_at").cloned().unwrap_or_default();
    let shown = objects("stories_shown");
    let mut story_ids: Vec<String> = shown
        .iter()
        .chain(objects("predictions").iter())
        .filter_map(|r| {
            r.get("story_id")
                .and_then(|x| x.as_str())
                .map(str::to_string)
        })
        .collect();
    story_ids.sort();
    story_ids.dedup();
    let one = |pairs: &[(&str, serde_json::Value)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<serde_json::Map<_, _>>()
    };
    let mut out = vec![to_table(
        "stations",
        vec![one(&[("id", station), ("first_seen_at", created.clone())])],
        false,
    )];
    if !participant.is_null() {
        out.push(to_table(
            "participants",
            vec![one(&[
                ("id", participant),
                ("first_seen_at", created.clone()),
            ])],
            false,
        ));
    }
    out.push(to_table(
        "stories",
        story_ids
            .iter()
            .map(|sid| {
                one(&[
                    ("id", sid.clone().into()),
                    ("title", sid.clone().into()),
                    ("text", "".into()),
                    ("source", "not carried by a version 1 record".into()),
                    ("created_at", created.clone()),
                ])
            })
            .collect(),
        false,
    ));
    out.push(to_table("sessions", vec![s], false));
    out.push(to_table("phases", objects("phases"), true));
    out.push(to_table("story_exposures", shown, true));
    out.push(to_table("self_ratings", objects("self_ratings"), true));
    out.push(to_table("survey_responses", objects("surveys"), true));
    // Predictions refer to windows a version 1 record does not carry: kept in the record,
    // not applied.
    Ok(out.into_iter().filter(|t| !t.rows.is_empty()).collect())
}

/// A table's columns in the store: name to (declared type, primary-key position).
fn schema_of(
    tx: &Transaction<'_>,
    table: &str,
) -> Result<BTreeMap<String, (String, i64)>, CentralError> {
    let mut st = tx
        .prepare("SELECT name, type, pk FROM pragma_table_info(?1)")
        .map_err(|e| CentralError::database(format!("reading the schema of {table}"), e))?;
    let cols = st
        .query_map([table], |r| {
            Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?)))
        })
        .and_then(|rows| rows.collect::<Result<BTreeMap<_, _>, _>>())
        .map_err(|e| CentralError::database(format!("reading the schema of {table}"), e))?;
    if cols.is_empty() {
        return Err(CentralError::database_says(
            "reading the schema",
            format!("no table {table}"),
        ));
    }
    Ok(cols)
}

fn to_value(v: &serde_json::Value, blob: bool, at: &str) -> Result<Value, CentralError> {
    Ok(match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Integer(i64::from(*b)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Real(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) if blob => Value::Blob(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| CentralError::Record(format!("{at}: not base64: {e}")))?,
        ),
        serde_json::Value::String(s) => Value::Text(s.clone()),
        other => {
            return Err(CentralError::Record(format!(
                "{at}: {other} is not a column value"
            )))
        }
    })
}

/// Inserts the record's rows (upserting on each table's primary key). The session's earlier
/// rows should be removed first ([`remove_session`]) when the record replaces them.
///
/// A participant's survey answer is one row (participant, instrument, item, time point) that
/// the last session to record it owns, as on the station. With `seq` (the record's outbox
/// sequence number, in a central file that keeps `collect_records`), an answer already
/// owned by a session whose applied record is newer is left to it, so the owner does not
/// depend on the order records arrive in; without it, the record applied last wins (a
/// snapshot applies records in sequence order).
pub(super) fn apply_record(
    tx: &Transaction<'_>,
    payload: &str,
    seq: Option<i64>,
) -> Result<RecordHeader, CentralError> {
    apply_record_without(tx, payload, seq, &[])
}

/// [`apply_record`] leaving out the tables named in `skip` (a light read view).
pub(super) fn apply_record_without(
    tx: &Transaction<'_>,
    payload: &str,
    seq: Option<i64>,
    skip: &[&str],
) -> Result<RecordHeader, CentralError> {
    let head = header(payload)?;
    let mut tables = tables(payload)?;
    // What the record carried of the optional tables, for readers of this database (they
    // say "not synced" rather than show an absent table as zero rows).
    let carried = |name: &str| tables.iter().any(|t| t.name == name);
    let content = SyncContent {
        window_features: carried("window_features"),
        transcripts: carried("utterances"),
        frame_features: carried("frames") && carried("frame_features"),
    };
    tables.retain(|t| !skip.contains(&t.name.as_str()));
    for t in tables {
        let schema = schema_of(tx, &t.name)?;
        for c in &t.columns {
            if !schema.contains_key(c) {
                return Err(CentralError::Record(format!(
                    "table {} has no column `{c}`",
                    t.name
                )));
            }
        }
        let keys: Vec<&String> = {
            let mut k: Vec<(&String, i64)> = schema
                .iter()
                .filter(|(_, (_, pk))| *pk > 0)
                .map(|(n, (_, pk))| (n, *pk))
                .collect();
            k.sort_by_key(|(_, pk)| *pk);
            k.into_iter().map(|(n, _)| n).collect()
        };
        let updates: Vec<String> = t
            .columns
            .iter()
            .filter(|c| !keys.contains(c))
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        let conflict = if keys.is_empty() || !keys.iter().all(|k| t.columns.contains(k)) {
            String::new()
        } else if updates.is_empty() || t.name == "stories" {
            // A story is the study's, shared by every station: the first text stored stays
            // (a record cannot rewrite what other sessions were shown).
            format!(
                " ON CONFLICT ({}) DO NOTHING",
                keys.iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!(
                " ON CONFLICT ({}) DO UPDATE SET {}",
                keys.iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                updates.join(", ")
            )
        };
        let guard = match (t.name.as_str(), seq, conflict.contains("DO UPDATE")) {
            ("survey_responses", Some(seq), true) => format!(
                " WHERE coalesce((SELECT max(r.seq) FROM collect_records r WHERE r.kind = 'session'
                   AND r.applied = 1 AND r.subject = survey_responses.session_id), -1) <= {seq}"
            ),
            _ => String::new(),
        };
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({}){conflict}{guard}",
            t.name,
            t.columns.join(", "),
            (1..=t.columns.len())
                .map(|i| format!("?{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut st = tx
            .prepare_cached(&sql)
            .map_err(|e| CentralError::database(format!("applying table {}", t.name), e))?;
        let blob: Vec<bool> = t
            .columns
            .iter()
            .map(|c| {
                schema
                    .get(c)
                    .is_some_and(|(ty, _)| ty.eq_ignore_ascii_case("BLOB"))
            })
            .collect();
        for (i, row) in t.rows.iter().enumerate() {
            let values = row
                .iter()
                .zip(&blob)
                .zip(&t.columns)
                .map(|((v, b), c)| to_value(v, *b, &format!("{} row {i} column {c}", t.name)))
                .collect::<Result<Vec<_>, _>>()?;
            st.execute(rusqlite::params_from_iter(values))
                .map_err(|e| CentralError::database(format!("applying {} row {i}", t.name), e))?;
        }
    }
    crate::store::sql::session_rows::set_synced_content(tx, &head.session_id, &content)
        .map_err(|e| CentralError::database("cannot record what the record carried", e))?;
    Ok(head)
}

/// Removes session `id`'s rows (as a station removes a session it replaces).
pub(super) fn remove_session(tx: &Transaction<'_>, id: &str) -> Result<(), CentralError> {
    crate::store::sql::session_rows::delete(tx, id).map_err(|e| {
        CentralError::database(format!("removing session {id} from the central tables"), e)
    })
}

/// Removes what is left of participant `id` once their sessions are gone: their survey
/// answers and their row.
pub(super) fn remove_participant(tx: &Transaction<'_>, id: &str) -> Result<(), CentralError> {
    tx.execute(
        "DELETE FROM survey_responses WHERE participant_id = ?1",
        [id],
    )
    .and_then(|_| {
        tx.execute(
            "DELETE FROM participants WHERE id = ?1
                   AND NOT EXISTS (SELECT 1 FROM sessions WHERE participant_id = ?1)",
            [id],
        )
    })
    .map_err(|e| {
        CentralError::database(
            format!("removing participant {id} from the central tables"),
            e,
        )
    })?;
    Ok(())
}
