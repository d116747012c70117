//! Per-participant calibration: a person's use of the 1-5 scale is their own.
//!
//! Contract: [`participant_map`] fits, from a participant's earlier sessions only (pairs of
//! session-level mean raw cosine and self-rating, one per rated story), a linear map
//! `rating ~ a + b * cosine`, and shrinks it toward the predictor's population map:
//! each coefficient is `w * fitted + (1 - w) * population` with `w = n / (n + k)`, `n`
//! the pairs and `k` = [`PRIOR_PAIRS`] (the population map counts as that many pairs of
//! evidence). This is the posterior mean of a linear map under a normal prior centred on
//! the population map whose strength is fixed, not estimated (there are too few
//! participants on a station to estimate it): with few ratings a person keeps the
//! population map; with many their own. When their cosines barely vary (the slope cannot
//! be fitted), only the intercept moves: their mean rating against the population map's
//! mean prediction, shrunk the same way.

use super::zero_shot::BankRelative;
use super::PopulationMap;

/// How many rated stories the population map is worth.
pub const PRIOR_PAIRS: f64 = 5.0;
/// Below this variance of the cosines, only the intercept is recalibrated.
const MIN_COSINE_VARIANCE: f64 = 1e-4;

/// The participant's map from `pairs` of (mean raw cosine, rating) of earlier sessions, or
/// `None` when there are none.
pub fn participant_map(population: PopulationMap, pairs: &[(f64, f64)]) -> Option<PopulationMap> {
    let n = pairs.len() as f64;
    if pairs.is_empty() {
        return None;
    }
    let w = n / (n + PRIOR_PAIRS);
    let mc = pairs.iter().map(|p| p.0).sum::<f64>() / n;
    let mr = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let var = pairs.iter().map(|p| (p.0 - mc).powi(2)).sum::<f64>() / n;
    if pairs.len() < 3 || var < MIN_COSINE_VARIANCE {
        // The mean rating against the population's mean prediction (unclamped).
        let predicted = population.intercept + population.slope * mc;
        return Some(PopulationMap {
            intercept: population.intercept + w * (mr - predicted),
            slope: population.slope,
        });
    }
    let cov = pairs.iter().map(|p| (p.0 - mc) * (p.1 - mr)).sum::<f64>() / n;
    let slope = cov / var;
    let intercept = mr - slope * mc;
    Some(PopulationMap {
        intercept: w * intercept + (1.0 - w) * population.intercept,
        slope: w * slope + (1.0 - w) * population.slope,
    })
}

/// A cosine to a predicted 1-5 score under the calibration in use, and its name (the
/// story recommendation's, and the latest window's of a live session).
#[derive(Debug, Clone)]
pub enum Scorer {
    /// Fitted to the participant's earlier ratings (`participant:N`).
    Participant { map: PopulationMap, label: String },
    /// Relative to the bank's cosines to the query (`population`, not fitted to ratings).
    /// Shared: a live session keeps it in the latest-window slot every second.
    Bank(std::sync::Arc<BankRelative>),
    /// No bank spread to speak of: the absolute map (`population`).
    Absolute(PopulationMap),
}

impl Scorer {
    /// The score of a story at `cosine` to `query` (the words, or a window's
    /// representation).
    pub fn score(&self, query: &[f32], cosine: f64) -> f64 {
        match self {
            Scorer::Participant { map, .. } | Scorer::Absolute(map) => map.score(cosine),
            Scorer::Bank(bank) => bank.score(query, cosine).unwrap_or(3.0),
        }
    }

    pub fn label(&self) -> &str {
        match self {
            Scorer::Participant { label, .. } => label,
            Scorer::Bank(_) | Scorer::Absolute(_) => "population",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POP: PopulationMap = PopulationMap {
        intercept: 1.0,
        slope: 4.0,
    };

    #[test]
    fn no_history_keeps_the_population_map_and_history_pulls_toward_the_person() {
        assert_eq!(participant_map(POP, &[]), None);
        // Two ratings of 5 where the population map says 1.4: the intercept moves by
        // w = 2 / 7 of the gap.
        let m = participant_map(POP, &[(0.1, 5.0), (0.1, 5.0)]).unwrap();
        assert!((m.intercept - (1.0 + 2.0 / 7.0 * 3.6)).abs() < 1e-12);
        assert_eq!(m.slope, 4.0);
    }

    /// Planted per-participant scale use: everyone's ratings follow their own line in the
    /// cosine (a harsh rater, a generous one, one who uses the whole scale) with noise.
    /// Calibrating each session's predictions on that participant's earlier sessions only
    /// lowers the squared error against the population map.
    #[test]
    fn calibration_on_earlier_sessions_lowers_the_error_on_planted_scale_use() {
        let people = [(0.5, 2.0), (3.0, 2.0), (1.0, 8.0), (2.0, 4.0)];
        let mut state = 12345u64;
        let mut noise = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * 0.6
        };
        let (mut se_pop, mut se_cal, mut n) = (0.0, 0.0, 0.0);
        for (a, b) in people {
            let mut history: Vec<(f64, f64)> = Vec::new();
            for session in 0..12 {
                let sessions_stories: Vec<(f64, f64)> = (0..3)
                    .map(|k| {
                        let c = 0.05 + 0.1 * ((session * 3 + k) % 5) as f64 + 0.02 * noise();
                        let r = (a + b * c + noise()).clamp(1.0, 5.0);
                        (c, r)
                    })
                    .collect();
                let map = participant_map(POP, &history).unwrap_or(POP);
                for (c, r) in &sessions_stories {
                    se_pop += (POP.score(*c) - r).powi(2);
                    se_cal += (map.score(*c) - r).powi(2);
                    n += 1.0;
                }
                history.extend(sessions_stories);
            }
        }
        let (mse_pop, mse_cal) = (se_pop / n, se_cal / n);
        eprintln!("planted scale use: MSE population {mse_pop:.3}, per participant {mse_cal:.3}");
        assert!(
            mse_cal < 0.5 * mse_pop,
            "population {mse_pop:.3}, calibrated {mse_cal:.3}"
        );
    }
}
