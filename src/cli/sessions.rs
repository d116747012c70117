//! `empathic sessions list|show`: the stored sessions, one line each or one in detail.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::options::ReadOptions;
use super::{db_path, fail, load_config, open_existing_store, print_json, Failure};
use crate::report;

/// List or show stored sessions.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// One line per session.
    List {
        #[command(flatten)]
        read: ReadOptions,
    },
    /// One session in detail.
    Show {
        /// The session id (as `sessions list` shows it).
        id: String,
        #[command(flatten)]
        read: ReadOptions,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::List { read } => sessions_list(read.db.db, read.config.path(), read.json.json),
            Command::Show { id, read } => {
                sessions_show(&id, read.db.db, read.config.path(), read.json.json)
            }
        }
    }
}

/// `empathic sessions list`.
pub fn sessions_list(
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let sessions = store.list_sessions().map_err(fail)?;
    if json {
        print_json(&sessions)?;
    } else {
        out!("{}", report::render_session_list(&sessions));
    }
    Ok(ExitCode::SUCCESS)
}

/// `empathic sessions show ID`.
pub fn sessions_show(
    id: &str,
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    let detail = store.session_detail(id).map_err(fail)?;
    if json {
        print_json(&detail)?;
    } else {
        out!("{}", report::render_session_detail(&detail));
    }
    Ok(ExitCode::SUCCESS)
}
