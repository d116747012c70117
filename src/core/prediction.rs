//! One prediction: a window's empathy toward one story in play, by one predictor. The
//! fusion stage makes it, the runtime hands it to the store as it is (stored in
//! `predictions`, its attribution in `attributions`: docs/formats.md).

use std::collections::BTreeMap;

use super::Attribution;

/// A prediction of the fusion stage: one window, one predictor, one story in play.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub window_index: u64,
    /// Stored in `predictions.predictor`.
    pub predictor: String,
    pub story_id: String,
    /// Retrieved from the bank while the participant shared (not yet shown), else shown.
    pub retrieved: bool,
    /// Cosine between the window's representation and the story's embedding.
    pub raw_cosine: f64,
    /// On the 1-5 rating scale, after `calibration`.
    pub score: f64,
    /// `population` (the predictor's map) or a per-participant map.
    pub calibration: String,
    /// The predictor's modality subset.
    pub modalities: Vec<String>,
    /// Per modality of the subset, the share of the window's frames present.
    pub coverage: BTreeMap<String, f64>,
    pub synthetic: bool,
    /// What moved it (`[fusion] explain`), when the predictor can say; stored in
    /// `attributions`.
    pub attribution: Option<Attribution>,
}
