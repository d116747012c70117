//! Appearance embedding per video frame: a CNN's globally pooled features through ONNX
//! Runtime (default EfficientNet-Lite0, 1280-d, real ImageNet weights; the paper used
//! ResNet50's 2048-d penultimate layer, which any ONNX image model in the manifest can stand
//! in for).
//!
//! Contract: the input is the whole frame (until the facial stage provides an aligned face
//! crop), resized to 224x224 with area interpolation, RGB, scaled as `(x - 127) / 128`,
//! NCHW float32. The output is the model's feature vector, present on every decoded frame.

use std::path::Path;

use opencv::core::{Mat, Size};
use opencv::imgproc;
use opencv::prelude::*;
use ort::session::Session;
use ort::value::TensorRef;

use super::{FrameStage, ModalitySpec, StageError};
use crate::capture::VideoFrame;
use crate::models::manifest::ModelEntry;
use crate::models::{onnx, ModelError};

/// Input side of the image models.
pub const INPUT_SIZE: i32 = 224;

pub struct AppearanceEncoder {
    name: String,
    spec: ModalitySpec,
    session: Session,
    input: Vec<f32>,
}

impl AppearanceEncoder {
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        onnxruntime_library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        let session = onnx::open_session(&entry.name, &entry.path(dir), 1, onnxruntime_library)?;
        Ok(Self {
            name: entry.name.clone(),
            spec: ModalitySpec {
                name: "appearance",
                columns: (0..entry.output_dim)
                    .map(|i| format!("appearance_{i}"))
                    .collect(),
            },
            session,
            input: vec![0.0; 3 * (INPUT_SIZE * INPUT_SIZE) as usize],
        })
    }

    /// Features of an already preprocessed NCHW 1x3x224x224 input.
    pub fn run(&mut self, input: &[f32]) -> Result<Vec<f32>, ModelError> {
        infer(&mut self.session, &self.name, input)
    }

    /// Resizes and normalises a BGR frame into `self.input`.
    fn preprocess(&mut self, frame: &VideoFrame) -> Result<(), String> {
        let img = &frame.image;
        let src = Mat::new_rows_cols_with_data(img.height as i32, img.width as i32 * 3, &img.data)
            .map_err(|e| e.to_string())?;
        let src = src
            .reshape(3, img.height as i32)
            .map_err(|e| e.to_string())?;
        let mut small = Mat::default();
        imgproc::resize(
            &src,
            &mut small,
            Size::new(INPUT_SIZE, INPUT_SIZE),
            0.0,
            0.0,
            imgproc::INTER_AREA,
        )
        .map_err(|e| e.to_string())?;
        let bytes = small.data_bytes().map_err(|e| e.to_string())?;
        let plane = (INPUT_SIZE * INPUT_SIZE) as usize;
        for (i, px) in bytes.chunks_exact(3).enumerate() {
            // BGR in, RGB planes out.
            for (c, &v) in [px[2], px[1], px[0]].iter().enumerate() {
                self.input[c * plane + i] = (f32::from(v) - 127.0) / 128.0;
            }
        }
        Ok(())
    }
}

impl FrameStage for AppearanceEncoder {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(&mut self, frame: &VideoFrame) -> Result<Option<Vec<f32>>, StageError> {
        self.preprocess(frame).map_err(|message| StageError {
            stage: "appearance",
            message,
        })?;
        // Borrowed, not copied: the 600 kB input tensor is built once per frame in place.
        infer(&mut self.session, &self.name, &self.input)
            .map(Some)
            .map_err(|e| StageError {
                stage: "appearance",
                message: e.to_string(),
            })
    }
}

/// Runs the image model on a borrowed input (no copy into ONNX Runtime's tensor).
fn infer(session: &mut Session, name: &str, input: &[f32]) -> Result<Vec<f32>, ModelError> {
    let fail = |message: String| ModelError::Inference {
        name: name.to_string(),
        message,
    };
    let s = INPUT_SIZE as usize;
    let tensor =
        TensorRef::from_array_view(([1usize, 3, s, s], input)).map_err(|e| fail(e.to_string()))?;
    let outputs = session
        .run(ort::inputs!["image" => tensor])
        .map_err(|e| fail(e.to_string()))?;
    let (_, data) = outputs["features"]
        .try_extract_tensor::<f32>()
        .map_err(|e| fail(e.to_string()))?;
    Ok(data.to_vec())
}

/// The deterministic test pattern of the image models' known answer:
/// `((x * 7 + y * 13 + c * 101) % 256 - 127) / 128`, NCHW 1x3x224x224.
pub fn test_pattern() -> Vec<f32> {
    let s = INPUT_SIZE as usize;
    let mut v = Vec::with_capacity(3 * s * s);
    for c in 0..3 {
        for y in 0..s {
            for x in 0..s {
                v.push((((x * 7 + y * 13 + c * 101) % 256) as f32 - 127.0) / 128.0);
            }
        }
    }
    v
}
