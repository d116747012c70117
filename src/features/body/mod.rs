//! The body: MediaPipe's BlazePose GHUM 3D (full) on each video frame, tracked as MediaPipe
//! tracks it.
//!
//! Contract: [`BodyTracker::track`] takes one BGR frame and returns the participant's pose
//! ([`Pose`]: 33 landmarks in image pixels with visibility and presence, and 33 world
//! points in metres, hips-centred) or `None` when no person is found. It follows MediaPipe
//! 0.10.14's CPU graphs (`pose_detection_cpu`, `pose_landmark_by_roi_cpu`,
//! `pose_landmarks_to_roi`): the detector (224x224, letterboxed, [-1, 1], SSD anchors of
//! strides 8, 16, 32, 32, 32, sigmoid scores >= 0.5, weighted non-maximum suppression at
//! IoU 0.3) runs only when there is no pose to follow; its best detection, or the previous
//! frame's hip centre and scale point (landmarks 33 and 34), give a crop centred on the hips,
//! turned so the hips-to-shoulders line is upright, twice the hips-to-scale-point distance
//! enlarged 1.25x; the landmark model (256x256, [0, 1]) gives 39 points (the first 33 are
//! the body; each point's x, y refined by its heatmap as MediaPipe does), a pose flag
//! (below 0.5: the person is lost and the next frame detects again) and world points turned
//! back by the crop's rotation. The two alignment points are smoothed (MediaPipe's one-euro
//! filter, on the frame times rounded to the nominal period) before the next crop is made
//! from them; the stored landmarks are not (MediaPipe's `smooth_landmarks` off): the
//! model's, frame by frame.
//!
//! The landmark order is MediaPipe's: 0 nose, 1-3 left eye (inner, centre, outer), 4-6 right
//! eye, 7-8 ears (left, right), 9-10 mouth (left, right), 11-12 shoulders, 13-14 elbows,
//! 15-16 wrists, 17-18 pinkies, 19-20 index fingers, 21-22 thumbs, 23-24 hips, 25-26
//! knees, 27-28 ankles, 29-30 heels, 31-32 foot index (left before right, the subject's).

pub mod rate;
pub mod stage;

use std::path::Path;

use crate::features::face::crop::{normalize_radians, rotation_between, Border, FrameMat, Roi};
use crate::features::face::models::{overlap_clusters, Model};
use crate::models::manifest::Manifest;
use crate::models::ModelError;

/// Manifest names of the two models.
pub const DETECTOR_MODEL: &str = "mediapipe-pose-detection";
pub const LANDMARK_MODEL: &str = "mediapipe-pose-landmark-full";

pub const DETECTOR_SIZE: i32 = 224;
pub const LANDMARK_SIZE: i32 = 256;
/// Body landmarks stored; the landmark model gives 39 (33 body + 6 auxiliary).
pub const POINTS: usize = 33;
const MODEL_POINTS: usize = 39;
/// Detections below this score are dropped; a landmark pass whose flag is below this has
/// lost the person (MediaPipe's defaults, 0.5 both).
pub const MIN_DETECTION_SCORE: f32 = 0.5;
pub const MIN_POSE_PRESENCE: f32 = 0.5;
const NMS_IOU: f32 = 0.3;
/// The crop is the alignment box enlarged by this factor.
const CROP_SCALE: f32 = 1.25;
/// The landmark model's heatmaps: 64x64 per point; a point is moved to the heatmap's
/// weighted centre over a 7x7 window around it when the window's most confident cell has
/// a probability of at least 0.5 (MediaPipe's RefineLandmarksFromHeatmap for this model).
const HEATMAP_SIDE: usize = 64;
const HEATMAP_KERNEL: usize = 7;
const HEATMAP_MIN_CONFIDENCE: f32 = 0.5;

/// MediaPipe's landmark names, in the model's order.
pub const LANDMARK_NAMES: [&str; POINTS] = [
    "nose",
    "left_eye_inner",
    "left_eye",
    "left_eye_outer",
    "right_eye_inner",
    "right_eye",
    "right_eye_outer",
    "left_ear",
    "right_ear",
    "mouth_left",
    "mouth_right",
    "left_shoulder",
    "right_shoulder",
    "left_elbow",
    "right_elbow",
    "left_wrist",
    "right_wrist",
    "left_pinky",
    "right_pinky",
    "left_index",
    "right_index",
    "left_thumb",
    "right_thumb",
    "left_hip",
    "right_hip",
    "left_knee",
    "right_knee",
    "left_ankle",
    "right_ankle",
    "left_heel",
    "right_heel",
    "left_foot_index",
    "right_foot_index",
];

