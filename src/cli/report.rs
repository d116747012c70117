//! `empathic report`: writes a session's (or a participant's) HTML page.
//!
//! Contract: the page is written to `OUT.partial` beside `OUT`, then renamed, so a failure
//! half way never leaves a partial page under the asked name; an existing `OUT` is replaced
//! only by a complete page. An unknown session or participant is exit 2, naming it and the
//! database. The store is opened as every reading command opens it (migrated when
//! writable); a read-only database of an older schema is refused with both versions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use super::options::{ConfigOption, DbOption};
use super::{db_path, fail, load_config, open_existing_store, Failure};
use crate::exit::ExitKind;
use crate::report::page::{self, PageError, PageOptions};
use crate::store::StoreError;

/// One self-contained HTML page (no network, no script) of a session, or of a
/// participant across their sessions: timeline, predictions, face, voice, data quality.
#[derive(clap::Args)]
pub struct Args {
    /// The session to report on.
    #[arg(
        required_unless_present = "participant",
        conflicts_with = "participant"
    )]
    session_id: Option<String>,
    /// Report on this participant's sessions instead.
    #[arg(long)]
    participant: Option<String>,
    #[command(flatten)]
    db: DbOption,
    #[command(flatten)]
    config: ConfigOption,
    /// Where to write the page (written beside, then renamed).
    #[arg(long)]
    out: PathBuf,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        report(
            self.session_id.as_deref(),
            self.participant.as_deref(),
            self.db.db,
            self.config.path(),
            &self.out,
        )
    }
}

fn page_failure(e: PageError) -> Failure {
    match e {
        PageError::Store(e @ StoreError::NoSuchSession { .. }) => {
            (ExitKind::BadInput, e.to_string())
        }
        PageError::Store(e) => fail(e),
        e @ PageError::NoSuchParticipant { .. } => (ExitKind::BadInput, e.to_string()),
        PageError::Plot(m) => (ExitKind::Runtime, m),
    }
}

pub fn report(
    session: Option<&str>,
    participant: Option<&str>,
    db: Option<PathBuf>,
    config: Option<&Path>,
    out: &Path,
) -> Result<ExitCode, Failure> {
    crate::files::check_output(out).map_err(fail)?;
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let found = store.schema_version().map_err(fail)?;
    let known = crate::store::schema::MIGRATIONS.last().map_or(0, |m| m.0);
    if found < known {
        return Err((
            ExitKind::BadInput,
            format!(
                "{} has schema version {found} and cannot be migrated here (read-only); this build reads {known}: copy it somewhere writable and run the report on the copy",
                store.path().display()
            ),
        ));
    }
    let started = Instant::now();
    let html = match (session, participant) {
        (_, Some(p)) => page::participant_page(&store, p),
        (Some(s), None) => page::session_page(
            &store,
            s,
            &PageOptions {
                transcript: config.report.transcript,
            },
        ),
        (None, None) => {
            return Err((
                ExitKind::BadInput,
                "name a session, or a participant with --participant".into(),
            ))
        }
    }
    .map_err(page_failure)?;
    crate::files::write_atomically(out, html.as_bytes()).map_err(fail)?;
    eprintln!(
        "wrote {} ({:.0} kB in {:.2} s)",
        out.display(),
        html.len() as f64 / 1e3,
        started.elapsed().as_secs_f64()
    );
    outln!("{}", out.display());
    Ok(ExitCode::SUCCESS)
}
