//! `empathic models verify`: every model in the manifest is checked end to end.
//!
//! Contract: for each model, in manifest order: the file and tokenizer exist with the
//! manifest's sha256; ONNX Runtime loads the file; its inputs and outputs have the
//! manifest's names, element types, ranks and fixed dimensions; and its known-answer test
//! passes (sentence encoders: cosine to the reference embeddings of the original model).
//! Every model is checked even when an earlier one fails; the first error is returned.

use std::path::Path;

use ort::value::ValueType;

use crate::features::appearance::{test_pattern, AppearanceEncoder};
use crate::features::face::models::BlendshapeModel;
use crate::features::text::SentenceEncoder;
use crate::models::manifest::{
    Dim, KnownAnswer, Manifest, ModelEntry, ModelKind, TensorSpec, Weights,
};
use crate::models::{onnx, ModelError};

/// The cosine of a model's output to its reference; 0 (a failed known answer) when either
/// is zero or their lengths differ.
fn cosine(a: &[f32], b: &[f32]) -> f64 {
    crate::core::cosine(a, b).unwrap_or(0.0)
}

/// What one model's verification found.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReport {
    pub name: String,
    pub result: Result<String, String>,
}

/// Verifies every model in `dir/MODELS.toml`.
pub fn verify_all(
    dir: &Path,
    onnxruntime_library: Option<&Path>,
) -> Result<Vec<ModelReport>, ModelError> {
    let manifest = Manifest::load(dir)?;
    Ok(manifest
        .models
        .iter()
        .map(|m| {
            let result = if !m.shipped && !m.path(dir).exists() {
                Ok(format!(
                    "not installed (optional, not committed; built by {})",
                    m.built_by.split(':').next().unwrap_or(&m.built_by)
                ))
            } else {
                verify_one(dir, m, onnxruntime_library).map_err(|e| e.to_string())
            };
            ModelReport {
                name: m.name.clone(),
                result,
            }
        })
        .collect())
}

