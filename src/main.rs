//! The `empathic` command: parses the command line, sets up logging and dispatches to the
//! command bodies in [`empathic::cli`], after two process-wide settings made before any
//! thread exists (one malloc arena, [`share_one_malloc_arena`]; ONNX Runtime's telemetry
//! off, `empathic::models::onnx::TELEMETRY_OFF`); nothing else lives here.
#![deny(clippy::unwrap_used, clippy::expect_used)]

mod alsa_log;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use empathic::cli::{self, Failure};
use empathic::clock::Speed;
use empathic::features::acoustic::LldSet;
use empathic::features::face::pose::IntrinsicsArgs;

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
        /// The text to embed (quote it).
        text: String,
        /// Model name in models/MODELS.toml (default: models.sentence_encoder).
        #[arg(long)]
        model: Option<String>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
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
    /// Export stored data.
    Export {
        #[command(subcommand)]
        command: ExportCommand,
    },
    /// Stored predictions against self-ratings: Pearson r, Spearman rho, MSE, accuracy and
    /// F1, with 95 % bootstrap intervals over participants.
    Evaluate {
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Only this predictor (default: each stored one).
        #[arg(long)]
        predictor: Option<String>,
        /// Only windows of this phase: warm_up, story_share, story_receive, reflection, cool_down (default: every phase, one row each, and all phases together).
        #[arg(long)]
        phase: Option<String>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
    /// One self-contained HTML page (no network, no script) of a session, or of a
    /// participant across their sessions: timeline, predictions, face, voice, data quality.
    Report {
        /// The session to report on.
        #[arg(
            required_unless_present = "participant",
            conflicts_with = "participant"
        )]
        session_id: Option<String>,
        /// Report on this participant's sessions instead.
        #[arg(long)]
        participant: Option<String>,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Where to write the page (written beside, then renamed).
        #[arg(long)]
        out: PathBuf,
    },
    /// Publish the store's outbox (every ended session's record, and tombstones) to the
    /// study's MQTT broker; `sync status` shows what is pending.
    #[command(args_conflicts_with_subcommands = true)]
    Sync {
        #[command(subcommand)]
        command: Option<SyncCommand>,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        target: BrokerArgs,
        /// Station id in the topics (default: `[station] id`).
        #[arg(long)]
        station: Option<String>,
        /// A collector (client id, or share group) that must confirm every message before it
        /// counts as synced; repeat for several (default: `[sync] collectors`; none: any
        /// one collector's receipt).
        #[arg(long = "collector", value_name = "NAME")]
        collectors: Vec<String>,
        /// Exit once nothing is pending (otherwise keep publishing what comes).
        #[arg(long)]
        until_synced: bool,
        /// Give up (exit 1) after this many seconds.
        #[arg(long)]
        timeout: Option<f64>,
        /// First enqueue every ended session the outbox has never announced (sessions stored
        /// before the outbox existed).
        #[arg(long)]
        backfill: bool,
    },
    /// The live station service: camera, microphone and the control socket, one session at
    /// a time, recorded and stored (run by systemd; see systemd/empathic.service).
    Run {
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Send a request to the running service (the dialogue app's protocol).
    Ctl {
        #[command(subcommand)]
        command: CtlCommand,
        /// The control socket (default: `live.socket` of the config).
        #[arg(long, global = true)]
        socket: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long, global = true)]
        config: Option<PathBuf>,
    },
    /// Devices, the running session, drops, disk space and the last error of the service.
    Status {
        /// The control socket (default: `[live] socket` of the config).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
    /// Live recordings.
    Recording {
        #[command(subcommand)]
        command: RecordingCommand,
    },
    /// Participants.
    Participant {
        #[command(subcommand)]
        command: ParticipantCommand,
    },
    /// For study staff: receive every station's sync messages into the central database
    /// (a SQLite file, or PostgreSQL), exactly once (until SIGINT/SIGTERM).
    Collect {
        /// The central SQLite file (created when missing; the other commands read it with
        /// `--db FILE`).
        #[arg(long, conflicts_with = "central", required_unless_present = "central")]
        db: Option<PathBuf>,
        /// The central database as `postgres://USER@HOST:PORT/DB` (or a SQLite file); the
        /// other commands read it with `--db postgres://...`.
        #[arg(long)]
        central: Option<String>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        target: BrokerArgs,
        /// The collector's MQTT client id (stable: the broker keeps its session).
        #[arg(long, default_value = "empathic-collector")]
        client_id: String,
        /// Share the study's messages among the collectors of this group (an MQTT shared
        /// subscription: each message goes to one of them); each needs its own client id.
        #[arg(long)]
        share_group: Option<String>,
    },
    /// Check the installation and say what is missing.
    Doctor {
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
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
        /// The story bank: JSONL or CSV with id, title, text, source, licence.
        file: PathBuf,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// The stories closest to TEXT, with cosine scores.
    Search {
        /// What to search for (quote it).
        text: String,
        /// How many stories to list.
        #[arg(short, default_value_t = 3)]
        k: usize,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
    /// Stories for what the participant shared in a session, leaving out stories they saw
    /// in earlier sessions.
    Retrieve {
        /// The stored session whose shared story the retrieval starts from.
        session_id: String,
        /// How many stories to retrieve.
        #[arg(short, default_value_t = 3)]
        k: usize,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum CtlCommand {
    /// Start a session for a participant with recorded consent.
    Start {
        /// The participant's pseudonym (their consent must be recorded as given).
        participant: String,
        /// The new session's id (default: `<station>-<UTC time>`).
        #[arg(long)]
        session_id: Option<String>,
    },
    /// Stop the running session (stored complete, recording finalised).
    Stop,
    /// Enter a phase: warm_up, story_share, story_receive, reflection, cool_down.
    Phase {
        /// warm_up, story_share, story_receive, reflection or cool_down.
        phase: String,
    },
    /// Any event as an events.jsonl line without t_ms, e.g.
    /// '{"type":"rating","story_id":"s1","value":4}'.
    Event {
        /// The event as one JSON object (quote it).
        json: String,
    },
}

#[derive(Subcommand)]
enum RecordingCommand {
    /// Finish recordings a crash or power loss left unfinished (the service does this when
    /// it starts).
    Repair {
        /// The recordings folder (`[recording] dir` of the config) or one recording in it.
        dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum ParticipantCommand {
    /// Record consent as study staff took it: the live service captures only participants
    /// whose consent is `given`.
    Consent {
        /// The participant's pseudonym.
        id: String,
        /// Consent given (without it: withdrawn).
        #[arg(long)]
        given: bool,
        /// Raw video and audio may leave the station (only with --given).
        #[arg(long)]
        raw_media: bool,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Withdrawal: stop their running live session (if the service runs one), delete their
    /// sessions, answers, pending records and the station's recordings of them, rebuild the
    /// database without the deleted bytes, and tell the study's collector to delete theirs
    /// (at the next `sync`); only an audit line that a purge happened stays.
    Purge {
        /// The participant's pseudonym.
        id: String,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// The broker and study of `sync` and `collect`.
#[derive(clap::Args)]
struct BrokerArgs {
    /// `mqtt://HOST:PORT` or `mqtts://HOST:PORT` (TLS) (default: `[sync] broker`).
    #[arg(long)]
    broker: Option<String>,
    /// Study name in the topics (default: `[sync] study`).
    #[arg(long)]
    study: Option<String>,
    /// Broker username (default: `[sync] username`).
    #[arg(long)]
    username: Option<String>,
    /// File holding the broker password (default: `[sync] password_file`).
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// CA certificate (PEM) of an mqtts:// broker (default: `[sync] ca_file`).
    #[arg(long)]
    ca: Option<PathBuf>,
}

#[derive(Subcommand)]
enum SyncCommand {
    /// Pending, synced, bytes waiting, last error.
    Status {
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ExportCommand {
    /// Every window's per-frame features and masks per modality, with session, participant,
    /// phase, time and the stories in play with their ratings (numpy .npy + JSON lines).
    Windows {
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// A new or empty folder.
        #[arg(long)]
        out: PathBuf,
        /// Only windows of this phase.
        #[arg(long)]
        phase: Option<String>,
        /// Only this session.
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Subcommand)]
enum ModelsCommand {
    /// Check every model: sha256, loading, shapes and a known-answer test.
    Verify {
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
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
        /// Append MediaPipe's 52 blendshape coefficients (ARKit names) after the 714 columns.
        #[arg(long)]
        blendshapes: bool,
        /// The eyeball model of the gaze columns: `openface` (OpenFace 2.0's geometry) or
        /// `anatomical` (default: `[face] gaze_model`, itself `openface` by default).
        #[arg(long, value_name = "MODEL")]
        gaze_model: Option<empathic::features::face::GazeModel>,
        /// Camera focal length in pixels (default 500 * width / 640, OpenFace's default).
        #[arg(long)]
        fx: Option<f64>,
        /// Camera focal length in y, in pixels (default: fx).
        #[arg(long)]
        fy: Option<f64>,
        /// Principal point x (default: the image centre).
        #[arg(long)]
        cx: Option<f64>,
        /// Principal point y (default: the image centre).
        #[arg(long)]
        cy: Option<f64>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
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
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
    /// One session in detail.
    Show {
        /// The session id (as `sessions list` shows it).
        id: String,
        /// The session database: a SQLite file, or a central postgres:// URL for reading commands (default: the config's `[store] db_path`, empathic.db).
        #[arg(long)]
        db: Option<PathBuf>,
        /// The station config (TOML; default: built-in defaults, as listed in firmware-config/station.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of text (default: text).
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    share_one_malloc_arena();
    // Before any thread exists (setting the environment later would race with readers).
    if std::env::var_os(empathic::models::onnx::TELEMETRY_OFF).is_none() {
        std::env::set_var(empathic::models::onnx::TELEMETRY_OFF, "1");
    }
    init_logging();
    alsa_log::route_messages();
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err((kind, message)) => {
            eprintln!("error: {message}");
            ExitCode::from(kind.code() as u8)
        }
    }
}

/// Limits glibc malloc to one arena for the whole process, unless `MALLOC_ARENA_MAX` is
/// set (then the environment wins). Called before any thread exists.
///
/// glibc otherwise gives a thread that allocates while another holds the lock an arena of
/// its own (up to 8 per core), and freed memory stays in the arena that allocated it. The
/// pipeline's dozen named threads each allocate a little per frame, so a replay held
/// 37-76 MiB more at its peak with 16 arenas than with one (`scripts/replay_throughput.sh`,
/// the same build run with `MALLOC_ARENA_MAX=16`, demo and the three shared sessions,
/// issue 18). Speed: in that sitting 16 arenas replayed 1-9 % faster; in a second one (demo,
/// 1, 2, 4 and 16 arenas: 119, 120, 111, 116 frames/s) one arena was as fast, so the cost is
/// within this machine's noise (the tensors live in ONNX Runtime's own arenas; per frame the
/// threads ask malloc for a few small vectors). The library crate forbids `unsafe`; this
/// one call is its only use.
fn share_one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter, before any other thread runs.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// Logs go to stderr without colours or targets, one event per line, so a station's
/// journal (systemd captures stderr) reads them well. `EMPATHIC_LOG` takes an
/// `EnvFilter` directive (`debug` prints each thread's figures at the end of a run).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EMPATHIC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,ort=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

fn dispatch(command: Command) -> Result<ExitCode, Failure> {
    match command {
        Command::Replay {
            session_dir,
            db,
            config,
            speed,
            replace,
            json,
        } => cli::replay(session_dir, db, config.as_deref(), speed, replace, json),
        Command::Sessions {
            command: SessionsCommand::List { db, config, json },
        } => cli::sessions_list(db, config.as_deref(), json),
        Command::Sessions {
            command:
                SessionsCommand::Show {
                    id,
                    db,
                    config,
                    json,
                },
        } => cli::sessions_show(&id, db, config.as_deref(), json),
        Command::Extract {
            command: ExtractCommand::Audio { input, out, set },
        } => cli::extract_audio(
            &input,
            &out,
            match set {
                FeatureSet::Compare => LldSet::Compare,
                FeatureSet::Egemaps => LldSet::Egemaps,
            },
        ),
        Command::Extract {
            command:
                ExtractCommand::Face {
                    input,
                    out,
                    tracked,
                    blendshapes,
                    gaze_model,
                    fx,
                    fy,
                    cx,
                    cy,
                    config,
                },
        } => cli::extract_face(
            &input,
            &out,
            tracked.as_deref(),
            IntrinsicsArgs { fx, fy, cx, cy },
            blendshapes,
            gaze_model,
            config.as_deref(),
        ),
        Command::Embed {
            text,
            model,
            config,
        } => cli::embed(&text, model, config.as_deref()),
        Command::Stories {
            command: StoriesCommand::Import { file, db, config },
        } => cli::stories_import(&file, db, config.as_deref()),
        Command::Stories {
            command:
                StoriesCommand::Search {
                    text,
                    k,
                    db,
                    config,
                    json,
                },
        } => cli::stories_search(&text, k, db, config.as_deref(), json),
        Command::Stories {
            command:
                StoriesCommand::Retrieve {
                    session_id,
                    k,
                    db,
                    config,
                    json,
                },
        } => cli::stories_retrieve(&session_id, k, db, config.as_deref(), json),
        Command::Models {
            command: ModelsCommand::Verify { config },
        } => cli::models_verify(config.as_deref()),
        Command::Export {
            command:
                ExportCommand::Windows {
                    db,
                    config,
                    out,
                    phase,
                    session,
                },
        } => cli::export_windows(
            db,
            config.as_deref(),
            &out,
            phase.as_deref(),
            session.as_deref(),
        ),
        Command::Evaluate {
            db,
            config,
            predictor,
            phase,
            json,
        } => cli::evaluate(
            db,
            config.as_deref(),
            predictor.as_deref(),
            phase.as_deref(),
            json,
        ),
        Command::Report {
            session_id,
            participant,
            db,
            config,
            out,
        } => cli::report::report(
            session_id.as_deref(),
            participant.as_deref(),
            db,
            config.as_deref(),
            &out,
        ),
        Command::Sync {
            command: Some(SyncCommand::Status { db, config, json }),
            ..
        } => cli::sync::status(db, config.as_deref(), json),
        Command::Sync {
            command: None,
            db,
            config,
            target,
            station,
            collectors,
            until_synced,
            timeout,
            backfill,
        } => cli::sync::push(
            db,
            config.as_deref(),
            cli::sync::Overrides {
                broker: target.broker,
                study: target.study,
                station,
                username: target.username,
                password_file: target.password_file,
                ca: target.ca,
                collectors,
            },
            until_synced,
            timeout,
            backfill,
        ),
        Command::Run { config } => cli::live::run(config.as_deref()),
        Command::Ctl {
            command,
            socket,
            config,
        } => {
            let body = match command {
                CtlCommand::Start {
                    participant,
                    session_id,
                } => Ok(
                    serde_json::json!({"type": "start_session", "participant_id": participant, "session_id": session_id}),
                ),
                CtlCommand::Stop => Ok(serde_json::json!({"type": "stop_session"})),
                CtlCommand::Phase { phase } => {
                    Ok(serde_json::json!({"type": "phase", "phase": phase}))
                }
                CtlCommand::Event { json } => serde_json::from_str(&json).map_err(|e| {
                    (
                        empathic::exit::ExitKind::BadInput,
                        format!("not valid JSON: {e}"),
                    )
                }),
            };
            body.and_then(|b| cli::live::ctl(socket, config.as_deref(), b))
        }
        Command::Status {
            socket,
            config,
            json,
        } => cli::live::status(socket, config.as_deref(), json),
        Command::Recording {
            command: RecordingCommand::Repair { dir },
        } => cli::live::repair(&dir),
        Command::Participant {
            command:
                ParticipantCommand::Consent {
                    id,
                    given,
                    raw_media,
                    db,
                    config,
                },
        } => cli::live::consent(&id, given, raw_media, db, config.as_deref()),
        Command::Participant {
            command: ParticipantCommand::Purge { id, db, config },
        } => cli::sync::purge(&id, db, config.as_deref()),
        Command::Collect {
            db,
            central,
            config,
            target,
            client_id,
            share_group,
        } => cli::sync::collect(
            &central
                .or(db.map(|d| d.to_string_lossy().into_owned()))
                .unwrap_or_default(),
            config.as_deref(),
            cli::sync::Overrides {
                broker: target.broker,
                study: target.study,
                station: None,
                username: target.username,
                password_file: target.password_file,
                ca: target.ca,
                collectors: Vec::new(),
            },
            &client_id,
            share_group.as_deref(),
        ),
        Command::Doctor { config, db, live } => cli::doctor(config.as_deref(), db.as_deref(), live),
    }
}

#[cfg(test)]
mod help_tests {
    use clap::CommandFactory;

    /// Every argument of every command says what it is (README: `--help` is the reference).
    #[test]
    fn every_argument_has_a_description() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "empathic", &mut missing);
        assert!(
            missing.is_empty(),
            "{} without help:\n{}",
            missing.len(),
            missing.join("\n")
        );
    }
}
