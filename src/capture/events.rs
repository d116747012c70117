//! The session-event source: utterances, phases, stories, ratings and surveys as they
//! become known.
//!
//! Contract: [`EventSource::next_batch`] hands out batches in time order; a batch carries
//! the events that became known since the last one and `known_until_ns`: every event
//! stamped at or before it has been handed out. The pipeline embeds utterances and decides
//! window phases from what is known, so a frame waits until the events are known up to its
//! time. A recorded session knows everything at once: [`RecordedEvents`] gives one batch
//! with all its events, known until the end of time. A live control socket gives a batch
//! per message and empty batches as its clock advances.

use crate::capture::CaptureError;
use crate::session::Event;
use crate::Nanos;

/// Events that became known, and how far the stream is complete.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// Time-sorted.
    pub events: Vec<Event>,
    pub known_until_ns: Nanos,
}

/// A source of session events.
pub trait EventSource: Send {
    /// The next batch, or `None` at the end of the stream.
    fn next_batch(&mut self) -> Result<Option<EventBatch>, CaptureError>;
}

/// A recorded session's `events.jsonl`, already read and checked.
pub struct RecordedEvents {
    events: Option<Vec<Event>>,
}

impl RecordedEvents {
    pub fn new(events: Vec<Event>) -> Self {
        Self {
            events: Some(events),
        }
    }
}

impl EventSource for RecordedEvents {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, CaptureError> {
        Ok(self.events.take().map(|events| EventBatch {
            events,
            known_until_ns: Nanos::MAX,
        }))
    }
}
