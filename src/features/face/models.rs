//! MediaPipe's face models run through ONNX Runtime: the short-range face detector
//! (BlazeFace, 128x128), the face mesh (468 points, 192x192), the iris model (64x64) and
//! the blendshape model (146 mesh and iris points in, 52 expression coefficients out).
//!
//! Contract: every function takes a BGR frame as an OpenCV `Mat` and returns results in
//! image pixels. Pre- and post-processing follow MediaPipe 0.10.14's CPU graphs
//! (`face_detection_short_range_cpu`, `face_landmark_front_cpu`, `iris_landmark_cpu`):
//! detector input letterboxed to 128x128 in [-1, 1], SSD anchors (strides 8, 16, 16, 16),
//! sigmoid scores >= 0.5, weighted non-maximum suppression at IoU 0.3; mesh and iris inputs
//! are rotated crops in [0, 1]; the image-right eye is mirrored for the iris model.

use std::path::Path;

use ort::session::Session;
use ort::value::TensorRef;

use super::crop::{crop_to_tensor, rotation_between, Border, FrameMat, Roi};
use crate::models::manifest::ModelEntry;
use crate::models::{onnx, ModelError};

pub const DETECTOR_SIZE: i32 = 128;
pub const MESH_SIZE: i32 = 192;
pub const IRIS_SIZE: i32 = 64;
/// Detections below this score are dropped (MediaPipe's default).
pub const MIN_DETECTION_SCORE: f32 = 0.5;
/// Overlap above which detections are merged.
const NMS_IOU: f32 = 0.3;
/// A face crop is the face box squared and enlarged by this factor.
pub const FACE_CROP_SCALE: f32 = 1.5;
/// An eye crop is the eye-corner distance enlarged by this factor.
const EYE_CROP_SCALE: f32 = 2.3;

/// A detected face in image pixels.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    pub xmin: f32,
    pub ymin: f32,
    pub width: f32,
    pub height: f32,
    /// Right eye, left eye, nose tip, mouth centre, right ear, left ear (the subject's).
    pub keypoints: [(f32, f32); 6],
    pub score: f32,
}

impl Detection {
    pub fn centre(&self) -> (f32, f32) {
        (self.xmin + self.width / 2.0, self.ymin + self.height / 2.0)
    }

    /// The mesh crop of this face (MediaPipe's detection-to-ROI: eyes levelled, squared,
    /// enlarged 1.5x).
    pub fn face_roi(&self) -> Roi {
        let (cx, cy) = self.centre();
        Roi {
            cx,
            cy,
            w: self.width,
            h: self.height,
            rotation: rotation_between(self.keypoints[0], self.keypoints[1]),
        }
        .squared_scaled(FACE_CROP_SCALE)
    }

    fn as_roi(&self) -> Roi {
        let (cx, cy) = self.centre();
        Roi {
            cx,
            cy,
            w: self.width,
            h: self.height,
            rotation: 0.0,
        }
    }
}

/// One model session with its input buffer (the body's models use it too).
pub(crate) struct Model {
    name: String,
    session: Session,
    input: Vec<f32>,
}

impl Model {
    pub(crate) fn open(
        dir: &Path,
        entry: &ModelEntry,
        library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            name: entry.name.clone(),
            session: onnx::open_session(&entry.name, &entry.path(dir), 1, library)?,
            input: Vec::new(),
        })
    }

    /// Crops `roi` into `self.input` (see [`crop_to_tensor`]), naming this model on error.
    pub(crate) fn crop(
        &mut self,
        frame: &FrameMat<'_>,
        roi: &Roi,
        size: i32,
        flip: bool,
        border: Border,
        lo: f32,
    ) -> Result<(), ModelError> {
        crop_to_tensor(frame, roi, size, flip, border, lo, &mut self.input)
            .map_err(|message| self.error(message))
    }

    /// An inference error naming this model.
    pub(crate) fn error(&self, message: String) -> ModelError {
        ModelError::Inference {
            name: self.name.clone(),
            message,
        }
    }

    /// Runs the model on `self.input` (a batch of NHWC `size` x `size` x 3 images) and
    /// returns its outputs, flattened, in the order of `names`.
    pub(crate) fn run(&mut self, size: i32, names: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let s = size as usize;
        let batch = self.input.len() / (s * s * 3);
        self.run_shaped(&[batch, s, s, 3], names)
    }

    /// Runs the model on `self.input` as one tensor of `shape` and returns its outputs,
    /// flattened, in the order of `names`.
    fn run_shaped(&mut self, shape: &[usize], names: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let fail = |message: String| ModelError::Inference {
            name: self.name.clone(),
            message,
        };
        let tensor = TensorRef::from_array_view((shape, self.input.as_slice()))
            .map_err(|e| fail(e.to_string()))?;
        let outputs = self
            .session
            .run(ort::inputs!["image" => tensor])
            .map_err(|e| fail(e.to_string()))?;
        names
            .iter()
            .map(|n| {
                outputs[*n]
                    .try_extract_tensor::<f32>()
                    .map(|(_, d)| d.to_vec())
                    .map_err(|e| fail(e.to_string()))
            })
            .collect()
    }
}

