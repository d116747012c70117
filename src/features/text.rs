//! Sentence embeddings (Sentence-BERT all-MiniLM-L6-v2, 384-d) through ONNX Runtime.
//!
//! Contract: texts are tokenised with the model's `tokenizer.json` (the `tokenizers` crate,
//! truncation at 256 tokens), run one text at a time through the ONNX
//! graph, whose output is already mean-pooled over the attention mask and L2-normalised. An
//! empty text embeds as `[CLS] [SEP]` like sentence-transformers does.

use std::path::Path;

use ort::session::Session;
use ort::value::Tensor;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::core::ModalitySpec;
use crate::core::TranscriptSource;
use crate::models::manifest::ModelEntry;
use crate::models::{onnx, ModelError};
use crate::session::{Event, EventKind};
use crate::Nanos;

/// Tokens per text at most (the model's `max_seq_length`).
pub const MAX_TOKENS: usize = 256;
/// Visible characters (not white space, not control) of a text that can reach the
/// encoder's window: every word piece covers at least one, and a word over 100 is one
/// unknown token, so [`MAX_TOKENS`] tokens never span more. A longer text is cut after this
/// many before tokenising: the embedding is the same, and a 210 kB request no longer costs
/// its length in CPU.
pub const MAX_INPUT_CHARS: usize = MAX_TOKENS * 101;

/// `text` cut after [`MAX_INPUT_CHARS`] visible characters (the encoder sees no further).
pub fn within_window(text: &str) -> &str {
    let mut visible = 0;
    for (i, c) in text.char_indices() {
        if !c.is_whitespace() && !c.is_control() {
            visible += 1;
            if visible > MAX_INPUT_CHARS {
                return &text[..i];
            }
        }
    }
    text
}

/// One sentence encoder shared by everything on a station that embeds text (a session's
/// text stage and the live service's `recommend` thread), so the model's weights are in
/// memory once (about 90 MB for the default fp32 MiniLM). Embedding is per text and
/// deterministic, so who held the lock before never changes a vector.
#[derive(Clone)]
pub struct SharedEncoder {
    encoder: std::sync::Arc<std::sync::Mutex<SentenceEncoder>>,
    dim: usize,
    producer: String,
}

impl SharedEncoder {
    pub fn new(encoder: SentenceEncoder) -> Self {
        Self {
            dim: encoder.dim(),
            producer: encoder.producer().to_string(),
            encoder: std::sync::Arc::new(std::sync::Mutex::new(encoder)),
        }
    }

    /// [`SentenceEncoder::embed`] under the lock (a panicked holder leaves it usable: the
    /// encoder keeps no state between texts).
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.encoder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .embed(texts)
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The model id with its sha256 (what produced a `text` vector).
    pub fn producer(&self) -> &str {
        &self.producer
    }
}

pub struct SentenceEncoder {
    name: String,
    /// The model id with its sha256, as stored in `modalities.producer`.
    producer: String,
    session: Session,
    tokenizer: Tokenizer,
    dim: usize,
    output: String,
}