fn verify_one(
    dir: &Path,
    m: &ModelEntry,
    onnxruntime_library: Option<&Path>,
) -> Result<String, ModelError> {
    m.check_files(dir)?;
    let path = m.path(dir);
    let session = onnx::open_session(&m.name, &path, 1, onnxruntime_library)?;
    let shape_err = |message: String| ModelError::Shape {
        name: m.name.clone(),
        path: path.clone(),
        message,
    };
    check_outlets(
        "input",
        session.inputs().iter().map(|o| (o.name(), o.dtype())),
        &m.inputs,
    )
    .map_err(shape_err)?;
    check_outlets(
        "output",
        session.outputs().iter().map(|o| (o.name(), o.dtype())),
        &m.outputs,
    )
    .map_err(shape_err)?;
    drop(session);
    if m.kind == ModelKind::FusionModel {
        return fusion_known_answer(dir, m, onnxruntime_library);
    }
    let Some(ka) = &m.known_answer else {
        return Ok(format!(
            "sha256, load and shapes ok ({:?} weights, no known answer)",
            m.weights
        ));
    };
    let reference: serde_json::Value = std::fs::read_to_string(dir.join(&ka.file))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|message| ModelError::KnownAnswer {
            name: m.name.clone(),
            path: dir.join(&ka.file),
            message,
        })?;
    match m.kind {
        ModelKind::SentenceEncoder => {
            let texts: Vec<String> = serde_json::from_value(reference["texts"].clone())
                .map_err(|e| known(m, dir, &ka.file, e.to_string()))?;
            let expected: Vec<Vec<f32>> = serde_json::from_value(reference["embeddings"].clone())
                .map_err(|e| known(m, dir, &ka.file, e.to_string()))?;
            let mut encoder = SentenceEncoder::open(dir, m, onnxruntime_library)?;
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let got = encoder.embed(&refs)?;
            let worst = got
                .iter()
                .zip(&expected)
                .map(|(a, b)| cosine(a, b))
                .fold(f64::INFINITY, f64::min);
            if got.len() != expected.len() || worst < ka.min_cosine {
                return Err(known(
                    m,
                    dir,
                    &ka.file,
                    format!(
                        "lowest cosine to the reference {worst:.5} < {} over {} texts",
                        ka.min_cosine,
                        texts.len()
                    ),
                ));
            }
            Ok(format!(
                "sha256, load, shapes ok; {} reference texts, lowest cosine {worst:.5} (>= {})",
                texts.len(),
                ka.min_cosine
            ))
        }
        ModelKind::FaceBlendshapes => {
            let c = points_known_answer(dir, m, &reference, onnxruntime_library)
                .map_err(|e| known(m, dir, &ka.file, e))?;
            at_least(m, dir, ka, c, true, "cosine", "point pattern cosine")
        }
        ModelKind::FaceDetector
        | ModelKind::FaceLandmarks
        | ModelKind::IrisLandmarks
        | ModelKind::PoseDetector
        | ModelKind::PoseLandmarks => {
            let worst = tensor_known_answer(dir, m, &reference, onnxruntime_library)
                .map_err(|e| known(m, dir, &ka.file, e))?;
            at_least(
                m,
                dir,
                ka,
                worst,
                true,
                "lowest output cosine",
                "test pattern lowest output cosine",
            )
        }
        ModelKind::FusionModel => unreachable!("handled above"),
        ModelKind::VoiceActivity => {
            let wave = reference_wave(&reference).map_err(|e| known(m, dir, &ka.file, e))?;
            let expected: Vec<f32> = serde_json::from_value(reference["probabilities"].clone())
                .map_err(|e| known(m, dir, &ka.file, e.to_string()))?;
            let mut vad =
                crate::features::speech::vad::SileroVad::open(&m.name, &path, onnxruntime_library)?;
            let got = vad.push(&wave)?;
            let c = cosine(&got, &expected);
            let worst = got
                .iter()
                .zip(&expected)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            at_least(
                m,
                dir,
                ka,
                c,
                got.len() == expected.len() && worst < 0.02,
                "cosine",
                &format!("chunk probabilities cosine (largest difference {worst:.4})"),
            )
        }
        ModelKind::SpeechEncoder => Ok(format!(
            "sha256, load and shapes ok (its known answer is the recogniser's, {:?} weights)",
            m.weights
        )),
        ModelKind::SpeechRecogniser => {
            let wave = reference_wave(&reference).map_err(|e| known(m, dir, &ka.file, e))?;
            let expected: Vec<i64> = serde_json::from_value(reference["tokens"].clone())
                .map_err(|e| known(m, dir, &ka.file, e.to_string()))?;
            let Some(vocabulary) = &m.tokenizer else {
                return Err(known(
                    m,
                    dir,
                    &ka.file,
                    "no `tokenizer` (vocabulary) in the manifest".into(),
                ));
            };
            let encoder = path.with_file_name(
                path.file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .replace(".decoder.", ".encoder."),
            );
            let mut asr = crate::features::speech::moonshine::Moonshine::open(
                &m.name,
                &encoder,
                &path,
                &dir.join(vocabulary),
                onnxruntime_library,
            )?;
            let got = asr.transcribe(&wave)?;
            if got.tokens != expected {
                return Err(known(
                    m,
                    dir,
                    &ka.file,
                    format!(
                        "tokens {:?} (\"{}\"), the reference has {expected:?}",
                        got.tokens, got.text
                    ),
                ));
            }
            Ok(format!(
                "sha256, load, shapes ok; the reference waveform gives the reference's {} tokens: \"{}\"",
                expected.len(),
                got.text
            ))
        }
        ModelKind::ImageEncoder => {
            let expected: Vec<f32> = serde_json::from_value(reference["features"].clone())
                .map_err(|e| known(m, dir, &ka.file, e.to_string()))?;
            let mut encoder = AppearanceEncoder::open(dir, m, onnxruntime_library)?;
            let got = encoder.run(&test_pattern(encoder.input_size()))?;
            let c = cosine(&got, &expected);
            let same_length = got.len() == expected.len();
            at_least(m, dir, ka, c, same_length, "cosine", "test pattern cosine")
        }
    }
}

/// Runs the blendshape model on the known-answer points (point `i` of 146 at
/// `(64 + 37 i mod 128, 64 + 53 i mod 128)` pixels) and returns the cosine between its output
/// and the reference's `outputs.blendshapes`.
fn points_known_answer(
    dir: &Path,
    m: &ModelEntry,
    reference: &serde_json::Value,
    onnxruntime_library: Option<&Path>,
) -> Result<f64, String> {
    let want: Vec<f32> = serde_json::from_value(reference["outputs"]["blendshapes"].clone())
        .map_err(|e| format!("the reference's outputs.blendshapes: {e}"))?;
    let input: Vec<f32> = (0..146usize)
        .flat_map(|i| [(64 + (37 * i) % 128) as f32, (64 + (53 * i) % 128) as f32])
        .collect();
    let got = BlendshapeModel::open(dir, m, onnxruntime_library)
        .and_then(|mut model| model.run_subset(&input))
        .map_err(|e| e.to_string())?;
    if got.len() != want.len() {
        return Err(format!(
            "blendshapes has {} values, the reference {}",
            got.len(),
            want.len()
        ));
    }
    Ok(cosine(&got, &want))
}

