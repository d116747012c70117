//! Fusion: from a window of every modality to predicted empathy toward each story in play.
//!
//! Contract: a [`Predictor`] turns a window ([`WindowInput`]: per-frame vectors and
//! presence masks of the modalities of its subset, found by name in the layout) into a
//! representation `z` in the sentence encoder's space, or says it cannot (its modalities
//! are absent from the window: the window is skipped, never guessed). The predicted
//! empathy toward story `S_i` is the cosine of `z` with the story's embedding `E(S_i)`,
//! mapped to the 1-5 scale by the predictor's [`PopulationMap`]. [`FusionStage`] is the
//! plain struct the runtime feeds every window (on its own thread): it runs each
//! configured predictor on the windows of its phases that have stories in play and returns
//! the rows to store. Nothing here spawns threads or writes files.
//!
//! Predictors now: [`zero_shot::TextZeroShot`] (`text-zero-shot`, the default: the
//! participant's own words against the story, no training). ONNX-exported fusion models
//! (AMER, TFN, LF-LSTM, EF-LSTM) implement the same trait.

pub mod attribute;
pub mod calibration;
pub mod cues;
pub mod evaluate;
pub mod explain;
#[cfg(feature = "sensing")]
pub mod onnx_model;
pub mod recommend;
pub mod zero_shot;

use std::collections::BTreeMap;

use crate::core::cosine;
use crate::core::Phase;
/// A prediction (its type lives in `core`: the store keeps it as it is).
pub use crate::core::Prediction;
use crate::core::{ModalityId, ModalityLayout, Window};

/// Errors of a predictor.
#[derive(Debug, thiserror::Error)]
pub enum FusionError {
    /// The session lacks a modality the predictor needs, or has it with another width.
    #[error("predictor `{predictor}` needs modality `{modality}`: {problem}")]
    Layout {
        predictor: String,
        modality: String,
        problem: String,
    },
}

/// The maps from a raw cosine to the 1-5 rating scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PopulationMap {
    /// score = clamp(intercept + slope * cosine, 1, 5)
    pub intercept: f64,
    pub slope: f64,
}

impl PopulationMap {
    pub fn score(&self, cosine: f64) -> f64 {
        (self.intercept + self.slope * cosine).clamp(1.0, 5.0)
    }
}

/// One modality of a window as a predictor sees it: `T` rows of `dims` values (zeros where
/// absent) and the presence mask.
#[derive(Debug, Clone, PartialEq)]
pub struct ModalityMatrix {
    pub dims: usize,
    /// Row-major `T x dims`.
    pub values: Vec<f32>,
    pub mask: Vec<bool>,
}

impl ModalityMatrix {
    /// Share of the window's frames where the modality is present.
    pub fn coverage(&self) -> f64 {
        if self.mask.is_empty() {
            return 0.0;
        }
        self.mask.iter().filter(|p| **p).count() as f64 / self.mask.len() as f64
    }

    /// Column-wise mean over present frames; `None` when never present.
    pub fn mean(&self) -> Option<Vec<f32>> {
        let present = self.mask.iter().filter(|p| **p).count();
        if present == 0 {
            return None;
        }
        let mut sum = vec![0f64; self.dims];
        for (row, _) in self
            .values
            .chunks_exact(self.dims.max(1))
            .zip(&self.mask)
            .filter(|(_, p)| **p)
        {
            for (s, v) in sum.iter_mut().zip(row) {
                *s += f64::from(*v);
            }
        }
        Some(sum.iter().map(|s| (s / present as f64) as f32).collect())
    }
}

/// A window with the layout to find its modalities by name.
pub struct WindowInput<'a> {
    pub window: &'a Window,
    pub layout: &'a ModalityLayout,
}

impl WindowInput<'_> {
    /// Modality `name` over the window's frames, or `None` when the session lacks it.
    pub fn matrix(&self, name: &str) -> Option<ModalityMatrix> {
        let id: ModalityId = self.layout.id(name)?;
        let dims = self.layout.get(id).spec.dims();
        let t = self.window.frames.len();
        let mut values = vec![0f32; t * dims];
        let mut mask = vec![false; t];
        for (i, f) in self.window.frames.iter().enumerate() {
            if let Some(v) = f.get(id) {
                values[i * dims..(i + 1) * dims].copy_from_slice(v);
                mask[i] = true;
            }
        }
        Some(ModalityMatrix { dims, values, mask })
    }
}

/// What a predictor made of a window.
#[derive(Debug, Clone, PartialEq)]
pub struct Representation {
    /// In the sentence encoder's space.
    pub z: Vec<f32>,
    /// Per modality of the predictor's subset, the share of frames present.
    pub coverage: BTreeMap<String, f64>,
}

