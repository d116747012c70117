//! Per-participant calibration: a person's use of the 1-5 scale is their own.
//!
//! Contract: [`participant_map`] fits, from a participant's earlier sessions only (pairs of
//! session-level mean raw cosine and self-rating, one per rated story), a linear map
//! `rating ~ a + b * cosine` as the posterior mean under a normal prior centred on the
//! predictor's population map, written around the participant's mean cosine `c̄`:
//!
//! - the **level** (the rating predicted at `c̄`) moves from the population's toward the
//!   participant's mean rating with weight `n / (n + PRIOR_PAIRS)`: the information about a
//!   mean grows with the count of ratings;
//! - the **slope** moves from the population's toward the fitted one with weight
//!   `S / (S + RATING_NOISE² / τ²)`, `S = Σ (c - c̄)²`: the information about a slope grows
//!   with how much the cosines vary, not with how many there are. Three ratings at cosines
//!   0.095-0.129 carry almost none (S ≈ 0.0006), so the population's direction holds; τ, the
//!   prior spread of a person's slope, is the population slope's own size.
//! - **never a sign change on weak evidence**: a slope whose sign differs from the
//!   population's is kept only when the participant's own fit says so strongly (at least
//!   [`FLIP_MIN_PAIRS`] pairs and a t statistic of [`FLIP_MIN_T`] against the population's
//!   sign); otherwise the slope keeps a quarter of the population's, in its direction.
//!
//! Why these constants (first principles, not fitted to any data): ratings on a 1-5 scale
//! are noisy by about one scale point (`RATING_NOISE`); a person's sensitivity to the
//! cosine can plausibly differ from the population's by about its own size; and a
//! population's direction (more similar, more empathy) should survive anything short of
//! a clear, repeated contrary pattern.

use super::zero_shot::BankRelative;
use super::PopulationMap;

/// How many rated stories the population map's level is worth.
pub const PRIOR_PAIRS: f64 = 5.0;
/// The noise of one self-rating, in scale points.
const RATING_NOISE: f64 = 1.0;
/// A participant's slope of the other sign than the population's needs this many pairs...
pub const FLIP_MIN_PAIRS: usize = 8;
/// ...and this t statistic (its fitted slope over its standard error).
pub const FLIP_MIN_T: f64 = 3.0;
/// Without that evidence, the share of the population slope a participant keeps at least.
const KEPT_DIRECTION: f64 = 0.25;

/// The participant's map from `pairs` of (mean raw cosine, rating) of earlier sessions, or
/// `None` when there are none.
pub fn participant_map(population: PopulationMap, pairs: &[(f64, f64)]) -> Option<PopulationMap> {
    if pairs.is_empty() {
        return None;
    }
    let n = pairs.len() as f64;
    let mc = pairs.iter().map(|p| p.0).sum::<f64>() / n;
    let mr = pairs.iter().map(|p| p.1).sum::<f64>() / n;
    let scc = pairs.iter().map(|p| (p.0 - mc).powi(2)).sum::<f64>();
    let scr = pairs.iter().map(|p| (p.0 - mc) * (p.1 - mr)).sum::<f64>();
    // Level at the participant's mean cosine.
    let level_pop = population.intercept + population.slope * mc;
    let level = level_pop + n / (n + PRIOR_PAIRS) * (mr - level_pop);
    // Slope, weighed by the information the cosines' spread carries.
    let tau = population.slope.abs().max(1e-6);
    let prior_info = (RATING_NOISE / tau).powi(2);
    let slope = if scc > 0.0 {
        let fitted = scr / scc;
        let w = scc / (scc + prior_info);
        let posterior = w * fitted + (1.0 - w) * population.slope;
        if posterior * population.slope < 0.0 && !strong_contrary(pairs, fitted, mc, mr, scc) {
            KEPT_DIRECTION * population.slope
        } else {
            posterior
        }
    } else {
        population.slope
    };
    Some(PopulationMap {
        intercept: level - slope * mc,
        slope,
    })
}

/// Whether the participant's own least-squares slope `fitted` (of the other sign than the
/// population's) is strong evidence: enough pairs and a large t statistic.
fn strong_contrary(pairs: &[(f64, f64)], fitted: f64, mc: f64, mr: f64, scc: f64) -> bool {
    if pairs.len() < FLIP_MIN_PAIRS {
        return false;
    }
    let rss: f64 = pairs
        .iter()
        .map(|p| (p.1 - (mr + fitted * (p.0 - mc))).powi(2))
        .sum();
    let sigma2 = rss / (pairs.len() - 2) as f64;
    let se = (sigma2 / scc).sqrt();
    se > 0.0 && (fitted / se).abs() >= FLIP_MIN_T
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
        // Two ratings of 5 where the population map says 1.4: the level moves by
        // w = 2 / 7 of the gap; no spread in the cosines, so the slope stays.
        let m = participant_map(POP, &[(0.1, 5.0), (0.1, 5.0)]).unwrap();
        assert!((m.intercept - (1.0 + 2.0 / 7.0 * 3.6)).abs() < 1e-12);
        assert_eq!(m.slope, 4.0);
    }

    #[test]
    fn clustered_ratings_never_turn_the_predictor_upside_down() {
        // The demo's three ratings: 4, 3, 5 at cosines 0.129, 0.103, 0.095 (a least-squares
        // slope of about -17 over a spread of 0.034).
        let demo = [(0.129, 4.0), (0.103, 3.0), (0.095, 5.0)];
        let m = participant_map(POP, &demo).unwrap();
        assert!(m.slope > 0.0, "{m:?}");
        assert!(m.score(0.3) > m.score(0.1), "{m:?}");
        // Any three to seven ratings, whatever their pattern, keep the direction.
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as f64 / (1u64 << 31) as f64
        };
        for _ in 0..2_000 {
            let k = 3 + (next() * 5.0) as usize;
            let pairs: Vec<(f64, f64)> = (0..k)
                .map(|_| (next() * 0.6, (1.0 + next() * 4.0).round()))
                .collect();
            let m = participant_map(POP, &pairs).unwrap();
            assert!(m.slope > 0.0, "{pairs:?} -> {m:?}");
        }
    }

    #[test]
    fn a_clear_repeated_contrary_pattern_may_change_the_sign() {
        // Twelve ratings falling cleanly with the cosine over a wide spread.
        let pairs: Vec<(f64, f64)> = (0..12)
            .map(|i| {
                let c = 0.05 * i as f64;
                (c, 5.0 - 6.0 * c + if i % 2 == 0 { 0.1 } else { -0.1 })
            })
            .collect();
        let m = participant_map(POP, &pairs).unwrap();
        assert!(m.slope < 0.0, "{m:?}");
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