/// Runs an NHWC image model on the known-answer pattern
/// `((x*7 + y*13 + c*101) % 256) / 255` mapped to `[pattern_low, 1]` and returns the lowest
/// cosine between its outputs and the reference's `outputs`.
fn tensor_known_answer(
    dir: &Path,
    m: &ModelEntry,
    reference: &serde_json::Value,
    onnxruntime_library: Option<&Path>,
) -> Result<f64, String> {
    let lo = reference["pattern_low"]
        .as_f64()
        .ok_or("no pattern_low in the reference")? as f32;
    let expected: std::collections::BTreeMap<String, Vec<f32>> =
        serde_json::from_value(reference["outputs"].clone()).map_err(|e| e.to_string())?;
    let side = match m.inputs.first().map(|i| i.shape.as_slice()) {
        Some([_, Dim::Fixed(h), Dim::Fixed(w), Dim::Fixed(3)]) if h == w => *h as usize,
        _ => return Err("the manifest input is not a fixed square NHWC RGB image".into()),
    };
    let mut input = Vec::with_capacity(side * side * 3);
    for y in 0..side {
        for x in 0..side {
            for c in 0..3 {
                let v = ((x * 7 + y * 13 + c * 101) % 256) as f32 / 255.0;
                input.push(lo + (1.0 - lo) * v);
            }
        }
    }
    let mut session = onnx::open_session(&m.name, &m.path(dir), 1, onnxruntime_library)
        .map_err(|e| e.to_string())?;
    let tensor =
        ort::value::TensorRef::from_array_view(([1usize, side, side, 3], input.as_slice()))
            .map_err(|e| e.to_string())?;
    let outputs = session
        .run(ort::inputs!["image" => tensor])
        .map_err(|e| e.to_string())?;
    let mut worst = f64::INFINITY;
    for (name, want) in &expected {
        let (_, got) = outputs[name.as_str()]
            .try_extract_tensor::<f32>()
            .map_err(|e| format!("output {name}: {e}"))?;
        if got.len() != want.len() {
            return Err(format!(
                "output {name} has {} values, the reference {}",
                got.len(),
                want.len()
            ));
        }
        worst = worst.min(cosine(got, want));
    }
    Ok(worst)
}

/// The verdict on a known answer: `figure` (`what` in the messages) must reach the entry's
/// `min_cosine`, and the output its reference's length (`comparable`).
fn at_least(
    m: &ModelEntry,
    dir: &Path,
    ka: &KnownAnswer,
    figure: f64,
    comparable: bool,
    what: &str,
    passed: &str,
) -> Result<String, ModelError> {
    if !comparable || figure < ka.min_cosine {
        return Err(known(
            m,
            dir,
            &ka.file,
            format!("{what} to the reference {figure:.6} < {}", ka.min_cosine),
        ));
    }
    Ok(format!(
        "sha256, load, shapes ok; {passed} {figure:.6} (>= {})",
        ka.min_cosine
    ))
}

fn known(m: &ModelEntry, dir: &Path, file: &str, message: String) -> ModelError {
    ModelError::KnownAnswer {
        name: m.name.clone(),
        path: dir.join(file),
        message,
    }
}

