//! `text-zero-shot`: the default predictor. No training: `z` is the mean, over the window's
//! frames where the participant's words are present, of the `text` modality (the sentence
//! embedding of their utterance at that time), so the cosine with `E(S_i)` says how close
//! what they said in the window is to the story. The published study found text alone the
//! best single modality while a person shares a story. A window where the participant said
//! nothing within the text horizon is skipped.
//!
//! Population map, relative to the story bank ([`BankRelative`]): per window, score =
//! 3 + (cosine - m) / s, clamped to 1-5, where m and s are the mean and standard deviation
//! of the cosines between the window's `z` and every story of the bank. It is fitted to no
//! ratings (none exist before a participant rates), so it is labelled uncalibrated wherever
//! it is shown. Why this shape: a sentence encoder's cosines are anisotropic and depend on
//! the text's length and register (a spoken fragment against a written story sits at about
//! 0.1-0.2 with all-MiniLM-L6-v2 on the demo, whatever the story), so an absolute map such
//! as 1 + 4 * cosine calls every story "low empathy". What a zero-shot cosine can say is
//! how much closer this story is to what the person is saying than the bank's other stories
//! are: with no ratings the honest prior for a story of average closeness is the middle of
//! the 1-5 scale, and one standard deviation of the window's own spread is taken as one
//! scale point (two above reach 5, two below reach 1). Without a bank of at least three
//! stories the map falls back to [`ABSOLUTE_MAP`]. Once the participant has rated stories,
//! per-participant calibration replaces it with a linear map of the raw cosine fitted to
//! their ratings (prior: [`ABSOLUTE_MAP`]).

use std::collections::BTreeMap;

use super::{FusionError, PopulationMap, Predictor, Representation, WindowInput};
use crate::core::ModalityLayout;

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
        ABSOLUTE_MAP
    }

    /// The mean of the words left in: an utterance left out is absent on its frames.
    fn represent_variants(
        &mut self,
        input: &WindowInput<'_>,
        variants: &[super::explain::Variant],
    ) -> Option<Vec<Option<Vec<f32>>>> {
        use super::explain::ModalityEdit;
        let text = input.matrix(TEXT)?;
        Some(
            variants
                .iter()
                .map(|v| match v.first() {
                    Some(ModalityEdit::Absent) => None,
                    Some(ModalityEdit::Partial { absent_frames, .. }) => {
                        let mut m = text.clone();
                        for &f in absent_frames {
                            if let Some(p) = m.mask.get_mut(f) {
                                *p = false;
                            }
                        }
                        m.mean()
                    }
                    _ => text.mean(),
                })
                .collect(),
        )
    }

    fn cheap(&self) -> bool {
        true
    }
}

/// The fewest stories a bank needs to be the map's reference (a spread of cosines).
pub const MIN_BANK_STORIES: usize = 3;

/// The map without a bank: "unrelated" (cosine 0) to 1, "identical" (cosine 1) to 5.
pub const ABSOLUTE_MAP: PopulationMap = PopulationMap {
    intercept: 1.0,
    slope: 4.0,
};

/// The story bank as the zero-shot map's reference: unit-length vectors, row after row.
#[derive(Debug, Clone, PartialEq)]
pub struct BankRelative {
    vectors: Vec<f32>,
    dims: usize,
}

impl BankRelative {
    /// None with fewer than three stories (no spread to speak of).
    pub fn new(vectors: &[f32], dims: usize) -> Option<Self> {
        (dims > 0 && vectors.len() / dims >= MIN_BANK_STORIES).then(|| Self {
            vectors: vectors.to_vec(),
            dims,
        })
    }

    /// The score of a story at `cosine` to `z`, relative to every bank story's cosine to
    /// `z`; None when `z` is of another width or the bank's cosines do not spread.
    pub fn score(&self, z: &[f32], cosine: f64) -> Option<f64> {
        if z.len() != self.dims {
            return None;
        }
        let norm = z.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        if norm <= 0.0 {
            return None;
        }
        let (mut sum, mut sum2, mut n) = (0f64, 0f64, 0f64);
        for row in self.vectors.chunks_exact(self.dims) {
            let c = row
                .iter()
                .zip(z)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum::<f64>()
                / norm;
            sum += c;
            sum2 += c * c;
            n += 1.0;
        }
        let mean = sum / n;
        let sd = (sum2 / n - mean * mean).max(0.0).sqrt();
        (sd > 1e-9).then(|| (3.0 + (cosine - mean) / sd).clamp(1.0, 5.0))
    }
}

#[cfg(test)]
mod bank_tests {
    use super::*;

    #[test]
    fn a_story_of_average_closeness_sits_mid_scale() {
        // Three unit stories; z along the first axis: cosines 1.0, 0.6, 0.0.
        let v: Vec<f32> = vec![1.0, 0.0, 0.0, 0.6, 0.8, 0.0, 0.0, 0.6, 0.8];
        let bank = BankRelative::new(&v, 3).unwrap();
        let z = [2.0f32, 0.0, 0.0];
        let mean = (1.0 + 0.6 + 0.0) / 3.0;
        let sd = (((1.0f64 - mean).powi(2) + (0.6 - mean).powi(2) + mean.powi(2)) / 3.0).sqrt();
        assert!((bank.score(&z, mean).unwrap() - 3.0).abs() < 1e-6);
        assert!((bank.score(&z, mean + sd).unwrap() - 4.0).abs() < 1e-6);
        assert_eq!(bank.score(&z, 10.0), Some(5.0));
        assert_eq!(bank.score(&[1.0, 0.0], 0.5), None);
        assert_eq!(BankRelative::new(&v[..6], 3), None);
    }
}
