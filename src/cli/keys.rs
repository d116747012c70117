//! `empathic keys init station|study|collector` and `keys show`: the keys of sealed sync
//! (`sync::keys`). A secret key is made in a file (mode 0600, never overwritten); only its
//! public half is printed, to be handed to the other side.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::options::ConfigOption;
use super::{fail, load_config, Failure};
use crate::sync::keys::{self, KeyKind};

/// Keys of sealed sync: make a station's, the study's or a collector's, or show a key's
/// public half.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Whose {
    /// A station's signing key (Ed25519; default file: `[sync] signing_key`).
    Station,
    /// The study's sealing key pair (X25519; default file: keys/study.key): its public
    /// half goes in every station's `[sync] study_key`, the secret stays with the collectors
    /// (back it up offline: without it no sealed record can be read).
    Study,
    /// A collector's signing key (Ed25519; default file: keys/collector.key): its public
    /// half goes in every station's `[sync] collector_keys`.
    Collector,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Make a new secret key in a file (0600; refuses to overwrite) and print its public half.
    Init {
        /// Whose key.
        #[arg(value_enum)]
        whose: Whose,
        /// The key file (default: see each kind).
        #[arg(long)]
        file: Option<PathBuf>,
        #[command(flatten)]
        config: ConfigOption,
    },
    /// Print the public half of a key file.
    Show {
        /// The key file.
        file: PathBuf,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::Init {
                whose,
                file,
                config,
            } => {
                let (kind, default): (KeyKind, PathBuf) = match whose {
                    Whose::Station => (
                        KeyKind::Ed25519,
                        load_config(config.path())?.sync.signing_key,
                    ),
                    Whose::Study => (KeyKind::X25519, PathBuf::from("keys/study.key")),
                    Whose::Collector => (KeyKind::Ed25519, PathBuf::from("keys/collector.key")),
                };
                let path = file.unwrap_or(default);
                let public = keys::generate(&path, kind).map_err(fail)?;
                eprintln!("made {} (secret: keep it; mode 0600)", path.display());
                outln!("{public}");
                Ok(ExitCode::SUCCESS)
            }
            Command::Show { file } => {
                outln!("{}", show(&file)?);
                Ok(ExitCode::SUCCESS)
            }
        }
    }
}

fn show(file: &Path) -> Result<String, Failure> {
    keys::public_of_file(file).map_err(fail)
}
