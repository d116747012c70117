//! Stories chosen for this person: candidates from the bank never shown to them, ranked by a
//! policy, each with why.
//!
//! Contract: [`recommend`] is a pure function of the bank ([`StoryIndex`]), the participant's
//! words as a query vector, the stories to leave out, `k`, the [`Policy`] and the
//! [`Scorer`] (the text-zero-shot predictor's map from a cosine to the 1-5 scale: fitted to
//! this participant's earlier ratings when there are enough, else relative to the bank,
//! uncalibrated). It is deterministic: ties are broken by cosine, then by story id.
//!
//! - `similarity`: the `k` most similar stories (the study's original rule);
//! - `predicted_empathy`: the `k` with the highest predicted empathy under the scorer. The
//!   population maps rise with the cosine, so without the participant's own calibration the
//!   order is the similarity order (the scores are what it adds); a map fitted to their
//!   ratings may fall with the cosine (a person moved by stories unlike their own), and then
//!   the order turns;
//! - `explore`: `k` stories spread evenly over the candidates ranked by predicted empathy
//!   (the highest, the lowest and between), for studies that need variance in ratings.

use serde::Serialize;

pub use super::calibration::Scorer;
use crate::core::Policy;
use crate::features::retrieval::StoryIndex;

/// One recommended story and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommended {
    pub story_id: String,
    pub title: String,
    /// Cosine of the story's embedding to the participant's words.
    pub similarity: f64,
    /// The predictor's score of the story, 1-5: the text-zero-shot predictor's for these
    /// words, or (live, once a window was predicted) the configured predictor's against the
    /// latest window.
    pub predicted: f64,
    /// `participant:N` (fitted to N earlier ratings) or `population` (not fitted to ratings).
    pub calibration: String,
    /// Its rank among all candidates by predicted empathy (1: highest).
    pub predicted_rank: usize,
    pub candidates: usize,
}

/// The `k` stories of `index` for `query`, leaving out `exclude`, by `policy`, each
/// predicted against the words themselves.
pub fn recommend(
    index: &StoryIndex,
    query: &[f32],
    exclude: &[String],
    k: usize,
    policy: Policy,
    scorer: &Scorer,
) -> Vec<Recommended> {
    recommend_against(index, query, query, exclude, k, policy, scorer)
}

/// [`recommend`], with each story's predicted empathy taken against `z` (a predictor's
/// representation of the participant's latest window, in the sentence encoder's space)
/// under `scorer` (that predictor's calibration); similarity stays the cosine to `query`.
pub fn recommend_against(
    index: &StoryIndex,
    query: &[f32],
    z: &[f32],
    exclude: &[String],
    k: usize,
    policy: Policy,
    scorer: &Scorer,
) -> Vec<Recommended> {
    let all = index.top_k(query, index.len(), exclude);
    let to_z: std::collections::HashMap<String, f64> = if z == query {
        all.iter().map(|h| (h.id.clone(), h.score)).collect()
    } else {
        index
            .top_k(z, index.len(), exclude)
            .into_iter()
            .map(|h| (h.id, h.score))
            .collect()
    };
    let mut scored: Vec<(String, String, f64, f64)> = all
        .into_iter()
        .map(|h| {
            let cos_z = to_z.get(&h.id).copied().unwrap_or(h.score);
            let predicted = scorer.score(z, cos_z);
            (h.id, h.title, h.score, predicted)
        })
        .collect();
    // By predicted empathy, then cosine, then id: a total, deterministic order.
    scored.sort_by(|a, b| {
        b.3.total_cmp(&a.3)
            .then(b.2.total_cmp(&a.2))
            .then(a.0.cmp(&b.0))
    });
    let n = scored.len();
    let chosen: Vec<usize> = match policy {
        Policy::PredictedEmpathy => (0..k.min(n)).collect(),
        Policy::Similarity => {
            let mut by_cosine: Vec<usize> = (0..n).collect();
            by_cosine.sort_by(|&a, &b| {
                scored[b]
                    .2
                    .total_cmp(&scored[a].2)
                    .then(scored[a].0.cmp(&scored[b].0))
            });
            by_cosine.truncate(k);
            by_cosine
        }
        Policy::Explore => spread(n, k),
    };
    chosen
        .into_iter()
        .map(|i| {
            let (id, title, cosine, predicted) = &scored[i];
            Recommended {
                story_id: id.clone(),
                title: title.clone(),
                similarity: *cosine,
                predicted: *predicted,
                calibration: scorer.label().to_string(),
                predicted_rank: i + 1,
                candidates: n,
            }
        })
        .collect()
}