/// A fusion model or rule: window in, representation out.
pub trait Predictor: Send {
    /// Stored in `predictions.predictor`.
    fn id(&self) -> &str;
    /// True for a model trained on synthetic data (not an empathy model).
    fn synthetic(&self) -> bool;
    /// The modalities it reads, by the names the layout gives them.
    fn modalities(&self) -> Vec<String>;
    /// Checks the session's layout once, before any window (names the first mismatch).
    fn check_layout(&self, layout: &ModalityLayout) -> Result<(), FusionError>;
    /// `z` for the window, or `None` when its modalities are absent from the window.
    fn represent(&mut self, input: &WindowInput<'_>) -> Option<Representation>;
    /// Several windows at once (one model call where the predictor can); by default one by
    /// one. The result has one entry per input, in order.
    fn represent_batch(&mut self, inputs: &[WindowInput<'_>]) -> Vec<Option<Representation>> {
        inputs.iter().map(|i| self.represent(i)).collect()
    }
    fn population_map(&self) -> PopulationMap;
    /// The population baseline of `modality` (what a left-out cue group's columns become in
    /// an attribution), when the predictor carries one.
    fn baseline(&self, _modality: &str) -> Option<&[f32]> {
        None
    }
    /// `z` for the window altered as each variant says (see [`explain::Variant`]; `None`
    /// where nothing is left to represent), or `None` when the predictor cannot (then its
    /// predictions carry no attribution).
    fn represent_variants(
        &mut self,
        _input: &WindowInput<'_>,
        _variants: &[explain::Variant],
    ) -> Option<Vec<Option<Vec<f32>>>> {
        None
    }
    /// Whether a run costs microseconds, so an attribution may take many.
    fn cheap(&self) -> bool {
        false
    }
}

/// The built-in predictor `id`: the one place config validation, set-up and evaluation
/// learn which predictors exist.
pub fn builtin(id: &str) -> Option<Box<dyn Predictor>> {
    (id == zero_shot::TextZeroShot::ID)
        .then(|| Box::new(zero_shot::TextZeroShot) as Box<dyn Predictor>)
}

/// Whether a stored score of `predictor` under `calibration` is on the 1-5 scale without
/// having been fitted to any ratings: a built-in predictor's population map (a trained
/// model's map was fitted in training; `participant:N` to the person's own ratings).
pub fn uncalibrated(predictor: &str, calibration: &str) -> bool {
    calibration == "population" && crate::core::BUILTIN_PREDICTORS.contains(&predictor)
}

/// What a stored score's 1-5 map was fitted to, in the one set of words every page, the
/// replay summary and `evaluate` use (issue 55: "calibrated" meant three things):
/// `uncalibrated` (a built-in predictor's map, fitted to no ratings), `population` (a
/// trained model's map, fitted to its training participants' ratings), `calibrated` (fitted
/// to this participant's own earlier ratings: `participant:N`); `synthetic` first, since a
/// synthetic model measures nothing whatever its map.
pub fn calibration_word(predictor: &str, calibration: &str, synthetic: bool) -> &'static str {
    if synthetic {
        "synthetic"
    } else if uncalibrated(predictor, calibration) {
        "uncalibrated"
    } else if calibration.starts_with("participant:") {
        "calibrated"
    } else {
        "population"
    }
}

/// [`calibration_word`] with what it means, for a label beside a predictor's name.
pub fn calibration_label(predictor: &str, calibration: &str, synthetic: bool) -> &'static str {
    match calibration_word(predictor, calibration, synthetic) {
        "synthetic" => "synthetic: not an empathy model",
        "uncalibrated" => "uncalibrated: a zero-shot map, fitted to no ratings",
        "calibrated" => "calibrated: fitted to this participant's earlier ratings",
        _ => "population: the model's map from its training participants",
    }
}

/// The population map of a built-in predictor as a function of the raw cosine alone, by
/// id; None for the zero-shot predictor, whose map is relative to the bank per window (its
/// stored scores are the population scores).
pub fn population_map_of(id: &str) -> Option<PopulationMap> {
    if id == zero_shot::TextZeroShot::ID {
        return None;
    }
    builtin(id).map(|p| p.population_map())
}

/// A predictor and the phases whose windows it predicts.
pub struct Configured {
    pub predictor: Box<dyn Predictor>,
    pub phases: Vec<Phase>,
}

/// The map in use for one predictor and what `predictions.calibration` says of it.
struct InUse {
    map: PopulationMap,
    label: String,
}

