//! Station health and status in the central database: the latest health message of each
//! station, a bounded history of them, and the retained `status` (`online`/`offline`).
//!
//! Contract: [`Central::store_health`] takes one received `health` publish through
//! `sync::health::check` and the gate (sealed: signed by the key enrolled for the station
//! it names, not revoked, over `health::signed_bytes`; plain: as records are), then in one
//! transaction keeps it as the station's latest unless a later one (by `sent_at`) is held,
//! and adds it to the history, which keeps the newest [`HISTORY_PER_STATION`] per station.
//! Anything refused goes to `collect_quarantine` with the reason. A retained message the
//! broker hands out again changes nothing. [`Central::store_status`] keeps the latest
//! `status` word with when it came, through the same gate (`sync::status`: sealed, signed
//! and ordered by connection). What strangers (stations neither enrolled nor with a record)
//! leave in these tables is bounded ([`STRANGERS_KEPT`]) and expires
//! ([`STRANGER_EXPIRY_DAYS`]). Both hold for SQLite and PostgreSQL alike.

use super::{plain_admitted, signer_enrolled, Central, Gate, Stored};
use crate::store::central::Val;
use crate::store::CentralError;
use crate::sync::health::{self, Health};
use crate::sync::keys;
use crate::sync::status;

/// Health messages kept per station (15 min apart: about five days).
pub const HISTORY_PER_STATION: i64 = 500;

/// What the central database knows of one station's health.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StationHealth {
    pub station: String,
    /// The latest health message, as the station sent it.
    pub health: Option<serde_json::Value>,
    pub health_received_at: Option<String>,
    /// `online` or `offline` (the broker's last will), and when it came.
    pub status: Option<String>,
    pub status_received_at: Option<String>,
    /// Health messages in the history.
    pub history: i64,
    /// Its records stored here after its latest health message arrived: the outbox it
    /// reported pending has delivered at least these since (the study page shows the
    /// newest of the two; a health message is sent every 15 minutes).
    pub delivered_since_health: u64,
}

impl Central {
    /// Stores one received health message that `gate` lets in (see the module's contract).
    pub fn store_health(
        &mut self,
        topic: &str,
        payload: &[u8],
        gate: &Gate,
    ) -> Result<Stored, CentralError> {
        let now = crate::clock::utc_now();
        let h = match health::check(topic, payload, &now) {
            Ok(h) => h,
            Err(reason) => return self.quarantine(topic, payload, reason, None, None),
        };
        let mut tx = self.begin()?;
        let admitted = match (&h.signer, &h.sig) {
            (Some(signer), Some(sig)) => {
                match signer_enrolled(&mut *tx, &h.study, &h.station, signer)? {
                    Ok(owner) => {
                        let verifies = keys::VerifyingKey::parse(signer)
                            .map(|k| k.verifies(&health::signed_bytes(&h), sig))
                            .unwrap_or(false);
                        if verifies {
                            Ok(())
                        } else {
                            Err(format!(
                                "the signature by station {owner}'s key does not verify over this health message"
                            ))
                        }
                    }
                    Err(refused) => Err(refused.reason),
                }
            }
            (None, None) => {
                plain_admitted(&mut *tx, gate, &h.study, &h.station)?.map_err(|r| r.reason)
            }
            _ => Err("a health message with `signer` or `sig` but not both".into()),
        };
        if let Err(reason) = admitted {
            drop(tx);
            return self.quarantine(topic, payload, reason, None, None);
        }
        keep(&mut *tx, &h, payload, &now)?;
        bound_strangers(&mut *tx, &h.study, &h.station)?;
        tx.commit()?;
        Ok(Stored::Health { station: h.station })
    }

