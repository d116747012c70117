//! `empathic study report`: the study page from the central database (`report::study`).
//!
//! Contract: reads the central database (`--db FILE` or `--central postgres://...`), which
//! must exist (a missing file is exit 2, not a new empty database); prints the facts as
//! JSON with `--json`; with `--out FILE` writes the page to `FILE.partial` and renames it,
//! so a reader never sees half a page and a failure leaves the previous page in place.

use std::path::PathBuf;
use std::process::ExitCode;

use super::collect::{open_central_with, CentralOption};
use super::options::{ConfigOption, JsonOption};
use super::{print_json, Failure};
use crate::exit::ExitKind;
use crate::report::study::{html, StudyFacts};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: StudyCommand,
}

#[derive(clap::Subcommand)]
enum StudyCommand {
    /// The whole study at a glance: every open problem with what to do, the stations worst
    /// first, the participants against the plan (`[study]` of --config, as in
    /// firmware-config/collect.toml), data quality over time, ratings and predictions.
    Report {
        #[command(flatten)]
        central: CentralOption,
        #[command(flatten)]
        config: ConfigOption,
        /// Study name (default: `[sync] study`).
        #[arg(long)]
        study: Option<String>,
        /// Where to write the page (written beside, then renamed).
        #[arg(long, required_unless_present = "json")]
        out: Option<PathBuf>,
        #[command(flatten)]
        json: JsonOption,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        let StudyCommand::Report {
            central,
            config,
            study,
            out,
            json,
        } = self.command;
        if let Some(out) = &out {
            crate::files::check_output(out).map_err(super::fail)?;
        }
        let target = central.target();
        if !crate::sync::central::is_postgres(&target) && !std::path::Path::new(&target).exists() {
            return Err((
                ExitKind::BadInput,
                format!(
                    "no central database at {target} (`empathic collect --db {target}` makes one)"
                ),
            ));
        }
        let config = super::load_config(config.path())?;
        let (mut db, study) = open_central_with(&central, &config, study, true)?;
        let name = crate::sync::central::redacted(&target);
        let facts = StudyFacts::gather(
            &mut db,
            &mut Default::default(),
            &study,
            &config.study,
            &name,
            &crate::clock::utc_now(),
        )
        .map_err(super::fail)?;
        if json.json {
            print_json(&facts)?;
        }
        if let Some(out) = out {
            crate::files::write_atomically(&out, html(&facts).as_bytes()).map_err(super::fail)?;
            eprintln!(
                "wrote {} ({} stations, {} open problems)",
                out.display(),
                facts.stations.len(),
                facts.problems.len()
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}