/// The latest window a predictor represented, to score stories that are not in play (the
/// live `recommend`'s predicted empathy).
#[derive(Debug, Clone)]
pub struct LatestRepresentation {
    pub window_index: u64,
    pub end_ns: crate::Nanos,
    pub predictor: String,
    pub synthetic: bool,
    /// The window's representation, in the sentence encoder's space.
    pub z: Vec<f32>,
    /// The predictor's map in this session (its calibration), as the window's own
    /// predictions used it.
    pub scorer: calibration::Scorer,
}

/// Runs the configured predictors on every window.
pub struct FusionStage {
    layout: ModalityLayout,
    predictors: Vec<(Configured, InUse)>,
    /// Per predictor, the latest window it represented: (index, end, z).
    latest: Vec<Option<(u64, crate::Nanos, Vec<f32>)>>,
    /// The story bank, for the zero-shot predictor's population map.
    bank: Option<std::sync::Arc<zero_shot::BankRelative>>,
    /// Predict windows that have no phase (a recording whose events declare none).
    predict_unphased: bool,
    /// Attribute each prediction, within this many coalitions a window (`[fusion] explain`).
    explain: Option<usize>,
}

impl FusionStage {
    /// Checks every predictor against the session's `layout`.
    pub fn new(layout: ModalityLayout, predictors: Vec<Configured>) -> Result<Self, FusionError> {
        for c in &predictors {
            c.predictor.check_layout(&layout)?;
        }
        let predictors: Vec<(Configured, InUse)> = predictors
            .into_iter()
            .map(|c| {
                let map = c.predictor.population_map();
                (
                    c,
                    InUse {
                        map,
                        label: "population".into(),
                    },
                )
            })
            .collect();
        Ok(Self {
            layout,
            latest: vec![None; predictors.len()],
            predictors,
            bank: None,
            predict_unphased: false,
            explain: None,
        })
    }

    /// Attributes every prediction to its cues (within `max_coalitions` model runs a window
    /// per fusion model), or none when `None`.
    pub fn set_explain(&mut self, max_coalitions: Option<usize>) {
        self.explain = max_coalitions;
    }

    /// Gives the built-in zero-shot predictor its bank-relative population map (see
    /// [`zero_shot::BankRelative`]) from the story bank's unit-length `vectors`; it applies
    /// while the predictor is not calibrated to the participant.
    pub fn set_story_bank(&mut self, vectors: &[f32], dims: usize) {
        self.bank = zero_shot::BankRelative::new(vectors, dims).map(std::sync::Arc::new);
    }

    /// Whether windows without a phase are predicted (a recording whose events declare no
    /// phase: the whole session is predicted); otherwise only the configured phases are.
    pub fn set_predict_unphased(&mut self, on: bool) {
        self.predict_unphased = on;
    }

    /// The predictor ids, in order.
    pub fn predictor_ids(&self) -> Vec<String> {
        self.predictors
            .iter()
            .map(|(c, _)| c.predictor.id().to_string())
            .collect()
    }

    /// The latest window represented by the first predictor that is not synthetic (or by
    /// the first at all), with the map its predictions use; `None` before any.
    pub fn latest(&self) -> Option<LatestRepresentation> {
        use calibration::Scorer;
        let pick = |synthetic_ok: bool| {
            self.predictors
                .iter()
                .zip(&self.latest)
                .find(|((c, _), l)| l.is_some() && (synthetic_ok || !c.predictor.synthetic()))
        };
        let ((c, in_use), latest) = pick(false).or_else(|| pick(true))?;
        let (window_index, end_ns, z) = latest.clone()?;
        let bank = self.bank.as_ref().filter(|_| {
            c.predictor.id() == zero_shot::TextZeroShot::ID && in_use.label == "population"
        });
        let scorer = match bank {
            Some(b) => Scorer::Bank(b.clone()),
            None if in_use.label == "population" => Scorer::Absolute(in_use.map),
            None => Scorer::Participant {
                map: in_use.map,
                label: in_use.label.clone(),
            },
        };
        Some(LatestRepresentation {
            window_index,
            end_ns,
            predictor: c.predictor.id().to_string(),
            synthetic: c.predictor.synthetic(),
            z,
            scorer,
        })
    }

    /// Recalibrates predictor `id` for this session's participant from `pairs` (mean raw
    /// cosine, self-rating) of their earlier sessions (see [`calibration`]). Returns the
    /// label stored with its predictions.
    pub fn calibrate(&mut self, id: &str, pairs: &[(f64, f64)]) -> Option<String> {
        let (c, in_use) = self
            .predictors
            .iter_mut()
            .find(|(c, _)| c.predictor.id() == id)?;
        let map = calibration::participant_map(c.predictor.population_map(), pairs)?;
        *in_use = InUse {
            map,
            label: format!("participant:{}", pairs.len()),
        };
        Some(in_use.label.clone())
    }

