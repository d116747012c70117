//! `empathic participant consent|purge`: what study staff record of a participant, and a
//! withdrawal (the bodies are `live::consent` and `sync::purge`).

use std::process::ExitCode;

use super::options::{ConfigOption, DbOption};
use super::Failure;

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
        /// Consent given (without it: withdrawn).
        #[arg(long)]
        given: bool,
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
    /// (at the next `sync`); only an audit line that a purge happened stays.
    Purge {
        /// The participant's pseudonym.
        id: String,
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
                raw_media,
                db,
                config,
            } => super::live::consent(&id, given, raw_media, db.db, config.path()),
            Command::Purge { id, db, config } => super::sync::purge(&id, db.db, config.path()),
        }
    }
}
