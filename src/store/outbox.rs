//! The outbox as the sync publisher and the commands see it: a handle on a store that reads
//! and moves its messages through their states, never a connection.
//!
//! Contract: every method is one statement or one transaction of `sql::announce` on the
//! store's connection; the message formats, the record tables and the states are written
//! there, once. Enqueueing happens inside the store (a session's end, a tombstone, a
//! purge) in the same transaction as the change it announces.

use super::sql::{self, announce, delivery};
use super::{Store, StoreError};

pub use announce::{Include, RecordTable, PAYLOAD_VERSION, RECORD_TABLES, STATION_LOCAL};
pub use delivery::{
    BrokerState, OutboxStatus, Pending, RefusalNote, REFUSAL_PROBE_SECS, RESEND_AFTER_SECS,
};

/// The outbox of one store.
pub struct Outbox<'a>(&'a Store);

impl Store {
    /// This store's outbox.
    pub fn outbox(&self) -> Outbox<'_> {
        Outbox(self)
    }
}

impl Outbox<'_> {
    /// Counts by state, the broker's state and the receipts (`sync status`).
    pub fn status(&self) -> Result<OutboxStatus, StoreError> {
        delivery::status(self.0.connection())
    }

    /// The store's clock now (the form `sent_at` has), e.g. to mark a connection's start.
    pub fn now(&self) -> Result<String, StoreError> {
        delivery::now(self.0.connection())
    }

    /// Up to `limit` messages to publish, oldest first, under the sync configuration of
    /// digest `config` (see `sql::delivery::pending`).
    pub fn pending(
        &self,
        limit: usize,
        connected_at: &str,
        config: &str,
    ) -> Result<Vec<Pending>, StoreError> {
        delivery::pending(self.0.connection(), limit, connected_at, config)
    }

    /// Records a collector's refusal of `message_id`; held under the configuration digest
    /// `held_under` when a change of configuration can cure it (see
    /// `sql::delivery::mark_refused`). Whether the message is this outbox's.
    pub fn mark_refused(
        &self,
        message_id: &str,
        note: &RefusalNote,
        held_under: Option<&str>,
    ) -> Result<bool, StoreError> {
        delivery::mark_refused(self.0.connection(), message_id, note, held_under)
    }

    /// Message `seq`'s payload sealed to `study_key` at an earlier send, if any.
    pub fn sealed(&self, seq: i64, study_key: &str) -> Result<Option<String>, StoreError> {
        delivery::sealed(self.0.connection(), seq, study_key)
    }

    /// Keeps message `seq`'s sealed payload, so every resend carries the same bytes.
    pub fn keep_sealed(&self, seq: i64, study_key: &str, sealed: &str) -> Result<(), StoreError> {
        delivery::keep_sealed(self.0.connection(), seq, study_key, sealed)
    }

    /// Message `seq` was acknowledged by the broker.
    pub fn mark_sent(&self, seq: i64) -> Result<(), StoreError> {
        delivery::mark_sent(self.0.connection(), seq)
    }

    /// Whether a receipt can be one for `message_id` as this station sent it (`Err` says
    /// why not).
    pub fn receipt_matches(
        &self,
        message_id: &str,
        sha256: Option<&str>,
        in_flight: Option<&str>,
    ) -> Result<Result<(), String>, StoreError> {
        delivery::receipt_matches(self.0.connection(), message_id, sha256, in_flight)
    }

    /// Records `collector`'s receipt; true when the message now counts as synced (every
    /// collector in `required` confirmed it, or any one when `required` is empty).
    pub fn mark_synced(
        &self,
        message_id: &str,
        collector: Option<&str>,
        required: &[String],
    ) -> Result<bool, StoreError> {
        delivery::mark_synced(self.0.connection(), message_id, collector, required)
    }

    /// Messages still owed under the configuration of digest `config` (not synced, not
    /// held by a refusal under it).
    pub fn owed(&self, config: &str) -> Result<u64, StoreError> {
        delivery::owed(self.0.connection(), config)
    }

    /// Messages held by a collector's refusal (one count: the health loop asks each second).
    pub fn held(&self) -> Result<u64, StoreError> {
        delivery::held(self.0.connection())
    }

    /// Releases the messages collector `by` refused as too new while it read something
    /// other than `reads` (see `sql::delivery::release_too_new`).
    pub fn release_too_new(&self, by: &str, reads: &str) -> Result<usize, StoreError> {
        delivery::release_too_new(self.0.connection(), by, reads)
    }

    /// Releases every message held by a collector's refusal, to go at the next sync.
    pub fn release_refused(&self) -> Result<usize, StoreError> {
        delivery::release_refused(self.0.connection())
    }

    /// One more attempt at message `seq`, with the error it met.
    pub fn note_attempt(&self, seq: i64, error: Option<&str>) -> Result<(), StoreError> {
        delivery::note_attempt(self.0.connection(), seq, error)
    }

    /// Records the broker's state (`connected`, `unreachable`, `disconnected`).
    pub fn set_broker_state(
        &self,
        state: &str,
        broker: &str,
        error: Option<&str>,
    ) -> Result<(), StoreError> {
        delivery::set_broker_state(self.0.connection(), state, broker, error)
    }

    /// Enqueues every ended session the outbox never announced (sessions stored before the
    /// outbox existed), in one transaction; how many.
    pub fn backfill(&self) -> Result<usize, StoreError> {
        let tx = self
            .0
            .connection()
            .unchecked_transaction()
            .map_err(sql::ctx("beginning the outbox backfill"))?;
        let n = announce::backfill(&tx)?;
        tx.commit()
            .map_err(sql::ctx("committing the outbox backfill"))?;
        Ok(n)
    }
}

impl Store {
    /// A participant's withdrawal, in one transaction: their sessions and rows deleted and
    /// a purge message enqueued for the collectors. The ids of their sessions, or `None`
    /// when the store has no such participant (nothing changed). The deleted bytes are
    /// erased from the files by [`Store::erase_deleted`], which the caller runs next.
    pub fn purge_participant(&self, id: &str) -> Result<Option<Vec<String>>, StoreError> {
        let tx = self
            .connection()
            .unchecked_transaction()
            .map_err(sql::ctx("beginning the purge"))?;
        let sessions = sql::participants::purge_participant(&tx, id)?;
        if sessions.is_some() {
            tx.commit().map_err(sql::ctx("committing the purge"))?;
        }
        Ok(sessions)
    }
}
