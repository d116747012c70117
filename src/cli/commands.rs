//! One function per command: the work and its printed output. Arguments arrive parsed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use super::extract_audio::extract_audio_csv;
use super::extract_face::{extract_face_csv, FaceExtractOptions};
use super::{db_path, fail, open_existing_store, print_json, progress_bar, Failure, ModelFiles};
use crate::clock::{MonotonicClock, Speed};
use crate::config::Config;
use crate::doctor;
use crate::exit::ExitKind;
use crate::features::acoustic::LldSet;
use crate::features::face::pose::IntrinsicsArgs;
use crate::models::verify::verify_all;
use crate::report;
use crate::runtime::replay::{replay as run_replay, ReplayOptions};
use crate::runtime::stop_flag;
use crate::store::Store;
use crate::stories::{self, read_bank, session_context, Hit, StoryIndex};

pub(crate) fn load_config(path: Option<&Path>) -> Result<Config, Failure> {
    Config::load_or_default(path).map_err(fail)
}

fn exit_code(kind: ExitKind) -> ExitCode {
    ExitCode::from(kind.code() as u8)
}

/// `empathic replay`.
pub fn replay(
    session_dir: PathBuf,
    db: Option<PathBuf>,
    config: Option<&Path>,
    speed: Speed,
    replace: bool,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let stop = stop_flag().map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    let progress = progress_bar("frames");
    let opts = ReplayOptions {
        session_dir,
        db_path: db_path(db, &config),
        config,
        speed,
        replace,
        progress: Arc::new(super::Bar(progress.clone())),
    };
    let result = run_replay(&opts, Arc::new(MonotonicClock::new()), stop);
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    if json {
        print_json(&summary)?;
    } else {
        out!("{}", summary.render());
    }
    // A replay stopped by a signal did not finish: say so in the exit code.
    Ok(if summary.status == "complete" {
        ExitCode::SUCCESS
    } else {
        exit_code(ExitKind::Runtime)
    })
}

/// `empathic sessions list`.
pub fn sessions_list(
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let sessions = store.list_sessions().map_err(fail)?;
    if json {
        print_json(&sessions)?;
    } else {
        out!("{}", report::render_session_list(&sessions));
    }
    Ok(ExitCode::SUCCESS)
}

/// `empathic sessions show ID`.
pub fn sessions_show(
    id: &str,
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let detail = store.session_detail(id).map_err(fail)?;
    if json {
        print_json(&detail)?;
    } else {
        out!("{}", report::render_session_detail(&detail));
    }
    Ok(ExitCode::SUCCESS)
}

