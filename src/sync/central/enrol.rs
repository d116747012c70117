//! Which stations a collector lets in (`collect enrol`, `revoke`, `stations`): the
//! `collect_stations` table of the central database, written once for SQLite and
//! PostgreSQL over [`CentralTx`].
//!
//! Contract: a station is enrolled with its public signing key (one key belongs to one
//! station of a study; a station may have several during a rotation) and, for a changeover,
//! may be allowed plain messages (a row with an empty key). Revoking sets `revoked_at` and
//! is never undone: what was stored from the key stays, what arrives signed by it later is
//! quarantined. A revoked key cannot be enrolled again (make a new one).

use super::*;
use crate::store::CentralError;

/// Where messages on topics whose station part is no valid id are counted.
pub const INVALID_NAME: &str = "(invalid name)";

impl Central {
    /// Enrols `station` of `study` with `key` (`ed25519:...`) and/or allows it plain
    /// messages. `Err` names what is refused: a malformed key, a key of another station, a
    /// revoked key, or neither a key nor `allow_plain`.
    pub fn enrol(
        &mut self,
        study: &str,
        station: &str,
        key: Option<&str>,
        allow_plain: bool,
    ) -> Result<(), CentralError> {
        // The one id rule, as for every envelope: a station's name reaches pages, logs and
        // terminals, and names folders.
        for (field, value) in [("study", study), ("station", station)] {
            crate::session::manifest::check_id(field, value).map_err(CentralError::Refused)?;
        }
        if key.is_none() && !allow_plain {
            return Err(CentralError::Refused(format!(
                "enrolling {station} needs its public key (ed25519:..., from `empathic keys init station` on it) or --allow-plain"
            )));
        }
        let key = canonical(key)?;
        let now = crate::clock::utc_now();
        let mut tx = self.begin()?;
        if let Some(key) = &key {
            let held = tx.rows(
                "SELECT station, revoked_at FROM collect_stations WHERE study = ?1 AND key = ?2",
                &[Val::text(study), Val::text(key)],
            )?;
            if let Some(row) = held.into_iter().next() {
                let mut row = row.into_iter();
                let owner = row.next().and_then(Val::into_text).unwrap_or_default();
                if let Some(at) = row.next().and_then(Val::into_text) {
                    return Err(CentralError::Refused(format!(
                        "key {key} was revoked at {at} (station {owner}): a revoked key stays revoked; make a new one"
                    )));
                }
                if owner != station {
                    return Err(CentralError::Refused(format!(
                        "key {key} is already enrolled for station {owner}: one key belongs to one station"
                    )));
                }
            } else {
                tx.exec(
                    "INSERT INTO collect_stations (study, station, key, allow_plain, enrolled_at)
                     VALUES (?1, ?2, ?3, 0, ?4)",
                    &[
                        Val::text(study),
                        Val::text(station),
                        Val::text(key),
                        Val::text(&now),
                    ],
                )?;
            }
        }
        if allow_plain {
            tx.exec(
                "INSERT INTO collect_stations (study, station, key, allow_plain, enrolled_at)
                 VALUES (?1, ?2, '', 1, ?3) ON CONFLICT DO NOTHING",
                &[Val::text(study), Val::text(station), Val::text(&now)],
            )?;
            tx.exec(
                "UPDATE collect_stations SET allow_plain = 1, revoked_at = NULL
                 WHERE study = ?1 AND station = ?2 AND key = ''",
                &[Val::text(study), Val::text(station)],
            )?;
        }
        tx.commit()
    }

    /// Revokes `station`'s key `key`, or every key and its plain allowance when `key` is
    /// `None` (a stolen station). Returns how many enrolments were revoked.
    pub fn revoke(
        &mut self,
        study: &str,
        station: &str,
        key: Option<&str>,
    ) -> Result<u64, CentralError> {
        let key = canonical(key)?;
        let now = crate::clock::utc_now();
        let mut tx = self.begin()?;
        let n = match &key {
            Some(key) => tx.exec(
                "UPDATE collect_stations SET revoked_at = ?4
                 WHERE study = ?1 AND station = ?2 AND key = ?3 AND revoked_at IS NULL",
                &[
                    Val::text(study),
                    Val::text(station),
                    Val::text(key),
                    Val::text(&now),
                ],
            )?,
            None => tx.exec(
                "UPDATE collect_stations SET revoked_at = ?3, allow_plain = 0
                 WHERE study = ?1 AND station = ?2 AND revoked_at IS NULL",
                &[Val::text(study), Val::text(station), Val::text(&now)],
            )?,
        };
        tx.commit()?;
        Ok(n)
    }