/// An SSD anchor centre in normalised letterbox coordinates (all anchors are 1x1).
#[derive(Debug, Clone, Copy)]
struct Anchor {
    x: f32,
    y: f32,
}

/// The 896 anchors of the short-range detector: a 16x16 grid with 2 anchors per cell
/// (stride 8), then an 8x8 grid with 6 (three layers of stride 16, 2 each).
fn anchors() -> Vec<Anchor> {
    let mut out = Vec::with_capacity(896);
    for (grid, per_cell) in [(16usize, 2usize), (8, 6)] {
        for y in 0..grid {
            for x in 0..grid {
                for _ in 0..per_cell {
                    out.push(Anchor {
                        x: (x as f32 + 0.5) / grid as f32,
                        y: (y as f32 + 0.5) / grid as f32,
                    });
                }
            }
        }
    }
    out
}

pub struct FaceDetector {
    model: Model,
    anchors: Vec<Anchor>,
}

impl FaceDetector {
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            model: Model::open(dir, entry, library)?,
            anchors: anchors(),
        })
    }

    /// Every face in the frame with a score >= 0.5, best first.
    pub fn detect(
        &mut self,
        frame: &FrameMat<'_>,
        width: u32,
        height: u32,
    ) -> Result<Vec<Detection>, ModelError> {
        // Letterbox: the whole frame, aspect kept, centred in a square.
        let side = width.max(height) as f32;
        let letterbox = Roi {
            cx: width as f32 / 2.0,
            cy: height as f32 / 2.0,
            w: side,
            h: side,
            rotation: 0.0,
        };
        self.model
            .crop(frame, &letterbox, DETECTOR_SIZE, false, Border::Zero, -1.0)?;
        let out = self
            .model
            .run(DETECTOR_SIZE, &["regressors", "classificators"])?;
        let (boxes, scores) = (&out[0], &out[1]);
        let n = DETECTOR_SIZE as f32;
        let to_px = |x: f32, y: f32| letterbox.to_image(x * n, y * n, n);
        let mut raw = Vec::new();
        for (i, a) in self.anchors.iter().enumerate() {
            let score = sigmoid(scores[i].clamp(-100.0, 100.0));
            if score < MIN_DETECTION_SCORE {
                continue;
            }
            let r = &boxes[i * 16..(i + 1) * 16];
            let (cx, cy) = (r[0] / n + a.x, r[1] / n + a.y);
            let (w, h) = (r[2] / n, r[3] / n);
            let (x0, y0) = to_px(cx - w / 2.0, cy - h / 2.0);
            let (x1, y1) = to_px(cx + w / 2.0, cy + h / 2.0);
            let mut keypoints = [(0.0, 0.0); 6];
            for (k, kp) in keypoints.iter_mut().enumerate() {
                *kp = to_px(r[4 + 2 * k] / n + a.x, r[5 + 2 * k] / n + a.y);
            }
            raw.push(Detection {
                xmin: x0,
                ymin: y0,
                width: x1 - x0,
                height: y1 - y0,
                keypoints,
                score,
            });
        }
        Ok(weighted_nms(raw))
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Detections grouped for MediaPipe's weighted non-maximum suppression (the face's and the
/// body's detectors): best score first, each cluster the best remaining detection and every
/// other remaining one overlapping it by more than `iou`.
pub(crate) fn overlap_clusters<D>(
    mut dets: Vec<D>,
    iou: f32,
    score: impl Fn(&D) -> f32,
    as_box: impl Fn(&D) -> Roi,
) -> Vec<Vec<D>> {
    dets.sort_by(|a, b| score(b).total_cmp(&score(a)));
    let mut out = Vec::new();
    while !dets.is_empty() {
        let top = as_box(&dets[0]);
        let (cluster, rest): (Vec<D>, Vec<D>) =
            dets.into_iter().partition(|d| as_box(d).iou(&top) > iou);
        dets = rest;
        out.push(cluster);
    }
    out
}

/// MediaPipe's weighted non-maximum suppression: each cluster of overlapping detections
/// becomes their score-weighted mean, with the best member's score.
fn weighted_nms(dets: Vec<Detection>) -> Vec<Detection> {
    let mut out = Vec::new();
    for cluster in overlap_clusters(dets, NMS_IOU, |d| d.score, Detection::as_roi) {
        let total: f32 = cluster.iter().map(|d| d.score).sum();
        let mut merged = cluster[0].clone();
        let avg = |f: &dyn Fn(&Detection) -> f32| {
            cluster.iter().map(|d| f(d) * d.score).sum::<f32>() / total
        };
        merged.xmin = avg(&|d| d.xmin);
        merged.ymin = avg(&|d| d.ymin);
        merged.width = avg(&|d| d.width);
        merged.height = avg(&|d| d.height);
        for k in 0..6 {
            merged.keypoints[k] = (avg(&|d| d.keypoints[k].0), avg(&|d| d.keypoints[k].1));
        }
        out.push(merged);
    }
    out
}

/// The face mesh's output on one crop.
#[derive(Debug, Clone)]
pub struct Mesh {
    /// 468 points: x, y in image pixels; z in pixels at the same scale, relative depth
    /// (smaller is nearer the camera).
    pub points: Vec<[f32; 3]>,
    /// Probability that the crop holds a face.
    pub score: f32,
    /// The crop it was computed on.
    pub roi: Roi,
}

impl Mesh {
    /// The crop for the next frame (MediaPipe's landmarks-to-ROI: the image-axis box of
    /// the points, turned to level the eye corners 33 and 263, squared, enlarged 1.5x).
    pub fn next_roi(&self) -> Roi {
        let p = |i: usize| (self.points[i][0], self.points[i][1]);
        let xy: Vec<(f32, f32)> = self.points.iter().map(|q| (q[0], q[1])).collect();
        match Roi::around(&xy, rotation_between(p(33), p(263))) {
            Some(r) => r.squared_scaled(FACE_CROP_SCALE),
            None => self.roi,
        }
    }
}

pub struct FaceMeshModel {
    model: Model,
}

impl FaceMeshModel {
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            model: Model::open(dir, entry, library)?,
        })
    }

    pub fn run(&mut self, frame: &FrameMat<'_>, roi: Roi) -> Result<Mesh, ModelError> {
        self.model
            .crop(frame, &roi, MESH_SIZE, false, Border::Replicate, 0.0)?;
        let out = self.model.run(MESH_SIZE, &["landmarks", "face_flag"])?;
        let n = MESH_SIZE as f32;
        let points = out[0]
            .chunks_exact(3)
            .map(|p| {
                let (x, y) = roi.to_image(p[0], p[1], n);
                [x, y, p[2] / n * roi.w]
            })
            .collect();
        Ok(Mesh {
            points,
            score: sigmoid(out[1].first().copied().unwrap_or(f32::MIN)),
            roi,
        })
    }
}

