//! What a collector refused, per message (`collect quarantine list|drop`).
//!
//! Contract: the quarantine is read per message (a message refused at the gate chunk by
//! chunk is one entry, keyed by the message id it named; a row that named none is its own
//! entry, `row:N`), with the latest reason, never with the payload (it may hold a
//! participant's words). An entry is open until the message it names is stored after all
//! (the station enrolled late, a key put right, its resend taken) or staff drop it.
//! Dropping a message read whole and quarantined also forgets that it was answered: the
//! station's next resend, if any, is judged again.

use super::*;
use crate::store::CentralError;

/// One quarantined message.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Quarantined {
    /// The message id, or `row:N` for a row that named no message.
    pub id: String,
    pub topic: String,
    /// The latest reason.
    pub reason: String,
    /// Rows (chunks, or deliveries) kept of it.
    pub rows: i64,
    pub first_at: String,
    pub last_at: String,
    /// Read whole and answered with a receipt and a final refusal (sending it again cannot
    /// help); otherwise refused at the gate or unopenable (held at the station).
    pub read_whole: bool,
}

impl Central {
    /// The open quarantine of `study`, oldest first.
    pub fn quarantine_list(&mut self, study: &str) -> Result<Vec<Quarantined>, CentralError> {
        let prefix = format!("empathic/v1/{study}/");
        let mut tx = self.begin()?;
        let rows = tx.rows(
            "SELECT id, topic, reason, received_at, message_id, refused_id
             FROM collect_quarantine q
             WHERE substr(topic, 1, length(?1)) = ?1
               AND NOT EXISTS (SELECT 1 FROM collect_records r WHERE r.message_id = q.refused_id)
             ORDER BY id",
            &[Val::text(&prefix)],
        )?;
        let mut out: Vec<Quarantined> = Vec::new();
        let mut at: std::collections::HashMap<String, usize> = Default::default();
        for r in rows {
            let mut r = r.into_iter();
            let row = r.next().and_then(|v| v.int()).unwrap_or(0);
            let topic = r.next().and_then(Val::into_text).unwrap_or_default();
            let reason = r.next().and_then(Val::into_text).unwrap_or_default();
            let when = r.next().and_then(Val::into_text).unwrap_or_default();
            let message = r.next().and_then(Val::into_text);
            let refused = r.next().and_then(Val::into_text);
            let read_whole = message.is_some();
            let id = message.or(refused).unwrap_or_else(|| format!("row:{row}"));
            match at.get(&id) {
                Some(&i) => {
                    let q = &mut out[i];
                    q.rows += 1;
                    q.reason = reason;
                    q.last_at = when;
                    q.read_whole |= read_whole;
                }
                None => {
                    at.insert(id.clone(), out.len());
                    out.push(Quarantined {
                        id,
                        topic: health_message::printable(&topic, 200),
                        reason: health_message::printable(&reason, 1000),
                        rows: 1,
                        first_at: when.clone(),
                        last_at: when,
                        read_whole,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Drops quarantined message `id` of `study` (as `quarantine_list` names it); how many
    /// rows went. The deleted bytes are erased from the database's files.
    pub fn quarantine_drop(&mut self, study: &str, id: &str) -> Result<u64, CentralError> {
        let prefix = format!("empathic/v1/{study}/");
        let mut tx = self.begin()?;
        let n = match id.strip_prefix("row:").and_then(|n| n.parse::<i64>().ok()) {
            Some(row) => tx.exec(
                "DELETE FROM collect_quarantine WHERE id = ?1 AND substr(topic, 1, length(?2)) = ?2",
                &[Val::Int(Some(row)), Val::text(&prefix)],
            )?,
            None => tx.exec(
                "DELETE FROM collect_quarantine
                 WHERE (message_id = ?1 OR refused_id = ?1) AND substr(topic, 1, length(?2)) = ?2",
                &[Val::text(id), Val::text(&prefix)],
            )?,
        };
        tx.commit()?;
        if n > 0 {
            self.erase_deleted();
        }
        Ok(n)
    }
}