impl SentenceEncoder {
    /// Opens the model `entry` from `dir` (checksums are `models verify`'s job).
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        onnxruntime_library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        let path = entry.path(dir);
        let tokenizer_path = entry.tokenizer_path(dir).ok_or_else(|| ModelError::Shape {
            name: entry.name.clone(),
            path: path.clone(),
            message: "a sentence encoder needs a tokenizer in the manifest".into(),
        })?;
        if !tokenizer_path.is_file() {
            return Err(ModelError::Missing {
                name: entry.name.clone(),
                path: tokenizer_path,
            });
        }
        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| ModelError::Load {
                name: entry.name.clone(),
                path: tokenizer_path.clone(),
                message: e.to_string(),
            })?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| ModelError::Load {
                name: entry.name.clone(),
                path: tokenizer_path.clone(),
                message: e.to_string(),
            })?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        let session = onnx::open_variable_session(&entry.name, &path, 1, onnxruntime_library)?;
        let output = entry
            .outputs
            .first()
            .map(|o| o.name.clone())
            .unwrap_or_else(|| "sentence_embedding".into());
        Ok(Self {
            name: entry.name.clone(),
            producer: entry.producer_id(),
            session,
            tokenizer,
            dim: entry.output_dim,
            output,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The model's name in the manifest.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model id with its sha256 (what produced a `text` vector).
    pub fn producer(&self) -> &str {
        &self.producer
    }

    /// One L2-normalised embedding per text. Each text runs on its own: with int8 dynamic
    /// quantisation the activation scales are taken over the whole batch, so batching texts
    /// (and their padding) together would make an embedding depend on its neighbours.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            out.extend(self.embed_batch(&[within_window(text)])?);
        }
        Ok(out)
    }

    fn embed_batch(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let fail = |message: String| ModelError::Inference {
            name: self.name.clone(),
            message,
        };
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| fail(format!("tokenising: {e}")))?;
        let batch = encodings.len();
        let len = encodings.first().map_or(0, |e| e.get_ids().len());
        let mut ids = Vec::with_capacity(batch * len);
        let mut mask = Vec::with_capacity(batch * len);
        let mut types = Vec::with_capacity(batch * len);
        for e in &encodings {
            ids.extend(e.get_ids().iter().map(|&v| i64::from(v)));
            mask.extend(e.get_attention_mask().iter().map(|&v| i64::from(v)));
            types.extend(e.get_type_ids().iter().map(|&v| i64::from(v)));
        }
        let shape = [batch, len];
        let tensor = |data: Vec<i64>| {
            Tensor::from_array((shape, data)).map_err(|e| fail(format!("input tensor: {e}")))
        };
        let inputs = ort::inputs![
            "input_ids" => tensor(ids)?,
            "attention_mask" => tensor(mask)?,
            "token_type_ids" => tensor(types)?,
        ];
        let outputs = self
            .session
            .run(inputs)
            .map_err(|e| ModelError::Inference {
                name: self.name.clone(),
                message: e.to_string(),
            })?;
        let (out_shape, data) = outputs[self.output.as_str()]
            .try_extract_tensor::<f32>()
            .map_err(|e| ModelError::Inference {
                name: self.name.clone(),
                message: e.to_string(),
            })?;
        if out_shape.len() != 2
            || out_shape[0] as usize != batch
            || out_shape[1] as usize != self.dim
        {
            return Err(ModelError::Inference {
                name: self.name.clone(),
                message: format!(
                    "output shape {out_shape:?}, expected [{batch}, {}]",
                    self.dim
                ),
            });
        }
        Ok(data.chunks(self.dim).map(<[f32]>::to_vec).collect())
    }
}

/// The participant's words per frame: the embedding of the utterance being spoken at a
/// frame, or of the most recent one that ended at most `horizon_ns` before it.
///
/// Contract: built once per session from the time-sorted `events.jsonl` utterances of one
/// speaker (each embedded once); [`TextTrack::at`] is a pure lookup by frame time.
/// The text stage: embeds the participant's utterances as their events arrive.
pub struct TextStage {
    encoder: SharedEncoder,
    speaker: String,
    /// Whose transcripts are embedded (the other's are stored, not embedded).
    source: TranscriptSource,
    spec: ModalitySpec,
    retrieval: Option<Retrieval>,
    /// The phases entered so far, in time order.
    phases: Vec<(Nanos, crate::core::Phase)>,
    /// The session declares no phases: all it says is shared.
    unphased: bool,
}

/// Retrieval of stories from the bank for what the participant shares, while they share.
struct Retrieval {
    index: super::retrieval::StoryIndex,
    k: usize,
    /// Stories the participant saw in earlier sessions: never retrieved again.
    exclude: Vec<String>,
    shared: Vec<String>,
}

/// A retrieval made at a time: the top-k stories for what had been shared by then.
pub type RetrievalSet = (Nanos, Vec<StoryInPlay>);

pub use crate::core::StoryInPlay;

/// An embedded utterance: `[start_ns, end_ns)` and its vector.
pub type EmbeddedUtterance = (Nanos, Nanos, std::sync::Arc<Vec<f32>>);

impl TextStage {
    /// Embeds utterances of `speaker` (others are stored but carry no text vector).
    pub fn new(encoder: SharedEncoder, speaker: &str) -> Self {
        let spec = ModalitySpec::by_model(
            "text",
            (0..encoder.dim()).map(|i| format!("text_{i}")).collect(),
            encoder.producer().to_string(),
            1,
        );
        Self {
            encoder,
            speaker: speaker.to_string(),
            source: TranscriptSource::DialogueApp,
            spec,
            retrieval: None,
            phases: Vec::new(),
            unphased: false,
        }
    }

    /// Embeds the utterances of `source` only (default: the dialogue app's).
    pub fn set_source(&mut self, source: TranscriptSource) {
        self.source = source;
    }

    /// A session that declares no phases: everything the participant says is shared
    /// (retrieval runs on all of it).
    pub fn set_unphased(&mut self, unphased: bool) {
        self.unphased = unphased;
    }