/// The iris model's output for one eye, in image pixels.
#[derive(Debug, Clone)]
pub struct Eye {
    /// 71 eye-region points (eyelids first: 0 and 8 are the eye corners).
    pub contour: Vec<[f32; 3]>,
    /// Iris centre, then 4 points on the iris edge.
    pub iris: [[f32; 3]; 5],
}

pub struct IrisModel {
    model: Model,
}

impl IrisModel {
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            model: Model::open(dir, entry, library)?,
        })
    }

    /// Both eyes in one batch. Each eye is given by its corners, image-left corner first;
    /// the second (image-right) eye is mirrored, since the model was trained on one side.
    pub fn run_pair(
        &mut self,
        frame: &FrameMat<'_>,
        eyes: [((f32, f32), (f32, f32)); 2],
    ) -> Result<[Eye; 2], ModelError> {
        let mut rois = [None; 2];
        let mut batch = Vec::with_capacity(2 * (IRIS_SIZE * IRIS_SIZE * 3) as usize);
        for (k, &(a, b)) in eyes.iter().enumerate() {
            let dist = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
            let roi = Roi {
                cx: (a.0 + b.0) / 2.0,
                cy: (a.1 + b.1) / 2.0,
                w: dist,
                h: dist,
                rotation: rotation_between(a, b),
            }
            .squared_scaled(EYE_CROP_SCALE);
            self.model
                .crop(frame, &roi, IRIS_SIZE, k == 1, Border::Replicate, 0.0)?;
            batch.extend_from_slice(&self.model.input);
            rois[k] = Some(roi);
        }
        self.model.input = batch;
        let out = self.model.run(IRIS_SIZE, &["eye_contours", "iris"])?;
        let n = IRIS_SIZE as f32;
        let eye = |k: usize| -> Eye {
            let roi = rois[k].unwrap_or(Roi {
                cx: 0.0,
                cy: 0.0,
                w: 0.0,
                h: 0.0,
                rotation: 0.0,
            });
            let mirror = k == 1;
            let project = |p: &[f32]| {
                let u = if mirror { n - p[0] } else { p[0] };
                let (x, y) = roi.to_image(u, p[1], n);
                [x, y, p[2] / n * roi.w]
            };
            let half_c = out[0].len() / 2;
            let half_i = out[1].len() / 2;
            let contour = out[0][k * half_c..(k + 1) * half_c]
                .chunks_exact(3)
                .map(project)
                .collect();
            let mut iris = [[0.0; 3]; 5];
            for (j, p) in out[1][k * half_i..(k + 1) * half_i]
                .chunks_exact(3)
                .take(5)
                .enumerate()
            {
                iris[j] = project(p);
            }
            Eye { contour, iris }
        };
        Ok([eye(0), eye(1)])
    }
}

