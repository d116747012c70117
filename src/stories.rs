//! The story bank: import, search and retrieval of stories by sentence embedding.
//!
//! Contract: a bank file is JSONL (one object a line) or CSV (header row), each story with
//! `id`, `title`, `text`, `source`, `licence`; a malformed row or a duplicate id is an error
//! naming the file and the row. Import embeds every story with the configured sentence
//! encoder and stores story and embedding in one transaction (an id already stored is
//! replaced). Search ranks stories by cosine similarity of their embeddings to the query's.
//! Retrieval for a session embeds what the participant shared (their utterances in the
//! `story_share` phase, or all of theirs when the session has no phases) and leaves out the
//! stories that participant was shown in earlier sessions.

use std::path::{Path, PathBuf};

use crate::exit::{Classify, ExitKind};
#[cfg(feature = "sensing")]
use crate::features::text::SentenceEncoder;
use crate::models::ModelError;
use crate::store::{Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum StoryError {
    #[error("cannot read the story bank: {source}: {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid story on row {row}: {message}: {path}")]
    Row {
        path: PathBuf,
        row: usize,
        message: String,
    },
    #[error("unsupported story bank format (expected .jsonl or .csv): {path}")]
    Format { path: PathBuf },
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no session `{id}` in the store")]
    NoSession { id: String },
    #[error("session `{id}` has no utterances by `{speaker}` to retrieve stories for")]
    NothingShared { id: String, speaker: String },
    #[error("no stories embedded with model `{model}` in the store: run `empathic stories import FILE` first")]
    EmptyBank { model: String },
    #[error("participant `{participant}` has no session in the store to take their words from: give the text, or recommend after their story share")]
    NoSessionOf { participant: String },
    #[error("the text to recommend for is empty")]
    EmptyText,
}

impl Classify for StoryError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            StoryError::Model(e) => e.exit_kind(),
            StoryError::Store(e) => e.exit_kind(),
            _ => ExitKind::BadInput,
        }
    }
}

pub use crate::store::rows::Story;

/// Reads and checks a bank file.
pub fn read_bank(path: &Path) -> Result<Vec<Story>, StoryError> {
    let text = std::fs::read_to_string(path).map_err(|source| StoryError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let row_err = |row: usize, message: String| StoryError::Row {
        path: path.to_path_buf(),
        row,
        message,
    };
    let mut stories: Vec<(usize, Story)> = Vec::new();
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => {
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let s: Story =
                    serde_json::from_str(line).map_err(|e| row_err(i + 1, e.to_string()))?;
                stories.push((i + 1, s));
            }
        }
        Some("csv") => {
            let mut reader = csv::Reader::from_reader(text.as_bytes());
            for (i, record) in reader.deserialize::<Story>().enumerate() {
                // Row numbers count the header as row 1.
                let s = record.map_err(|e| row_err(i + 2, e.to_string()))?;
                stories.push((i + 2, s));
            }
        }
        _ => {
            return Err(StoryError::Format {
                path: path.to_path_buf(),
            })
        }
    }
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (row, s) in &stories {
        for (field, value) in [("id", &s.id), ("title", &s.title), ("text", &s.text)] {
            if value.trim().is_empty() {
                return Err(row_err(*row, format!("`{field}` is empty")));
            }
        }
        if let Some(first) = seen.insert(&s.id, *row) {
            return Err(row_err(
                *row,
                format!("duplicate id `{}` (first on row {first})", s.id),
            ));
        }
    }
    Ok(stories.into_iter().map(|(_, s)| s).collect())
}

/// Embeds and stores `stories` under `model`, in one transaction. Returns how many.
/// `progress` is called after each story is embedded.
#[cfg(feature = "sensing")]
pub fn import(
    store: &mut Store,
    stories: &[Story],
    model: &str,
    encoder: &mut SentenceEncoder,
    progress: &dyn Fn(),
) -> Result<usize, StoryError> {
    let mut vectors = Vec::with_capacity(stories.len());
    for s in stories {
        let input = presented_text(&s.title, &s.text);
        vectors.push(encoder.embed(&[input.as_str()])?.remove(0));
        progress();
    }
    store.import_stories(stories, &vectors, model)?;
    Ok(stories.len())
}

pub use crate::features::retrieval::{presented_text, Hit, StoryIndex};

/// Loads every story of the bank embedded with `model` into an index.
pub fn load_index(store: &Store, model: &str) -> Result<StoryIndex, StoryError> {
    let items = store
        .story_embeddings(model)?
        .into_iter()
        .filter(|e| {
            let whole = e.vec.len() == e.dims;
            if !whole {
                tracing::warn!(story = %e.story_id, "embedding of {} values skipped (stored as {})", e.vec.len(), e.dims);
            }
            whole
        })
        .map(|e| (e.story_id, e.title, e.vec))
        .collect::<Vec<_>>();
    let index = StoryIndex::from_vectors(items);
    if index.is_empty() {
        return Err(StoryError::EmptyBank {
            model: model.to_string(),
        });
    }
    Ok(index)
}