    /// Whether `kind` is an utterance of the participant from the embedded source.
    fn is_embedded<'e>(&self, kind: &'e EventKind) -> Option<(u64, u64, &'e str)> {
        match kind {
            EventKind::Utterance {
                speaker,
                start_ms,
                end_ms,
                text,
                source,
                ..
            } if *speaker == self.speaker && *source == self.source => {
                Some((*start_ms, *end_ms, text.as_str()))
            }
            _ => None,
        }
    }

    /// Whether the participant is sharing their story at `t_ns`: in `story_share` by the
    /// phases known, or anywhere in a session without phases.
    fn sharing_at(&self, t_ns: Nanos) -> bool {
        match self.phases.iter().rev().find(|(at, _)| *at <= t_ns) {
            Some((_, phase)) => *phase == crate::core::Phase::StoryShare,
            None => self.unphased && self.phases.is_empty(),
        }
    }

    pub fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    /// The embeddings of the speaker's utterances among `events`, in event order.
    /// Retrieves the top `k` stories of `index` (embedded with this stage's encoder),
    /// leaving out `exclude`, for what the participant has said in `story_share` so far,
    /// after each such utterance.
    pub fn set_retrieval(
        &mut self,
        index: super::retrieval::StoryIndex,
        k: usize,
        exclude: Vec<String>,
    ) {
        self.retrieval = Some(Retrieval {
            index,
            k,
            exclude,
            shared: Vec::new(),
        });
    }

    /// The retrievals `events` (time-sorted, after those seen before) lead to: one after
    /// each utterance of the participant in `story_share`, for all they have shared since
    /// the phase began.
    pub fn retrieve(&mut self, events: &[Event]) -> Result<Vec<RetrievalSet>, ModelError> {
        for e in events {
            if let EventKind::Phase { phase } = e.kind {
                // Phases arrive in time order; an utterance's phase is the one at its stamp.
                let at = self.phases.partition_point(|(t, _)| *t <= e.t_ns);
                self.phases.insert(at, (e.t_ns, phase));
            }
        }
        if self.retrieval.is_none() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for e in events {
            let Some((_, _, text)) = self.is_embedded(&e.kind) else {
                continue;
            };
            if !self.sharing_at(e.t_ns) {
                continue;
            }
            let text = text.to_string();
            let Some(r) = self.retrieval.as_mut() else {
                break;
            };
            r.shared.push(text);
            let query = r.shared.join(" ");
            let q = self
                .encoder
                .embed(&[query.as_str()])?
                .into_iter()
                .next()
                .unwrap_or_default();
            let set = r
                .index
                .top_k(&q, r.k, &r.exclude)
                .into_iter()
                .filter_map(|hit| {
                    let (title, v) = r.index.story(&hit.id)?;
                    Some(StoryInPlay {
                        story_id: hit.id.clone(),
                        title: title.to_string(),
                        shown_ns: e.t_ns,
                        embedding: v.to_vec(),
                        retrieved: true,
                    })
                })
                .collect();
            out.push((e.t_ns, set));
        }
        Ok(out)
    }

    /// Embeds the stories shown among `events` (title and text, as the bank does), so the
    /// fusion stage can compare a window with each story in play.
    pub fn embed_stories(&mut self, events: &[Event]) -> Result<Vec<StoryInPlay>, ModelError> {
        let mut out = Vec::new();
        for e in events {
            if let EventKind::StoryShown {
                story_id,
                title,
                text,
            } = &e.kind
            {
                let input = super::retrieval::presented_text(title, text);
                let v = self
                    .encoder
                    .embed(&[input.as_str()])?
                    .into_iter()
                    .next()
                    .unwrap_or_default();
                out.push(StoryInPlay {
                    story_id: story_id.clone(),
                    title: title.clone(),
                    shown_ns: e.t_ns,
                    embedding: v,
                    retrieved: false,
                });
            }
        }
        Ok(out)
    }

    pub fn embed_utterances(
        &mut self,
        events: &[Event],
    ) -> Result<Vec<EmbeddedUtterance>, ModelError> {
        let mut out = Vec::new();
        for e in events {
            let Some((start_ms, end_ms, text)) = self.is_embedded(&e.kind) else {
                continue;
            };
            let text = text.to_string();
            let v = self
                .encoder
                .embed(&[text.as_str()])?
                .into_iter()
                .next()
                .unwrap_or_default();
            out.push((
                start_ms.saturating_mul(1_000_000),
                end_ms.saturating_mul(1_000_000),
                std::sync::Arc::new(v),
            ));
        }
        Ok(out)
    }
}

pub struct TextTrack {
    /// (start, end, embedding), sorted by start (equal starts in arrival order).
    spans: Vec<(Nanos, Nanos, std::sync::Arc<Vec<f32>>)>,
    horizon_ns: Nanos,
    /// Every utterance event stamped at or before this time has been added.
    known_until_ns: Option<Nanos>,
    ended: bool,
}

