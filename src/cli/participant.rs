//! `empathic participant consent|purge`: what study staff record of a participant, and a
//! withdrawal (the purge's body is `sync::purge`: it reaches the outbox and the service).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::options::{ConfigOption, DbOption};
use super::{fail, load_config, Failure};
use crate::exit::ExitKind;

/// Participants.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Record consent as study staff took it: the live service captures only participants
    /// whose consent is `given`.
    Consent {
        /// The participant's pseudonym.
        id: String,
        /// Consent given.
        #[arg(long, conflicts_with = "withdrawn")]
        given: bool,
        /// Consent withdrawn (a running session of theirs stops at once; their data stays
        /// until `participant purge`). One of `--given` and `--withdrawn` is required: a
        /// bare `consent P` once recorded a withdrawal.
        #[arg(long)]
        withdrawn: bool,
        /// Raw video and audio may leave the station (only with --given).
        #[arg(long)]
        raw_media: bool,
        #[command(flatten)]
        db: DbOption,
        #[command(flatten)]
        config: ConfigOption,
    },
    /// Withdrawal: stop their running live session (if the service runs one), delete their
    /// sessions, answers, pending records and the station's recordings of them, rebuild the
    /// database without the deleted bytes, and tell the study's collector to delete theirs
    /// (at the next `sync`); only an audit line that a purge happened stays. On a central
    /// database (`--db CENTRAL.db` or `--db postgres://...`): every record, chunk and
    /// quarantined copy of theirs from every station of the study, for a station that is
    /// lost or revoked; exit 0 only when nothing of theirs is left.
    Purge {
        /// The participant's pseudonym.
        id: String,
        /// On a central database (`--db CENTRAL.db` or a postgres:// URL): the study, when
        /// the participant's pseudonym is in several.
        #[arg(long)]
        study: Option<String>,
        #[command(flatten)]
        db: DbOption,
        #[command(flatten)]
        config: ConfigOption,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::Consent {
                id,
                given,
                withdrawn,
                raw_media,
                db,
                config,
            } => {
                if !given && !withdrawn {
                    return Err((
                        ExitKind::BadInput,
                        format!("say which: `participant consent {id} --given` or `--withdrawn`"),
                    ));
                }
                if withdrawn && raw_media {
                    return Err((ExitKind::BadInput, "--raw-media goes with --given".into()));
                }
                consent(&id, given, raw_media, db.db, config.path())
            }
            Command::Purge {
                id,
                study,
                db,
                config,
            } => super::sync::purge(&id, db.db, config.path(), study.as_deref()),
        }
    }
}

/// Records participant `id`'s consent in the station's store (created if absent).
pub fn consent(
    id: &str,
    given: bool,
    raw_media: bool,
    db: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    crate::session::manifest::check_id("participant id", id)
        .map_err(|m| (ExitKind::BadInput, m))?;
    let config = load_config(config)?;
    let path = super::db_path(db, &config);
    // Consent may be the first thing recorded on a new station: create the store.
    let store = crate::store::Store::open(&path).map_err(fail)?;
    let consent = if given { "given" } else { "withdrawn" };
    store
        .set_consent(id, consent, given && raw_media)
        .map_err(fail)?;
    outln!(
        "participant {id}: consent {consent}{}",
        if given && raw_media {
            ", raw media may leave the station"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}