/// The 146 of the 478 mesh points (468 mesh points, then the subject's right iris centre
/// and edge at 468-472 and the left at 473-477) the blendshape model reads, in its input
/// order: MediaPipe's `kLandmarksSubsetIdxs` (`face_blendshapes_graph.cc`), an interface
/// of the model like its input size.
pub const BLENDSHAPE_POINTS: [usize; 146] = [
    0, 1, 4, 5, 6, 7, 8, 10, 13, 14, 17, 21, 33, 37, 39, 40, 46, 52, 53, 54, 55, 58, 61, 63, 65,
    66, 67, 70, 78, 80, 81, 82, 84, 87, 88, 91, 93, 95, 103, 105, 107, 109, 127, 132, 133, 136,
    144, 145, 146, 148, 149, 150, 152, 153, 154, 155, 157, 158, 159, 160, 161, 162, 163, 168, 172,
    173, 176, 178, 181, 185, 191, 195, 197, 234, 246, 249, 251, 263, 267, 269, 270, 276, 282, 283,
    284, 285, 288, 291, 293, 295, 296, 297, 300, 308, 310, 311, 312, 314, 317, 318, 321, 323, 324,
    332, 334, 336, 338, 356, 361, 362, 365, 373, 374, 375, 377, 378, 379, 380, 381, 382, 384, 385,
    386, 387, 388, 389, 390, 397, 398, 400, 402, 405, 409, 415, 454, 466, 468, 469, 470, 471, 472,
    473, 474, 475, 476, 477,
];

