//! The PostgreSQL central database: for studies with several collectors or many stations.
//!
//! Contract: the same collector tables as SQLite's (`BIGINT` where SQLite has `INTEGER`),
//! created on first use under an advisory lock (several collectors may start at once).
//! Every transaction first takes `collect_records` in `EXCLUSIVE` mode, so collectors
//! sharing the database apply the rules of [`super`] one message at a time, as SQLite's
//! `IMMEDIATE` transactions do; reading is never blocked. PostgreSQL holds the records, not
//! the station-schema tables: [`snapshot`] builds those, in memory, from the applied records
//! with the same [`super::apply`] the SQLite collector uses. Plain TCP (no TLS): keep the
//! database on the collector's host or behind a tunnel.

use crate::store::CentralError;
use postgres::types::{ToSql, Type};
use postgres::{Client, NoTls, Transaction};

use crate::store::central::{CentralTx, Val};
use crate::store::Store;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS collect_records (
    message_id  TEXT PRIMARY KEY,
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    kind        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    received_at TEXT NOT NULL,
    voided      BIGINT NOT NULL DEFAULT 0,
    participant TEXT,
    seq         BIGINT,
    applied     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS collect_records_subject ON collect_records (study, station, subject);
CREATE INDEX IF NOT EXISTS collect_records_participant ON collect_records (study, station, participant);
CREATE TABLE IF NOT EXISTS collect_chunks (
    message_id TEXT NOT NULL,
    chunk      BIGINT NOT NULL,
    chunks     BIGINT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (message_id, chunk)
);
ALTER TABLE collect_chunks ADD COLUMN IF NOT EXISTS station TEXT;
ALTER TABLE collect_chunks ADD COLUMN IF NOT EXISTS subject TEXT;
ALTER TABLE collect_chunks ADD COLUMN IF NOT EXISTS received_at TEXT;
CREATE TABLE IF NOT EXISTS collect_purges (
    study          TEXT NOT NULL,
    station        TEXT NOT NULL,
    participant_id TEXT NOT NULL,
    records        BIGINT NOT NULL,
    purged_at      TEXT NOT NULL,
    seq            BIGINT
);
ALTER TABLE collect_records ADD COLUMN IF NOT EXISTS sealed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE collect_records ADD COLUMN IF NOT EXISTS proof TEXT;
CREATE TABLE IF NOT EXISTS collect_stations (
    study       TEXT NOT NULL,
    station     TEXT NOT NULL,
    key         TEXT NOT NULL,
    allow_plain BIGINT NOT NULL DEFAULT 0,
    enrolled_at TEXT NOT NULL,
    revoked_at  TEXT,
    PRIMARY KEY (study, station, key)
);
CREATE TABLE IF NOT EXISTS collect_quarantine (
    id          BIGSERIAL PRIMARY KEY,
    topic       TEXT NOT NULL,
    reason      TEXT NOT NULL,
    payload     TEXT NOT NULL,
    received_at TEXT NOT NULL,
    message_id  TEXT
);
CREATE INDEX IF NOT EXISTS collect_quarantine_message ON collect_quarantine (message_id);
ALTER TABLE collect_quarantine ADD COLUMN IF NOT EXISTS refused_id TEXT;
CREATE INDEX IF NOT EXISTS collect_quarantine_refused ON collect_quarantine (refused_id);
";

/// A PostgreSQL error with the server's message (the error's own text is only "db error").
pub(super) fn pg(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{}: {}{}",
            db.severity(),
            db.message(),
            db.detail().map(|d| format!(" ({d})")).unwrap_or_default()
        ),
        None => e.to_string(),
    }
}

/// Hides the password of a URL in messages.
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &url[s + 3..at];
            match cred.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &cred[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

pub(super) fn open(url: &str) -> Result<Client, CentralError> {
    let mut client = Client::connect(url, NoTls).map_err(|e| {
        CentralError::database_with(format!("connecting to {}", redacted(url)), pg(&e), e)
    })?;
    let mut tx = client.transaction().map_err(|e| {
        CentralError::database_with(format!("opening {}", redacted(url)), pg(&e), e)
    })?;
    tx.batch_execute(
        "SET LOCAL client_min_messages TO WARNING; SELECT pg_advisory_xact_lock(7120394)",
    )
    .and_then(|()| tx.batch_execute(SCHEMA))
    .and_then(|()| tx.batch_execute(crate::store::central::HEALTH_TABLES))
    .and_then(|()| {
        tx.batch_execute("ALTER TABLE collect_status ADD COLUMN IF NOT EXISTS connection TEXT")
    })
    .and_then(|()| tx.commit())
    .map_err(|e| CentralError::database_with(format!("preparing {}", redacted(url)), pg(&e), e))?;
    Ok(client)
}

struct PgTx<'a>(Transaction<'a>);

pub(super) fn begin(client: &mut Client) -> Result<Box<dyn CentralTx + '_>, CentralError> {
    let mut tx = client.transaction().map_err(|e| {
        CentralError::database_with("cannot begin a central transaction", pg(&e), e)
    })?;
    tx.batch_execute("LOCK TABLE collect_records IN EXCLUSIVE MODE")
        .map_err(|e| CentralError::database_with("cannot lock the central records", pg(&e), e))?;
    Ok(Box::new(PgTx(tx)))
}