/// `k` positions spread evenly over `0..n` (both ends included), without repeats.
fn spread(n: usize, k: usize) -> Vec<usize> {
    if n == 0 || k == 0 {
        return Vec::new();
    }
    if k >= n {
        return (0..n).collect();
    }
    if k == 1 {
        return vec![0];
    }
    let mut out: Vec<usize> = (0..k)
        .map(|i| ((i * (n - 1)) as f64 / (k - 1) as f64).round() as usize)
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::zero_shot::BankRelative;

    fn bank() -> StoryIndex {
        StoryIndex::from_vectors(
            (0..10)
                .map(|i| {
                    let a = i as f32 * 0.3;
                    (
                        format!("s{i}"),
                        format!("S{i}"),
                        vec![a.cos(), a.sin(), 0.1],
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn policies_rank_deterministically_and_leave_out_what_was_shown() {
        let index = bank();
        let (v, d) = index.vectors();
        let scorer = Scorer::Bank(std::sync::Arc::new(BankRelative::new(v, d).unwrap()));
        let q = [1.0, 0.05, 0.1];
        let shown = vec!["s0".to_string()];
        let sim = recommend(&index, &q, &shown, 3, Policy::Similarity, &scorer);
        let ids: Vec<&str> = sim.iter().map(|r| r.story_id.as_str()).collect();
        assert_eq!(ids, ["s1", "s2", "s3"]);
        assert!(sim
            .iter()
            .all(|r| r.candidates == 9 && r.calibration == "population"));
        // The zero-shot map rises with the cosine: the same order, with scores.
        let pe = recommend(&index, &q, &shown, 3, Policy::PredictedEmpathy, &scorer);
        assert_eq!(
            pe.iter().map(|r| &r.story_id).collect::<Vec<_>>(),
            sim.iter().map(|r| &r.story_id).collect::<Vec<_>>()
        );
        assert!(pe[0].predicted >= pe[1].predicted && pe[1].predicted >= pe[2].predicted);
        // Explore spans the predicted levels: the highest, the middle, the lowest.
        let ex = recommend(&index, &q, &shown, 3, Policy::Explore, &scorer);
        let ranks: Vec<usize> = ex.iter().map(|r| r.predicted_rank).collect();
        assert_eq!(ranks, [1, 5, 9]);
        assert_eq!(
            ex,
            recommend(&index, &q, &shown, 3, Policy::Explore, &scorer)
        );
        // Nothing left, or nothing asked: an empty answer, not a failure.
        let everything: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
        assert!(recommend(&index, &q, &everything, 3, Policy::Explore, &scorer).is_empty());
        assert!(recommend(&index, &q, &[], 0, Policy::Similarity, &scorer).is_empty());
    }

    /// Against a window's representation elsewhere in the space, predicted empathy ranks
    /// the stories near it first, while similarity stays the words' order.
    #[test]
    fn predicted_empathy_against_a_window_ranks_by_the_windows_representation() {
        let index = bank();
        let (v, d) = index.vectors();
        let scorer = Scorer::Bank(std::sync::Arc::new(BankRelative::new(v, d).unwrap()));
        let q = [1.0, 0.05, 0.1];
        // The latest window's z points at s8 (angle 2.4 rad).
        let z = [2.4f32.cos(), 2.4f32.sin(), 0.1];
        let pe = recommend_against(&index, &q, &z, &[], 3, Policy::PredictedEmpathy, &scorer);
        assert_eq!(pe[0].story_id, "s8", "{pe:?}");
        let sim = recommend_against(&index, &q, &z, &[], 3, Policy::Similarity, &scorer);
        let ids: Vec<&str> = sim.iter().map(|r| r.story_id.as_str()).collect();
        assert_eq!(ids, ["s0", "s1", "s2"]);
        // Its similarity is still the cosine to the words.
        assert!(pe[0].similarity < sim[2].similarity);
    }
}
