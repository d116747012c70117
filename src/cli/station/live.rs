//! `empathic run` (the live service), `empathic ctl` and `empathic status` (its control
//! socket), `empathic participant consent`, and `empathic recording repair`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::capture::camera::opener_for;
use crate::cli::options::{ConfigOption, JsonOption};
use crate::cli::{fail, load_config, print_json, Failure};
use crate::clock::MonotonicClock;
use crate::exit::ExitKind;
use crate::runtime::live::{request, request_ok, request_stream, serve, Served};
use crate::runtime::stop_flag;

/// The live station service: camera, microphone and the control socket, one session at
/// a time, recorded and stored (run by systemd; see systemd/empathic.service).
#[derive(clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    config: ConfigOption,
}

impl RunArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        run(self.config.path())
    }
}

/// Send a request to the running service (the dialogue app's protocol).
#[derive(clap::Args)]
pub struct CtlArgs {
    #[command(subcommand)]
    command: CtlCommand,
    /// The control socket (default: `live.socket` of the config).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// The station config (TOML; default: $EMPATHIC_CONFIG, else /etc/empathic/station.toml when it exists, else the built-in defaults listed in firmware-config/station.toml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The session's token (`ctl start` prints it in its answer): needed to act on a
    /// session from a user other than the service's own or root.
    #[arg(long, global = true)]
    token: Option<String>,
}

#[derive(clap::Subcommand)]
enum CtlCommand {
    /// Start a session for a participant with recorded consent.
    Start {
        /// The participant's pseudonym (their consent must be recorded as given).
        participant: String,
        /// The new session's id (default: `<station>-<UTC time>`).
        #[arg(long)]
        session_id: Option<String>,
        /// The session's lease: `ctl` connects once per command, so the session is kept
        /// while commands for it (`ctl heartbeat`, `phase`, `event`, `stop`) come at most this
        /// many seconds apart, and ended `incomplete` otherwise (at most `[live] max_lease_s`).
        #[arg(long, default_value_t = 900)]
        lease_s: u64,
    },
    /// Stop the running session (stored complete, recording finalised): as the service's
    /// user or root whoever started it, as another user with its `--token`; returns when
    /// the next session may start.
    Stop,
    /// Renew the running session's lease.
    Heartbeat,
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
    /// Print the stream of the named topics, one JSON object a line as the service sends
    /// it (docs/station.md, "Subscriptions"), until the service closes it or Ctrl-C.
    Subscribe {
        /// voice, utterance, face, prediction, quality, session (one or more).
        #[arg(required = true)]
        topics: Vec<String>,
    },
}

impl CtlArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let body = match self.command {
            CtlCommand::Start {
                participant,
                session_id,
                lease_s,
            } => {
                serde_json::json!({"type": "start_session", "participant_id": participant, "session_id": session_id, "lease_s": lease_s})
            }
            CtlCommand::Stop => {
                // Staff stop whichever session runs: named, so one bound to its dialogue
                // app's connection is stopped too.
                let socket = socket_of(self.socket.clone(), self.config.as_deref())?;
                let s = request_ok(&socket, &serde_json::json!({"type": "status"}))
                    .map_err(|e| (ExitKind::Runtime, e))?;
                match s["session"]["session_id"].as_str() {
                    Some(id) => serde_json::json!({"type": "stop_session", "session_id": id}),
                    None => serde_json::json!({"type": "stop_session"}),
                }
            }
            CtlCommand::Heartbeat => {
                // The running session, named (a heartbeat always names its session).
                let socket = socket_of(self.socket.clone(), self.config.as_deref())?;
                let s = request_ok(&socket, &serde_json::json!({"type": "status"}))
                    .map_err(|e| (ExitKind::Runtime, e))?;
                let id = s["session"]["session_id"]
                    .as_str()
                    .ok_or((ExitKind::BadInput, "no session is running".to_string()))?;
                serde_json::json!({"type": "heartbeat", "session_id": id})
            }
            CtlCommand::Phase { phase } => serde_json::json!({"type": "phase", "phase": phase}),
            CtlCommand::Event { json } => serde_json::from_str(&json)
                .map_err(|e| (ExitKind::BadInput, format!("not valid JSON: {e}")))?,
            CtlCommand::Subscribe { topics } => {
                let socket = socket_of(self.socket, self.config.as_deref())?;
                return subscribe(&socket, &topics);
            }
        };
        let mut body = body;
        if let (Some(t), Some(map)) = (&self.token, body.as_object_mut()) {
            map.insert("token".into(), t.clone().into());
        }
        ctl(self.socket, self.config.as_deref(), body)
    }
}

