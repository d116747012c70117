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

use crate::models::manifest::ModelEntry;
use crate::models::{onnx, ModelError};

/// Tokens per text at most (the model's `max_seq_length`).
pub const MAX_TOKENS: usize = 256;

pub struct SentenceEncoder {
    name: String,
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
        let session = onnx::open_session(&entry.name, &path, 1, onnxruntime_library)?;
        let output = entry
            .outputs
            .first()
            .map(|o| o.name.clone())
            .unwrap_or_else(|| "sentence_embedding".into());
        Ok(Self {
            name: entry.name.clone(),
            session,
            tokenizer,
            dim: entry.output_dim,
            output,
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// One L2-normalised embedding per text. Each text runs on its own: with int8 dynamic
    /// quantisation the activation scales are taken over the whole batch, so batching texts
    /// (and their padding) together would make an embedding depend on its neighbours.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out = Vec::with_capacity(texts.len());
        for text in texts {
            out.extend(self.embed_batch(&[text])?);
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

/// Cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa > 0.0 && bb > 0.0 {
        ab / (aa.sqrt() * bb.sqrt())
    } else {
        0.0
    }
}
