//! Retrieval by embedding: an in-memory index of a story bank's (unit-length) embeddings
//! and its top-k by cosine.
//!
//! Contract: [`StoryIndex`] holds one contiguous matrix; [`StoryIndex::top_k`] ranks by
//! cosine, best first, skipping excluded ids. It knows no store: `stories::load_index`
//! fills it from one. [`presented_text`] is what a story's embedding is computed from, the
//! same for the bank's import and the stories shown in a session.

use serde::Serialize;

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
    /// An index of `(id, title, embedding)` items (an embedding of another width than the
    /// first is skipped with a warning).
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
