//! The `empathic` command: parses the command line, sets up logging, calls the library.
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use empathic::clock::{MonotonicClock, Speed};
use empathic::config::Config;
use empathic::exit::{Classify, ExitKind};
use empathic::features::acoustic::extract::extract_audio_csv;
use empathic::features::acoustic::LldSet;
use empathic::features::face::extract::{extract_face_csv, FaceExtractOptions};
use empathic::features::face::pose::IntrinsicsArgs;
use empathic::features::text::SentenceEncoder;
use empathic::models::manifest::Manifest;
use empathic::models::verify::verify_all;
use empathic::runtime::replay::{replay, ReplayOptions};
use empathic::runtime::{stop_flag, RunError};
use empathic::store::Store;
use empathic::stories::{import, read_bank, session_context, Hit, StoryIndex};
use empathic::{doctor, report};
use indicatif::ProgressBar;

#[derive(Parser)]
#[command(
    name = "empathic",
    version,
    about = "Senses empathy on an in-home social robot"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a recorded session folder through the pipeline into the session store.
    Replay {
        /// Folder with video.avi, audio.wav and optionally session.json and events.jsonl.
        session_dir: PathBuf,
        /// Session database (default: store.db_path from the config, else empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// Configuration file (TOML; see firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// `max`: as fast as possible; `realtime`: at the pace it was recorded.
        #[arg(long, default_value = "max")]
        speed: Speed,
        /// Replace a session already stored complete under the same id.
        #[arg(long)]
        replace: bool,
        /// Print the summary as JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List or show stored sessions.
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Extract features from a media file.
    Extract {
        #[command(subcommand)]
        command: ExtractCommand,
    },
    /// Print the sentence embedding of TEXT as a JSON array.
    Embed {
        text: String,
        /// Model name in models/MODELS.toml (default: models.sentence_encoder).
        #[arg(long)]
        model: Option<String>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The story bank: import, search, retrieve for a session.
    Stories {
        #[command(subcommand)]
        command: StoriesCommand,
    },
    /// Model files.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
    /// Check the installation and say what is missing.
    Doctor {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Session database whose folder must be writable.
        #[arg(long)]
        db: Option<PathBuf>,
        /// Also require a camera and a microphone (a station).
        #[arg(long)]
        live: bool,
    },
}

#[derive(Subcommand)]
enum StoriesCommand {
    /// Embed and store the stories of a JSONL or CSV file (id, title, text, source, licence).
    Import {
        file: PathBuf,
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The stories closest to TEXT, with cosine scores.
    Search {
        text: String,
        #[arg(short, default_value_t = 3)]
        k: usize,
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Stories for what the participant shared in a session, leaving out stories they saw
    /// in earlier sessions.
    Retrieve {
        session_id: String,
        #[arg(short, default_value_t = 3)]
        k: usize,
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Check every model: sha256, loading, shapes and a known-answer test.
    Verify {
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ExtractCommand {
    /// openSMILE-compatible low-level descriptors per 10 ms (its names and order) as CSV.
    Audio {
        /// A PCM WAV file, mono or stereo (averaged), any sample rate.
        input: PathBuf,
        /// The CSV to write.
        #[arg(long)]
        out: PathBuf,
        /// Feature set: `compare` (ComParE-2016, 65 LLDs) or `egemaps` (eGeMAPSv02, 25 LLDs).
        #[arg(long, default_value = "compare")]
        set: FeatureSet,
    },
    /// OpenFace 2.0-compatible facial behaviour per video frame (its 714 columns) as CSV.
    Face {
        /// A video file (any format FFmpeg reads).
        input: PathBuf,
        /// The CSV to write.
        #[arg(long)]
        out: PathBuf,
        /// Also write the video with the landmarks, gaze, head axes and AUs drawn on every
        /// frame (Motion-JPEG, *.avi), to check the tracking by eye.
        #[arg(long)]
        tracked: Option<PathBuf>,
        /// Camera focal length in pixels (default 500 * width / 640, OpenFace's default).
        #[arg(long)]
        fx: Option<f64>,
        #[arg(long)]
        fy: Option<f64>,
        /// Principal point (default: the image centre).
        #[arg(long)]
        cx: Option<f64>,
        #[arg(long)]
        cy: Option<f64>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FeatureSet {
    Compare,
    Egemaps,
}

#[derive(Subcommand)]
enum SessionsCommand {
    /// One line per session.
    List {
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// One session in detail.
    Show {
        id: String,
        #[arg(long)]
        db: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err((kind, message)) => {
            eprintln!("error: {message}");
            ExitCode::from(kind.code() as u8)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EMPATHIC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,ort=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

type Failure = (ExitKind, String);

fn fail<E: Classify + std::fmt::Display>(e: E) -> Failure {
    (e.exit_kind(), e.to_string())
}

fn db_path(db: Option<PathBuf>, config: &Config) -> PathBuf {
    db.unwrap_or_else(|| config.store.db_path.clone())
}

fn open_existing_store(path: &Path) -> Result<Store, Failure> {
    if !path.exists() {
        return Err((
            ExitKind::BadInput,
            format!("no session database at {}", path.display()),
        ));
    }
    Store::open(path).map_err(fail)
}

fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| (ExitKind::Runtime, format!("cannot encode JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

fn open_encoder(config: &Config, name: &str) -> Result<SentenceEncoder, Failure> {
    let dir = &config.models.dir;
    let manifest = Manifest::load(dir).map_err(fail)?;
    let entry = manifest.get(name, dir).map_err(fail)?;
    SentenceEncoder::open(dir, entry, config.models.onnxruntime_library.as_deref()).map_err(fail)
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

fn stories(command: StoriesCommand) -> Result<ExitCode, Failure> {
    match command {
        StoriesCommand::Import { file, db, config } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
            let bank = read_bank(&file).map_err(fail)?;
            let model = config.models.sentence_encoder.clone();
            let mut encoder = open_encoder(&config, &model)?;
            let mut store = Store::open(&db_path(db, &config)).map_err(fail)?;
            let bar = if std::io::stderr().is_terminal() {
                ProgressBar::new(bank.len() as u64)
            } else {
                ProgressBar::hidden()
            };
            let n =
                import(store.connection_mut(), &bank, &model, &mut encoder, &bar).map_err(fail)?;
            bar.finish_and_clear();
            println!(
                "imported {n} stories from {} (embedded with {model}) into {}",
                file.display(),
                store.path().display()
            );
        }
        StoriesCommand::Search {
            text,
            k,
            db,
            config,
            json,
        } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
            let model = config.models.sentence_encoder.clone();
            let store = open_existing_store(&db_path(db, &config))?;
            let index = StoryIndex::load(store.connection(), &model).map_err(fail)?;
            let mut encoder = open_encoder(&config, &model)?;
            let query = encoder.embed(&[text.as_str()]).map_err(fail)?.remove(0);
            print_hits(&index.top_k(&query, k, &[]), json)?;
        }
        StoriesCommand::Retrieve {
            session_id,
            k,
            db,
            config,
            json,
        } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
            let model = config.models.sentence_encoder.clone();
            let store = open_existing_store(&db_path(db, &config))?;
            let (shared, seen) =
                session_context(store.connection(), &session_id, &config.text.speaker)
                    .map_err(fail)?;
            let index = StoryIndex::load(store.connection(), &model).map_err(fail)?;
            let mut encoder = open_encoder(&config, &model)?;
            let query = encoder.embed(&[shared.as_str()]).map_err(fail)?.remove(0);
            if !json && !seen.is_empty() {
                println!(
                    "leaving out {} stories seen in earlier sessions",
                    seen.len()
                );
            }
            print_hits(&index.top_k(&query, k, &seen), json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.command {
        Command::Replay {
            session_dir,
            db,
            config,
            speed,
            replace,
            json,
        } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
            let stop = stop_flag().map_err(|e| {
                (
                    ExitKind::Runtime,
                    format!("cannot install signal handlers: {e}"),
                )
            })?;
            let opts = ReplayOptions {
                session_dir,
                db_path: db_path(db, &config),
                config,
                speed,
                replace,
                progress: std::io::stderr().is_terminal(),
            };
            let summary = replay(&opts, Arc::new(MonotonicClock::new()), stop)
                .map_err(|e: RunError| fail(e))?;
            if json {
                print_json(&summary)?;
            } else {
                print!("{}", summary.render());
            }
            // A replay stopped by a signal did not finish: say so in the exit code.
            Ok(if summary.status == "complete" {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(ExitKind::Runtime.code() as u8)
            })
        }
        Command::Sessions { command } => {
            match command {
                SessionsCommand::List { db, config, json } => {
                    let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
                    let store = open_existing_store(&db_path(db, &config))?;
                    let sessions = store.list_sessions().map_err(fail)?;
                    if json {
                        print_json(&sessions)?;
                    } else {
                        print!("{}", report::render_session_list(&sessions));
                    }
                }
                SessionsCommand::Show {
                    id,
                    db,
                    config,
                    json,
                } => {
                    let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
                    let store = open_existing_store(&db_path(db, &config))?;
                    let detail = store.session_detail(&id).map_err(fail)?;
                    if json {
                        print_json(&detail)?;
                    } else {
                        print!("{}", report::render_session_detail(&detail));
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Extract {
            command: ExtractCommand::Audio { input, out, set },
        } => {
            let set = match set {
                FeatureSet::Compare => LldSet::Compare,
                FeatureSet::Egemaps => LldSet::Egemaps,
            };
            let summary = extract_audio_csv(&input, &out, set, std::io::stderr().is_terminal())
                .map_err(fail)?;
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
        Command::Extract {
            command:
                ExtractCommand::Face {
                    input,
                    out,
                    tracked,
                    fx,
                    fy,
                    cx,
                    cy,
                    config,
                },
        } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
            let summary = extract_face_csv(
                &input,
                &out,
                &config.models.dir,
                &FaceExtractOptions {
                    onnxruntime_library: config.models.onnxruntime_library.as_deref(),
                    intrinsics: IntrinsicsArgs { fx, fy, cx, cy },
                    tracked: tracked.as_deref(),
                    progress: std::io::stderr().is_terminal(),
                },
            )
            .map_err(fail)?;
            eprintln!(
                "wrote {} rows of the 714 OpenFace columns to {}: face on {} frames ({:.1} %), at most {} face(s) seen, fx {:.1} fy {:.1} cx {:.1} cy {:.1}, {:.0} frames/s",
                summary.rows,
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
        Command::Embed {
            text,
            model,
            config,
        } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
            let name = model.unwrap_or_else(|| config.models.sentence_encoder.clone());
            let mut encoder = open_encoder(&config, &name)?;
            let v = encoder.embed(&[text.as_str()]).map_err(fail)?;
            print_json(&v.first())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Stories { command } => stories(command),
        Command::Models {
            command: ModelsCommand::Verify { config },
        } => {
            let config = Config::load_or_default(config.as_deref()).map_err(fail)?;
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
                ExitCode::from(ExitKind::BadInput.code() as u8)
            })
        }
        Command::Doctor { config, db, live } => {
            let checks = doctor::run_checks(config.as_deref(), db.as_deref());
            let (text, ready) = doctor::render(&checks, live);
            print!("{text}");
            Ok(if ready {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(ExitKind::Runtime.code() as u8)
            })
        }
    }
}