/// `?N` placeholders as PostgreSQL's `$N`.
fn dollars(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

fn bind(params: &[Val]) -> Vec<Box<dyn ToSql + Sync>> {
    params
        .iter()
        .map(|p| match p {
            Val::Int(i) => Box::new(*i) as Box<dyn ToSql + Sync>,
            Val::Text(t) => Box::new(t.clone()) as Box<dyn ToSql + Sync>,
        })
        .collect()
}

impl PgTx<'_> {
    /// Prepares `sql` (placeholders as `$N`), binds `params` and runs `f`.
    fn run<T>(
        &mut self,
        sql: &str,
        params: &[Val],
        f: impl FnOnce(
            &mut Transaction<'_>,
            &postgres::Statement,
            &[&(dyn ToSql + Sync)],
        ) -> Result<T, postgres::Error>,
    ) -> Result<T, CentralError> {
        let st = self
            .0
            .prepare(&dollars(sql))
            .map_err(|e| CentralError::database_with("central database", pg(&e), e))?;
        let bound = bind(params);
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| b.as_ref()).collect();
        f(&mut self.0, &st, &refs)
            .map_err(|e| CentralError::database_with("central database", pg(&e), e))
    }
}

impl CentralTx for PgTx<'_> {
    fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64, CentralError> {
        self.run(sql, params, |tx, st, p| tx.execute(st, p))
    }

    fn rows(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, CentralError> {
        let rows = self.run(sql, params, |tx, st, p| tx.query(st, p))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| {
                        let ty = r.columns()[i].type_();
                        Ok(if *ty == Type::INT8 {
                            Val::Int(r.try_get::<_, Option<i64>>(i)?)
                        } else if *ty == Type::INT4 {
                            Val::Int(r.try_get::<_, Option<i32>>(i)?.map(i64::from))
                        } else {
                            Val::Text(r.try_get::<_, Option<String>>(i)?)
                        })
                    })
                    .collect::<Result<Vec<_>, postgres::Error>>()
                    .map_err(|e| CentralError::database_with("central database", pg(&e), e))
            })
            .collect()
    }

    /// The view is built when read ([`snapshot`]); nothing to keep in step here.
    /// PostgreSQL keeps no station-schema tables (its reads build them from the applied
    /// records), so a record is checked the way a SQLite central file takes it: applied,
    /// here to a scratch store. One that cannot be is refused (quarantined) as it is there.
    fn set_session(
        &mut self,
        _id: &str,
        record: Option<&str>,
        _seq: Option<i64>,
    ) -> Result<(), CentralError> {
        match record {
            Some(r) => crate::store::central::check_applies(r),
            None => Ok(()),
        }
    }

    fn remove_participant(&mut self, _id: &str) -> Result<(), CentralError> {
        Ok(())
    }

    fn commit(self: Box<Self>) -> Result<(), CentralError> {
        self.0.commit().map_err(|e| {
            CentralError::database_with("cannot commit to the central database", pg(&e), e)
        })
    }
}

/// The applied session records, in the order a view applies them (per station, by outbox
/// sequence).
const APPLIED: &str = "FROM collect_records WHERE kind = 'session' AND applied = 1
     ORDER BY station, seq NULLS FIRST, received_at, message_id";

/// An in-memory store with the station schema holding every applied session record.
pub(super) fn snapshot(client: &mut Client) -> Result<Store, CentralError> {
    let rows = client
        .query(&format!("SELECT message_id, payload {APPLIED}"), &[])
        .map_err(|e| CentralError::database_with("cannot read the central records", pg(&e), e))?;
    Store::from_records(rows.iter().map(|r| (r.get(0), r.get(1))))
}

/// Brings `view` up to date with the applied session records: removes the sessions whose
/// record is no longer applied (replaced, voided, purged), applies the records not yet in
/// it (in the snapshot's order), leaving out [`super::PAGE_VIEW_SKIPS`]. Each record is
/// read once over the life of `view`.
pub(super) fn refresh(client: &mut Client, view: &mut super::PageView) -> Result<(), CentralError> {
    let rows = client
        .query(&format!("SELECT message_id, subject {APPLIED}"), &[])
        .map_err(|e| CentralError::database_with("cannot read the central records", pg(&e), e))?;
    let now: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let ids: std::collections::HashSet<&str> = now.iter().map(|(id, _)| id.as_str()).collect();
    let mut gone: Vec<String> = view
        .applied
        .iter()
        .filter(|(id, _)| !ids.contains(id.as_str()))
        .map(|(_, subject)| subject.clone())
        .collect();
    let new: Vec<String> = now
        .iter()
        .filter(|(id, _)| !view.applied.contains_key(id))
        .map(|(id, _)| id.clone())
        .collect();
    if view.store.is_none() {
        view.store = Some(Store::new_page_view()?);
    }
    let Some(store) = view.store.as_ref() else {
        return Err(CentralError::database_says(
            "refreshing the read view",
            "no read view",
        ));
    };
    // A few records a query: a long session's record is megabytes of window features
    // (parsed, then left out), so a batch bounds what is held at once.
    for batch in new.chunks(8) {
        let batch: Vec<String> = batch.to_vec();
        let rows = client
            .query(
                "SELECT message_id, payload FROM collect_records WHERE message_id = ANY($1)",
                &[&batch],
            )
            .map_err(|e| {
                CentralError::database_with("cannot read the central records", pg(&e), e)
            })?;
        let mut by_id: std::collections::HashMap<String, String> =
            rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        let records: Vec<(String, String)> = batch
            .iter()
            .filter_map(|id| Some((id.clone(), by_id.remove(id)?)))
            .collect();
        store.update_page_view(&std::mem::take(&mut gone), records, &super::PAGE_VIEW_SKIPS)?;
    }
    if !gone.is_empty() {
        store.update_page_view(&gone, Vec::new(), &super::PAGE_VIEW_SKIPS)?;
    }
    view.applied = now.into_iter().collect();
    Ok(())
}