/// `empathic extract audio`.
pub fn extract_audio(input: &Path, out: &Path, set: LldSet) -> Result<ExitCode, Failure> {
    let progress = progress_bar("samples");
    let result = extract_audio_csv(input, out, set, &progress);
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    eprintln!(
        "wrote {} rows of {} {} LLDs ({:.2} s at {} Hz, {} channel(s)) to {}",
        summary.rows,
        set.dims(),
        match set {
            LldSet::Compare => "ComParE-2016",
            LldSet::Egemaps => "eGeMAPSv02",
        },
        summary.duration_secs,
        summary.sample_rate_hz,
        summary.input_channels,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `empathic extract face`.
pub fn extract_face(
    input: &Path,
    out: &Path,
    tracked: Option<&Path>,
    intrinsics: IntrinsicsArgs,
    blendshapes: bool,
    gaze_model: Option<crate::features::face::GazeModel>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let models = ModelFiles::open(&config)?;
    let progress = progress_bar("frames");
    let result = extract_face_csv(
        input,
        out,
        &models,
        &FaceExtractOptions {
            intrinsics,
            tracked,
            progress: &progress,
            blendshapes,
            gaze_model: gaze_model.unwrap_or(config.face.gaze_model),
        },
    );
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    eprintln!(
        "wrote {} rows of the {} columns to {}: face on {} frames ({:.1} %), at most {} face(s) seen, fx {:.1} fy {:.1} cx {:.1} cy {:.1}, {:.0} frames/s",
        summary.rows,
        if blendshapes { "714 OpenFace and 52 blendshape" } else { "714 OpenFace" },
        out.display(),
        summary.frames_with_face,
        100.0 * summary.frames_with_face as f64 / summary.rows.max(1) as f64,
        summary.max_faces_seen,
        summary.intrinsics.fx,
        summary.intrinsics.fy,
        summary.intrinsics.cx,
        summary.intrinsics.cy,
        summary.frames_per_second
    );
    Ok(ExitCode::SUCCESS)
}

/// `empathic embed TEXT`: the sentence embedding as a JSON array.
pub fn embed(
    text: &str,
    model: Option<String>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let name = model.unwrap_or_else(|| config.models.sentence_encoder.clone());
    let mut encoder = ModelFiles::open(&config)?.sentence_encoder(&name)?;
    let v = encoder.embed(&[text]).map_err(fail)?;
    print_json(&v.first())?;
    Ok(ExitCode::SUCCESS)
}

/// `empathic stories import FILE`.
pub fn stories_import(
    file: &Path,
    db: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let bank = read_bank(file).map_err(fail)?;
    let model = config.models.sentence_encoder.clone();
    let mut encoder = ModelFiles::open(&config)?.sentence_encoder(&model)?;
    let mut store = Store::open(&db_path(db, &config)).map_err(fail)?;
    let progress = progress_bar("stories");
    progress.set_length(bank.len() as u64);
    let result = stories::import(&mut store, &bank, &model, &mut encoder, &|| progress.inc(1));
    progress.finish_and_clear();
    let n = result.map_err(fail)?;
    outln!(
        "imported {n} stories from {} (embedded with {model}) into {}",
        file.display(),
        store.path().display()
    );
    Ok(ExitCode::SUCCESS)
}

fn print_hits(hits: &[Hit], json: bool) -> Result<(), Failure> {
    if json {
        return print_json(&hits);
    }
    for (i, h) in hits.iter().enumerate() {
        outln!("{}. {:.4}  {}  {}", i + 1, h.score, h.id, h.title);
    }
    Ok(())
}

/// A stored story bank ready to query: its index for the configured sentence encoder, and
/// the encoder for queries.
struct Bank {
    index: StoryIndex,
    encoder: crate::features::text::SentenceEncoder,
}

impl Bank {
    fn open(db: Option<PathBuf>, config: Option<&Path>) -> Result<Self, Failure> {
        let config = load_config(config)?;
        let store = open_existing_store(&db_path(db, &config))?;
        Self::load(&config, &store)
    }

    fn load(config: &Config, store: &Store) -> Result<Self, Failure> {
        let model = config.models.sentence_encoder.clone();
        let index = stories::load_index(store, &model).map_err(fail)?;
        let encoder = ModelFiles::open(config)?.sentence_encoder(&model)?;
        Ok(Bank { index, encoder })
    }

    fn top_k(&mut self, text: &str, k: usize, exclude: &[String]) -> Result<Vec<Hit>, Failure> {
        let query = self.encoder.embed(&[text]).map_err(fail)?.remove(0);
        Ok(self.index.top_k(&query, k, exclude))
    }
}

/// `empathic stories search TEXT`.
pub fn stories_search(
    text: &str,
    k: usize,
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let mut bank = Bank::open(db, config)?;
    print_hits(&bank.top_k(text, k, &[])?, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `empathic stories retrieve SESSION_ID`.
pub fn stories_retrieve(
    session_id: &str,
    k: usize,
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    // The session is checked before the bank: a wrong id is the likelier mistake.
    let (shared, seen) = session_context(&store, session_id, &config.text.speaker).map_err(fail)?;
    let mut bank = Bank::load(&config, &store)?;
    if !json && !seen.is_empty() {
        outln!(
            "leaving out {} stories seen in earlier sessions",
            seen.len()
        );
    }
    print_hits(&bank.top_k(&shared, k, &seen)?, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `empathic models verify`.
pub fn models_verify(config: Option<&Path>) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let reports = verify_all(
        &config.models.dir,
        config.models.onnxruntime_library.as_deref(),
    )
    .map_err(fail)?;
    let mut failed = 0;
    for r in &reports {
        match &r.result {
            Ok(detail) => outln!("ok      {:<24} {detail}", r.name),
            Err(e) => {
                failed += 1;
                outln!("FAILED  {:<24} {e}", r.name);
            }
        }
    }
    outln!("{} models, {failed} failed", reports.len());
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        exit_code(ExitKind::BadInput)
    })
}

/// `empathic doctor`.
pub fn doctor(config: Option<&Path>, db: Option<&Path>, live: bool) -> Result<ExitCode, Failure> {
    let checks = doctor::run_checks(config, db);
    let (text, ready) = doctor::render(&checks, live);
    out!("{text}");
    Ok(if ready {
        ExitCode::SUCCESS
    } else {
        exit_code(ExitKind::Runtime)
    })
}

/// The report of `empathic evaluate`: per predictor and phase, overall and per participant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evaluation {
    pub predictor: String,
    /// Trained on synthetic data: not an empathy model, its figures measure nothing.
    pub synthetic: bool,
    /// Whether the stored scores went through a map fitted to ratings: a trained model's, or
    /// a participant's own calibration (false for the built-in zero-shot population map).
    pub calibrated: bool,
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
/// model of the manifest was fitted on, when its provenance records them.
fn fitted_participants(config: &Config, predictor: &str) -> Result<Option<Vec<String>>, String> {
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
    let model = crate::fusion::onnx_model::OnnxPredictor::open(
        &entry.path(&config.models.dir),
        config.models.onnxruntime_library.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    Ok(model.fitted_participants())
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
        if !crate::session::Phase::ALL.iter().any(|x| x.as_str() == p) {
            return Err((
                ExitKind::BadInput,
                format!(
                    "unknown phase `{p}` (one of {})",
                    crate::session::Phase::ALL.map(|x| x.as_str()).join(", ")
                ),
            ));
        }
    }
    let store = open_existing_store(&db_path(db, &config))?;
    // Every phase (None = all windows) unless one is asked for.
    let phases: Vec<Option<&str>> = match phase {
        Some(p) => vec![Some(p)],
        None => std::iter::once(None)
            .chain(crate::session::Phase::ALL.iter().map(|p| Some(p.as_str())))
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
        for w in &rows {
            if let Some(e) = by_predictor.get_mut(&w.predictor) {
                e.2 |= w.synthetic;
                // Fitted to ratings: a trained model's map, or a participant's own.
                e.3 |=
                    crate::fusion::builtin(&w.predictor).is_none() || w.calibration != "population";
            }
        }
        for (p, (rated, population, synthetic, calibrated)) in by_predictor {
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
            if !calibrated {
                warnings.push(
                    "uncalibrated: a zero-shot map from cosine to the 1-5 scale, fitted to no ratings (docs/prediction.md, \"Empathy prediction\")"
                        .to_string(),
                );
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
                1 + crate::session::Phase::ALL
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
            } else if !e.calibrated {
                " (uncalibrated)"
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

/// `empathic export windows`.
pub fn export_windows(
    db: Option<PathBuf>,
    config: Option<&Path>,
    out: &Path,
    phase: Option<&str>,
    session: Option<&str>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    // Stories without embeddings (a central database) are embedded with the configured
    // encoder; opened only when needed, so an export needs no models otherwise.
    let model = config.models.sentence_encoder.clone();
    let has_embeddings = store
        .export_reads()
        .story_encoders()
        .map_err(fail)?
        .contains(&model);
    let mut encoder = if has_embeddings {
        None
    } else {
        Some(ModelFiles::open(&config)?.sentence_encoder(&model)?)
    };
    let progress = progress_bar("sessions");
    let result = super::export::export_windows(
        &store,
        out,
        phase,
        session,
        encoder.as_mut().map(|e| (model.as_str(), e)),
        &progress,
    );
    progress.finish_and_clear();
    let e = result?;
    outln!(
        "exported {} windows of {} session(s) to {} ({:.1} MB; format empathic-windows v{})",
        e.windows,
        e.sessions,
        out.display(),
        e.bytes as f64 / 1e6,
        super::export::EXPORT_VERSION
    );
    Ok(ExitCode::SUCCESS)
}
