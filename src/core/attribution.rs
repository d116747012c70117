//! What moved one prediction: the attribution of a window's prediction toward one story to
//! the cues of the window (computed by `fusion::explain`, stored by the store, read by
//! `explain`, the report and the stream).
//!
//! Contract: `baseline` + the sum of every cue's `value` = the prediction's score (1-5)
//! within 1e-3 (exactly, up to float rounding). A modality's value is the sum of its cues'.
//! `method` is `exact` or `sampled:K` (K sampled orders; each sampled cue carries its
//! standard error `se`). An utterance cue carries its time on the session timeline.

use serde::{Deserialize, Serialize};

/// One cue's share of a prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CueAttribution {
    /// The modality, as the layout names it (`face`, `acoustic_compare`, `text`, ...).
    pub modality: String,
    /// The cue group (`smile (AU06, AU12)`, `loudness`, `words`, `all of it`).
    pub cue: String,
    /// How far it moved the score, on the 1-5 scale.
    pub value: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub se: Option<f64>,
    /// An utterance's first and last frame, in ns on the session timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ns: Option<u64>,
}

/// A prediction's attribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// The score with every modality absent (the model's own answer to nothing).
    pub baseline: f64,
    /// `exact` or `sampled:K`.
    pub method: String,
    /// How many coalitions were evaluated.
    pub coalitions: usize,
    pub cues: Vec<CueAttribution>,
}

impl Attribution {
    /// Per modality, the sum of its cues' values, in the order the cues first name them.
    pub fn modalities(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = Vec::new();
        for c in &self.cues {
            match out.iter_mut().find(|(m, _)| *m == c.modality) {
                Some((_, v)) => *v += c.value,
                None => out.push((c.modality.clone(), c.value)),
            }
        }
        out
    }

    /// baseline + every cue's value: the score it explains.
    pub fn total(&self) -> f64 {
        self.baseline + self.cues.iter().map(|c| c.value).sum::<f64>()
    }
}
