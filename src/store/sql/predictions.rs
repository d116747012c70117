//! Predictions: written by the fusion stage (not yet built); removed with a failed
//! session's partial rows.

use rusqlite::Transaction;

use super::ctx;
use crate::store::StoreError;

/// Removes every prediction of session `id`.
pub fn delete_for_session(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    tx.execute("DELETE FROM predictions WHERE session_id = ?1", [id])
        .map_err(ctx("removing a failed session's predictions"))?;
    Ok(())
}
