//! `empathic doctor`: the installation checked, what is missing and whether it matters.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::options::ConfigOption;
use crate::cli::{exit_code, Failure};
use crate::doctor;
use crate::exit::ExitKind;

/// Check the installation and say what is missing.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    config: ConfigOption,
    /// Session database whose folder must be writable.
    #[arg(long)]
    db: Option<PathBuf>,
    /// Also require a camera and a microphone (a station).
    #[arg(long)]
    live: bool,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        run_doctor(self.config.path(), self.db.as_deref(), self.live)
    }
}

/// `empathic doctor`.
fn run_doctor(config: Option<&Path>, db: Option<&Path>, live: bool) -> Result<ExitCode, Failure> {
    let checks = doctor::run_checks(config, db);
    let (text, ready) = doctor::render(&checks, live);
    out!("{text}");
    Ok(if ready {
        ExitCode::SUCCESS
    } else {
        exit_code(ExitKind::Runtime)
    })
}
