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
//! `empathic.window_frames`, `empathic.population_map`
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
use crate::core::ModalityLayout;
use crate::models::{onnx, ModelError};

/// The contract version this build runs.
pub const CONTRACT_VERSION: &str = "1";

/// What a model declares for one of its modalities.
#[derive(Debug, Clone, PartialEq)]
struct Declared {
    name: String,
    dims: usize,
    layout_version: u32,
    producer: Option<String>,
    /// `empathic.<name>.baseline`: the training population's mean vector (base64 of
    /// little-endian float32), what a left-out cue group becomes in an attribution.
    baseline: Option<Vec<f32>>,
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
    /// `empathic.training` as written by the training tool (JSON), when present.
    training: Option<String>,
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
                baseline: match meta.custom(&format!("empathic.{m}.baseline")) {
                    Some(text) => Some(decode_baseline(&text).map_err(|e| {
                        contract(path, format!("metadata `empathic.{m}.baseline`: {e}"))
                    })?),
                    None => None,
                },
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
        let training = meta.custom("empathic.training");
        drop(meta);
        Ok(Self {
            id,
            path: path.to_path_buf(),
            session,
            modalities,
            window_frames,
            map: PopulationMap { intercept, slope },
            synthetic,
            training,
        })
    }

    /// The participants the model was fitted on (its training and validation splits), when
    /// its training provenance names them (`tools/fusion/train.py` writes
    /// `split.train_participants` and `split.validation_participants`); None when unknown.
    pub fn fitted_participants(&self) -> Option<Vec<String>> {
        let training: serde_json::Value = serde_json::from_str(self.training.as_deref()?).ok()?;
        let split = training.get("split")?;
        let mut out = Vec::new();
        for key in ["train_participants", "validation_participants"] {
            for p in split.get(key)?.as_array()? {
                out.push(p.as_str()?.to_string());
            }
        }
        Some(out)
    }

    /// The model's modalities, in input order, with their widths.
    pub fn inputs(&self) -> Vec<(String, usize)> {
        self.modalities
            .iter()
            .map(|m| (m.name.clone(), m.dims))
            .collect()
    }

    /// The window length the model was trained on, in frames.
    pub fn window_frames(&self) -> usize {
        self.window_frames
    }

    /// Runs the graph on a batch of windows given as raw arrays: per window, per modality
    /// (in [`Self::inputs`] order), `values [T*F]` and `mask [T]` (1 = present). Returns
    /// `z` per window. For the runtime (`represent_batch`), `models verify`'s known answer and
    /// benchmarks alike.
    pub fn infer(&mut self, windows: &[RawWindow]) -> Result<Vec<Vec<f32>>, String> {
        let t = self.window_frames;
        run_batch(
            &mut self.session,
            &self.modalities,
            t,
            windows.len(),
            |k, m, w, values, mask| {
                let (v, k_mask) = windows[w]
                    .modalities
                    .get(k)
                    .ok_or("a window lacks a modality")?;
                if v.len() != t * m.dims || k_mask.len() != t {
                    return Err(format!(
                        "`{}`: {} values and {} mask entries, the model takes {t} x {} and {t}",
                        m.name,
                        v.len(),
                        k_mask.len(),
                        m.dims
                    ));
                }
                values.extend_from_slice(v);
                mask.extend_from_slice(k_mask);
                Ok(())
            },
        )
    }

    /// The raw arrays of one window, and the coverage of each modality; `None` when every
    /// modality of the subset is wholly absent (skipped) or the window's length differs.
    fn raw(&self, input: &WindowInput<'_>) -> Result<Option<(RawWindow, Coverage)>, String> {
        if input.window.frames.len() != self.window_frames {
            tracing::warn!(model = %self.id, frames = input.window.frames.len(), expected = self.window_frames, "window length differs from the model's; skipped");
            return Ok(None);
        }
        let mut coverage = BTreeMap::new();
        let mut any = false;
        let mut modalities = Vec::new();
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
            modalities.push((matrix.values, mask));
        }
        Ok(any.then_some((RawWindow { modalities }, coverage)))
    }
}

