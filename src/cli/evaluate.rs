//! `empathic evaluate`: stored predictions against the self-ratings, every phase in one
//! table, with bootstrap intervals over participants when there are enough.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::options::{ConfigOption, DbOption, JsonOption};
use super::{db_path, fail, load_config, open_existing_store, print_json, Failure};
use crate::config::Config;
use crate::exit::ExitKind;

/// Stored predictions against self-ratings: Pearson r, Spearman rho, MSE, accuracy and
/// F1, with 95 % bootstrap intervals over participants.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbOption,
    #[command(flatten)]
    config: ConfigOption,
    /// Only this predictor (default: each stored one).
    #[arg(long)]
    predictor: Option<String>,
    /// Only windows of this phase: warm_up, story_share, story_receive, reflection, cool_down (default: every phase, one row each, and all phases together).
    #[arg(long)]
    phase: Option<String>,
    #[command(flatten)]
    json: JsonOption,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        evaluate(
            self.db.db,
            self.config.path(),
            self.predictor.as_deref(),
            self.phase.as_deref(),
            self.json.json,
        )
    }
}

/// The report of `empathic evaluate`: per predictor and phase, overall and per participant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evaluation {
    pub predictor: String,
    /// Trained on synthetic data: not an empathy model, its figures measure nothing.
    pub synthetic: bool,
    /// Whether every stored score went through a map fitted to ratings: a trained model's,
    /// or a participant's own calibration (false for the built-in zero-shot population map).
    pub calibrated: bool,
    /// Of the rated (session, story) pairs, how many were scored through such a map.
    pub calibrated_pairs: usize,
    pub pairs: usize,
    /// The phase of the windows, or None for windows of every phase.
    pub phase: Option<String>,
    /// As stored: each session's predictions under the calibration in force for it.
    pub overall: crate::fusion::evaluate::Metrics,
    /// The same windows through the predictor's population map, for comparison.
    pub population: Option<crate::fusion::evaluate::Metrics>,
    pub per_participant: std::collections::BTreeMap<String, crate::fusion::evaluate::Metrics>,
    /// What a reader must know before trusting the figures.
    pub warnings: Vec<String>,
}

