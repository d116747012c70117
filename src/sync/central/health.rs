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
//! `status` word with when it came (the last will is unsigned: it says only online or
//! offline). Both hold for SQLite and PostgreSQL alike.

use super::{plain_admitted, signer_enrolled, Central, Gate, Stored};
use crate::store::central::Val;
use crate::sync::health::{self, Health};
use crate::sync::keys;

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
}

impl Central {
    /// Stores one received health message that `gate` lets in (see the module's contract).
    pub fn store_health(
        &mut self,
        topic: &str,
        payload: &[u8],
        gate: &Gate,
    ) -> Result<Stored, String> {
        let now = crate::clock::utc_now();
        let h = match health::check(topic, payload, &now) {
            Ok(h) => h,
            Err(reason) => return self.quarantine(topic, payload, reason, None),
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
                    Err(reason) => Err(reason),
                }
            }
            (None, None) => plain_admitted(&mut *tx, gate, &h.study, &h.station)?,
            _ => Err("a health message with `signer` or `sig` but not both".into()),
        };
        if let Err(reason) = admitted {
            drop(tx);
            return self.quarantine(topic, payload, reason, None);
        }
        keep(&mut *tx, &h, payload, &now)?;
        tx.commit()?;
        Ok(Stored::Health { station: h.station })
    }

    /// Keeps the station's retained `status` word (`online`, `offline`).
    pub fn store_status(&mut self, topic: &str, payload: &[u8]) -> Result<Stored, String> {
        let parts: Vec<&str> = topic.split('/').collect();
        let word = String::from_utf8_lossy(payload).to_string();
        if parts.len() != 5 || !["online", "offline"].contains(&word.as_str()) {
            return self.quarantine(
                topic,
                payload,
                format!("status {word:?} on {topic}: expected online or offline"),
                None,
            );
        }
        let mut tx = self.begin()?;
        tx.exec(
            "INSERT INTO collect_status (study, station, status, received_at)
             VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (study, station) DO UPDATE SET status = excluded.status,
               received_at = excluded.received_at",
            &[
                Val::text(parts[2]),
                Val::text(parts[3]),
                Val::text(&word),
                Val::text(&crate::clock::utc_now()),
            ],
        )?;
        tx.commit()?;
        Ok(Stored::Status {
            station: parts[3].to_string(),
        })
    }

    /// Every station of `study` that sent health or status, or is enrolled, by name.
    pub fn station_health(&mut self, study: &str) -> Result<Vec<StationHealth>, String> {
        let mut tx = self.begin()?;
        let mut by: std::collections::BTreeMap<String, StationHealth> = Default::default();
        let blank = |station: &str| StationHealth {
            station: station.to_string(),
            health: None,
            health_received_at: None,
            status: None,
            status_received_at: None,
            history: 0,
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
        Ok(by.into_values().collect())
    }
}

/// The latest (unless a later one is held) and the history, trimmed.
fn keep(
    tx: &mut dyn crate::store::central::CentralTx,
    h: &Health,
    payload: &[u8],
    now: &str,
) -> Result<(), String> {
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