/// Runs `session` on a batch of `b` windows of `t` frames whose inputs `fill` writes
/// straight into the batch's buffers: `fill(k, modality, w, values, mask)` appends window
/// `w`'s `t * dims` values and `t` mask entries of modality `k`. Returns `z` per window.
/// (An attribution's altered windows are written here without a copy of their own.)
fn run_batch(
    session: &mut Session,
    modalities: &[Declared],
    t: usize,
    b: usize,
    mut fill: impl FnMut(usize, &Declared, usize, &mut Vec<f32>, &mut Vec<f32>) -> Result<(), String>,
) -> Result<Vec<Vec<f32>>, String> {
    if b == 0 {
        return Ok(Vec::new());
    }
    let mut buffers = Vec::with_capacity(modalities.len());
    for (k, m) in modalities.iter().enumerate() {
        let mut values = Vec::with_capacity(b * t * m.dims);
        let mut mask = Vec::with_capacity(b * t);
        for w in 0..b {
            fill(k, m, w, &mut values, &mut mask)?;
            if values.len() != (w + 1) * t * m.dims || mask.len() != (w + 1) * t {
                return Err(format!(
                    "`{}`: window {w} does not fill {t} x {} values and {t} mask entries",
                    m.name, m.dims
                ));
            }
        }
        buffers.push((m.name.as_str(), m.dims, values, mask));
    }
    let mut inputs: Vec<(String, ort::session::SessionInputValue<'_>)> = Vec::new();
    for (name, dims, values, mask) in &buffers {
        let v = TensorRef::from_array_view(([b, t, *dims], values.as_slice()))
            .map_err(|e| e.to_string())?;
        let k = TensorRef::from_array_view(([b, t], mask.as_slice())).map_err(|e| e.to_string())?;
        inputs.push((name.to_string(), v.into()));
        inputs.push((format!("{name}_mask"), k.into()));
    }
    let outputs = session.run(inputs).map_err(|e| e.to_string())?;
    let (shape, z) = outputs["z"]
        .try_extract_tensor::<f32>()
        .map_err(|e| e.to_string())?;
    let d = shape.get(1).copied().unwrap_or(0).max(0) as usize;
    if shape.len() != 2 || shape[0] as usize != b || d == 0 {
        return Err(format!("output `z` has shape {shape:?}, not [{b}, D]"));
    }
    Ok(z.chunks(d).map(<[f32]>::to_vec).collect())
}

/// Appends window `raw`'s modality `k` (`m`) to the batch buffers `values` and `mask`,
/// altered as `variant` says: absent (zeros, mask 0), its listed column groups at the
/// model's baseline on present frames and its listed frames absent, or as it was.
fn append_altered(
    k: usize,
    m: &Declared,
    t: usize,
    raw: &RawWindow,
    variant: &super::explain::Variant,
    values: &mut Vec<f32>,
    mask: &mut Vec<f32>,
) -> Result<(), String> {
    use super::explain::ModalityEdit;
    let (v, k_mask) = raw.modalities.get(k).ok_or("a window lacks a modality")?;
    let (from, from_mask) = (values.len(), mask.len());
    match variant.get(k) {
        Some(ModalityEdit::Absent) => {
            values.resize(from + v.len(), 0.0);
            mask.resize(from_mask + k_mask.len(), 0.0);
        }
        Some(ModalityEdit::Partial {
            baseline_columns,
            absent_frames,
        }) => {
            values.extend_from_slice(v);
            mask.extend_from_slice(k_mask);
            let (values, mask) = (&mut values[from..], &mut mask[from_mask..]);
            if let Some(base) = m.baseline.as_ref().filter(|b| b.len() == m.dims) {
                for f in (0..t).filter(|&f| mask.get(f).is_some_and(|p| *p > 0.0)) {
                    let row = &mut values[f * m.dims..(f + 1) * m.dims];
                    for &c in baseline_columns {
                        row[c] = base[c];
                    }
                }
            }
            let frames = mask.len().min(t);
            for &f in absent_frames.iter().filter(|&&f| f < frames) {
                mask[f] = 0.0;
                values[f * m.dims..(f + 1) * m.dims].fill(0.0);
            }
        }
        _ => {
            values.extend_from_slice(v);
            mask.extend_from_slice(k_mask);
        }
    }
    Ok(())
}

type Coverage = BTreeMap<String, f64>;

/// A baseline vector from its metadata text: base64 of little-endian float32 values.
fn decode_baseline(text: &str) -> Result<Vec<f32>, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    if bytes.len() % 4 != 0 {
        return Err(format!("{} bytes, not float32 values", bytes.len()));
    }
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if v.iter().any(|x| !x.is_finite()) {
        return Err("a value is not finite".into());
    }
    Ok(v)
}

/// Windows altered for an attribution, at most this many to one model call.
const VARIANT_BATCH: usize = 16;

/// One window's inputs as raw arrays: per modality, values `[T*F]` and mask `[T]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RawWindow {
    pub modalities: Vec<(Vec<f32>, Vec<f32>)>,
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
        self.represent_batch(std::slice::from_ref(input))
            .pop()
            .flatten()
    }

    fn represent_batch(&mut self, inputs: &[WindowInput<'_>]) -> Vec<Option<Representation>> {
        let mut out: Vec<Option<Representation>> = vec![None; inputs.len()];
        let mut raws = Vec::new();
        let mut at = Vec::new();
        for (i, input) in inputs.iter().enumerate() {
            match self.raw(input) {
                Ok(Some((raw, coverage))) => {
                    raws.push(raw);
                    at.push((i, coverage));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(model = %self.id, window = input.window.index, error = %e, "window skipped");
                }
            }
        }
        match self.infer(&raws) {
            Ok(zs) => {
                for ((i, coverage), z) in at.into_iter().zip(zs) {
                    out[i] = Some(Representation { z, coverage });
                }
            }
            Err(e) => {
                tracing::warn!(model = %self.id, windows = raws.len(), error = %e, "model failed on the windows; skipped");
            }
        }
        out
    }

    fn population_map(&self) -> PopulationMap {
        self.map
    }

    fn baseline(&self, modality: &str) -> Option<&[f32]> {
        self.modalities
            .iter()
            .find(|m| m.name == modality)?
            .baseline
            .as_deref()
    }

    fn represent_variants(
        &mut self,
        input: &WindowInput<'_>,
        variants: &[super::explain::Variant],
    ) -> Option<Vec<Option<Vec<f32>>>> {
        let (raw, _) = self.raw(input).ok()??;
        let mut out = Vec::with_capacity(variants.len());
        let t = self.window_frames;
        for chunk in variants.chunks(VARIANT_BATCH) {
            let batch = run_batch(
                &mut self.session,
                &self.modalities,
                t,
                chunk.len(),
                |k, m, w, values, mask| append_altered(k, m, t, &raw, &chunk[w], values, mask),
            );
            match batch {
                Ok(zs) => out.extend(zs.into_iter().map(Some)),
                Err(e) => {
                    tracing::warn!(model = %self.id, window = input.window.index, error = %e, "attribution skipped");
                    return None;
                }
            }
        }
        Some(out)
    }
}