    /// Keeps a station's retained `status` word that `gate` lets in: signed by the key
    /// enrolled for the station (sealed), or plain where the gate takes plain from it. A
    /// signed word of an earlier connection than the one held changes nothing (a replayed
    /// `offline`), nor does the same word again (its `received_at` stays when it came).
    pub fn store_status(
        &mut self,
        topic: &str,
        payload: &[u8],
        gate: &Gate,
    ) -> Result<Stored, CentralError> {
        let st = match status::check(topic, payload) {
            Ok(s) => s,
            Err(reason) => return self.quarantine(topic, payload, reason, None, None),
        };
        if let Err(e) = crate::session::manifest::check_id("station", &st.station)
            .and_then(|()| crate::session::manifest::check_id("study", &st.study))
        {
            return self.quarantine(topic, payload, format!("status topic: {e}"), None, None);
        }
        let mut tx = self.begin()?;
        let admitted = match &st.signed {
            Some(signed) => {
                match signer_enrolled(&mut *tx, &st.study, &st.station, &signed.signer)? {
                    Ok(owner) => {
                        let verifies = keys::VerifyingKey::parse(&signed.signer)
                            .map(|k| k.verifies(&status::signed_bytes(signed), &signed.sig))
                            .unwrap_or(false);
                        if verifies {
                            Ok(())
                        } else {
                            Err(format!(
                                "the signature by station {owner}'s key does not verify over this status"
                            ))
                        }
                    }
                    Err(refused) => Err(refused.reason),
                }
            }
            None => plain_admitted(&mut *tx, gate, &st.study, &st.station)?.map_err(|_| {
                format!(
                    "unsigned status {:?} for station {}: under sealed sync only a status signed by the station's enrolled key is believed",
                    st.status, st.station
                )
            }),
        };
        if let Err(reason) = admitted {
            drop(tx);
            return self.quarantine(topic, payload, reason, None, None);
        }
        let connection = st.signed.as_ref().map(|s| s.connection.as_str());
        tx.exec(
            "INSERT INTO collect_status (study, station, status, received_at, connection)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (study, station) DO UPDATE SET status = excluded.status,
               received_at = excluded.received_at, connection = excluded.connection
             WHERE (collect_status.status <> excluded.status
                    OR COALESCE(collect_status.connection, '') <> COALESCE(excluded.connection, ''))
               AND (excluded.connection IS NULL OR collect_status.connection IS NULL
                    OR excluded.connection > collect_status.connection
                    OR (excluded.connection = collect_status.connection
                        AND excluded.status = 'offline'))",
            &[
                Val::text(&st.study),
                Val::text(&st.station),
                Val::text(&st.status),
                Val::text(&crate::clock::utc_now()),
                Val::Text(connection.map(str::to_string)),
            ],
        )?;
        bound_strangers(&mut *tx, &st.study, &st.station)?;
        tx.commit()?;
        Ok(Stored::Status {
            station: st.station,
        })
    }

    /// Every station of `study` that sent health or status, or is enrolled, by name.
    pub fn station_health(&mut self, study: &str) -> Result<Vec<StationHealth>, CentralError> {
        let mut tx = self.begin()?;
        let mut by: std::collections::BTreeMap<String, StationHealth> = Default::default();
        let blank = |station: &str| StationHealth {
            station: station.to_string(),
            health: None,
            health_received_at: None,
            status: None,
            status_received_at: None,
            history: 0,
            delivered_since_health: 0,
        };
        for r in tx.rows(
            "SELECT DISTINCT station FROM collect_stations WHERE study = ?1",
            &[Val::text(study)],
        )? {
            let station = r
                .into_iter()
                .next()
                .and_then(Val::into_text)
                .unwrap_or_default();
            by.insert(station.clone(), blank(&station));
        }
        for r in tx.rows(
            "SELECT station, payload, received_at FROM collect_health WHERE study = ?1",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let mut text = || r.next().and_then(Val::into_text);
            let station = text().unwrap_or_default();
            let e = by.entry(station.clone()).or_insert_with(|| blank(&station));
            e.health = text().and_then(|p| serde_json::from_str(&p).ok());
            e.health_received_at = text();
        }
        for r in tx.rows(
            "SELECT station, status, received_at FROM collect_status WHERE study = ?1",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let mut text = || r.next().and_then(Val::into_text);
            let station = text().unwrap_or_default();
            let e = by.entry(station.clone()).or_insert_with(|| blank(&station));
            e.status = text();
            e.status_received_at = text();
        }
        for r in tx.rows(
            "SELECT station, COUNT(*) FROM collect_health_history WHERE study = ?1 GROUP BY station",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let station = r.next().and_then(Val::into_text).unwrap_or_default();
            let n = r.next().and_then(|v| v.int()).unwrap_or(0);
            by.entry(station.clone()).or_insert_with(|| blank(&station)).history = n;
        }
        for (station, e) in by.iter_mut() {
            let Some(at) = &e.health_received_at else {
                continue;
            };
            let n = tx
                .rows(
                    "SELECT COUNT(*) FROM collect_records
                     WHERE study = ?1 AND station = ?2 AND received_at > ?3",
                    &[Val::text(study), Val::text(station), Val::text(at)],
                )?
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
                .and_then(|v| v.int())
                .unwrap_or(0);
            e.delivered_since_health = n.max(0) as u64;
        }
        Ok(by.into_values().collect())
    }
}

