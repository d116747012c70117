//! `text-zero-shot`: the default predictor. No training: `z` is the mean, over the window's
//! frames where the participant's words are present, of the `text` modality (the sentence
//! embedding of their utterance at that time), so the cosine with `E(S_i)` says how close
//! what they said in the window is to the story. The published study found text alone the
//! best single modality while a person shares a story. A window where the participant said
//! nothing within the text horizon is skipped.
//!
//! Population map: score = 1 + 4 * cosine, clamped to 1-5. It is not fitted to any
//! ratings (none can be had here): it maps "unrelated" (cosine 0 or below) to 1 and
//! "identical" (cosine 1) to 5, linearly. Per-participant calibration is what corrects a
//! person's use of the scale.

use std::collections::BTreeMap;

use super::{FusionError, PopulationMap, Predictor, Representation, WindowInput};
use crate::windows::ModalityLayout;

/// The modality it reads.
pub const TEXT: &str = "text";

/// The `text-zero-shot` predictor.
#[derive(Debug, Default)]
pub struct TextZeroShot;

impl TextZeroShot {
    pub const ID: &'static str = "text-zero-shot";
}

impl Predictor for TextZeroShot {
    fn id(&self) -> &str {
        Self::ID
    }

    fn synthetic(&self) -> bool {
        false
    }

    fn modalities(&self) -> Vec<String> {
        vec![TEXT.to_string()]
    }

    fn check_layout(&self, layout: &ModalityLayout) -> Result<(), FusionError> {
        match layout.id(TEXT) {
            Some(_) => Ok(()),
            None => Err(FusionError::Layout {
                predictor: Self::ID.into(),
                modality: TEXT.into(),
                problem: "the session has no text modality".into(),
            }),
        }
    }

    fn represent(&mut self, input: &WindowInput<'_>) -> Option<Representation> {
        let text = input.matrix(TEXT)?;
        let z = text.mean()?;
        Some(Representation {
            z,
            coverage: BTreeMap::from([(TEXT.to_string(), text.coverage())]),
        })
    }

    fn population_map(&self) -> PopulationMap {
        PopulationMap {
            intercept: 1.0,
            slope: 4.0,
        }
    }
}
