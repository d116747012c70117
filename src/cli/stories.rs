//! `empathic stories import|search|retrieve`: the story bank.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::options::{ConfigOption, DbOption, ReadOptions};
use super::{
    db_path, fail, load_config, open_existing_store, print_json, progress_bar, Failure, ModelFiles,
};
use crate::config::Config;
use crate::store::Store;
use crate::stories::{self, read_bank, session_context, Hit, StoryIndex};

/// The story bank: import, search, retrieve for a session.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Embed and store the stories of a JSONL or CSV file (id, title, text, source, licence).
    Import {
        /// The story bank: JSONL or CSV with id, title, text, source, licence.
        file: PathBuf,
        #[command(flatten)]
        db: DbOption,
        #[command(flatten)]
        config: ConfigOption,
    },
    /// The stories closest to TEXT, with cosine scores.
    Search {
        /// What to search for (quote it).
        text: String,
        /// How many stories to list.
        #[arg(short, default_value_t = 3)]
        k: usize,
        #[command(flatten)]
        read: ReadOptions,
    },
    /// Stories for what the participant shared in a session, leaving out stories they saw
    /// in earlier sessions.
    Retrieve {
        /// The stored session whose shared story the retrieval starts from.
        session_id: String,
        /// How many stories to retrieve.
        #[arg(short, default_value_t = 3)]
        k: usize,
        #[command(flatten)]
        read: ReadOptions,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::Import { file, db, config } => stories_import(&file, db.db, config.path()),
            Command::Search { text, k, read } => {
                stories_search(&text, k, read.db.db, read.config.path(), read.json.json)
            }
            Command::Retrieve {
                session_id,
                k,
                read,
            } => stories_retrieve(
                &session_id,
                k,
                read.db.db,
                read.config.path(),
                read.json.json,
            ),
        }
    }
}

/// `empathic stories import FILE`.
pub fn stories_import(
    file: &Path,
    db: Option<PathBuf>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let bank = read_bank(file).map_err(fail)?;
    let model = config.models.sentence_encoder.clone();
    let mut encoder = ModelFiles::open(&config)?.sentence_encoder(&model)?;
    let mut store = Store::open(&db_path(db, &config)).map_err(fail)?;
    let progress = progress_bar("stories");
    progress.set_length(bank.len() as u64);
    let result = stories::import(&mut store, &bank, &model, &mut encoder, &|| progress.inc(1));
    progress.finish_and_clear();
    let n = result.map_err(fail)?;
    outln!(
        "imported {n} stories from {} (embedded with {model}) into {}",
        file.display(),
        store.path().display()
    );
    Ok(ExitCode::SUCCESS)
}

fn print_hits(hits: &[Hit], json: bool) -> Result<(), Failure> {
    if json {
        return print_json(&hits);
    }
    for (i, h) in hits.iter().enumerate() {
        outln!("{}. {:.4}  {}  {}", i + 1, h.score, h.id, h.title);
    }
    Ok(())
}

/// A stored story bank ready to query: its index for the configured sentence encoder, and
/// the encoder for queries.
struct Bank {
    index: StoryIndex,
    encoder: crate::features::text::SentenceEncoder,
}

impl Bank {
    fn open(db: Option<PathBuf>, config: Option<&Path>) -> Result<Self, Failure> {
        let config = load_config(config)?;
        let store = open_existing_store(&db_path(db, &config))?;
        Self::load(&config, &store)
    }

    fn load(config: &Config, store: &Store) -> Result<Self, Failure> {
        let model = config.models.sentence_encoder.clone();
        let index = stories::load_index(store, &model).map_err(fail)?;
        let encoder = ModelFiles::open(config)?.sentence_encoder(&model)?;
        Ok(Bank { index, encoder })
    }

    fn top_k(&mut self, text: &str, k: usize, exclude: &[String]) -> Result<Vec<Hit>, Failure> {
        let query = self.encoder.embed(&[text]).map_err(fail)?.remove(0);
        Ok(self.index.top_k(&query, k, exclude))
    }
}

/// `empathic stories search TEXT`.
pub fn stories_search(
    text: &str,
    k: usize,
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let mut bank = Bank::open(db, config)?;
    print_hits(&bank.top_k(text, k, &[])?, json)?;
    Ok(ExitCode::SUCCESS)
}

/// `empathic stories retrieve SESSION_ID`.
pub fn stories_retrieve(
    session_id: &str,
    k: usize,
    db: Option<PathBuf>,
    config: Option<&Path>,
    json: bool,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let store = open_existing_store(&db_path(db, &config))?;
    // The session is checked before the bank: a wrong id is the likelier mistake.
    let (shared, seen) = session_context(&store, session_id, &config.text.speaker).map_err(fail)?;
    let mut bank = Bank::load(&config, &store)?;
    if !json && !seen.is_empty() {
        outln!(
            "leaving out {} stories seen in earlier sessions",
            seen.len()
        );
    }
    print_hits(&bank.top_k(&shared, k, &seen)?, json)?;
    Ok(ExitCode::SUCCESS)
}
