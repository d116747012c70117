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
        progress: progress.clone(),
    };
    let result = run_replay(&opts, Arc::new(MonotonicClock::new()), stop);
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    if json {
        print_json(&summary)?;
    } else {
        print!("{}", summary.render());
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
        print!("{}", report::render_session_list(&sessions));
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
        print!("{}", report::render_session_detail(&detail));
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
    println!(
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
        println!("{}. {:.4}  {}  {}", i + 1, h.score, h.id, h.title);
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
        let index = StoryIndex::load(store, &model).map_err(fail)?;
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
        println!(
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
            Ok(detail) => println!("ok      {:<24} {detail}", r.name),
            Err(e) => {
                failed += 1;
                println!("FAILED  {:<24} {e}", r.name);
            }
        }
    }
    println!("{} models, {failed} failed", reports.len());
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
    print!("{text}");
    Ok(if ready {
        ExitCode::SUCCESS
    } else {
        exit_code(ExitKind::Runtime)
    })
}

/// The report of `empathic evaluate`: per predictor, overall and per participant.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Evaluation {
    pub predictor: String,
    pub phase: Option<String>,
    /// As stored: each session's predictions under the calibration in force for it.
    pub overall: crate::fusion::evaluate::Metrics,
    /// The same windows through the predictor's population map, for comparison.
    pub population: Option<crate::fusion::evaluate::Metrics>,
    pub per_participant: Vec<(String, crate::fusion::evaluate::Metrics)>,
}

/// `empathic evaluate`.
pub fn evaluate(
    db: Option<PathBuf>,
    config: Option<&Path>,
    predictor: Option<&str>,
    phase: Option<&str>,
    json: bool,
) -> Result<ExitCode, Failure> {
    use crate::fusion::evaluate::{evaluate as metrics, Estimate, Rated, POSITIVE_AT};
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
    let (rows, total) = store.rated_predictions(predictor, phase).map_err(fail)?;
    if rows.is_empty() {
        return Err((
            ExitKind::BadInput,
            format!(
                "nothing to evaluate in {}: {total} predictions match{}, none toward a story the participant rated in a complete session",
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
    let mut by_predictor: std::collections::BTreeMap<String, (Vec<Rated>, Option<Vec<Rated>>)> =
        Default::default();
    for (p, stored, population) in
        crate::fusion::evaluate::session_level(&rows, crate::fusion::population_map_of)
    {
        let entry = by_predictor
            .entry(p)
            .or_insert_with(|| (Vec::new(), Some(Vec::new())));
        entry.0.push(stored);
        // Population metrics only when every unit has them.
        entry.1 = match (entry.1.take(), population) {
            (Some(mut v), Some(r)) => {
                v.push(r);
                Some(v)
            }
            _ => None,
        };
    }
    let report: Vec<Evaluation> = by_predictor
        .into_iter()
        .map(|(p, (rated, population))| {
            let mut participants: std::collections::BTreeMap<String, Vec<Rated>> =
                Default::default();
            for r in &rated {
                participants
                    .entry(r.participant.clone())
                    .or_default()
                    .push(r.clone());
            }
            Evaluation {
                predictor: p,
                phase: phase.map(str::to_string),
                overall: metrics(&rated),
                population: population.as_deref().map(metrics),
                per_participant: participants
                    .into_iter()
                    .map(|(id, r)| (id, metrics(&r)))
                    .collect(),
            }
        })
        .collect();
    if json {
        print_json(&report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let fmt = |e: &Estimate| match (e.value, e.low, e.high) {
        (Some(v), Some(l), Some(h)) => format!("{v:6.3}  [{l:6.3}, {h:6.3}]"),
        (Some(v), _, _) => format!("{v:6.3}"),
        _ => "     -  (undefined: too few or constant values)".into(),
    };
    for e in &report {
        let m = &e.overall;
        println!(
            "{}{}: {} rated stories from {} participant(s); prediction = mean score over the story's windows; 95 % bootstrap over participants",
            e.predictor,
            e.phase.as_deref().map(|p| format!(" ({p})")).unwrap_or_default(),
            m.n,
            m.participants
        );
        let mut blocks = vec![("as stored (population or per-participant calibration)", m)];
        if let Some(pm) = &e.population {
            blocks.push(("population map only", pm));
        }
        for (title, m) in blocks {
            println!("  {title}:");
            println!("    pearson r     {}", fmt(&m.pearson_r));
            println!("    spearman rho  {}", fmt(&m.spearman_rho));
            println!("    mse (1-5)     {}", fmt(&m.mse));
            println!(
                "    accuracy      {}   (positive: rating and score >= {POSITIVE_AT})",
                fmt(&m.accuracy)
            );
            println!("    f1            {}", fmt(&m.f1));
        }
        for (id, pm) in &e.per_participant {
            println!(
                "  participant {id}: n {}, r {}, mse {}",
                pm.n,
                pm.pearson_r.value.map_or("-".into(), |v| format!("{v:.3}")),
                pm.mse.value.map_or("-".into(), |v| format!("{v:.3}"))
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
    let progress = progress_bar("sessions");
    let result = super::export::export_windows(&store, out, phase, session, &progress);
    progress.finish_and_clear();
    let e = result?;
    println!(
        "exported {} windows of {} session(s) to {} ({:.1} MB; format empathic-windows v{})",
        e.windows,
        e.sessions,
        out.display(),
        e.bytes as f64 / 1e6,
        super::export::EXPORT_VERSION
    );
    Ok(ExitCode::SUCCESS)
}
