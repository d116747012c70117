//! Why a session's predictions are what they are: the stored attributions of each window
//! (`core::Attribution`) gathered per predictor and story over the windows that made the
//! session-level prediction, as `empathic explain`, the report's "why" panel and their tests
//! read them.
//!
//! Contract: for one predictor and story (and whether it was shown or retrieved), the
//! session-level prediction is the mean of its windows' scores, so its explanation is the
//! mean over those windows of each baseline and each cue's value (a cue absent from a window
//! counts 0 there): baseline + the sum of the cues = the prediction, as in every window.
//! Utterances are matched to the stored transcript by time (the participant's utterance that
//! had begun by the group's first frame) and gathered per utterance. Cues are sorted by
//! size, largest first. Nothing here computes an attribution.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::StoredAttribution;
use crate::store::UtteranceRow;

/// What an attribution is and is not, in the words every reader of one is shown.
pub const WHAT_IT_IS: &str = "An attribution says how much each cue moved this model's score from its baseline (the score with every modality absent): how the model reacted to these cues, not what the participant felt.";

/// One cue over the windows of a prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CueShare {
    pub modality: String,
    pub cue: String,
    /// Mean over the windows, on the 1-5 scale.
    pub value: f64,
    /// The largest standard error of a sampled window's value, when sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub se: Option<f64>,
}

/// One utterance's share of a prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UtteranceShare {
    pub start_secs: f64,
    pub end_secs: f64,
    /// The stored transcript's words, when the store has them (a central database may not).
    pub text: Option<String>,
    pub value: f64,
}

/// One modality's share, and in how many windows it was absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModalityShare {
    pub modality: String,
    pub value: f64,
    pub absent_windows: usize,
}

/// A window's point on the course of a prediction over the session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowWhy {
    pub window_index: u64,
    pub end_secs: f64,
    pub score: f64,
    pub baseline: f64,
    /// Per modality, its value in this window.
    pub modalities: BTreeMap<String, f64>,
    /// The window's largest cues (at most three), largest first.
    pub top: Vec<CueShare>,
}

/// The explanation of one session-level prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Why {
    pub predictor: String,
    pub story_id: String,
    pub retrieved: bool,
    pub synthetic: bool,
    pub calibration: String,
    pub windows: usize,
    pub score: f64,
    pub baseline: f64,
    /// `exact`, `sampled:K`, or both kinds named when windows differ.
    pub method: String,
    pub modalities: Vec<ModalityShare>,
    pub cues: Vec<CueShare>,
    pub utterances: Vec<UtteranceShare>,
    pub course: Vec<WindowWhy>,
}

impl Why {
    /// The words' share, all utterances together, and whether the text had any.
    pub fn words(&self) -> Option<f64> {
        let words: Vec<f64> = self
            .cues
            .iter()
            .filter(|c| c.cue == crate::fusion::attribute::WORDS)
            .map(|c| c.value)
            .collect();
        (!words.is_empty()).then(|| words.iter().sum())
    }
}

/// The utterance that had begun by `start_ns` (the participant's, when speakers are named).
fn utterance_at(utterances: &[UtteranceRow], start_ns: u64) -> Option<&UtteranceRow> {
    let t = start_ns as f64 / 1e9 + 0.05;
    let participant = utterances.iter().any(|u| u.speaker == "participant");
    utterances
        .iter()
        .filter(|u| !participant || u.speaker == "participant")
        .filter(|u| u.start_secs <= t)
        .max_by(|a, b| a.start_secs.total_cmp(&b.start_secs))
}

fn by_size<T>(v: &mut [T], value: impl Fn(&T) -> f64) {
    v.sort_by(|a, b| value(b).abs().total_cmp(&value(a).abs()));
}

/// A window's three largest cues, largest first.
pub fn top_cues(a: &crate::core::Attribution, n: usize) -> Vec<CueShare> {
    let mut cues: Vec<CueShare> = a
        .cues
        .iter()
        .map(|c| CueShare {
            modality: c.modality.clone(),
            cue: c.cue.clone(),
            value: c.value,
            se: c.se,
        })
        .collect();
    by_size(&mut cues, |c| c.value);
    cues.truncate(n);
    cues
}