    /// The rows for one window: per predictor whose phases include the window's, and per
    /// story in play, the cosine and its calibrated score. Empty when the window is outside
    /// those phases, has no story in play, or lacks the predictor's modalities.
    pub fn predict(&mut self, window: &Window) -> Vec<Prediction> {
        self.predict_batch(&[window])
    }

    /// Predictions for `windows`, in the order `predict` would give them one by one: per
    /// window, per predictor, per story. Each predictor sees the windows of its phases with
    /// stories in play in one `represent_batch` call.
    pub fn predict_batch(&mut self, windows: &[&Window]) -> Vec<Prediction> {
        let layout = &self.layout;
        let predict_unphased = self.predict_unphased;
        let mut reps: Vec<Vec<Option<Representation>>> = Vec::new();
        for (c, _) in &mut self.predictors {
            let wanted: Vec<usize> = (0..windows.len())
                .filter(|&i| {
                    windows[i]
                        .phase
                        .map_or(predict_unphased, |p| c.phases.contains(&p))
                        && !windows[i].stories.is_empty()
                })
                .collect();
            let inputs: Vec<WindowInput<'_>> = wanted
                .iter()
                .map(|&i| WindowInput {
                    window: windows[i],
                    layout,
                })
                .collect();
            let mut out: Vec<Option<Representation>> = vec![None; windows.len()];
            for (i, rep) in wanted.iter().zip(c.predictor.represent_batch(&inputs)) {
                out[*i] = rep;
            }
            if let Some((i, rep)) = out
                .iter()
                .enumerate()
                .rev()
                .find_map(|(i, r)| r.as_ref().map(|r| (i, r)))
            {
                self.latest[reps.len()] =
                    Some((windows[i].index, windows[i].end_ns, rep.z.clone()));
            }
            reps.push(out);
        }
        let mut rows = Vec::new();
        for (wi, window) in windows.iter().enumerate() {
            for ((c, in_use), reps) in self.predictors.iter_mut().zip(&reps) {
                let Some(rep) = &reps[wi] else {
                    continue;
                };
                let modalities = c.predictor.modalities();
                let relative = self.bank.as_ref().filter(|_| {
                    c.predictor.id() == zero_shot::TextZeroShot::ID && in_use.label == "population"
                });
                let score = |z: &[f32], cos: f64| {
                    relative
                        .and_then(|b| b.score(z, cos))
                        .unwrap_or_else(|| in_use.map.score(cos))
                };
                let first = rows.len();
                for story in &window.stories {
                    let Some(cos) = cosine(&rep.z, &story.embedding) else {
                        continue;
                    };
                    rows.push(Prediction {
                        window_index: window.index,
                        predictor: c.predictor.id().to_string(),
                        story_id: story.story_id.clone(),
                        retrieved: story.retrieved,
                        raw_cosine: cos,
                        score: score(&rep.z, cos),
                        calibration: in_use.label.clone(),
                        modalities: modalities.clone(),
                        coverage: rep.coverage.clone(),
                        synthetic: c.predictor.synthetic(),
                        attribution: None,
                    });
                }
                let Some(max) = self.explain else { continue };
                let made = &mut rows[first..];
                if made.is_empty() {
                    continue;
                }
                // With nothing to represent, the score is the map's answer to "nothing in
                // common": the middle of the scale relative to a bank, else cosine 0.
                let nothing = if relative.is_some() {
                    3.0
                } else {
                    in_use.map.score(0.0)
                };
                let value = |z: Option<&[f32]>, e: &[f32]| {
                    z.and_then(|z| cosine(z, e).map(|cos| score(z, cos)))
                        .unwrap_or(nothing)
                };
                let stories: Vec<(&[f32], f64)> = made
                    .iter()
                    .filter_map(|p| {
                        window
                            .stories
                            .iter()
                            .find(|s| s.story_id == p.story_id)
                            .map(|s| (s.embedding.as_slice(), p.score))
                    })
                    .collect();
                if stories.len() != made.len() {
                    continue;
                }
                let input = WindowInput { window, layout };
                if let Some(found) =
                    attribute::attribute(c.predictor.as_mut(), &input, max, &stories, &value)
                {
                    for (p, a) in made.iter_mut().zip(found) {
                        p.attribution = Some(a);
                    }
                }
            }
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_builtin_predictor_a_configuration_may_name_exists() {
        for id in crate::core::BUILTIN_PREDICTORS {
            assert!(super::builtin(id).is_some(), "{id}");
        }
    }

    use super::*;

    #[test]
    fn cosine_and_population_map() {
        let m = PopulationMap {
            intercept: 1.0,
            slope: 4.0,
        };
        assert_eq!(m.score(-0.5), 1.0);
        assert_eq!(m.score(0.5), 3.0);
        assert_eq!(m.score(2.0), 5.0);
    }

    use crate::core::ModalitySpec;
    use crate::core::{FrameRecord, StoryInPlay, Stream};
    use std::sync::Arc;

    fn layout() -> ModalityLayout {
        let mut l = ModalityLayout::new();
        l.add(
            Stream::Video,
            ModalitySpec::by_algorithm("video_signal", vec!["b".into()], "test", 1),
        )
        .unwrap();
        l.add(
            Stream::Text,
            ModalitySpec::by_algorithm("text", vec!["t0".into(), "t1".into()], "test", 1),
        )
        .unwrap();
        l
    }

    fn window(text: &[Option<[f32; 2]>], phase: Phase, stories: &[(&str, [f32; 2])]) -> Window {
        Window {
            index: 7,
            start_frame: 0,
            end_frame: text.len() as u64,
            start_ns: 0,
            end_ns: 1,
            phase: Some(phase),
            frames: text
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    Arc::new(FrameRecord {
                        index: i as u64,
                        t_ns: i as u64,
                        decoded: true,
                        features: vec![Some(vec![0.5]), t.map(|v| v.to_vec())],
                    })
                })
                .collect(),
            stories: stories
                .iter()
                .map(|(id, e)| {
                    Arc::new(StoryInPlay {
                        story_id: id.to_string(),
                        title: String::new(),
                        shown_ns: 0,
                        embedding: e.to_vec(),
                        retrieved: false,
                    })
                })
                .collect(),
        }
    }