fn check_outlets<'a>(
    what: &str,
    actual: impl Iterator<Item = (&'a str, &'a ValueType)>,
    expected: &[TensorSpec],
) -> Result<(), String> {
    let actual: Vec<(&str, &ValueType)> = actual.collect();
    if actual.len() != expected.len() {
        return Err(format!(
            "{} {what}s in the file, {} in the manifest",
            actual.len(),
            expected.len()
        ));
    }
    for ((name, ty), spec) in actual.iter().zip(expected) {
        if *name != spec.name {
            return Err(format!(
                "{what} `{name}` where the manifest has `{}`",
                spec.name
            ));
        }
        let ValueType::Tensor { ty, shape, .. } = ty else {
            return Err(format!("{what} `{name}` is not a tensor"));
        };
        let dtype = format!("{ty:?}").to_lowercase();
        if dtype != spec.dtype {
            return Err(format!(
                "{what} `{name}` is {dtype}, the manifest says {}",
                spec.dtype
            ));
        }
        if shape.len() != spec.shape.len() {
            return Err(format!(
                "{what} `{name}` has rank {}, the manifest says {}",
                shape.len(),
                spec.shape.len()
            ));
        }
        for (i, (&got, want)) in shape.iter().zip(&spec.shape).enumerate() {
            if let Dim::Fixed(want) = want {
                if got != *want {
                    return Err(format!(
                        "{what} `{name}` dimension {i} is {got}, the manifest says {want}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A fusion model: its contract metadata, then `z` on the fixed windows its training tool
/// saved (PyTorch's output at export), in one batch and one window at a time.
fn fusion_known_answer(
    dir: &Path,
    m: &ModelEntry,
    onnxruntime_library: Option<&Path>,
) -> Result<String, ModelError> {
    use crate::fusion::onnx_model::{OnnxPredictor, RawWindow};
    use ndarray_npy::ReadNpyExt;
    let mut model = OnnxPredictor::open(&m.path(dir), onnxruntime_library)?;
    let Some(ka) = &m.known_answer else {
        return Ok(format!(
            "sha256, load and contract ok ({:?} weights, no known answer)",
            m.weights
        ));
    };
    let z_path = dir.join(&ka.file);
    let folder = z_path.parent().unwrap_or(dir).to_path_buf();
    let read3 = |path: &Path| -> Result<ndarray::Array3<f32>, ModelError> {
        std::fs::File::open(path)
            .map_err(|e| e.to_string())
            .and_then(|f| ndarray::Array3::<f32>::read_npy(f).map_err(|e| e.to_string()))
            .map_err(|e| known(m, dir, &ka.file, format!("{}: {e}", path.display())))
    };
    let read2 = |path: &Path| -> Result<ndarray::Array2<f32>, ModelError> {
        std::fs::File::open(path)
            .map_err(|e| e.to_string())
            .and_then(|f| ndarray::Array2::<f32>::read_npy(f).map_err(|e| e.to_string()))
            .map_err(|e| known(m, dir, &ka.file, format!("{}: {e}", path.display())))
    };
    let expected = read2(&z_path)?;
    let n = expected.nrows();
    let mut windows = vec![
        RawWindow {
            modalities: Vec::new()
        };
        n
    ];
    for (name, _) in model.inputs() {
        let values = read3(&folder.join(format!("window.{name}.npy")))?;
        let mask = read2(&folder.join(format!("window.{name}_mask.npy")))?;
        for (i, w) in windows.iter_mut().enumerate() {
            w.modalities.push((
                values
                    .index_axis(ndarray::Axis(0), i)
                    .iter()
                    .copied()
                    .collect(),
                mask.row(i).to_vec(),
            ));
        }
    }
    let batched = model
        .infer(&windows)
        .map_err(|e| known(m, dir, &ka.file, e))?;
    let mut single = Vec::new();
    for w in &windows {
        let mut z = model
            .infer(std::slice::from_ref(w))
            .map_err(|e| known(m, dir, &ka.file, e))?;
        single.push(z.pop().unwrap_or_default());
    }
    let mut worst_cos = f64::INFINITY;
    let mut max_diff = 0f32;
    for got in [&batched, &single] {
        for (g, e) in got.iter().zip(expected.rows()) {
            let e = e.to_vec();
            worst_cos = worst_cos.min(cosine(g, &e));
            max_diff = g
                .iter()
                .zip(&e)
                .map(|(a, b)| (a - b).abs())
                .fold(max_diff, f32::max);
        }
    }
    if batched.len() != n || worst_cos < ka.min_cosine {
        return Err(known(
            m,
            dir,
            &ka.file,
            format!(
                "z on the {n} reference windows: lowest cosine to PyTorch's {worst_cos:.6} < {}",
                ka.min_cosine
            ),
        ));
    }
    Ok(format!(
        "sha256, load, contract ok; {n} reference windows (batched and one by one): lowest cosine to PyTorch {worst_cos:.6} (>= {}), max abs diff {max_diff:.1e}{}",
        ka.min_cosine,
        if m.weights == Weights::Synthetic {
            "; synthetic: not an empathy model"
        } else {
            ""
        }
    ))
}

/// The known-answer waveform of a speech model's reference (`pcm_s16le_16k_base64`), as
/// samples in [-1, 1].
fn reference_wave(reference: &serde_json::Value) -> Result<Vec<f32>, String> {
    use base64::Engine;
    let text = reference["pcm_s16le_16k_base64"]
        .as_str()
        .ok_or("no `pcm_s16le_16k_base64`")?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("the waveform is not base64: {e}"))?;
    Ok(bytes
        .chunks_exact(2)
        .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
        .collect())
}