/// Stations not enrolled in a study and with no record in it whose health or status is kept
/// (only where plain is taken from anyone): at most this many, the longest silent dropped.
pub const STRANGERS_KEPT: usize = 100;
/// ... and for at most this long after their last message.
pub const STRANGER_EXPIRY_DAYS: u64 = 7;

/// Keeps what strangers (stations neither enrolled nor with a record in `study`) left in
/// the health and status tables bounded and expiring, when `station` is one: a client that
/// makes up station names cannot grow the database or the study page without end.
fn bound_strangers(
    tx: &mut dyn crate::store::central::CentralTx,
    study: &str,
    station: &str,
) -> Result<(), CentralError> {
    let known = tx.rows(
        "SELECT 1 FROM collect_stations WHERE study = ?1 AND station = ?2
         UNION ALL SELECT 1 FROM collect_records WHERE study = ?1 AND station = ?2",
        &[Val::text(study), Val::text(station)],
    )?;
    if !known.is_empty() {
        return Ok(());
    }
    let expired = crate::clock::utc_at(
        std::time::SystemTime::now()
            - std::time::Duration::from_secs(STRANGER_EXPIRY_DAYS * 86_400),
    );
    let strangers = tx.rows(
        "SELECT station, MAX(received_at) AS last FROM (
             SELECT station, received_at FROM collect_status WHERE study = ?1
             UNION ALL SELECT station, received_at FROM collect_health WHERE study = ?1) AS heard
         WHERE station NOT IN (SELECT station FROM collect_stations WHERE study = ?1)
           AND station NOT IN (SELECT station FROM collect_records WHERE study = ?1)
         GROUP BY station ORDER BY last DESC",
        &[Val::text(study)],
    )?;
    for (i, row) in strangers.into_iter().enumerate() {
        let mut row = row.into_iter();
        let name = row.next().and_then(Val::into_text).unwrap_or_default();
        let last = row.next().and_then(Val::into_text).unwrap_or_default();
        if i >= STRANGERS_KEPT || last < expired {
            for table in ["collect_status", "collect_health", "collect_health_history"] {
                tx.exec(
                    &format!("DELETE FROM {table} WHERE study = ?1 AND station = ?2"),
                    &[Val::text(study), Val::text(&name)],
                )?;
            }
        }
    }
    Ok(())
}

/// The latest (unless a later one is held) and the history, trimmed.
fn keep(
    tx: &mut dyn crate::store::central::CentralTx,
    h: &Health,
    payload: &[u8],
    now: &str,
) -> Result<(), CentralError> {
    let text = String::from_utf8_lossy(payload);
    let (study, station) = (Val::text(&h.study), Val::text(&h.station));
    tx.exec(
        "INSERT INTO collect_health (study, station, sent_at, received_at, sealed, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (study, station) DO UPDATE SET sent_at = excluded.sent_at,
           received_at = excluded.received_at, sealed = excluded.sealed,
           payload = excluded.payload
         WHERE excluded.sent_at > collect_health.sent_at",
        &[
            study.clone(),
            station.clone(),
            Val::text(&h.sent_at),
            Val::text(now),
            Val::Int(Some(i64::from(h.sig.is_some()))),
            Val::text(&text),
        ],
    )?;
    tx.exec(
        "INSERT INTO collect_health_history (study, station, sent_at, received_at, payload)
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (study, station, sent_at) DO NOTHING",
        &[
            study.clone(),
            station.clone(),
            Val::text(&h.sent_at),
            Val::text(now),
            Val::text(&text),
        ],
    )?;
    tx.exec(
        "DELETE FROM collect_health_history WHERE study = ?1 AND station = ?2 AND sent_at <
           (SELECT MIN(sent_at) FROM (SELECT sent_at FROM collect_health_history
              WHERE study = ?1 AND station = ?2 ORDER BY sent_at DESC LIMIT ?3) AS newest)",
        &[study, station, Val::Int(Some(HISTORY_PER_STATION))],
    )?;
    Ok(())
}