    /// Every enrolment of `study`, by station, then enrolment time.
    pub fn enrolments(&mut self, study: &str) -> Result<Vec<Enrolment>, CentralError> {
        let mut tx = self.begin()?;
        let rows = tx.rows(
            "SELECT station, key, allow_plain, enrolled_at, revoked_at FROM collect_stations
             WHERE study = ?1 ORDER BY station, enrolled_at, key",
            &[Val::text(study)],
        )?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut r = r.into_iter();
                let mut text = || r.next().and_then(Val::into_text);
                let station = text().unwrap_or_default();
                let key = text().unwrap_or_default();
                let allow_plain = r.next().and_then(|v| v.int()).unwrap_or(0) != 0;
                let mut text = || r.next().and_then(Val::into_text);
                Enrolment {
                    station,
                    key,
                    allow_plain,
                    enrolled_at: text().unwrap_or_default(),
                    revoked_at: text(),
                }
            })
            .collect())
    }

    /// The stations of `study` this collector greets at each connection (its hello:
    /// `sync::Hello`): those enrolled and not revoked, and those it stored a record from.
    /// Not those only quarantined: their names come from unauthenticated envelopes, and a
    /// flood of invented ones must not become as many retained messages on the broker.
    pub fn known_stations(&mut self, study: &str) -> Result<Vec<String>, CentralError> {
        let mut tx = self.begin()?;
        let rows = tx.rows(
            "SELECT station FROM collect_stations WHERE study = ?1 AND revoked_at IS NULL
             UNION SELECT station FROM collect_records WHERE study = ?1
             ORDER BY station",
            &[Val::text(study)],
        )?;
        Ok(rows
            .into_iter()
            .filter_map(|r| r.into_iter().next().and_then(Val::into_text))
            .filter(|s| crate::session::manifest::check_id("station", s).is_ok())
            .collect())
    }

    /// Which station sent each session shown from `study` (by the sync's station id, which
    /// a replayed recording's own `station_id` need not be).
    pub fn session_stations(
        &mut self,
        study: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, CentralError> {
        let mut tx = self.begin()?;
        let mut out = std::collections::BTreeMap::new();
        for r in tx.rows(
            "SELECT subject, station FROM collect_records
             WHERE study = ?1 AND kind = 'session' AND applied = 1",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let subject = r.next().and_then(Val::into_text).unwrap_or_default();
            let station = r.next().and_then(Val::into_text).unwrap_or_default();
            out.insert(subject, station);
        }
        Ok(out)
    }

    /// Per station of `study` that sent anything: messages stored sealed and plain, the
    /// sessions they show, and messages quarantined under its topics that are still open
    /// (a station part that is no valid station id counts under [`INVALID_NAME`]).
    pub fn station_counts(&mut self, study: &str) -> Result<Vec<StationCounts>, CentralError> {
        let mut tx = self.begin()?;
        let mut counts: std::collections::BTreeMap<String, StationCounts> = Default::default();
        for r in tx.rows(
            "SELECT station, sealed, COUNT(*),
                    SUM(CASE WHEN kind = 'session' AND applied = 1 THEN 1 ELSE 0 END)
             FROM collect_records WHERE study = ?1
             GROUP BY station, sealed",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let station = r.next().and_then(Val::into_text).unwrap_or_default();
            let sealed = r.next().and_then(|v| v.int()).unwrap_or(0) != 0;
            let n = r.next().and_then(|v| v.int()).unwrap_or(0);
            let shown = r.next().and_then(|v| v.int()).unwrap_or(0);
            let c = counts
                .entry(station.clone())
                .or_insert_with(|| StationCounts::none(station));
            if sealed {
                c.sealed += n;
            } else {
                c.plain += n;
            }
            c.sessions += shown;
        }
        let prefix = format!("empathic/v1/{study}/");
        for q in open_quarantine(tx.as_mut(), &prefix)? {
            let Some(station) = q
                .topic
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split('/').next())
            else {
                continue;
            };
            // A made-up name with escapes or line breaks never reaches a terminal or a page.
            let station = if crate::session::manifest::check_id("station", station).is_ok() {
                station
            } else {
                INVALID_NAME
            };
            let c = counts
                .entry(station.to_string())
                .or_insert_with(|| StationCounts::none(station.to_string()));
            c.quarantined += q.messages;
            if q.refused_latest > c.refused_latest {
                c.refused_latest = q.refused_latest;
            }
        }
        Ok(counts.into_values().collect())
    }
}

/// Open quarantine of one topic: distinct messages (a chunk refused at the gate counts
/// under the message it names; a row without any id on its own), and when a record chunk
/// was last refused at the gate.
struct OpenQuarantine {
    topic: String,
    messages: i64,
    refused_latest: Option<String>,
}

/// The quarantine under `prefix` still open: rows whose refused message was not stored
/// since (a station enrolled late, its resend taken) are closed.
fn open_quarantine(
    tx: &mut dyn CentralTx,
    prefix: &str,
) -> Result<Vec<OpenQuarantine>, CentralError> {
    Ok(tx
        .rows(
            "SELECT topic, COUNT(DISTINCT coalesce(message_id, refused_id, 'row' || id)),
                    max(CASE WHEN refused_id IS NOT NULL THEN received_at END)
             FROM collect_quarantine q
             WHERE substr(topic, 1, length(?1)) = ?1
               AND NOT EXISTS (SELECT 1 FROM collect_records r WHERE r.message_id = q.refused_id)
             GROUP BY topic",
            &[Val::text(prefix)],
        )?
        .into_iter()
        .map(|r| {
            let mut r = r.into_iter();
            OpenQuarantine {
                topic: r.next().and_then(Val::into_text).unwrap_or_default(),
                messages: r.next().and_then(|v| v.int()).unwrap_or(0),
                refused_latest: r.next().and_then(Val::into_text),
            }
        })
        .collect())
}

/// A public signing key in its canonical text form (`None` stays `None`).
fn canonical(key: Option<&str>) -> Result<Option<String>, CentralError> {
    key.map(|k| keys::VerifyingKey::parse(k).map(|v| v.text().to_string()))
        .transpose()
        .map_err(|e| CentralError::Refused(e.to_string()))
}

impl StationCounts {
    fn none(station: String) -> Self {
        StationCounts {
            station,
            sealed: 0,
            plain: 0,
            sessions: 0,
            quarantined: 0,
            refused_latest: None,
        }
    }
}