/// What the participant shared in session `id`, and the stories they saw before it.
pub fn session_context(
    store: &Store,
    id: &str,
    speaker: &str,
) -> Result<(String, Vec<String>), StoryError> {
    let Some(ctx) = store.retrieval_context(id, speaker)? else {
        return Err(StoryError::NoSession { id: id.to_string() });
    };
    if ctx.shared.is_empty() {
        return Err(StoryError::NothingShared {
            id: id.to_string(),
            speaker: speaker.to_string(),
        });
    }
    Ok((ctx.shared.join(" "), ctx.seen))
}

/// What a recommendation for a participant starts from, read from the store.
pub struct RecommendationInputs {
    /// The participant's words (given, or what they shared in `session`).
    pub text: String,
    /// The session the words came from, when read from the store.
    pub session: Option<String>,
    /// Every story they were ever shown: never recommended again.
    pub exclude: Vec<String>,
    /// The text-zero-shot map: fitted to their earlier rated stories when there are enough.
    pub scorer: crate::fusion::recommend::Scorer,
}

/// Reads what [`crate::fusion::recommend::recommend`] needs for `participant`: `text` when
/// given, else what they shared in `session` (default: their latest session); the stories
/// they were shown; their calibration over every complete session.
pub fn recommendation_inputs(
    store: &Store,
    index: &StoryIndex,
    participant: &str,
    text: Option<&str>,
    session: Option<&str>,
    speaker: &str,
) -> Result<RecommendationInputs, StoryError> {
    use crate::fusion::recommend::Scorer;
    use crate::fusion::zero_shot::{BankRelative, TextZeroShot, ABSOLUTE_MAP};
    let (text, session) = match (text, session) {
        (Some(t), _) if !t.trim().is_empty() => (t.to_string(), None),
        (Some(_), _) => return Err(StoryError::EmptyText),
        (None, Some(id)) => (session_context(store, id, speaker)?.0, Some(id.to_string())),
        (None, None) => {
            let id =
                store
                    .latest_session_of(participant)?
                    .ok_or_else(|| StoryError::NoSessionOf {
                        participant: participant.to_string(),
                    })?;
            (session_context(store, &id, speaker)?.0, Some(id))
        }
    };
    let exclude = store.stories_shown_to(participant)?;
    let pairs = store.calibration_pairs(participant, TextZeroShot::ID, "", None)?;
    let scorer = match crate::fusion::calibration::participant_map(ABSOLUTE_MAP, &pairs) {
        Some(map) => Scorer::Participant {
            map,
            label: format!("participant:{}", pairs.len()),
        },
        None => {
            let (v, d) = index.vectors();
            match BankRelative::new(v, d) {
                Some(bank) => Scorer::Bank(std::sync::Arc::new(bank)),
                None => Scorer::Absolute(ABSOLUTE_MAP),
            }
        }
    };
    Ok(RecommendationInputs {
        text,
        session,
        exclude,
        scorer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_ranks_by_cosine_and_skips_excluded() {
        let index = StoryIndex::from_vectors(vec![
            ("a".into(), "A".into(), vec![1.0, 0.0]),
            ("b".into(), "B".into(), vec![0.7, 0.7]),
            ("c".into(), "C".into(), vec![0.0, 1.0]),
            ("d".into(), "D".into(), vec![-1.0, 0.0]),
        ]);
        let hits = index.top_k(&[1.0, 0.1], 2, &[]);
        assert_eq!(
            hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(hits[0].score > hits[1].score);
        let hits = index.top_k(&[1.0, 0.1], 2, &["a".to_string()]);
        assert_eq!(
            hits.iter().map(|h| h.id.as_str()).collect::<Vec<_>>(),
            ["b", "c"]
        );
        assert_eq!(index.top_k(&[1.0, 0.0], 10, &[]).len(), 4);
    }

    #[test]
    fn bank_rows_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.jsonl");
        let ok = r#"{"id":"s1","title":"T","text":"x","source":"me","licence":"CC0"}"#;
        std::fs::write(&p, format!("{ok}\n{ok}\n")).unwrap();
        let msg = read_bank(&p).unwrap_err().to_string();
        assert!(
            msg.contains("row 2") && msg.contains("duplicate") && msg.contains("b.jsonl"),
            "{msg}"
        );
        std::fs::write(&p, format!("{ok}\n{{\"id\": 3}}\n")).unwrap();
        assert!(read_bank(&p).unwrap_err().to_string().contains("row 2"));
        let c = dir.path().join("b.csv");
        std::fs::write(
            &c,
            "id,title,text,source,licence\ns1,T,\"a, b\",me,CC0\ns2,,x,me,CC0\n",
        )
        .unwrap();
        let msg = read_bank(&c).unwrap_err().to_string();
        assert!(msg.contains("row 3") && msg.contains("title"), "{msg}");
        std::fs::write(&c, "id,title,text,source,licence\ns1,T,\"a, b\",me,CC0\n").unwrap();
        assert_eq!(read_bank(&c).unwrap()[0].text, "a, b");
        let bad = dir.path().join("b.txt");
        std::fs::write(&bad, "").unwrap();
        assert!(read_bank(&bad).unwrap_err().to_string().contains("b.txt"));
    }
}
