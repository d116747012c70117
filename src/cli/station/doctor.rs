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
    let mut checks = doctor::run_checks(config, db);
    if let Ok(c) = crate::config::Config::load_or_default(config) {
        checks.push(story_bank(db.unwrap_or(&c.store.db_path), &c));
    }
    let (text, ready) = doctor::render(&checks, live);
    out!("{text}");
    Ok(if ready {
        ExitCode::SUCCESS
    } else {
        exit_code(ExitKind::Runtime)
    })
}

/// A station recommends stories from its bank once the participant has shared theirs: a
/// station without one would fail the first `recommend` mid-session. The packages ship no
/// bank (a study's stories are its own): this names the command that imports one.
fn story_bank(db: &Path, config: &crate::config::Config) -> doctor::Check {
    let import = format!(
        "`empathic stories import STORIES.jsonl --db {}` (docs/commands.md; the demo's bank is demo/stories/stories.jsonl in the source)",
        db.display()
    );
    let (ok, detail) = if !db.exists() {
        (
            false,
            format!(
                "no session database at {} yet, so no story bank: {import}",
                db.display()
            ),
        )
    } else {
        match crate::store::Store::open_read_only(db)
            .map_err(|e| e.to_string())
            .and_then(|s| {
                crate::stories::load_index(&s, &config.models.sentence_encoder)
                    .map_err(|e| e.to_string())
            }) {
            Ok(index) => (
                true,
                format!(
                    "{} stories embedded with {}",
                    index.len(),
                    config.models.sentence_encoder
                ),
            ),
            Err(e) => (false, format!("{e}: {import}")),
        }
    };
    doctor::Check {
        name: "story bank",
        need: doctor::Need::Study,
        ok,
        detail,
    }
}