impl TextTrack {
    /// An empty track: nothing known yet. `horizon_ns`: how long an utterance's vector
    /// stays after it ended.
    pub fn new(horizon_ns: Nanos) -> Self {
        Self {
            spans: Vec::new(),
            horizon_ns,
            known_until_ns: None,
            ended: false,
        }
    }

    /// Adds an utterance spoken over `[start_ns, end_ns)`.
    pub fn push(&mut self, start_ns: Nanos, end_ns: Nanos, v: std::sync::Arc<Vec<f32>>) {
        let at = self.spans.partition_point(|s| s.0 <= start_ns);
        self.spans.insert(at, (start_ns, end_ns, v));
    }

    /// Every utterance event stamped at or before `t_ns` has been added.
    pub fn known_until(&mut self, t_ns: Nanos) {
        self.known_until_ns = Some(self.known_until_ns.map_or(t_ns, |k| k.max(t_ns)));
    }

    /// No more utterances will come.
    pub fn end(&mut self) {
        self.ended = true;
    }

    /// Whether the track is complete up to `t_ns` (a lookup there cannot change later).
    pub fn is_known_at(&self, t_ns: Nanos) -> bool {
        self.ended || self.known_until_ns.is_some_and(|k| k >= t_ns)
    }

    /// Utterances in the track.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The text vector at `t_ns`, if any.
    pub fn at(&self, t_ns: Nanos) -> Option<&[f32]> {
        // Utterances that started by t; the latest-starting one being spoken wins, else the
        // most recently ended within the horizon.
        let started = self.spans.partition_point(|s| s.0 <= t_ns);
        let candidates = &self.spans[..started];
        if let Some(s) = candidates.iter().rev().find(|s| t_ns < s.1) {
            return Some(&s.2);
        }
        candidates
            .iter()
            .filter(|s| s.1 <= t_ns && t_ns - s.1 <= self.horizon_ns)
            .max_by_key(|s| s.1)
            .map(|s| s.2.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn track(spans: &[(u64, u64, f32)], horizon_ms: u64) -> TextTrack {
        let mut t = TextTrack::new(horizon_ms * 1_000_000);
        for &(s, e, v) in spans {
            t.push(s * 1_000_000, e * 1_000_000, Arc::new(vec![v]));
        }
        t
    }

    #[test]
    fn spoken_utterance_then_recent_one_within_the_horizon() {
        let t = track(&[(1000, 2000, 1.0), (5000, 9000, 2.0)], 1500);
        let at = |ms: u64| t.at(ms * 1_000_000).map(|v| v[0]);
        assert_eq!(at(500), None);
        assert_eq!(at(1000), Some(1.0));
        assert_eq!(at(1999), Some(1.0));
        assert_eq!(at(3500), Some(1.0));
        assert_eq!(at(3501), None);
        assert_eq!(at(6000), Some(2.0));
        assert_eq!(at(20000), None);
    }

    #[test]
    fn overlapping_utterances_take_the_latest_started() {
        let t = track(&[(0, 5000, 1.0), (2000, 3000, 2.0)], 0);
        assert_eq!(t.at(2500 * 1_000_000).map(|v| v[0]), Some(2.0));
        assert_eq!(t.at(4000 * 1_000_000).map(|v| v[0]), Some(1.0));
    }

    /// Issue 43: a 210 kB `recommend` text cost its length in CPU. Cut before tokenising,
    /// it embeds exactly as the tokenizer's own truncation would.
    #[test]
    fn a_text_past_the_window_embeds_as_its_beginning() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        let manifest = crate::models::manifest::Manifest::load(&dir).unwrap();
        let entry = manifest.get("all-MiniLM-L6-v2", &dir).unwrap();
        let mut encoder = SentenceEncoder::open(&dir, entry, None).unwrap();
        let long = "I remember the summer my grandmother taught me to swim. ".repeat(4000);
        assert!(long.len() > 200_000);
        let cut = within_window(&long);
        assert!(
            cut.len() < long.len()
                && cut.chars().filter(|c| !c.is_whitespace()).count() == MAX_INPUT_CHARS
        );
        let beginning = &long[..3000];
        let a = encoder.embed(&[long.as_str()]).unwrap();
        let b = encoder.embed(&[beginning]).unwrap();
        assert_eq!(a, b);
        assert_eq!(within_window("short"), "short");
        let spaced = format!("{}{}", " ".repeat(100_000), "words after spaces");
        assert_eq!(within_window(&spaced), spaced.as_str());
    }
}
