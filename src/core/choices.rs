//! The choices a configuration names that a lower layer acts on: the acoustic LLD set, the
//! recommendation policy and the built-in predictors.
//!
//! Contract: the names (serde's, `as_str`) are the configuration's and the database's
//! (docs/formats.md); behaviour that needs an extractor's tables lives with the extractor
//! (`features::acoustic` adds [`LldSet`]'s columns).

use serde::{Deserialize, Serialize};

/// Number of ComParE-2016 LLDs (the widest set).
pub const COMPARE_LLDS: usize = 65;

/// Which openSMILE LLD set to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LldSet {
    /// ComParE-2016: 65 LLDs (the paper's audio features).
    #[default]
    Compare,
    /// eGeMAPSv02: 25 LLDs (loudness, alpha ratio, Hammarberg index, slopes, formants...).
    Egemaps,
}

impl LldSet {
    pub fn dims(self) -> usize {
        match self {
            LldSet::Compare => COMPARE_LLDS,
            LldSet::Egemaps => 25,
        }
    }

    /// The modality name the stage stores its vectors under.
    pub fn modality(self) -> &'static str {
        match self {
            LldSet::Compare => "acoustic_compare",
            LldSet::Egemaps => "acoustic_egemaps",
        }
    }
}

/// How candidates are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Policy {
    Similarity,
    PredictedEmpathy,
    Explore,
}

impl Policy {
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Similarity => "similarity",
            Policy::PredictedEmpathy => "predicted_empathy",
            Policy::Explore => "explore",
        }
    }
}

/// The predictors built into the station (no model file): ids a configuration may name.
pub const BUILTIN_PREDICTORS: &[&str] = &["text-zero-shot"];
