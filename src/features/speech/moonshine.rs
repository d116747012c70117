//! Moonshine tiny-en: a waveform in, its words out, greedy.
//!
//! Contract: [`Moonshine::transcribe`] takes 16 kHz mono samples of one utterance (up to
//! about 30 s) and returns its text, the tokens and a confidence, the mean log-probability
//! of the tokens chosen. The encoder (`input_values` [1, N], `attention_mask` [1, N]) gives
//! `last_hidden_state` [1, T, 288]; the merged decoder runs once per token with its
//! key/value cache: step 0 without the cache branch from `<s>`, every later step with it,
//! feeding the last token and the decoder's own cache from the step before (the encoder's
//! cross-attention cache from step 0). It stops at `</s>` or after `6.5 tokens a second of
//! audio + 8` (a length guard against a decoder that repeats itself).

use std::borrow::Cow;
use std::path::Path;

use ort::session::{Session, SessionInputValue};
use ort::value::Tensor;

use super::tokenizer::{Vocabulary, BOS, EOS};
use crate::models::{onnx, ModelError};

/// Decoder layers, heads and head size of tiny-en.
const LAYERS: usize = 6;
const HEADS: usize = 8;
const HEAD_DIM: usize = 36;

/// One utterance, recognised.
#[derive(Debug, Clone, PartialEq)]
pub struct Recognised {
    pub text: String,
    pub tokens: Vec<i64>,
    /// Mean log-probability of the chosen tokens (0 is certain; `</s>` included).
    pub mean_logprob: f32,
}

pub struct Moonshine {
    name: String,
    encoder: Session,
    decoder: Session,
    vocabulary: Vocabulary,
    /// Whether the decoder takes `encoder_attention_mask`.
    decoder_takes_mask: bool,
}

/// A [1, heads, len, 36] cache tensor.
struct Cache {
    len: usize,
    data: Vec<f32>,
}

impl Moonshine {
    pub fn open(
        name: &str,
        encoder: &Path,
        decoder: &Path,
        vocabulary: &Path,
        onnxruntime_library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        let encoder = onnx::open_variable_session(name, encoder, 1, onnxruntime_library)?;
        let decoder = onnx::open_variable_session(name, decoder, 1, onnxruntime_library)?;
        let decoder_takes_mask = decoder
            .inputs()
            .iter()
            .any(|i| i.name() == "encoder_attention_mask");
        let vocabulary = Vocabulary::load(vocabulary).map_err(|message| ModelError::Load {
            name: name.to_string(),
            path: vocabulary.to_path_buf(),
            message,
        })?;
        Ok(Self {
            name: name.to_string(),
            encoder,
            decoder,
            vocabulary,
            decoder_takes_mask,
        })
    }

    fn fail(&self, message: impl Into<String>) -> ModelError {
        ModelError::Inference {
            name: self.name.clone(),
            message: message.into(),
        }
    }

