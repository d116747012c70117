//! Appearance embedding per video frame: a CNN's globally pooled features through ONNX
//! Runtime (default EfficientNet-Lite0, 1280-d, real ImageNet weights; the paper used
//! ResNet50's 2048-d penultimate layer, which any ONNX image model in the manifest can stand
//! in for).
//!
//! Contract: the input is chosen by [`AppearanceInput`]: the participant's aligned face crop
//! from the facial stage (default: eyes levelled, 1.5x the face, bilinear to the model's
//! input side, 224 unless its manifest entry declares another; absent on frames without a
//! face), or the whole frame (area resize to that side; present on every decoded frame). RGB, scaled as `(x - 127) / 128`, NCHW float32. The output is the
//! model's feature vector.

use std::path::Path;

use opencv::core::{Mat, Size};
use opencv::imgproc;
use opencv::prelude::*;
use ort::session::Session;
use ort::value::TensorRef;

use super::face::crop::{crop_to_tensor, mat_of, Border};
use super::{FrameContext, FrameStage, StageError};
use crate::capture::VideoFrame;
use crate::core::ModalitySpec;
use crate::models::manifest::ModelEntry;
use crate::models::{onnx, ModelError};

/// Input side of the image models unless their manifest entry says another (its first
/// input's last dimension, e.g. `["batch", 3, 160, 160]`).
pub const INPUT_SIZE: i32 = 224;

/// The square input side an image model's manifest entry declares.
pub fn input_size(entry: &ModelEntry) -> i32 {
    match entry.inputs.first().and_then(|i| i.shape.last()) {
        Some(crate::models::manifest::Dim::Fixed(n)) if *n > 0 && *n <= 4096 => *n as i32,
        _ => INPUT_SIZE,
    }
}

pub use crate::config::AppearanceInput;

pub struct AppearanceEncoder {
    name: String,
    /// Input side in pixels (square).
    size: i32,
    spec: ModalitySpec,
    session: Session,
    input: Vec<f32>,
    source: AppearanceInput,
    /// NHWC scratch of the face crop.
    crop: Vec<f32>,
}

impl AppearanceEncoder {
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        onnxruntime_library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        let session = onnx::open_session(&entry.name, &entry.path(dir), 1, onnxruntime_library)?;
        let size = input_size(entry);
        Ok(Self {
            name: entry.name.clone(),
            size,
            spec: ModalitySpec::by_model(
                "appearance",
                (0..entry.output_dim)
                    .map(|i| format!("appearance_{i}"))
                    .collect(),
                entry.producer_id(),
                1,
            ),
            session,
            input: vec![0.0; 3 * (size * size) as usize],
            source: AppearanceInput::Frame,
            crop: Vec::new(),
        })
    }

    /// Looks at `source` instead of the whole frame.
    pub fn with_input(mut self, source: AppearanceInput) -> Self {
        self.source = source;
        self
    }

    /// Crops `roi` to the input size into `self.input` (same scaling as the whole frame:
    /// mapping [0, 255] to [-127/128, 1] is exactly (x - 127) / 128).
    fn preprocess_face(
        &mut self,
        frame: &VideoFrame,
        roi: &super::face::crop::Roi,
    ) -> Result<(), String> {
        let mat = mat_of(&frame.image)?;
        crop_to_tensor(
            &mat,
            roi,
            self.size,
            false,
            Border::Replicate,
            -127.0 / 128.0,
            &mut self.crop,
        )?;
        let plane = (self.size * self.size) as usize;
        for (i, px) in self.crop.chunks_exact(3).enumerate() {
            for (c, &v) in px.iter().enumerate() {
                self.input[c * plane + i] = v;
            }
        }
        Ok(())
    }

    /// Features of an already preprocessed NCHW 1x3xSxS input (S: [`Self::input_size`]).
    pub fn run(&mut self, input: &[f32]) -> Result<Vec<f32>, ModelError> {
        infer(&mut self.session, &self.name, self.size, input)
    }

    /// The model's square input side in pixels.
    pub fn input_size(&self) -> i32 {
        self.size
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
            Size::new(self.size, self.size),
            0.0,
            0.0,
            imgproc::INTER_AREA,
        )
        .map_err(|e| e.to_string())?;
        let bytes = small.data_bytes().map_err(|e| e.to_string())?;
        let plane = (self.size * self.size) as usize;
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

    fn process(
        &mut self,
        frame: &VideoFrame,
        ctx: &mut FrameContext,
    ) -> Result<Option<Vec<f32>>, StageError> {
        let prepared = match (self.source, ctx.face_roi) {
            (AppearanceInput::Frame, _) => self.preprocess(frame),
            (AppearanceInput::Face, Some(roi)) => self.preprocess_face(frame, &roi),
            // No face on this frame: the face appearance is absent.
            (AppearanceInput::Face, None) => return Ok(None),
        };
        prepared.map_err(|message| StageError {
            stage: "appearance",
            message,
        })?;
        // Borrowed, not copied: the 600 kB input tensor is built once per frame in place.
        infer(&mut self.session, &self.name, self.size, &self.input)
            .map(Some)
            .map_err(|e| StageError {
                stage: "appearance",
                message: e.to_string(),
            })
    }
}

/// Runs the image model on a borrowed input (no copy into ONNX Runtime's tensor).
fn infer(
    session: &mut Session,
    name: &str,
    size: i32,
    input: &[f32],
) -> Result<Vec<f32>, ModelError> {
    let fail = |message: String| ModelError::Inference {
        name: name.to_string(),
        message,
    };
    let s = size as usize;
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
/// `((x * 7 + y * 13 + c * 101) % 256 - 127) / 128`, NCHW 1x3xSxS.
pub fn test_pattern(size: i32) -> Vec<f32> {
    let s = size as usize;
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
