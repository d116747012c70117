//! `empathic stories import|search|retrieve|recommend`: the story bank.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli::options::{ConfigOption, DbOption, ReadOptions};
use crate::cli::{
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
    /// Stories for a participant from the bank, never shown to them before, ranked by a
    /// policy, each with why (similarity, predicted empathy, the calibration used).
    Recommend {
        /// The participant (pseudonym).
        #[arg(long)]
        participant: String,
        /// What they said (default: what they shared in --session, or in their latest
        /// session).
        #[arg(long)]
        text: Option<String>,
        /// The session whose shared story to start from (default: their latest).
        #[arg(long)]
        session: Option<String>,
        /// How to rank: similarity (the study's original rule), predicted_empathy (the
        /// text-zero-shot predictor's score under their calibration), explore (spread over
        /// predicted levels).
        #[arg(long, value_enum, default_value = "similarity")]
        policy: crate::core::Policy,
        /// How many stories.
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
            Command::Recommend {
                participant,
                text,
                session,
                policy,
                k,
                read,
            } => stories_recommend(
                &participant,
                text.as_deref(),
                session.as_deref(),
                policy,
                k,
                read,
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

/// `empathic stories recommend --participant ID`.
fn stories_recommend(
    participant: &str,
    text: Option<&str>,
    session: Option<&str>,
    policy: crate::core::Policy,
    k: usize,
    read: ReadOptions,
) -> Result<ExitCode, Failure> {
    crate::session::manifest::check_id("participant", participant)
        .map_err(|m| (crate::exit::ExitKind::BadInput, m))?;
    if !(1..=50).contains(&k) {
        return Err((
            crate::exit::ExitKind::BadInput,
            format!("-k must be 1-50, got {k}"),
        ));
    }
    let config = load_config(read.config.path())?;
    let store = open_existing_store(&db_path(read.db.db, &config))?;
    let mut bank = Bank::load(&config, &store)?;
    let inputs = stories::recommendation_inputs(
        &store,
        &bank.index,
        participant,
        text,
        session,
        &config.text.speaker,
    )
    .map_err(fail)?;
    let query = bank
        .encoder
        .embed(&[inputs.text.as_str()])
        .map_err(fail)?
        .remove(0);
    let chosen = crate::fusion::recommend::recommend(
        &bank.index,
        &query,
        &inputs.exclude,
        k,
        policy,
        &inputs.scorer,
    );
    if read.json.json {
        print_json(&serde_json::json!({
            "participant_id": participant,
            "policy": policy.as_str(),
            "from_session": inputs.session,
            "left_out": inputs.exclude.len(),
            "stories": chosen,
        }))?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{} stories for {participant} by {} (from {}; {} shown before left out; calibration {}):",
        chosen.len(),
        policy.as_str(),
        inputs
            .session
            .as_deref()
            .map_or("the given text".to_string(), |s| format!(
                "what they shared in {s}"
            )),
        inputs.exclude.len(),
        inputs.scorer.label()
    );
    if chosen.is_empty() {
        outln!("none: every story of the bank was shown to them");
    }
    for (i, r) in chosen.iter().enumerate() {
        outln!(
            "{}. {}  {}  similarity {:+.3}, predicted {:.2} (rank {} of {})",
            i + 1,
            r.story_id,
            r.title,
            r.similarity,
            r.predicted,
            r.predicted_rank,
            r.candidates
        );
    }
    Ok(ExitCode::SUCCESS)
}
