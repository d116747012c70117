//! What the study's staff were told, and who withdrew: the problems the collector's
//! `[collect] on_problem` command was told of and that have not cleared
//! (`collect_alerts`), and the participants whose data a purge removed (`collect_purges`).
//!
//! Contract: [`Central::alerts_told`] lists the told problems of a study by key;
//! [`Central::note_alerts`] records, in one transaction, the problems just told and forgets
//! the ones that cleared, so a problem is told once until it clears, across collector
//! restarts. SQLite and PostgreSQL alike.

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
    pub fn alerts_told(&mut self, study: &str) -> Result<BTreeMap<String, String>, String> {
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

    /// Records `told` (key, what) as told at `now` and forgets `cleared`, in one transaction.
    pub fn note_alerts(
        &mut self,
        study: &str,
        told: &[(String, String)],
        cleared: &[String],
        now: &str,
    ) -> Result<(), String> {
        let mut tx = self.begin()?;
        for (key, what) in told {
            tx.exec(
                "INSERT INTO collect_alerts (study, problem, what, reported_at)
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (study, problem) DO NOTHING",
                &[
                    Val::text(study),
                    Val::text(key),
                    Val::text(what),
                    Val::text(now),
                ],
            )?;
        }
        for key in cleared {
            tx.exec(
                "DELETE FROM collect_alerts WHERE study = ?1 AND problem = ?2",
                &[Val::text(study), Val::text(key)],
            )?;
        }
        tx.commit()
    }

    /// Every withdrawal (purge) of `study`, oldest first.
    pub fn withdrawals(&mut self, study: &str) -> Result<Vec<Withdrawal>, String> {
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