    fn stage() -> FusionStage {
        FusionStage::new(
            layout(),
            vec![Configured {
                predictor: Box::new(zero_shot::TextZeroShot),
                phases: vec![Phase::Reflection],
            }],
        )
        .unwrap()
    }

    #[test]
    fn zero_shot_predicts_each_story_in_play_from_the_words_present() {
        let w = window(
            &[Some([1.0, 0.0]), None, Some([1.0, 0.0])],
            Phase::Reflection,
            &[("same", [2.0, 0.0]), ("orthogonal", [0.0, 1.0])],
        );
        let rows = stage().predict(&w);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].story_id.as_str(), rows[0].raw_cosine, rows[0].score),
            ("same", 1.0, 5.0)
        );
        assert_eq!((rows[1].raw_cosine, rows[1].score), (0.0, 1.0));
        assert!((rows[0].coverage["text"] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(rows[0].window_index, 7);
        assert!(!rows[0].synthetic);
    }

    #[test]
    fn windows_without_words_stories_or_the_phase_are_skipped() {
        let mut s = stage();
        let silent = window(&[None, None], Phase::Reflection, &[("s", [1.0, 0.0])]);
        assert!(s.predict(&silent).is_empty());
        let no_story = window(&[Some([1.0, 0.0])], Phase::Reflection, &[]);
        assert!(s.predict(&no_story).is_empty());
        let other_phase = window(&[Some([1.0, 0.0])], Phase::WarmUp, &[("s", [1.0, 0.0])]);
        assert!(s.predict(&other_phase).is_empty());
    }

    #[test]
    fn a_session_without_the_modality_is_refused_naming_it() {
        let mut l = ModalityLayout::new();
        l.add(
            Stream::Video,
            ModalitySpec::by_algorithm("video_signal", vec!["b".into()], "test", 1),
        )
        .unwrap();
        let err = FusionStage::new(
            l,
            vec![Configured {
                predictor: Box::new(zero_shot::TextZeroShot),
                phases: vec![Phase::Reflection],
            }],
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            err.contains("`text`") && err.contains("text-zero-shot"),
            "{err}"
        );
    }

    #[test]
    fn mean_and_coverage_respect_the_mask() {
        let m = ModalityMatrix {
            dims: 2,
            values: vec![1.0, 2.0, 0.0, 0.0, 3.0, 4.0],
            mask: vec![true, false, true],
        };
        assert_eq!(m.mean(), Some(vec![2.0, 3.0]));
        assert!((m.coverage() - 2.0 / 3.0).abs() < 1e-12);
        let none = ModalityMatrix {
            dims: 2,
            values: vec![0.0; 4],
            mask: vec![false, false],
        };
        assert_eq!(none.mean(), None);
    }
}
