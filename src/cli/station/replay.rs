//! `empathic replay`: a recorded session folder through the pipeline into the store, with
//! a progress bar and a one-screen summary.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use crate::cli::options::{ConfigOption, DbOption, JsonOption};
use crate::cli::{db_path, exit_code, fail, load_config, print_json, progress_bar, Failure};
use crate::clock::{MonotonicClock, Speed};
use crate::exit::ExitKind;
use crate::runtime::replay::{replay as run_replay, ReplayOptions};
use crate::runtime::stop_flag;

/// Replay a recorded session folder through the pipeline into the session store.
#[derive(clap::Args)]
pub struct Args {
    /// Folder with video.avi, audio.wav and optionally session.json and events.jsonl.
    session_dir: PathBuf,
    #[command(flatten)]
    db: DbOption,
    #[command(flatten)]
    config: ConfigOption,
    /// `max`: as fast as possible; `realtime`: at the pace it was recorded.
    #[arg(long, default_value = "max")]
    speed: Speed,
    /// Replace a session already stored complete under the same id.
    #[arg(long)]
    replace: bool,
    /// Also write the stream a control-socket subscriber to every topic would have
    /// received (JSON lines, in the order of the time each describes), to develop a
    /// dialogue policy on recorded sessions.
    #[arg(long, value_name = "FILE")]
    emit: Option<PathBuf>,
    /// Leave bad lines of events.jsonl out instead of refusing the session (each is kept
    /// with why in the session's quality report and named in its reason).
    #[arg(long)]
    skip_bad_events: bool,
    #[command(flatten)]
    json: JsonOption,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        replay(self)
    }
}

/// `empathic replay`.
fn replay(args: Args) -> Result<ExitCode, Failure> {
    let Args {
        session_dir,
        db,
        config,
        speed,
        replace,
        emit,
        skip_bad_events,
        json,
    } = args;
    let (db, json) = (db.db, json.json);
    let config = load_config(config.path())?;
    // Checked before the database is opened: a mistyped folder must not leave a new
    // database (and its disk reserve) behind.
    if !session_dir.is_dir() {
        return Err((
            ExitKind::BadInput,
            format!(
                "no session folder at {} (a recorded session: manifest.json, video, audio and events.jsonl)",
                session_dir.display()
            ),
        ));
    }
    // The stream is written at the end: a folder that is not there fails now, not after
    // the whole replay.
    if let Some(path) = &emit {
        crate::files::check_output(path)
            .map_err(|e| (ExitKind::BadInput, format!("--emit: {e}")))?;
    }
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
        progress: Arc::new(crate::cli::Bar(progress.clone())),
        emit,
        skip_bad_events,
    };
    let result = run_replay(&opts, Arc::new(MonotonicClock::new()), stop);
    progress.finish_and_clear();
    let summary = result.map_err(|e| {
        let hint = matches!(
            e,
            crate::runtime::RunError::Session(crate::session::SessionError::Events { .. })
        );
        let (kind, message) = fail(e);
        if hint {
            (kind, format!("{message} (fix the line, or replay with --skip-bad-events to leave bad lines out)"))
        } else {
            (kind, message)
        }
    })?;
    if json {
        print_json(&summary)?;
    } else {
        out!("{}", summary.render());
    }
    // Bad input part of the way through: what decoded is stored (`incomplete`), and the
    // exit code says the input was bad, naming it.
    if summary.input_cut {
        eprintln!(
            "replay: {}",
            summary
                .status_reason
                .as_deref()
                .unwrap_or("an input ends on bad data")
        );
        return Ok(exit_code(ExitKind::BadInput));
    }
    // A replay stopped by a signal did not finish, and a session stored `incomplete` (a
    // recording cut short, a video ending early) holds less than a whole session: the exit
    // code says so, and why goes to stderr for scripts that keep only that.
    Ok(if summary.status == "complete" {
        ExitCode::SUCCESS
    } else if let Some(kept) = &summary.kept {
        eprintln!("replay: {kept}");
        exit_code(ExitKind::Runtime)
    } else {
        eprintln!(
            "replay: session stored {}: {}",
            summary.status,
            summary
                .status_reason
                .as_deref()
                .unwrap_or("no reason recorded")
        );
        exit_code(ExitKind::Runtime)
    })
}