    /// The words of `samples` (16 kHz mono).
    pub fn transcribe(&mut self, samples: &[f32]) -> Result<Recognised, ModelError> {
        // Below 0.1 s the encoder has nothing to attend to.
        if samples.len() < 1_600 {
            return Ok(Recognised {
                text: String::new(),
                tokens: Vec::new(),
                mean_logprob: 0.0,
            });
        }
        let n = samples.len();
        let (hidden, t, width) = {
            let input = Tensor::from_array(([1usize, n], samples.to_vec()))
                .map_err(|e| self.fail(e.to_string()))?;
            let mask = Tensor::from_array(([1usize, n], vec![1i64; n]))
                .map_err(|e| self.fail(e.to_string()))?;
            let out = self
                .encoder
                .run(ort::inputs!["input_values" => input, "attention_mask" => mask])
                .map_err(|e| ModelError::Inference {
                    name: self.name.clone(),
                    message: format!("encoder: {e}"),
                })?;
            let (shape, data) = out["last_hidden_state"]
                .try_extract_tensor::<f32>()
                .map_err(|e| ModelError::Inference {
                    name: self.name.clone(),
                    message: e.to_string(),
                })?;
            if shape.len() != 3 {
                return Err(ModelError::Inference {
                    name: self.name.clone(),
                    message: format!("encoder output shape {shape:?}"),
                });
            }
            (data.to_vec(), shape[1] as usize, shape[2] as usize)
        };
        let max_tokens = (n as f64 / 16_000.0 * 6.5).ceil() as usize + 8;
        let empty = || Cache {
            len: 0,
            data: Vec::new(),
        };
        // Per layer: decoder key, decoder value, encoder key, encoder value.
        let mut caches: Vec<[Cache; 4]> = (0..LAYERS)
            .map(|_| [empty(), empty(), empty(), empty()])
            .collect();
        let mut tokens = Vec::new();
        let mut logprob_sum = 0.0f64;
        let mut last = BOS;
        for step in 0..max_tokens {
            let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'static>)> = Vec::new();
            let tensor_f = |shape: Vec<usize>, data: Vec<f32>| {
                Tensor::from_array((shape, data)).map_err(|e| e.to_string())
            };
            let ids = Tensor::from_array(([1usize, 1], vec![last]))
                .map_err(|e| self.fail(e.to_string()))?;
            inputs.push(("input_ids".into(), ids.into()));
            inputs.push((
                "encoder_hidden_states".into(),
                tensor_f(vec![1, t, width], hidden.clone())
                    .map_err(|e| self.fail(e))?
                    .into(),
            ));
            if self.decoder_takes_mask {
                // Over the input samples, like the encoder's own mask: the decoder reduces it
                // to the encoder's frames itself (the strides of the encoder's convolutions).
                // A mask over the frames was reduced a second time, to one value (which
                // broadcast, by luck) below 9.4 s and to two or more, which fail, above.
                let m = Tensor::from_array(([1usize, n], vec![1i64; n]))
                    .map_err(|e| self.fail(e.to_string()))?;
                inputs.push(("encoder_attention_mask".into(), m.into()));
            }
            let branch = Tensor::from_array(([1usize], vec![step > 0]))
                .map_err(|e| self.fail(e.to_string()))?;
            inputs.push(("use_cache_branch".into(), branch.into()));
            for (layer, c) in caches.iter().enumerate() {
                for (k, part) in [
                    "decoder.key",
                    "decoder.value",
                    "encoder.key",
                    "encoder.value",
                ]
                .iter()
                .enumerate()
                {
                    let v = tensor_f(vec![1, HEADS, c[k].len, HEAD_DIM], c[k].data.clone())
                        .map_err(|e| self.fail(e))?;
                    inputs.push((format!("past_key_values.{layer}.{part}").into(), v.into()));
                }
            }
            let out = self
                .decoder
                .run(inputs)
                .map_err(|e| ModelError::Inference {
                    name: self.name.clone(),
                    message: format!("decoder step {step}: {e}"),
                })?;
            let (_, logits) =
                out["logits"]
                    .try_extract_tensor::<f32>()
                    .map_err(|e| ModelError::Inference {
                        name: self.name.clone(),
                        message: e.to_string(),
                    })?;
            let (best, logprob) = argmax_logprob(logits);
            for (layer, c) in caches.iter_mut().enumerate() {
                // The encoder's cache is made at step 0 and kept.
                let parts: &[(usize, &str)] = if step == 0 {
                    &[
                        (0, "decoder.key"),
                        (1, "decoder.value"),
                        (2, "encoder.key"),
                        (3, "encoder.value"),
                    ]
                } else {
                    &[(0, "decoder.key"), (1, "decoder.value")]
                };
                for &(k, part) in parts {
                    let (shape, data) = out[format!("present.{layer}.{part}").as_str()]
                        .try_extract_tensor::<f32>()
                        .map_err(|e| ModelError::Inference {
                            name: self.name.clone(),
                            message: format!("present.{layer}.{part}: {e}"),
                        })?;
                    c[k] = Cache {
                        len: shape.get(2).copied().unwrap_or(0) as usize,
                        data: data.to_vec(),
                    };
                }
            }
            logprob_sum += f64::from(logprob);
            tokens.push(best);
            if best == EOS {
                break;
            }
            last = best;
        }
        let mean_logprob = if tokens.is_empty() {
            0.0
        } else {
            (logprob_sum / tokens.len() as f64) as f32
        };
        Ok(Recognised {
            text: self.vocabulary.decode(&tokens),
            tokens,
            mean_logprob,
        })
    }
}

/// The most likely token and its log-probability (log-softmax of the logits).
fn argmax_logprob(logits: &[f32]) -> (i64, f32) {
    let (mut best, mut max) = (0usize, f32::NEG_INFINITY);
    for (i, &v) in logits.iter().enumerate() {
        if v > max {
            (best, max) = (i, v);
        }
    }
    let sum: f64 = logits.iter().map(|&v| f64::from(v - max).exp()).sum();
    (best as i64, -(sum.ln() as f32))
}
