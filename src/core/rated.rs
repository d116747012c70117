//! A stored window prediction set against the participant's rating: what the store reads
//! and the evaluation scores.
//!
//! Contract: plain data, one row per (window, predictor, rated story), as
//! `store::read` returns it and `fusion::evaluate` consumes it.

/// One stored window prediction toward a story the participant rated.
#[derive(Debug, Clone, PartialEq)]
pub struct RatedWindow {
    pub predictor: String,
    pub participant: String,
    pub session_id: String,
    pub story_id: String,
    /// As stored (after the calibration in force for that session).
    pub score: f64,
    pub raw_cosine: Option<f64>,
    pub rating: f64,
    /// The predictor was trained on synthetic data (not an empathy model).
    pub synthetic: bool,
    /// `predictions.calibration`: `population`, or `participant:N` (fitted to N ratings).
    pub calibration: String,
}
