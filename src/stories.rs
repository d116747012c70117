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

use serde::{Deserialize, Serialize};

use crate::exit::{Classify, ExitKind};
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

/// One story as written in a bank file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Story {
    pub id: String,
    pub title: String,
    pub text: String,
    pub source: String,
    pub licence: String,
}

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

/// What a story's embedding is computed from: title and text together, as the robot
/// presents them (the bank's import and the stories shown in a session use the same).
pub fn presented_text(title: &str, text: &str) -> String {
    format!("{title}. {text}")
}

/// A ranked story.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    pub id: String,
    pub title: String,
    pub score: f64,
}

/// Embeddings of a model's stories held in memory: one contiguous matrix.
pub struct StoryIndex {
    ids: Vec<String>,
    titles: Vec<String>,
    dims: usize,
    matrix: Vec<f32>,
}

impl StoryIndex {
    /// Loads every story embedded with `model`.
    pub fn load(store: &Store, model: &str) -> Result<Self, StoryError> {
        let mut index = StoryIndex {
            ids: Vec::new(),
            titles: Vec::new(),
            dims: 0,
            matrix: Vec::new(),
        };
        for e in store.story_embeddings(model)? {
            index.push(e.story_id, e.title, &e.vec, e.dims);
        }
        if index.ids.is_empty() {
            return Err(StoryError::EmptyBank {
                model: model.to_string(),
            });
        }
        Ok(index)
    }

    /// An index from vectors in memory (tests, benchmarks).
    pub fn from_vectors(items: Vec<(String, String, Vec<f32>)>) -> Self {
        let mut index = StoryIndex {
            ids: Vec::new(),
            titles: Vec::new(),
            dims: 0,
            matrix: Vec::new(),
        };
        for (id, title, v) in items {
            let d = v.len();
            index.push(id, title, &v, d);
        }
        index
    }

    /// Story `id`'s title and (unit-length) embedding.
    pub fn story(&self, id: &str) -> Option<(&str, &[f32])> {
        let i = self.ids.iter().position(|x| x == id)?;
        Some((
            &self.titles[i],
            &self.matrix[i * self.dims..(i + 1) * self.dims],
        ))
    }

    fn push(&mut self, id: String, title: String, v: &[f32], dims: usize) {
        if self.dims == 0 {
            self.dims = dims;
        }
        if dims != self.dims || v.len() != dims {
            tracing::warn!(story = %id, "embedding of {} values skipped (index has {})", v.len(), self.dims);
            return;
        }
        // Normalise once, so a dot product is the cosine.
        let norm = v
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        self.matrix.extend(v.iter().map(|x| x / norm));
        self.ids.push(id);
        self.titles.push(title);
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Every story's unit-length embedding, row after row, and the width of a row.
    pub fn vectors(&self) -> (&[f32], usize) {
        (&self.matrix, self.dims)
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The `k` stories most similar to `query`, best first, skipping ids in `exclude`.
    pub fn top_k(&self, query: &[f32], k: usize, exclude: &[String]) -> Vec<Hit> {
        let norm = query
            .iter()
            .map(|x| x * x)
            .sum::<f32>()
            .sqrt()
            .max(f32::MIN_POSITIVE);
        let mut best: Vec<(f32, usize)> = Vec::with_capacity(k + 1);
        for (i, row) in self.matrix.chunks_exact(self.dims.max(1)).enumerate() {
            let score = row.iter().zip(query).map(|(a, b)| a * b).sum::<f32>() / norm;
            if best.len() == k && best.last().is_some_and(|&(s, _)| score <= s) {
                continue;
            }
            if exclude.contains(&self.ids[i]) {
                continue;
            }
            let pos = best.partition_point(|&(s, _)| s >= score);
            best.insert(pos, (score, i));
            best.truncate(k);
        }
        best.into_iter()
            .map(|(score, i)| Hit {
                id: self.ids[i].clone(),
                title: self.titles[i].clone(),
                score: f64::from(score),
            })
            .collect()
    }
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
