//! ONNX-exported fusion models (contract v1) as predictors.
//!
//! Contract v1: one input per modality of the model's subset, named as the store names
//! the modality, `<name> [B,T,F]` float32, with `<name>_mask [B,T]` float32 (1 = present,
//! absent frames are zeros); output `z [B,D]` in the sentence encoder's space. Feature
//! normalisation lives inside the graph. `metadata_props`: `empathic.contract` = "1",
//! `empathic.id`, `empathic.family`, `empathic.modalities` (comma-separated),
//! `empathic.<name>.dims` and `empathic.<name>.layout_version` per modality (and, when
//! present, `empathic.<name>.producer`: the model or stage that made the features the model
//! was trained on, which must equal the session's; a text model trained on another sentence
//! encoder, or an appearance model on another CNN, would read features it never saw),
//! `empathic.window_frames`, `empathic.encoder`, `empathic.population_map`
//! ("intercept,slope" from training), `empathic.synthetic` ("true" for a model trained on
//! synthetic data: not an empathy model), `empathic.training` (provenance). Before any
//! window, [`OnnxPredictor::check_layout`] compares the declared modalities with the
//! session's and refuses the first difference, naming the modality and both values. A
//! window where every modality of the subset is wholly absent is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ort::session::Session;
use ort::value::TensorRef;

use super::{FusionError, PopulationMap, Predictor, Representation, WindowInput};
use crate::models::{onnx, ModelError};
use crate::windows::ModalityLayout;

/// The contract version this build runs.
pub const CONTRACT_VERSION: &str = "1";

/// What a model declares for one of its modalities.
#[derive(Debug, Clone, PartialEq)]
struct Declared {
    name: String,
    dims: usize,
    layout_version: u32,
    producer: Option<String>,
}

/// A fusion model file under contract v1.
pub struct OnnxPredictor {
    id: String,
    path: PathBuf,
    session: Session,
    modalities: Vec<Declared>,
    window_frames: usize,
    map: PopulationMap,
    synthetic: bool,
}

fn contract(path: &Path, message: String) -> ModelError {
    ModelError::Shape {
        name: path.display().to_string(),
        path: path.to_path_buf(),
        message: format!("fusion contract v{CONTRACT_VERSION}: {message}"),
    }
}