/// What `evaluate` knows of a predictor beyond its stored rows: the participants a fusion
/// model was fitted on, when its provenance records them, read from the model itself: a
/// model the config names by path (`[fusion] predictors = ["my.onnx"]`, matched by the id
/// in its metadata) or one of the manifest.
fn fitted_participants(config: &Config, predictor: &str) -> Result<Option<Vec<String>>, String> {
    #[cfg(feature = "sensing")]
    for path in config
        .fusion
        .predictors
        .iter()
        .filter(|p| p.ends_with(".onnx"))
    {
        use crate::fusion::Predictor;
        let Ok(model) = crate::fusion::onnx_model::OnnxPredictor::open(
            std::path::Path::new(path),
            config.models.onnxruntime_library.as_deref(),
        ) else {
            continue;
        };
        if model.id() == predictor {
            return Ok(model.fitted_participants());
        }
    }
    let Ok(manifest) = crate::models::manifest::Manifest::load(&config.models.dir) else {
        return Err("the model manifest cannot be read".into());
    };
    let Some(entry) = manifest
        .models
        .iter()
        .find(|m| m.name == predictor && m.kind == crate::models::manifest::ModelKind::FusionModel)
    else {
        return Ok(None);
    };
    #[cfg(feature = "sensing")]
    {
        let model = crate::fusion::onnx_model::OnnxPredictor::open(
            &entry.path(&config.models.dir),
            config.models.onnxruntime_library.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        Ok(model.fitted_participants())
    }
    #[cfg(not(feature = "sensing"))]
    {
        Err(format!(
            "this build cannot open fusion model `{}` (built without the `sensing` feature: the collector build)",
            entry.name
        ))
    }
}

/// One predictor's session-level units as stored and through its population map, and
/// whether it is synthetic and calibrated (see [`Evaluation`]).
type PredictorUnits = (
    Vec<crate::fusion::evaluate::Rated>,
    Option<Vec<crate::fusion::evaluate::Rated>>,
    bool,
    bool,
);

/// `empathic evaluate`: every phase in one table unless `phase` names one.
pub fn evaluate(
    db: Option<PathBuf>,
    config: Option<&Path>,
    predictor: Option<&str>,
    phase: Option<&str>,
    json: bool,
) -> Result<ExitCode, Failure> {
    use crate::fusion::evaluate::{evaluate as metrics, Estimate, Rated, FEW_RATED};
    let config = load_config(config)?;
    if let Some(p) = phase {
        if !crate::core::Phase::ALL.iter().any(|x| x.as_str() == p) {
            return Err((
                ExitKind::BadInput,
                format!(
                    "unknown phase `{p}` (one of {})",
                    crate::core::Phase::ALL.map(|x| x.as_str()).join(", ")
                ),
            ));
        }
    }
    let store = open_existing_store(&db_path(db, &config))?;
    // Every phase (None = all windows) unless one is asked for.
    let phases: Vec<Option<&str>> = match phase {
        Some(p) => vec![Some(p)],
        None => std::iter::once(None)
            .chain(crate::core::Phase::ALL.iter().map(|p| Some(p.as_str())))
            .collect(),
    };
    let mut report: Vec<Evaluation> = Vec::new();
    let mut fitted: std::collections::BTreeMap<String, Result<Option<Vec<String>>, String>> =
        Default::default();
    let mut any_rows = false;
    let mut total_all = 0;
    let mut empty_phases: Vec<&str> = Vec::new();
    for ph in &phases {
        let (rows, total) = store.rated_predictions(predictor, *ph).map_err(fail)?;
        if ph.is_none() || phase.is_some() {
            total_all = total;
        }
        any_rows |= !rows.is_empty();
        if rows.is_empty() {
            if let Some(p) = ph {
                empty_phases.push(*p);
            }
        }
        let mut by_predictor: std::collections::BTreeMap<String, PredictorUnits> =
            Default::default();
        for (p, stored, population) in
            crate::fusion::evaluate::session_level(&rows, crate::fusion::population_map_of)
        {
            let entry = by_predictor
                .entry(p.clone())
                .or_insert_with(|| (Vec::new(), Some(Vec::new()), false, false));
            entry.0.push(stored);
            entry.1 = match (entry.1.take(), population) {
                (Some(mut v), Some(r)) => {
                    v.push(r);
                    Some(v)
                }
                _ => None,
            };
        }
        // Per predictor, each rated (session, story) pair and whether it was calibrated:
        // fitted to ratings, a trained model's map or a participant's own.
        let mut units: std::collections::BTreeMap<
            String,
            std::collections::BTreeMap<(&str, &str), bool>,
        > = Default::default();
        for w in &rows {
            if let Some(e) = by_predictor.get_mut(&w.predictor) {
                e.2 |= w.synthetic;
                let fitted =
                    crate::fusion::builtin(&w.predictor).is_none() || w.calibration != "population";
                *units
                    .entry(w.predictor.clone())
                    .or_default()
                    .entry((w.session_id.as_str(), w.story_id.as_str()))
                    .or_insert(false) |= fitted;
            }
        }
        for (p, (rated, population, synthetic, _)) in by_predictor {
            let unit = units.get(&p);
            let pairs = unit.map_or(0, |u| u.len());
            let calibrated_pairs = unit.map_or(0, |u| u.values().filter(|c| **c).count());
            let calibrated = pairs > 0 && calibrated_pairs == pairs;
            let mut participants: std::collections::BTreeMap<String, Vec<Rated>> =
                Default::default();
            for r in &rated {
                participants
                    .entry(r.participant.clone())
                    .or_default()
                    .push(r.clone());
            }
            let overall = metrics(&rated);
            let mut warnings = Vec::new();
            if synthetic {
                warnings.push(
                    "synthetic: trained on planted ratings, not an empathy model".to_string(),
                );
            }
            if calibrated_pairs == 0 {
                warnings.push(
                    "uncalibrated: a zero-shot map from cosine to the 1-5 scale, fitted to no ratings (docs/prediction.md, \"Empathy prediction\")"
                        .to_string(),
                );
            } else if !calibrated {
                warnings.push(format!(
                    "partly calibrated: {calibrated_pairs} of {pairs} rated pairs through a participant's own calibration, the rest through the zero-shot population map"
                ));
            }
            if let Some(why) = &overall.interval_withheld {
                warnings.push(format!("no interval: {why}"));
            }
            if overall.n < FEW_RATED {
                warnings.push(format!(
                    "n = {}: below {FEW_RATED} rated stories a correlation is anecdotal",
                    overall.n
                ));
            }
            let known = fitted
                .entry(p.clone())
                .or_insert_with(|| fitted_participants(&config, &p));
            match known {
                Ok(Some(fitted)) => {
                    let seen: Vec<&String> =
                        participants.keys().filter(|q| fitted.contains(q)).collect();
                    if !seen.is_empty() {
                        warnings.push(format!(
                            "evaluated on {} participant(s) the model was fitted on ({}): not a held-out figure",
                            seen.len(),
                            seen.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
                Ok(None) if crate::fusion::builtin(&p).is_none() => warnings.push(
                    "the model does not record whom it was fitted on: these may be training participants"
                        .to_string(),
                ),
                Ok(None) => {}
                Err(e) => warnings.push(format!("the model's provenance cannot be read: {e}")),
            }
            report.push(Evaluation {
                predictor: p,
                synthetic,
                calibrated,
                calibrated_pairs,
                pairs,
                phase: ph.map(str::to_string),
                overall,
                population: population.as_deref().map(metrics),
                per_participant: participants
                    .into_iter()
                    .map(|(id, r)| (id, metrics(&r)))
                    .collect(),
                warnings,
            });
        }
    }
    if !any_rows && phase.is_none() {
        return Err((
            ExitKind::BadInput,
            format!(
                "nothing to evaluate in {}: {total_all} predictions match{}, none toward a story the participant rated in a complete session",
                store.path().display(),
                match (predictor, phase) {
                    (None, None) => String::new(),
                    _ => format!(
                        " (predictor {}, phase {})",
                        predictor.unwrap_or("any"),
                        phase.unwrap_or("any")
                    ),
                }
            ),
        ));
    }
    report.sort_by(|a, b| {
        let order = |p: &Option<String>| {
            p.as_deref().map_or(0, |p| {
                1 + crate::core::Phase::ALL
                    .iter()
                    .position(|x| x.as_str() == p)
                    .unwrap_or(99)
            })
        };
        (a.predictor.as_str(), order(&a.phase)).cmp(&(b.predictor.as_str(), order(&b.phase)))
    });
    if json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let est = |e: &Estimate| match (e.value, e.low, e.high) {
        (Some(v), Some(l), Some(h)) => format!("{v:6.3} [{l:6.3},{h:6.3}]"),
        (Some(v), _, _) => format!("{v:6.3}"),
        _ => "     -".into(),
    };
    let val = |e: &Estimate| e.value.map_or("     -".into(), |v| format!("{v:6.3}"));
    let row = |label: &str, phase: &str, m: &crate::fusion::evaluate::Metrics| {
        format!(
            "{:<30} {:<14} {:>4} {:>5}  {:<23} {:<23} {:>6} {:>6} {:>6}",
            label,
            phase,
            m.n,
            m.participants,
            est(&m.pearson_r),
            est(&m.spearman_rho),
            val(&m.mse),
            val(&m.accuracy),
            val(&m.f1)
        )
    };
    outln!(
        "Session-level: prediction = mean score over the windows toward a rated story; 95 % bootstrap over participants in [ ]; - = undefined (too few or constant values)."
    );
    outln!(
        "{:<30} {:<14} {:>4} {:>5}  {:<23} {:<23} {:>6} {:>6} {:>6}  notes",
        "predictor",
        "phase",
        "n",
        "part.",
        "pearson r",
        "spearman rho",
        "mse",
        "acc",
        "f1"
    );
    let mut notes: Vec<String> = Vec::new();
    for e in &report {
        let m = &e.overall;
        let mut marks = Vec::new();
        for w in &e.warnings {
            let i = match notes.iter().position(|n| n == w) {
                Some(i) => i,
                None => {
                    notes.push(w.clone());
                    notes.len() - 1
                }
            };
            marks.push(format!("[{}]", i + 1));
        }
        let label = format!(
            "{}{}",
            e.predictor,
            if e.synthetic {
                " (synthetic)"
            } else if e.calibrated_pairs == 0 {
                " (uncalibrated)"
            } else if !e.calibrated {
                " (partly calibrated)"
            } else {
                ""
            }
        );
        outln!(
            "{}  {}",
            row(&label, e.phase.as_deref().unwrap_or("all phases"), m),
            marks.join("")
        );
        if let Some(pm) = e.population.as_ref().filter(|pm| *pm != m) {
            outln!("{}", row("  population map only", "", pm));
        }
    }
    if !empty_phases.is_empty() {
        outln!(
            "{:<30} {}: no prediction toward a rated story (stories are rated after they are shown; the configured phases, [fusion] phases, decide where predictors run)",
            "",
            empty_phases.join(", ")
        );
    }
    outln!(
        "accuracy and f1: positive = rating and score >= {}",
        crate::fusion::evaluate::POSITIVE_AT
    );
    for (i, n) in notes.iter().enumerate() {
        outln!("[{}] {n}", i + 1);
    }
    outln!("per participant (all phases): n, pearson r, mse");
    for e in report
        .iter()
        .filter(|e| e.phase.is_none() || phase.is_some())
    {
        for (id, pm) in &e.per_participant {
            outln!(
                "  {:<28} {:<16} n {:>3}  r {}  mse {}",
                e.predictor,
                id,
                pm.n,
                val(&pm.pearson_r),
                val(&pm.mse)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