/// Bones drawn between landmarks (MediaPipe's pose connections, face and hands left out but
/// the wrists kept).
pub const BONES: [(usize, usize); 18] = [
    (11, 12),
    (11, 13),
    (13, 15),
    (12, 14),
    (14, 16),
    (11, 23),
    (12, 24),
    (23, 24),
    (23, 25),
    (25, 27),
    (24, 26),
    (26, 28),
    (27, 29),
    (28, 30),
    (29, 31),
    (30, 32),
    (27, 31),
    (28, 32),
];

/// One person's pose on one frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Pose {
    /// The landmark model's pose flag (probability a person is in the crop).
    pub confidence: f32,
    /// x, y in image pixels; z relative depth at the scale of x (smaller is nearer the
    /// camera, 0 at the hips).
    pub image: [[f32; 3]; POINTS],
    /// Probability each landmark is visible (not occluded), and that it is in the frame.
    pub visibility: [f32; POINTS],
    pub presence: [f32; POINTS],
    /// World points in metres, origin between the hips (x right, y down, z away from the
    /// camera, as MediaPipe's world landmarks).
    pub world: [[f32; 3]; POINTS],
    /// The crop the landmarks were read from.
    pub roi: Roi,
    /// The crop for the next frame (from the auxiliary landmarks 33 and 34).
    pub next_roi: Roi,
    /// The auxiliary landmarks 33 (hip centre) and 34 (scale point), image pixels.
    pub alignment: ((f32, f32), (f32, f32)),
}

/// A detected person in image pixels: the box and four alignment points (hip centre, a
/// point on the full-body circle, shoulder centre, a point on the upper-body circle).
#[derive(Debug, Clone, PartialEq)]
struct Detection {
    cx: f32,
    cy: f32,
    w: f32,
    h: f32,
    keypoints: [(f32, f32); 4],
    score: f32,
}

impl Detection {
    fn as_box(&self) -> Roi {
        Roi {
            cx: self.cx,
            cy: self.cy,
            w: self.w,
            h: self.h,
            rotation: 0.0,
        }
    }
}

/// The crop from two alignment points (MediaPipe's AlignmentPointsRectsCalculator with a
/// target angle of 90 degrees, then RectTransformation 1.25x, squared on the long side):
/// centred on `centre`, turned so `centre -> scale_point` points up, side twice their
/// distance.
fn alignment_roi(centre: (f32, f32), scale_point: (f32, f32)) -> Roi {
    let d = ((scale_point.0 - centre.0).powi(2) + (scale_point.1 - centre.1).powi(2)).sqrt();
    let side = 2.0 * d * CROP_SCALE;
    Roi {
        cx: centre.0,
        cy: centre.1,
        w: side,
        h: side,
        rotation: normalize_radians(
            std::f32::consts::FRAC_PI_2 + rotation_between(centre, scale_point),
        ),
    }
}

