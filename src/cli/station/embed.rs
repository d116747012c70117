//! `empathic embed TEXT`: the sentence embedding as a JSON array.

use std::path::Path;
use std::process::ExitCode;

use crate::cli::options::ConfigOption;
use crate::cli::{fail, load_config, print_json, Failure, ModelFiles};

/// Print the sentence embedding of TEXT as a JSON array.
#[derive(clap::Args)]
pub struct Args {
    /// The text to embed (quote it).
    text: String,
    /// Model name in models/MODELS.toml (default: models.sentence_encoder).
    #[arg(long)]
    model: Option<String>,
    #[command(flatten)]
    config: ConfigOption,
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        embed(&self.text, self.model, self.config.path())
    }
}

/// `empathic embed TEXT`: the sentence embedding as a JSON array.
pub fn embed(
    text: &str,
    model: Option<String>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let name = model.unwrap_or_else(|| config.models.sentence_encoder.clone());
    let mut encoder = ModelFiles::open(&config)?.sentence_encoder(&name)?;
    let v = encoder.embed(&[text]).map_err(fail)?;
    print_json(&v.first())?;
    Ok(ExitCode::SUCCESS)
}