impl OnnxPredictor {
    /// Opens `path` and reads its contract metadata (a model without it is refused).
    pub fn open(path: &Path, onnxruntime_library: Option<&Path>) -> Result<Self, ModelError> {
        let name = path.display().to_string();
        let session = onnx::open_session(&name, path, 1, onnxruntime_library)?;
        let meta = session
            .metadata()
            .map_err(|e| contract(path, format!("cannot read metadata: {e}")))?;
        let get = |key: &str| -> Result<String, ModelError> {
            meta.custom(key)
                .ok_or_else(|| contract(path, format!("metadata `{key}` is missing")))
        };
        let version = get("empathic.contract")?;
        if version != CONTRACT_VERSION {
            return Err(contract(
                path,
                format!("the model is of contract version {version}"),
            ));
        }
        let parse = |key: &str| -> Result<usize, ModelError> {
            let v = get(key)?;
            v.parse()
                .map_err(|_| contract(path, format!("metadata `{key}` = `{v}` is not a count")))
        };
        let mut modalities = Vec::new();
        // Any modality name: whether the session has it is `check_layout`'s question, so a
        // new modality (blendshapes, say) needs no change here.
        for m in get("empathic.modalities")?.split(',').map(str::trim) {
            modalities.push(Declared {
                name: m.to_string(),
                dims: parse(&format!("empathic.{m}.dims"))?,
                layout_version: parse(&format!("empathic.{m}.layout_version"))? as u32,
                producer: meta.custom(&format!("empathic.{m}.producer")),
            });
        }
        let map_text = get("empathic.population_map")?;
        let map: Vec<f64> = map_text
            .split(',')
            .map(|x| x.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                contract(
                    path,
                    format!("population_map `{map_text}` is not two numbers"),
                )
            })?;
        let [intercept, slope] = map[..] else {
            return Err(contract(
                path,
                format!("population_map `{map_text}` is not two numbers"),
            ));
        };
        let window_frames = parse("empathic.window_frames")?;
        let synthetic = get("empathic.synthetic")? == "true";
        let id = get("empathic.id")?;
        drop(meta);
        Ok(Self {
            id,
            path: path.to_path_buf(),
            session,
            modalities,
            window_frames,
            map: PopulationMap { intercept, slope },
            synthetic,
        })
    }

    fn run(&mut self, input: &WindowInput<'_>) -> Result<Option<Representation>, String> {
        let t = input.window.frames.len();
        let mut tensors = Vec::new();
        let mut coverage = BTreeMap::new();
        let mut any = false;
        for m in &self.modalities {
            let matrix = input
                .matrix(&m.name)
                .ok_or_else(|| format!("the window has no `{}`", m.name))?;
            coverage.insert(m.name.to_string(), matrix.coverage());
            any |= matrix.mask.iter().any(|p| *p);
            let mask: Vec<f32> = matrix
                .mask
                .iter()
                .map(|p| f32::from(u8::from(*p)))
                .collect();
            tensors.push((m.name.as_str(), matrix.values, mask, m.dims));
        }
        if !any {
            return Ok(None);
        }
        let mut inputs: Vec<(String, ort::session::SessionInputValue<'_>)> = Vec::new();
        for (name, values, mask, dims) in &tensors {
            let v = TensorRef::from_array_view(([1usize, t, *dims], values.as_slice()))
                .map_err(|e| e.to_string())?;
            let k = TensorRef::from_array_view(([1usize, t], mask.as_slice()))
                .map_err(|e| e.to_string())?;
            inputs.push((name.to_string(), v.into()));
            inputs.push((format!("{name}_mask"), k.into()));
        }
        let outputs = self.session.run(inputs).map_err(|e| e.to_string())?;
        let (_, z) = outputs["z"]
            .try_extract_tensor::<f32>()
            .map_err(|e| e.to_string())?;
        Ok(Some(Representation {
            z: z.to_vec(),
            coverage,
        }))
    }
}

impl Predictor for OnnxPredictor {
    fn id(&self) -> &str {
        &self.id
    }

    fn synthetic(&self) -> bool {
        self.synthetic
    }

    fn modalities(&self) -> Vec<String> {
        self.modalities.iter().map(|m| m.name.clone()).collect()
    }

    fn check_layout(&self, layout: &ModalityLayout) -> Result<(), FusionError> {
        let mismatch = |m: &Declared, problem: String| FusionError::Layout {
            predictor: format!("{} ({})", self.id, self.path.display()),
            modality: m.name.clone(),
            problem,
        };
        for m in &self.modalities {
            let Some(id) = layout.id(&m.name) else {
                return Err(mismatch(m, "the session does not have it".into()));
            };
            let spec = &layout.get(id).spec;
            if spec.dims() != m.dims {
                return Err(mismatch(
                    m,
                    format!(
                        "the model takes {} values, the session has {}",
                        m.dims,
                        spec.dims()
                    ),
                ));
            }
            if spec.layout_version != m.layout_version {
                return Err(mismatch(
                    m,
                    format!(
                        "the model takes layout version {}, the session has {} (from {})",
                        m.layout_version, spec.layout_version, spec.producer
                    ),
                ));
            }
            if let Some(producer) = m.producer.as_ref().filter(|p| **p != spec.producer) {
                return Err(mismatch(
                    m,
                    format!(
                        "the model was trained on features from {producer}, the session's come from {}",
                        spec.producer
                    ),
                ));
            }
        }
        Ok(())
    }

    fn represent(&mut self, input: &WindowInput<'_>) -> Option<Representation> {
        if input.window.frames.len() != self.window_frames {
            tracing::warn!(model = %self.id, frames = input.window.frames.len(), expected = self.window_frames, "window length differs from the model's; skipped");
            return None;
        }
        match self.run(input) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(model = %self.id, window = input.window.index, "fusion model failed: {e}");
                None
            }
        }
    }

    fn population_map(&self) -> PopulationMap {
        self.map
    }
}