/// The explanations of every attributed prediction of a session, per predictor, then
/// shown before retrieved, then story.
pub fn gather(rows: &[StoredAttribution], utterances: &[UtteranceRow]) -> Vec<Why> {
    let mut groups: BTreeMap<(String, bool, String), Vec<&StoredAttribution>> = BTreeMap::new();
    for r in rows {
        groups
            .entry((r.predictor.clone(), r.retrieved, r.story_id.clone()))
            .or_default()
            .push(r);
    }
    groups
        .into_iter()
        .map(|((predictor, retrieved, story_id), windows)| {
            let n = windows.len() as f64;
            let mut cues: Vec<CueShare> = Vec::new();
            let mut modalities: Vec<ModalityShare> = Vec::new();
            let mut spoken: Vec<(Option<usize>, UtteranceShare)> = Vec::new();
            let mut methods: Vec<String> = Vec::new();
            for w in &windows {
                let kind = w
                    .attribution
                    .method
                    .split(':')
                    .next()
                    .unwrap_or("")
                    .to_string();
                if !methods.contains(&kind) {
                    methods.push(kind);
                }
                for (m, share) in &w.coverage {
                    let i = match modalities.iter().position(|x| x.modality == *m) {
                        Some(i) => i,
                        None => {
                            modalities.push(ModalityShare {
                                modality: m.clone(),
                                value: 0.0,
                                absent_windows: 0,
                            });
                            modalities.len() - 1
                        }
                    };
                    if *share <= 0.0 {
                        modalities[i].absent_windows += 1;
                    }
                }
                for c in &w.attribution.cues {
                    if let Some(m) = modalities.iter_mut().find(|x| x.modality == c.modality) {
                        m.value += c.value / n;
                    }
                    if let (Some(start), Some(end)) = (c.start_ns, c.end_ns) {
                        let matched = utterance_at(utterances, start);
                        let key = matched
                            .and_then(|u| utterances.iter().position(|x| std::ptr::eq(x, u)));
                        let found = spoken.iter_mut().find(|(k, s)| match key {
                            Some(_) => *k == key,
                            None => (s.start_secs - start as f64 / 1e9).abs() < 1e-9,
                        });
                        match found {
                            Some((_, s)) => {
                                s.value += c.value / n;
                                s.end_secs = s.end_secs.max(end as f64 / 1e9);
                                s.start_secs = s.start_secs.min(start as f64 / 1e9);
                            }
                            None => spoken.push((
                                key,
                                UtteranceShare {
                                    start_secs: matched
                                        .map_or(start as f64 / 1e9, |u| u.start_secs),
                                    end_secs: matched.map_or(end as f64 / 1e9, |u| u.end_secs),
                                    text: matched.map(|u| u.text.clone()),
                                    value: c.value / n,
                                },
                            )),
                        }
                    }
                    match cues
                        .iter_mut()
                        .find(|x| x.modality == c.modality && x.cue == c.cue)
                    {
                        Some(x) => {
                            x.value += c.value / n;
                            x.se = match (x.se, c.se) {
                                (Some(a), Some(b)) => Some(a.max(b)),
                                (a, b) => a.or(b),
                            };
                        }
                        None => cues.push(CueShare {
                            modality: c.modality.clone(),
                            cue: c.cue.clone(),
                            value: c.value / n,
                            se: c.se,
                        }),
                    }
                }
            }
            by_size(&mut cues, |c| c.value);
            by_size(&mut modalities, |m| m.value);
            let mut utterances: Vec<UtteranceShare> = spoken.into_iter().map(|(_, s)| s).collect();
            by_size(&mut utterances, |u| u.value);
            let course = windows
                .iter()
                .map(|w| WindowWhy {
                    window_index: w.window_index,
                    end_secs: w.end_ns as f64 / 1e9,
                    score: w.score,
                    baseline: w.attribution.baseline,
                    modalities: w.attribution.modalities().into_iter().collect(),
                    top: top_cues(&w.attribution, 3),
                })
                .collect();
            let first = windows[0];
            Why {
                predictor,
                story_id,
                retrieved,
                synthetic: first.synthetic,
                calibration: first.calibration.clone(),
                windows: windows.len(),
                score: windows.iter().map(|w| w.score).sum::<f64>() / n,
                baseline: windows.iter().map(|w| w.attribution.baseline).sum::<f64>() / n,
                method: methods.join(" and "),
                modalities,
                cues,
                utterances,
                course,
            }
        })
        .collect()
}
