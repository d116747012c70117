//! `empathic models verify`: every shipped model checked (sha256, loading, shapes, a
//! known answer).

use std::path::Path;
use std::process::ExitCode;

use crate::cli::options::ConfigOption;
use crate::cli::{exit_code, fail, load_config, Failure};
use crate::doctor::models::verify_all;
use crate::exit::ExitKind;

/// Model files.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Check every model: sha256, loading, shapes and a known-answer test.
    Verify {
        #[command(flatten)]
        config: ConfigOption,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::Verify { config } => models_verify(config.path()),
        }
    }
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