/// Devices, the running session, drops, disk space and the last error of the service.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The control socket (default: `[live] socket` of the config).
    #[arg(long)]
    socket: Option<PathBuf>,
    #[command(flatten)]
    config: ConfigOption,
    #[command(flatten)]
    json: JsonOption,
}

impl StatusArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        status(self.socket, self.config.path(), self.json.json)
    }
}

/// Live recordings.
#[derive(clap::Args)]
pub struct RecordingArgs {
    #[command(subcommand)]
    command: RecordingCommand,
}

#[derive(clap::Subcommand)]
enum RecordingCommand {
    /// Finish recordings a crash or power loss left unfinished (the service does this when
    /// it starts).
    Repair {
        /// The recordings folder (`[recording] dir` of the config) or one recording in it.
        dir: PathBuf,
    },
}

impl RecordingArgs {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            RecordingCommand::Repair { dir } => repair(&dir),
        }
    }
}

pub fn run(config_path: Option<&Path>) -> Result<ExitCode, Failure> {
    let config = load_config(config_path)?;
    // A `[sync] broker` that cannot be parsed was refused by the config's validation
    // (issue 44: the service once started and its sync thread died, silently).
    let stop = stop_flag().map_err(|e| {
        (
            ExitKind::Runtime,
            format!("cannot install signal handlers: {e}"),
        )
    })?;
    let v = &config.video;
    let camera = opener_for(&v.device, v.width, v.height, v.nominal_fps);
    let served = serve(
        &config,
        camera.as_ref(),
        Arc::new(MonotonicClock::new()),
        &stop,
    )
    .map_err(fail)?;
    Ok(match served {
        Served::Stopped => ExitCode::SUCCESS,
        Served::Replaced => ExitCode::from(crate::exit::RESTART_NEW_BUILD),
    })
}

fn socket_of(socket: Option<PathBuf>, config: Option<&Path>) -> Result<PathBuf, Failure> {
    Ok(match socket {
        Some(s) => s,
        None => load_config(config)?.live.socket,
    })
}

/// Sends one request line; prints the answer; fails when the service refused it: exit 2,
/// or 1 when it was busy (`"busy": true`: the same request may pass later).
pub fn ctl(
    socket: Option<PathBuf>,
    config: Option<&Path>,
    body: serde_json::Value,
) -> Result<ExitCode, Failure> {
    let socket = socket_of(socket, config)?;
    let answer = request(&socket, &body).map_err(|e| (ExitKind::Runtime, e))?;
    if answer["ok"] == true {
        outln!("{answer}");
        Ok(ExitCode::SUCCESS)
    } else {
        Err(refused(&answer))
    }
}

/// A refusal of the service as the command's failure: exit 1 when refused by the
/// service's state (`"busy": true`: the same request may pass later), else exit 2.
fn refused(answer: &serde_json::Value) -> Failure {
    (
        if answer["busy"] == true {
            ExitKind::Runtime
        } else {
            ExitKind::BadInput
        },
        format!(
            "refused: {}",
            answer["error"].as_str().unwrap_or("no reason given")
        ),
    )
}

/// `ctl subscribe`: one connection, the subscription's answer checked (an unknown topic
/// or a full connection table is refused with the service's reason, exit 2 or 1), then
/// every streamed line printed as it comes (stdout is line-buffered, so a pipe sees each
/// message at once) until a signal ends the process or the service closes the stream
/// (exit 1, said).
fn subscribe(socket: &Path, topics: &[String]) -> Result<ExitCode, Failure> {
    use std::io::BufRead;
    let request = serde_json::json!({"type": "subscribe", "topics": topics});
    let (answer, reader) = request_stream(socket, &request).map_err(|e| (ExitKind::Runtime, e))?;
    if answer["ok"] != true {
        return Err(refused(&answer));
    }
    eprintln!(
        "subscribed to {} at {} (Ctrl-C to stop)",
        topics.join(", "),
        socket.display()
    );
    for line in reader.lines() {
        let line = line.map_err(|e| {
            (
                ExitKind::Runtime,
                format!("the stream from {} broke: {e}", socket.display()),
            )
        })?;
        outln!("{line}");
    }
    // The stream ends only with Ctrl-C or the service: a script must tell the second apart.
    Err((
        ExitKind::Runtime,
        format!(
            "the service closed the stream at {} (stopped or restarted)",
            socket.display()
        ),
    ))
}

/// A running session's device that handed nothing on for this long is shown stalled (the
/// camera's frames come every 67 ms, the microphone's blocks every few tens of ms).
const STALLED_MS: u64 = 2_000;

