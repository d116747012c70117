//! What the study's staff were told, and who withdrew: the problems the collector's
//! `[collect] on_problem` command was told of and that have not cleared
//! (`collect_alerts`), and the participants whose data a purge removed (`collect_purges`).
//!
//! Contract: [`Central::alerts_told`] lists the told problems of a study by key;
//! [`Central::claim_alerts`] claims new ones before they are told (only the keys a caller
//! claimed are its to tell, so collectors sharing a database tell each once) and
//! [`Central::forget_alerts`] forgets those that cleared or whose telling failed. A problem
//! is told once until it clears, across collector restarts. SQLite and PostgreSQL alike.

use crate::store::CentralError;
use std::collections::BTreeMap;

use super::Central;
use crate::store::central::Val;

/// A participant's withdrawal as the central database keeps it: no data, only who, from
/// which station, when, and how many records went.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Withdrawal {
    pub participant: String,
    pub station: String,
    pub purged_at: String,
    pub records: i64,
}

impl Central {
    /// The problems of `study` told and not cleared: key -> when told.
    pub fn alerts_told(&mut self, study: &str) -> Result<BTreeMap<String, String>, CentralError> {
        let mut tx = self.begin()?;
        let mut out = BTreeMap::new();
        for r in tx.rows(
            "SELECT problem, reported_at FROM collect_alerts WHERE study = ?1",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let key = r.next().and_then(Val::into_text).unwrap_or_default();
            let at = r.next().and_then(Val::into_text).unwrap_or_default();
            out.insert(key, at);
        }
        Ok(out)
    }

    /// Claims the problems `new` (key, what) as told at `now`, in one transaction, and
    /// returns the keys this caller claimed: when several collectors of a share group keep
    /// the page, the one that claims a problem first is the one that tells it.
    pub fn claim_alerts(
        &mut self,
        study: &str,
        new: &[(String, String)],
        now: &str,
    ) -> Result<Vec<String>, CentralError> {
        let mut tx = self.begin()?;
        let mut claimed = Vec::new();
        for (key, what) in new {
            let n = tx.exec(
                "INSERT INTO collect_alerts (study, problem, what, reported_at)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (study, problem) DO NOTHING",
                &[
                    Val::text(study),
                    Val::text(key),
                    Val::text(what),
                    Val::text(now),
                ],
            )?;
            if n > 0 {
                claimed.push(key.clone());
            }
        }
        tx.commit()?;
        Ok(claimed)
    }

    /// Forgets `keys`: problems that cleared, or claims whose telling failed (told again
    /// at the next chance).
    pub fn forget_alerts(&mut self, study: &str, keys: &[String]) -> Result<(), CentralError> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin()?;
        for key in keys {
            tx.exec(
                "DELETE FROM collect_alerts WHERE study = ?1 AND problem = ?2",
                &[Val::text(study), Val::text(key)],
            )?;
        }
        tx.commit()
    }

    /// Every withdrawal (purge) of `study`, oldest first.
    pub fn withdrawals(&mut self, study: &str) -> Result<Vec<Withdrawal>, CentralError> {
        let mut tx = self.begin()?;
        let mut out = Vec::new();
        for r in tx.rows(
            "SELECT participant_id, station, purged_at, records FROM collect_purges
             WHERE study = ?1 ORDER BY purged_at",
            &[Val::text(study)],
        )? {
            let mut r = r.into_iter();
            let mut text = || r.next().and_then(Val::into_text).unwrap_or_default();
            let (participant, station, purged_at) = (text(), text(), text());
            let records = r.next().and_then(|v| v.int()).unwrap_or(0);
            out.push(Withdrawal {
                participant,
                station,
                purged_at,
                records,
            });
        }
        Ok(out)
    }
}