/// The 52 blendshape coefficients in the model's output order (ARKit's names; index 0,
/// `_neutral`, is the model's own baseline).
pub const BLENDSHAPE_NAMES: [&str; 52] = [
    "_neutral",
    "browDownLeft",
    "browDownRight",
    "browInnerUp",
    "browOuterUpLeft",
    "browOuterUpRight",
    "cheekPuff",
    "cheekSquintLeft",
    "cheekSquintRight",
    "eyeBlinkLeft",
    "eyeBlinkRight",
    "eyeLookDownLeft",
    "eyeLookDownRight",
    "eyeLookInLeft",
    "eyeLookInRight",
    "eyeLookOutLeft",
    "eyeLookOutRight",
    "eyeLookUpLeft",
    "eyeLookUpRight",
    "eyeSquintLeft",
    "eyeSquintRight",
    "eyeWideLeft",
    "eyeWideRight",
    "jawForward",
    "jawLeft",
    "jawOpen",
    "jawRight",
    "mouthClose",
    "mouthDimpleLeft",
    "mouthDimpleRight",
    "mouthFrownLeft",
    "mouthFrownRight",
    "mouthFunnel",
    "mouthLeft",
    "mouthLowerDownLeft",
    "mouthLowerDownRight",
    "mouthPressLeft",
    "mouthPressRight",
    "mouthPucker",
    "mouthRight",
    "mouthRollLower",
    "mouthRollUpper",
    "mouthShrugLower",
    "mouthShrugUpper",
    "mouthSmileLeft",
    "mouthSmileRight",
    "mouthStretchLeft",
    "mouthStretchRight",
    "mouthUpperUpLeft",
    "mouthUpperUpRight",
    "noseSneerLeft",
    "noseSneerRight",
];

/// MediaPipe's blendshape model (an MLP-mixer over 146 mesh points): the 52 ARKit-style
/// expression coefficients of one face, each in [0, 1].
pub struct BlendshapeModel {
    model: Model,
}

impl BlendshapeModel {
    pub fn open(
        dir: &Path,
        entry: &ModelEntry,
        library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            model: Model::open(dir, entry, library)?,
        })
    }

    /// The coefficients of the face whose points are `mesh` (468, x, y in image pixels)
    /// and `irises` (each eye's centre then 4 edge points, the subject's right eye first):
    /// MediaPipe's 478-point topology, read at [`BLENDSHAPE_POINTS`].
    pub fn run(
        &mut self,
        mesh: &[[f32; 2]],
        irises: [&[[f32; 3]; 5]; 2],
    ) -> Result<[f32; 52], ModelError> {
        if mesh.len() != 468 {
            return Err(ModelError::Inference {
                name: self.model.name.clone(),
                message: format!("needs 468 mesh points, got {}", mesh.len()),
            });
        }
        self.model.input.clear();
        for &i in &BLENDSHAPE_POINTS {
            let p = match i {
                0..468 => mesh[i],
                _ => {
                    let q = irises[(i - 468) / 5][(i - 468) % 5];
                    [q[0], q[1]]
                }
            };
            self.model.input.extend_from_slice(&p);
        }
        self.run_input()
    }

    /// The coefficients of 146 points given in the model's input order (x, y pairs).
    pub fn run_subset(&mut self, points: &[f32]) -> Result<[f32; 52], ModelError> {
        self.model.input.clear();
        self.model.input.extend_from_slice(points);
        self.run_input()
    }

    fn run_input(&mut self) -> Result<[f32; 52], ModelError> {
        if self.model.input.len() != 146 * 2 {
            let got = self.model.input.len() / 2;
            return Err(self.model.error(format!("needs 146 points, got {got}")));
        }
        let out = self.model.run_shaped(&[1, 146, 2], &["blendshapes"])?;
        <[f32; 52]>::try_from(out[0].as_slice()).map_err(|_| {
            self.model
                .error(format!("gave {} coefficients, not 52", out[0].len()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_grid_has_896_centres_in_the_unit_square() {
        let a = anchors();
        assert_eq!(a.len(), 896);
        assert!(a
            .iter()
            .all(|a| a.x > 0.0 && a.x < 1.0 && a.y > 0.0 && a.y < 1.0));
        assert!((a[0].x - 1.0 / 32.0).abs() < 1e-6 && (a[512].x - 1.0 / 16.0).abs() < 1e-6);
    }

    #[test]
    fn nms_merges_overlaps_and_keeps_separate_faces() {
        let det = |x: f32, s: f32| Detection {
            xmin: x,
            ymin: 0.0,
            width: 10.0,
            height: 10.0,
            keypoints: [(x, 0.0); 6],
            score: s,
        };
        let out = weighted_nms(vec![det(0.0, 0.9), det(1.0, 0.6), det(50.0, 0.7)]);
        assert_eq!(out.len(), 2);
        assert!((out[0].xmin - 0.4).abs() < 1e-5 && out[0].score == 0.9);
        assert_eq!(out[1].xmin, 50.0);
    }
}