pub fn status(
    socket: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let socket = socket_of(socket, config)?;
    let s = request_ok(&socket, &serde_json::json!({"type": "status"}))
        .map_err(|e| (ExitKind::Runtime, e))?;
    if json {
        print_json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    let device = |d: &serde_json::Value| {
        let name = d["name"].as_str().unwrap_or("?");
        if d["present"] == true {
            format!("ok        {name}")
        } else {
            format!(
                "MISSING   {name}: {}",
                d["problem"].as_str().unwrap_or("not checked yet")
            )
        }
    };
    outln!(
        "station   {} (pid {})",
        s["station_id"].as_str().unwrap_or("?"),
        s["pid"]
    );
    // A device that is there but whose data stopped reaching the pipeline is not fine.
    let stalled = |age: &serde_json::Value| {
        age.as_u64()
            .filter(|&a| a >= STALLED_MS)
            .map(|a| format!("  (STALLED: nothing for {:.1} s)", a as f64 / 1e3))
            .unwrap_or_default()
    };
    let session = &s["session"];
    outln!(
        "camera    {}{}",
        device(&s["camera"]),
        stalled(&session["frames_age_ms"])
    );
    outln!(
        "mic       {}{}",
        device(&s["microphone"]),
        stalled(&session["audio_age_ms"])
    );
    if let Some(failures) = session["stage_failures"].as_array() {
        for f in failures {
            outln!(
                "FAILED    stage {} at {:.1} s (the session goes on without it): {}",
                f["stage"].as_str().unwrap_or("?"),
                f["at_ms"].as_f64().unwrap_or(0.0) / 1e3,
                f["error"].as_str().unwrap_or("?")
            );
        }
    }
    match s["session"].as_object() {
        Some(r) => outln!(
            "session   {} participant {} at {:.1} s, phase {}; frames {} (dropped {}), audio samples {} (lost {}){}",
            r["session_id"].as_str().unwrap_or("?"),
            r["participant_id"].as_str().unwrap_or("?"),
            r["t_ms"].as_f64().unwrap_or(0.0) / 1e3,
            r["phase"].as_str().unwrap_or("none yet"),
            r["frames_captured"],
            r["frames_dropped"],
            r["audio_samples"],
            r["audio_samples_lost"],
            r["recording"].as_str().map(|d| format!(", recording into {d}")).unwrap_or_default()
        ),
        None => outln!("session   none running ({} run since start)", s["sessions_run"]),
    }
    if let Some(b) = s["session"]["bystanders"].as_object() {
        let n = |k: &str| b.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        outln!(
            "privacy   someone other than the participant in view on {} frames, masked on {} (each held 8 frames after last seen); participant not found on {}",
            n("frames_with_bystanders"),
            n("frames_masked"),
            n("frames_without_participant")
        );
    }
    if let Some(sync) = s["sync"].as_object() {
        let security = match sync.get("security").and_then(|v| v.as_str()) {
            Some("plain") => format!("PLAIN: {}", crate::sync::PLAIN_WARNING),
            Some(other) => other.to_string(),
            None => "?".into(),
        };
        outln!(
            "sync      {} pending, {} awaiting a receipt, {} synced; security {security}",
            sync.get("pending").unwrap_or(&serde_json::Value::Null),
            sync.get("sent").unwrap_or(&serde_json::Value::Null),
            sync.get("synced").unwrap_or(&serde_json::Value::Null)
        );
        let count = |k: &str| sync.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        let last = sync
            .get("last_refusal")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        for line in
            crate::cli::sync::refusal_lines(count("refused"), count("quarantined"), last.as_ref())
        {
            outln!("{line}");
        }
    }
    if let Some(free) = s["disk_free_mib"].as_u64() {
        outln!("disk      {free} MiB free");
    }
    if let Some(e) = s["last_error"].as_str() {
        outln!("last error {e}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Finishes the unfinished recordings in `dir` (a recordings folder, or one session
/// folder: then every unfinished one beside it too, as the service would at its start).
pub fn repair(dir: &Path) -> Result<ExitCode, Failure> {
    let root = if dir.join("session.json").exists() {
        dir.parent().unwrap_or(Path::new(".")).to_path_buf()
    } else {
        dir.to_path_buf()
    };
    let results = crate::capture::record::repair_interrupted(&root);
    if results.is_empty() {
        outln!(
            "{}: nothing to repair (no recording left unfinished)",
            dir.display()
        );
    }
    let mut failed = None;
    for (d, r) in results {
        match r {
            Ok(note) => outln!("{}: repaired: {note}", d.display()),
            Err(e) => {
                eprintln!("{}: {e}", d.display());
                failed = Some(format!("{}: {e}", d.display()));
            }
        }
    }
    match failed {
        Some(e) => Err((ExitKind::Runtime, e)),
        None => Ok(ExitCode::SUCCESS),
    }
}
