//! The store's SQL, by table group. Only the writer actor and [`super::Store`] call these;
//! no SQL lives outside `src/store/`.
//!
//! - [`sessions`]: the session row, its start, end and failure, and its events (phases,
//!   utterances, stories shown, ratings, surveys) as they arrive.
//! - [`frames`]: frames and windows with their per-modality features.
//! - [`predictions`]: predictions (removal with a failed session's partial rows).
//! - [`stories`]: the story bank and its embeddings, and a session's retrieval context.
//! - [`study`]: whole-database aggregates for the study page.

pub mod announce;
pub mod delivery;
pub mod export;
pub mod frames;
pub mod participants;
pub mod predictions;
pub mod report;
pub mod session_rows;
pub mod stories;
pub mod study;

use super::StoreError;

/// Wraps a rusqlite error with what was being done.
pub(crate) fn ctx(context: &str) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
    super::sql(context)
}

/// The current UTC time as SQLite writes it, for `created_at`-style columns.
pub(crate) const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