/// SSD anchor centres of the pose detector in normalised letterbox coordinates (all 1x1):
/// 28x28 with 2 per cell (stride 8), 14x14 with 2 (stride 16), 7x7 with 6 (three layers of
/// stride 32): 2254.
fn anchors() -> Vec<(f32, f32)> {
    let mut out = Vec::with_capacity(2254);
    for (grid, per_cell) in [(28usize, 2usize), (14, 2), (7, 6)] {
        for y in 0..grid {
            for x in 0..grid {
                for _ in 0..per_cell {
                    out.push((
                        (x as f32 + 0.5) / grid as f32,
                        (y as f32 + 0.5) / grid as f32,
                    ));
                }
            }
        }
    }
    out
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Weighted non-maximum suppression: each cluster of overlapping detections becomes their
/// score-weighted mean, with the best member's score.
fn weighted_nms(dets: Vec<Detection>) -> Vec<Detection> {
    let mut out = Vec::new();
    for cluster in overlap_clusters(dets, NMS_IOU, |d| d.score, Detection::as_box) {
        let total: f32 = cluster.iter().map(|d| d.score).sum();
        let avg = |f: &dyn Fn(&Detection) -> f32| {
            cluster.iter().map(|d| f(d) * d.score).sum::<f32>() / total
        };
        let mut merged = cluster[0].clone();
        merged.cx = avg(&|d| d.cx);
        merged.cy = avg(&|d| d.cy);
        merged.w = avg(&|d| d.w);
        merged.h = avg(&|d| d.h);
        for k in 0..4 {
            merged.keypoints[k] = (avg(&|d| d.keypoints[k].0), avg(&|d| d.keypoints[k].1));
        }
        out.push(merged);
    }
    out
}

/// Point `index`'s position (`u`, `v` as fractions of the crop) refined by its heatmap
/// (NHWC logits, [`HEATMAP_SIDE`]^2 x 39): the sigmoid-weighted mean cell (cell indices
/// over the side, as MediaPipe computes it) of the [`HEATMAP_KERNEL`]-wide window around
/// the point, clipped at the heatmap's edges; unchanged when the point is outside the
/// heatmap or no cell of the window reaches [`HEATMAP_MIN_CONFIDENCE`].
fn refine_from_heatmap(heatmap: &[f32], index: usize, u: f32, v: f32) -> (f32, f32) {
    let side = HEATMAP_SIDE as f32;
    let (col, row) = ((u * side).floor(), (v * side).floor());
    if !(0.0..side).contains(&col) || !(0.0..side).contains(&row) {
        return (u, v);
    }
    let (col, row) = (col as usize, row as usize);
    let half = (HEATMAP_KERNEL - 1) / 2;
    let (mut sum, mut wc, mut wr, mut best) = (0f32, 0f32, 0f32, 0f32);
    for r in row.saturating_sub(half)..(row + half + 1).min(HEATMAP_SIDE) {
        for c in col.saturating_sub(half)..(col + half + 1).min(HEATMAP_SIDE) {
            let p = sigmoid(heatmap[(r * HEATMAP_SIDE + c) * MODEL_POINTS + index]);
            sum += p;
            best = best.max(p);
            wc += c as f32 * p;
            wr += r as f32 * p;
        }
    }
    if best >= HEATMAP_MIN_CONFIDENCE && sum > 0.0 {
        (wc / side / sum, wr / side / sum)
    } else {
        (u, v)
    }
}

/// MediaPipe's one-euro filter (Casiez et al. 2012) as its pose graph applies it to the two
/// alignment points before the next crop is made from them: minimum cutoff 0.01 Hz, beta
/// 10, derivative cutoff 1 Hz, values scaled by the inverse of the points' box size,
/// frequency from the frames' timestamps (30 Hz until two are seen).
#[derive(Debug, Clone, Default)]
struct OneEuro {
    frequency: Option<f64>,
    last_s: Option<f64>,
    raw: Option<f64>,
    value: Option<f64>,
    derivative: Option<f64>,
}

const EURO_MIN_CUTOFF: f64 = 0.01;
const EURO_BETA: f64 = 10.0;
const EURO_DERIVATIVE_CUTOFF: f64 = 1.0;

impl OneEuro {
    fn alpha(frequency: f64, cutoff: f64) -> f64 {
        let tau = 1.0 / (std::f64::consts::TAU * cutoff);
        1.0 / (1.0 + tau * frequency)
    }

    fn low_pass(state: &mut Option<f64>, value: f64, alpha: f64) -> f64 {
        let out = match *state {
            Some(previous) => alpha * value + (1.0 - alpha) * previous,
            None => value,
        };
        *state = Some(out);
        out
    }

    fn apply(&mut self, value: f64, t_s: f64, value_scale: f64) -> f64 {
        if let Some(last) = self.last_s {
            if t_s <= last {
                return value;
            }
            self.frequency = Some(1.0 / (t_s - last));
        }
        self.last_s = Some(t_s);
        let frequency = self.frequency.unwrap_or(30.0);
        let dvalue = self
            .raw
            .map_or(0.0, |raw| (value - raw) * value_scale * frequency);
        self.raw = Some(value);
        let d = Self::low_pass(
            &mut self.derivative,
            dvalue,
            Self::alpha(frequency, EURO_DERIVATIVE_CUTOFF),
        );
        let cutoff = EURO_MIN_CUTOFF + EURO_BETA * d.abs();
        Self::low_pass(&mut self.value, value, Self::alpha(frequency, cutoff))
    }
}

/// The detector and the landmark model, and the crop carried from frame to frame.
pub struct BodyTracker {
    detector: Model,
    landmarks: Model,
    anchors: Vec<(f32, f32)>,
    /// The crop for the next frame, from this frame's pose; `None`: detect.
    next: Option<Roi>,
    /// The alignment points' filters (hip centre x, y; scale point x, y), reset when the
    /// person is lost.
    alignment: [OneEuro; 4],
    /// Frames on which the detector ran (for the stage's counters and tests).
    pub detections_run: u64,
    /// The nominal frame period: the filter's clock is the frame's time rounded to it.
    period_ns: f64,
}

impl BodyTracker {
    /// The tracker for video at `nominal_fps`.
    pub fn open(
        dir: &Path,
        manifest: &Manifest,
        library: Option<&Path>,
        nominal_fps: f64,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            detector: Model::open(dir, manifest.get(DETECTOR_MODEL, dir)?, library)?,
            landmarks: Model::open(dir, manifest.get(LANDMARK_MODEL, dir)?, library)?,
            anchors: anchors(),
            next: None,
            alignment: Default::default(),
            detections_run: 0,
            period_ns: 1e9 / nominal_fps.max(1.0),
        })
    }

    /// Forgets the person followed (a new video).
    pub fn reset(&mut self) {
        self.next = None;
        self.alignment = Default::default();
    }

    /// The participant's pose on this frame (taken at `t_ns`), or `None`.
    pub fn track(
        &mut self,
        frame: &FrameMat<'_>,
        width: u32,
        height: u32,
        t_ns: u64,
    ) -> Result<Option<Pose>, ModelError> {
        let roi = match self.next.take() {
            Some(roi) => roi,
            None => {
                self.detections_run += 1;
                match self.detect(frame, width, height)?.into_iter().next() {
                    Some(d) => alignment_roi(d.keypoints[0], d.keypoints[1]),
                    None => return Ok(None),
                }
            }
        };
        let mut pose = self.landmarks_in(frame, roi)?;
        if pose.confidence < MIN_POSE_PRESENCE {
            self.alignment = Default::default();
            return Ok(None);
        }
        // The next crop from the filtered alignment points, as MediaPipe smooths them
        // (whether or not it smooths the landmarks it reports).
        let (a, b) = pose.alignment;
        let scale = f64::from(((a.0 - b.0).abs() + (a.1 - b.1).abs()) / 2.0).max(1e-6);
        // The frame's time on the nominal grid: a live capture stamp jitters by milliseconds
        // where its recording, replayed, does not, and the filter must give both the same.
        let t = (t_ns as f64 / self.period_ns).round() * self.period_ns / 1e9;
        let f = &mut self.alignment;
        let a = (
            f[0].apply(f64::from(a.0), t, 1.0 / scale) as f32,
            f[1].apply(f64::from(a.1), t, 1.0 / scale) as f32,
        );
        let b = (
            f[2].apply(f64::from(b.0), t, 1.0 / scale) as f32,
            f[3].apply(f64::from(b.1), t, 1.0 / scale) as f32,
        );
        pose.next_roi = alignment_roi(a, b);
        self.next = Some(pose.next_roi);
        Ok(Some(pose))
    }

    /// Every person the detector finds, best first.
    fn detect(
        &mut self,
        frame: &FrameMat<'_>,
        width: u32,
        height: u32,
    ) -> Result<Vec<Detection>, ModelError> {
        let side = width.max(height) as f32;
        let letterbox = Roi {
            cx: width as f32 / 2.0,
            cy: height as f32 / 2.0,
            w: side,
            h: side,
            rotation: 0.0,
        };
        self.detector
            .crop(frame, &letterbox, DETECTOR_SIZE, false, Border::Zero, -1.0)?;
        let out = self
            .detector
            .run(DETECTOR_SIZE, &["regressors", "classificators"])?;
        let (boxes, scores) = (&out[0], &out[1]);
        if boxes.len() != self.anchors.len() * 12 || scores.len() != self.anchors.len() {
            return Err(self.detector.error(format!(
                "outputs of {} and {} values, expected {} and {}",
                boxes.len(),
                scores.len(),
                self.anchors.len() * 12,
                self.anchors.len()
            )));
        }
        let n = DETECTOR_SIZE as f32;
        let to_px = |x: f32, y: f32| letterbox.to_image(x * n, y * n, n);
        let mut raw = Vec::new();
        for (i, &(ax, ay)) in self.anchors.iter().enumerate() {
            let score = sigmoid(scores[i].clamp(-100.0, 100.0));
            if score < MIN_DETECTION_SCORE {
                continue;
            }
            let r = &boxes[i * 12..(i + 1) * 12];
            let (cx, cy) = to_px(r[0] / n + ax, r[1] / n + ay);
            let mut keypoints = [(0.0, 0.0); 4];
            for (k, kp) in keypoints.iter_mut().enumerate() {
                *kp = to_px(r[4 + 2 * k] / n + ax, r[5 + 2 * k] / n + ay);
            }
            // The letterbox is a square of the frame's long side, unturned: box sizes scale
            // by side / n.
            raw.push(Detection {
                cx,
                cy,
                w: r[2] / n * side,
                h: r[3] / n * side,
                keypoints,
                score,
            });
        }
        Ok(weighted_nms(raw))
    }

    /// The landmark model on `roi`.
    fn landmarks_in(&mut self, frame: &FrameMat<'_>, roi: Roi) -> Result<Pose, ModelError> {
        self.landmarks
            .crop(frame, &roi, LANDMARK_SIZE, false, Border::Replicate, 0.0)?;
        let out = self.landmarks.run(
            LANDMARK_SIZE,
            &["landmarks", "pose_flag", "world_landmarks", "heatmap"],
        )?;
        let (points, flag, world, heatmap) = (&out[0], &out[1], &out[2], &out[3]);
        if heatmap.len() != HEATMAP_SIDE * HEATMAP_SIDE * MODEL_POINTS {
            return Err(self.landmarks.error(format!(
                "heatmap of {} values, expected {}",
                heatmap.len(),
                HEATMAP_SIDE * HEATMAP_SIDE * MODEL_POINTS
            )));
        }
        if points.len() != MODEL_POINTS * 5 || flag.is_empty() || world.len() != MODEL_POINTS * 3 {
            return Err(self.landmarks.error(format!(
                "outputs of {}, {} and {} values, expected {}, 1 and {}",
                points.len(),
                flag.len(),
                world.len(),
                MODEL_POINTS * 5,
                MODEL_POINTS * 3
            )));
        }
        let s = LANDMARK_SIZE as f32;
        let (sin, cos) = roi.rotation.sin_cos();
        let mut pose = Pose {
            confidence: flag[0],
            image: [[0.0; 3]; POINTS],
            visibility: [0.0; POINTS],
            presence: [0.0; POINTS],
            world: [[0.0; 3]; POINTS],
            roi,
            next_roi: roi,
            alignment: ((0.0, 0.0), (0.0, 0.0)),
        };
        let mut aux = [(0.0f32, 0.0f32); 2];
        for i in 0..MODEL_POINTS {
            let p = &points[i * 5..i * 5 + 5];
            let (u, v) = refine_from_heatmap(heatmap, i, p[0] / s, p[1] / s);
            let (x, y) = roi.to_image(u * s, v * s, s);
            if i < POINTS {
                // z at the scale of x: the crop's tensor units mapped to image pixels.
                pose.image[i] = [x, y, p[2] / s * roi.w];
                pose.visibility[i] = sigmoid(p[3]);
                pose.presence[i] = sigmoid(p[4]);
                let w = &world[i * 3..i * 3 + 3];
                // Turned back by the crop's rotation (MediaPipe's world projection).
                pose.world[i] = [cos * w[0] - sin * w[1], sin * w[0] + cos * w[1], w[2]];
            } else if i < POINTS + 2 {
                aux[i - POINTS] = (x, y);
            }
        }
        // The next frame's crop, from the hip centre and the scale point (landmarks 33, 34).
        // `track` makes the next crop from them, filtered.
        pose.alignment = (aux[0], aux[1]);
        Ok(pose)
    }
}
