//! One window's attributions for one predictor: the players of its game ([`players`]), the
//! altered windows the predictor represents, and each story's [`Attribution`].
//!
//! Contract: [`attribute`] returns one attribution per story in the order given, or `None`
//! when the predictor cannot represent altered windows or the window has no cue present.
//! The full coalition's value is the stored score itself, so baseline + the cues = the
//! stored prediction exactly (not a recomputation that could differ in the last bits). The
//! players: per modality of the predictor present in the window, the utterances of `text`
//! (their frames), the cue groups of [`super::cues::column_groups`] when the predictor has a
//! baseline for the modality, else the modality whole.

use std::collections::HashMap;

use super::cues::{column_groups, utterance_groups};
use super::explain::{Part, Plan, Player};
use super::{Predictor, WindowInput};
use crate::core::{Attribution, CueAttribution};

/// At most this many utterances of one window are players (more are merged by time).
pub const MAX_UTTERANCES: usize = 12;

/// The cue of every utterance player.
pub const WORDS: &str = "words";

/// The players of `input` for `predictor`.
pub fn players(predictor: &dyn Predictor, input: &WindowInput<'_>) -> Vec<Player> {
    let mut out = Vec::new();
    for (k, name) in predictor.modalities().iter().enumerate() {
        let Some(matrix) = input.matrix(name) else {
            continue;
        };
        if !matrix.mask.iter().any(|p| *p) {
            continue;
        }
        if name == super::zero_shot::TEXT {
            let rows: Vec<Option<&[f32]>> = matrix
                .values
                .chunks_exact(matrix.dims.max(1))
                .zip(&matrix.mask)
                .map(|(row, present)| present.then_some(row))
                .collect();
            for g in utterance_groups(&rows, MAX_UTTERANCES) {
                let t = |i: usize| input.window.frames.get(i).map(|f| f.t_ns);
                let span = match (g.frames.first(), g.frames.last()) {
                    (Some(&a), Some(&b)) => t(a).zip(t(b)),
                    _ => None,
                };
                out.push(Player {
                    modality: k,
                    cue: WORDS.into(),
                    part: Part::Frames(g.frames),
                    span_ns: span,
                });
            }
            continue;
        }
        let has_baseline = predictor
            .baseline(name)
            .is_some_and(|b| b.len() == matrix.dims);
        let columns = input
            .layout
            .id(name)
            .map(|id| input.layout.get(id).spec.columns.clone())
            .unwrap_or_default();
        let groups = column_groups(name, &columns);
        if has_baseline && groups.len() > 1 {
            for g in groups {
                out.push(Player {
                    modality: k,
                    cue: g.cue.into(),
                    part: Part::Columns(g.columns),
                    span_ns: None,
                });
            }
        } else {
            out.push(Player {
                modality: k,
                cue: "all of it".into(),
                part: Part::Whole,
                span_ns: None,
            });
        }
    }
    out
}

/// The 1-5 score of a representation (None: nothing represented) toward a story embedding.
pub type ScoreOf<'a> = &'a dyn Fn(Option<&[f32]>, &[f32]) -> f64;

/// A seed for the sampled orders that a rerun reproduces: the window and the predictor.
fn seed(window_index: u64, predictor: &str) -> u64 {
    predictor.bytes().fold(window_index ^ 0x5eed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Attributions of `input`'s predictions toward `stories` (each an embedding and its stored
/// score), `score(z, embedding)` giving the 1-5 score of a representation (None: nothing
/// represented).
pub fn attribute(
    predictor: &mut dyn Predictor,
    input: &WindowInput<'_>,
    max_coalitions: usize,
    stories: &[(&[f32], f64)],
    score: ScoreOf<'_>,
) -> Option<Vec<Attribution>> {
    let names = predictor.modalities();
    let players = players(predictor, input);
    let budget = if predictor.cheap() {
        max_coalitions.max(4096)
    } else {
        max_coalitions
    };
    let plan = Plan::new(
        players,
        names.len(),
        budget,
        seed(input.window.index, predictor.id()),
    )?;
    let started = std::time::Instant::now();
    let variants: Vec<_> = plan.coalitions().iter().map(|&c| plan.variant(c)).collect();
    let zs = predictor.represent_variants(input, &variants)?;
    // The cost per window, for docs/performance.md (`EMPATHIC_LOG=debug`).
    tracing::debug!(
        predictor = predictor.id(),
        window = input.window.index,
        coalitions = variants.len(),
        ms = started.elapsed().as_secs_f64() * 1e3,
        "attributed a window"
    );
    if zs.len() != variants.len() {
        return None;
    }
    let full = plan.full();
    let mut out = Vec::with_capacity(stories.len());
    for (embedding, stored) in stories {
        let values: HashMap<u64, f64> = plan
            .coalitions()
            .iter()
            .zip(&zs)
            .map(|(&c, z)| {
                let v = if c == full {
                    *stored
                } else {
                    score(z.as_deref(), embedding)
                };
                (c, v)
            })
            .collect();
        let (baseline, values) = plan.attribute(&values);
        let cues = values
            .into_iter()
            .map(|v| {
                let p = &plan.players()[v.player];
                CueAttribution {
                    modality: names.get(p.modality).cloned().unwrap_or_default(),
                    cue: p.cue.clone(),
                    value: v.value,
                    se: v.se,
                    start_ns: p.span_ns.map(|s| s.0),
                    end_ns: p.span_ns.map(|s| s.1),
                }
            })
            .collect();
        out.push(Attribution {
            baseline,
            method: plan.method().label(),
            coalitions: plan.coalitions().len(),
            cues,
        });
    }
    Some(out)
}
