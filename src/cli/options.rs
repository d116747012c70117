//! Option groups several commands share, declared once and flattened into each command's
//! `Args` (`#[command(flatten)]`), so `--db`, `--config` and `--json` read and say the same
//! everywhere.

use std::path::{Path, PathBuf};

/// `--db`: the session database a command reads or writes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DbOption {
    /// The session database: a SQLite file, or a central database's postgres:// URL (read by `sessions`, `report`, `evaluate`, `export`; purged by `participant purge`) (default: the config's `[store] db_path`, empathic.db).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

/// `--config`: the station config.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ConfigOption {
    /// The station config (TOML; default: $EMPATHIC_CONFIG, else /etc/empathic/station.toml when it exists, else the built-in defaults listed in firmware-config/station.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl ConfigOption {
    pub fn path(&self) -> Option<&Path> {
        self.config.as_deref()
    }
}

/// `--json`: machine-readable output.
#[derive(clap::Args, Debug, Clone, Copy, Default)]
pub struct JsonOption {
    /// Print JSON instead of text (default: text).
    #[arg(long)]
    pub json: bool,
}

/// `--db`, `--config` and `--json`: what a reading command takes.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReadOptions {
    #[command(flatten)]
    pub db: DbOption,
    #[command(flatten)]
    pub config: ConfigOption,
    #[command(flatten)]
    pub json: JsonOption,
}

/// The broker and study of `sync` and `collect`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BrokerArgs {
    /// `mqtt://HOST:PORT` or `mqtts://HOST:PORT` (TLS) (default: `[sync] broker`).
    #[arg(long)]
    pub broker: Option<String>,
    /// Study name in the topics (default: `[sync] study`).
    #[arg(long)]
    pub study: Option<String>,
    /// Broker username (default: `[sync] username`).
    #[arg(long)]
    pub username: Option<String>,
    /// File holding the broker password (default: `[sync] password_file`).
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// CA certificate (PEM) of an mqtts:// broker (default: `[sync] ca_file`).
    #[arg(long)]
    pub ca: Option<PathBuf>,
}
