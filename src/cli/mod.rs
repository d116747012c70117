//! The bodies of the `empathic` commands: everything a command does between parsing its
//! arguments (in `main.rs`) and its exit code.
//!
//! Contract: one file per command (or per group of subcommands), each with its `Args`
//! (clap, with the shared option groups of [`options`] flattened in) and `Args::run`;
//! `main.rs` only parses and dispatches. A command's body takes plain arguments, does its work through the library
//! (the stages, the runtime, the store) and prints its result to stdout (summaries) or
//! stderr (progress, notes). Errors come back as a [`Failure`]: the exit kind (see
//! [`crate::exit`]) and a message naming what and where. This is the only place besides
//! the tests that draws a progress bar ([`progress_bar`]); the files written by `extract`
//! live here too, so that `features/` stays free of output files.

/// `println!` for command output: a closed pipe (`empathic evaluate --json | head`) ends the
/// process quietly with success, as a reader that has seen enough is not an error; any other
/// write error is reported on stderr and exits as a runtime failure.
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output, with [`outln!`]'s handling of a closed pipe.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

pub mod collect;
pub mod evaluate;
pub mod explain;
pub mod export;
pub mod export_session;
pub mod keys;
pub mod options;
pub mod participant;
pub mod report;
pub mod sessions;
#[cfg(feature = "sensing")]
pub mod station;
pub mod study;
pub mod sync;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};

use crate::config::Config;
use crate::exit::{Classify, ExitKind};
#[cfg(feature = "sensing")]
use crate::features::text::SentenceEncoder;
use crate::models::manifest::Manifest;
use crate::store::Store;

/// The config at `path`, or the built-in defaults.
pub(crate) fn load_config(path: Option<&Path>) -> Result<Config, Failure> {
    Config::load_or_default(path).map_err(fail)
}

/// The process exit code of an exit kind.
pub fn exit_code(kind: ExitKind) -> std::process::ExitCode {
    std::process::ExitCode::from(kind.code() as u8)
}

/// Writes command output to stdout (see `outln!`).
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to standard output: {e}");
        std::process::exit(ExitKind::Runtime.code());
    }
}

/// A command that did not succeed: how to exit and what to say.
pub type Failure = (ExitKind, String);

/// Turns any classified error into a [`Failure`].
pub fn fail<E: Classify + std::fmt::Display>(e: E) -> Failure {
    (e.exit_kind(), e.to_string())
}

/// A progress bar on stderr when it is a terminal (a person is watching), else hidden, so a
/// systemd journal or a CI log never fills with redraws. `unit` names what is counted.
pub fn progress_bar(unit: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let template =
        format!("{{spinner}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} ({{eta}})");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// A run's progress drawn as a bar (hidden when stderr is no terminal).
pub struct Bar(pub ProgressBar);

#[cfg(feature = "sensing")]
impl crate::runtime::pipeline::Progress for Bar {
    fn set_total(&self, frames: u64) {
        self.0.set_length(frames);
    }
    fn advance(&self, frames: u64) {
        self.0.inc(frames);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// The session database a command uses: `--db`, else `store.db_path` from the config.
pub fn db_path(db: Option<PathBuf>, config: &Config) -> PathBuf {
    db.unwrap_or_else(|| config.store.db_path.clone())
}

/// Opens a database that must already exist, for a command that reads it (reading
/// commands never create one).
pub fn open_existing_store(path: &Path) -> Result<Store, Failure> {
    let text = path.to_string_lossy();
    if crate::sync::central::is_postgres(&text) {
        // A study's central PostgreSQL database: read through a snapshot with the station
        // schema, built from its applied records.
        return crate::sync::central::Central::open(&text)
            .and_then(crate::sync::central::Central::read_view)
            .map_err(fail);
    }
    if !path.exists() {
        return Err((
            ExitKind::BadInput,
            format!(
                "no session database at {}: name one with --db PATH, or the station's config with --config FILE (or $EMPATHIC_CONFIG; /etc/empathic/station.toml is read when it exists)",
                path.display()
            ),
        ));
    }
    // Read-write first (it migrates and marks abandoned sessions); a read-only file or
    // folder (a copy for analysis, a mounted backup) is still read as it is.
    match Store::open(path) {
        Ok(store) => Ok(store),
        Err(e) => Store::open_read_only(path).map_err(|_| fail(e)),
    }
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json<T: serde::Serialize>(value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| (ExitKind::Runtime, format!("cannot encode JSON: {e}")))?;
    outln!("{text}");
    Ok(())
}

/// The model folder of a config with its manifest read, for the commands that open models.
pub struct ModelFiles<'a> {
    pub config: &'a Config,
    pub manifest: Manifest,
}

impl<'a> ModelFiles<'a> {
    pub fn open(config: &'a Config) -> Result<Self, Failure> {
        let manifest = Manifest::load(&config.models.dir).map_err(fail)?;
        Ok(ModelFiles { config, manifest })
    }

    pub fn dir(&self) -> &Path {
        &self.config.models.dir
    }

    pub fn onnxruntime_library(&self) -> Option<&Path> {
        self.config.models.onnxruntime_library.as_deref()
    }

    /// The sentence encoder `name` of the manifest.
    #[cfg(feature = "sensing")]
    pub fn sentence_encoder(&self, name: &str) -> Result<SentenceEncoder, Failure> {
        let entry = self.manifest.get(name, self.dir()).map_err(fail)?;
        SentenceEncoder::open(self.dir(), entry, self.onnxruntime_library()).map_err(fail)
    }
}
