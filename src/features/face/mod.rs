//! Facial behaviour per video frame, in OpenFace 2.0's conventions, from MediaPipe's
//! permissively licensed face models (see `models`, `landmarks`, `pose`, `au`).
//!
//! Contract: [`FaceAnalyzer::analyze`] takes one BGR frame and returns a [`FaceObservation`]:
//! how many faces the detector saw, and for the participant's face (largest and most
//! central, kept by overlap from frame to frame) the mesh confidence and, when it is >= 0.5,
//! every OpenFace quantity, plus MediaPipe's 52 blendshape coefficients (from the mesh and
//! both irises; the action units read them too). Gaze follows [`GazeModel`] (OpenFace's
//! eyeball geometry by default). Tracking: the previous frame's mesh places the next crop; the
//! detector runs again when the mesh loses the face, and once a second to count faces.
//! [`FaceStage`] wraps it as the replay's `face` modality (layout v2: [`face_columns`]),
//! and [`BlendshapeStage`] stores the coefficients it hands on as the `blendshapes` modality.
//!
//! 3D: the head pose is a PnP fit of MediaPipe's metric canonical face to the mesh; each
//! mesh point's depth is the pose's depth plus the mesh's own relative depth (pixels turned
//! to millimetres by the fitted scale), and x, y back-project through the intrinsics, so
//! every 3D landmark projects exactly onto its 2D landmark.

pub mod au;
pub mod bystanders;
pub mod canonical;
pub mod crop;
pub mod landmarks;
pub mod models;
pub mod openface;
pub mod pose;

mod stage;
pub use stage::{face_columns, BlendshapeStage, FaceStage, FACE_LAYOUT_VERSION};

use std::path::Path;

use nalgebra::{Matrix3, Vector3};

use self::au::{ActionUnits, AuEstimator, HeadFrameGeometry};
use self::crop::{appearance_signature, mat_of, Roi, SIGNATURE_SIDE};
use self::landmarks::{eyelids, ibug68, iris_ring, Blend, EYE_CORNERS};
use self::models::{BlendshapeModel, Detection, FaceDetector, FaceMeshModel, IrisModel, Mesh};
use self::pose::{euler_xyz, refine_pnp, similarity, Intrinsics, IntrinsicsArgs, Pose, Similarity};
use super::{pearson, FrameContext, FrameStage, StageError};
use crate::capture::{BgrImage, VideoFrame};
use crate::core::ModalitySpec;
use crate::models::manifest::Manifest;
use crate::models::ModelError;

/// The manifest names of the three face models.
pub const DETECTOR_MODEL: &str = "mediapipe-face-detection-short-range";
pub const MESH_MODEL: &str = "mediapipe-face-landmark";
pub const IRIS_MODEL: &str = "mediapipe-iris-landmark";
pub const BLENDSHAPE_MODEL: &str = "mediapipe-face-blendshapes";

/// Mesh confidence below which the face counts as lost.
pub const MIN_FACE_CONFIDENCE: f32 = 0.5;
/// While tracking, the detector runs every this many frames to count faces.
pub const COUNT_FACES_EVERY: u64 = 15;
/// A detection overlapping the tracked crop by less than this is another face.
const TRACK_MIN_IOU: f32 = 0.3;
/// The detector confirms a tracked crop it overlaps by at least this much; below it (and
/// when the crop's look changed) the mesh is placed again from the detection (a lagging crop, measured 0.36-0.56 on fast
/// selfie motion, against 0.69-0.95 for well-tracked faces).
const CONFIRM_TRACK_IOU: f32 = 0.6;
/// Correlation of the tracked crop's look with its last confirmed look below which the
/// detector checks the track at once.
const MIN_LOOK_CORRELATION: f64 = 0.5;
/// Frames without a face (5 s at 15 fps) after which whoever comes back gets a new
/// neutral face for the action units.
const NEW_PERSON_AFTER_FRAMES: u64 = 75;
/// Eyeball model (adult averages, millimetres): radius, and the centre's offset from the
/// middle of the eye opening (the mean of the 12 eyelid points) in the head frame. Looking
/// straight ahead the upper lid covers about 1.5 mm of an 11.5 mm cornea and the lower lid
/// rests at its edge, so the pupil sits 0.75 mm above the opening's middle; the centre is
/// that far up and 7.5 mm behind the lid surface (12 mm behind the corneal apex).
pub const EYEBALL_RADIUS_MM: f64 = 12.0;
pub const EYEBALL_OFFSET_MM: [f64; 3] = [0.0, -0.75, 7.5];
/// OpenFace 2.0's eyeball centre: the midpoint of the eye corners (iBUG 36 and 39; 42 and
/// 45) plus this offset in the head frame (mm, y down), radius [`EYEBALL_RADIUS_MM`].
pub const OPENFACE_EYEBALL_OFFSET_MM: [f64; 3] = [0.0, -3.5, 7.0];

pub use crate::config::GazeModel;

/// One frame's facial behaviour.
#[derive(Debug, Clone)]
pub struct FaceObservation {
    /// Faces the detector saw at its last run (0 when it saw none).
    pub faces_seen: u32,
    /// The participant's mesh confidence (0 when no face was found).
    pub confidence: f32,
    /// Everything else, when the confidence is >= 0.5.
    pub face: Option<Face>,
}

impl FaceObservation {
    pub fn success(&self) -> bool {
        self.face.is_some()
    }
}

/// The OpenFace quantities of one face (pixels, millimetres in camera axes, radians).
#[derive(Debug, Clone)]
pub struct Face {
    pub mesh: Mesh,
    /// The aligned face crop (eyes levelled, 1.5x the face): the next frame's mesh crop,
    /// and the appearance encoder's input.
    pub aligned_crop: Roi,
    pub landmarks_2d: Vec<(f64, f64)>,
    pub landmarks_3d: Vec<Vector3<f64>>,
    /// 56 eye points (left-most eye in the image first); `None` where not computed.
    pub eye_2d: Vec<Option<(f64, f64)>>,
    pub eye_3d: Vec<Option<Vector3<f64>>>,
    /// Unit gaze vectors of the left-most and right-most eye in the image.
    pub gaze: [Vector3<f64>; 2],
    pub gaze_angle: (f64, f64),
    pub pose: Pose,
    /// (pitch, yaw, roll) = (Rx, Ry, Rz).
    pub euler: (f64, f64, f64),
    /// Weak-perspective fit: scale (pixels per mm), Euler rotation, image translation.
    pub rigid: [f64; 6],
    pub aus: ActionUnits,
    /// MediaPipe's 52 expression coefficients (see [`models::BLENDSHAPE_NAMES`]), from the
    /// mesh and both irises.
    pub blendshapes: [f32; 52],
}

/// Whether to track from frame to frame (video) or detect on every frame (still images).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Video,
    StillImages,
}

/// MediaPipe's canonical face as the metric head model, with its rigid landmarks.
pub struct HeadModel {
    /// The canonical face relative to its 68-point centroid (mm, camera axes).
    pub vertices: Vec<Vector3<f64>>,
    rigid_ids: Vec<usize>,
    rigid_weights: Vec<f64>,
}

impl Default for HeadModel {
    fn default() -> Self {
        Self::new()
    }
}

impl HeadModel {
    pub fn new() -> Self {
        let canonical: Vec<Vector3<f64>> =
            canonical::VERTICES_MM.iter().map(|&v| vec3(v)).collect();
        let ibug = ibug68();
        let centroid = ibug
            .iter()
            .map(|b| vec3(b.apply(&canonical::VERTICES_MM)))
            .sum::<Vector3<f64>>()
            / ibug.len() as f64;
        Self {
            vertices: canonical.iter().map(|v| v - centroid).collect(),
            rigid_ids: canonical::PROCRUSTES_WEIGHTS.iter().map(|w| w.0).collect(),
            rigid_weights: canonical::PROCRUSTES_WEIGHTS
                .iter()
                .map(|w| w.1 as f64)
                .collect(),
        }
    }

    /// The canonical face's own geometry for the action units (its head frame).
    pub fn canonical_geometry(&self) -> OwnedHeadGeometry {
        let pts: Vec<[f32; 3]> = self
            .vertices
            .iter()
            .map(|v| [v.x as f32, v.y as f32, v.z as f32])
            .collect();
        OwnedHeadGeometry {
            ibug: ibug68().iter().map(|b| vec3(b.apply(&pts))).collect(),
            cheeks: [vec3(pts[205]), vec3(pts[425])],
            eye_openness: None,
        }
    }

    /// Fits the head to 468 mesh points (x, y in pixels, z relative depth in pixels):
    /// weak-perspective similarity on the rigid landmarks, then perspective PnP. `None`
    /// when the fit degenerates.
    pub fn fit(&self, points: &[[f32; 3]], k: &Intrinsics) -> Option<(Pose, Similarity)> {
        let image3: Vec<Vector3<f64>> = self.rigid_ids.iter().map(|&i| vec3(points[i])).collect();
        let model3: Vec<Vector3<f64>> = self.rigid_ids.iter().map(|&i| self.vertices[i]).collect();
        let sim = similarity(&model3, &image3, &self.rigid_weights);
        if !sim.scale.is_finite() || sim.scale <= 0.0 {
            return None;
        }
        let start = Pose::from_similarity(&sim, k);
        let image2: Vec<(f64, f64)> = image3.iter().map(|p| (p.x, p.y)).collect();
        let pose = refine_pnp(&model3, &image2, &self.rigid_weights, k, start);
        (pose.is_finite() && pose.translation.z > 0.0).then_some((pose, sim))
    }
}

/// [`HeadFrameGeometry`] with owned points.
pub struct OwnedHeadGeometry {
    pub ibug: Vec<Vector3<f64>>,
    pub cheeks: [Vector3<f64>; 2],
    pub eye_openness: Option<f64>,
}

impl OwnedHeadGeometry {
    pub fn view(&self) -> HeadFrameGeometry<'_> {
        HeadFrameGeometry {
            ibug: &self.ibug,
            cheeks: self.cheeks,
            eye_openness: self.eye_openness,
            blendshapes: None,
        }
    }
}

pub struct FaceAnalyzer {
    detector: FaceDetector,
    mesh: FaceMeshModel,
    iris: IrisModel,
    blendshapes: BlendshapeModel,
    /// The blendshape model's producer id (for the `blendshapes` modality).
    blendshape_producer: String,
    gaze_model: GazeModel,
    mode: Mode,
    intrinsics: IntrinsicsArgs,
    ibug: Vec<Blend>,
    eyelids: [Vec<Blend>; 2],
    head: HeadModel,
    tracked: Option<Roi>,
    /// [`appearance_signature`] of the tracked crop when the detector last confirmed it.
    confirmed_look: Option<[f32; SIGNATURE_SIDE * SIGNATURE_SIDE]>,
    faces_seen: u32,
    frames: u64,
    aus: AuEstimator,
    /// Frames since the face was last seen (a long absence resets the neutral face).
    lost_for: u64,
}

impl FaceAnalyzer {
    pub fn open(
        dir: &Path,
        manifest: &Manifest,
        library: Option<&Path>,
        intrinsics: IntrinsicsArgs,
        mode: Mode,
    ) -> Result<Self, ModelError> {
        let detector = FaceDetector::open(dir, manifest.get(DETECTOR_MODEL, dir)?, library)?;
        let mesh = FaceMeshModel::open(dir, manifest.get(MESH_MODEL, dir)?, library)?;
        let iris = IrisModel::open(dir, manifest.get(IRIS_MODEL, dir)?, library)?;
        let blendshape_entry = manifest.get(BLENDSHAPE_MODEL, dir)?;
        let blendshapes = BlendshapeModel::open(dir, blendshape_entry, library)?;
        let head = HeadModel::new();
        let aus = AuEstimator::new(&head.canonical_geometry().view());
        Ok(Self {
            detector,
            mesh,
            iris,
            blendshapes,
            blendshape_producer: blendshape_entry.producer_id(),
            gaze_model: GazeModel::default(),
            mode,
            intrinsics,
            ibug: ibug68(),
            eyelids: [eyelids(true), eyelids(false)],
            head,
            tracked: None,
            confirmed_look: None,
            faces_seen: 0,
            frames: 0,
            aus,
            lost_for: 0,
        })
    }

    /// Which eyeball model gaze is measured with (default: OpenFace's).
    pub fn with_gaze_model(mut self, gaze_model: GazeModel) -> Self {
        self.gaze_model = gaze_model;
        self
    }

    pub fn gaze_model(&self) -> GazeModel {
        self.gaze_model
    }

    /// The stage that stores this analyser's blendshapes (the `blendshapes` modality).
    pub fn blendshape_stage(&self) -> BlendshapeStage {
        BlendshapeStage {
            spec: ModalitySpec::by_model(
                "blendshapes",
                models::BLENDSHAPE_NAMES
                    .iter()
                    .map(|n| n.to_string())
                    .collect(),
                self.blendshape_producer.clone(),
                1,
            ),
        }
    }

    pub fn analyze(&mut self, image: &BgrImage) -> Result<FaceObservation, ModelError> {
        let frame = mat_of(image).map_err(|message| ModelError::Inference {
            name: MESH_MODEL.into(),
            message,
        })?;
        let k = self.intrinsics.resolve(image.width, image.height);
        let periodic = self.mode == Mode::StillImages || self.frames % COUNT_FACES_EVERY == 0;
        self.frames += 1;
        // The mesh with its aligned crop (the next frame's crop), computed once.
        let mut mesh = None;
        if let (Mode::Video, Some(roi)) = (self.mode, self.tracked) {
            let m = self.mesh.run(&frame, roi)?;
            if m.score >= MIN_FACE_CONFIDENCE {
                let crop = m.next_roi();
                mesh = Some((m, crop));
            }
        }
        // The mesh's own confidence stays high on a crop left on the background or on the
        // next shot after a cut, so the crop's look is compared with the one the detector
        // last confirmed: when it changed too much, the detector checks the track now.
        let mut look = mesh
            .as_ref()
            .map(|(_, crop)| appearance_signature(image, crop));
        let changed = match (&look, &self.confirmed_look) {
            (Some(now), Some(confirmed)) => pearson(now, confirmed) < MIN_LOOK_CORRELATION,
            _ => false,
        };
        if periodic || changed || mesh.is_none() {
            let dets = self.detector.detect(&frame, image.width, image.height)?;
            self.faces_seen = dets.len() as u32;
            if let Some((_, crop)) = &mesh {
                let best = dets
                    .iter()
                    .map(|d| d.face_roi().iou(crop))
                    .fold(0.0f32, f32::max);
                // Only a crop whose look changed is placed again: on a steady track a
                // missing overlap is more likely the detector missing a turned face
                // (while someone else is in view) than the mesh being lost.
                if changed && !dets.is_empty() && best < CONFIRM_TRACK_IOU {
                    // Placed again from the detection it overlaps (the same person,
                    // lagging), else chosen afresh (the crop was on the background).
                    self.tracked = Some(*crop);
                    mesh = None;
                }
            }
            if mesh.is_none() {
                if let Some(d) = self.choose(&dets, image.width, image.height) {
                    let m = self.mesh.run(&frame, d.face_roi())?;
                    let crop = m.next_roi();
                    look = Some(appearance_signature(image, &crop));
                    mesh = Some((m, crop));
                }
            }
            self.confirmed_look = if mesh.is_some() { look } else { None };
        }
        let Some((mesh, aligned_crop)) = mesh else {
            self.lost();
            return Ok(FaceObservation {
                faces_seen: self.faces_seen,
                confidence: 0.0,
                face: None,
            });
        };
        let confidence = mesh.score;
        if confidence < MIN_FACE_CONFIDENCE {
            self.lost();
            return Ok(FaceObservation {
                faces_seen: self.faces_seen,
                confidence,
                face: None,
            });
        }
        self.tracked = Some(aligned_crop);
        self.lost_for = 0;
        let face = self.describe(&frame, mesh, aligned_crop, &k)?;
        Ok(FaceObservation {
            faces_seen: self.faces_seen.max(1),
            confidence,
            face,
        })
    }

    fn lost(&mut self) {
        self.tracked = None;
        self.confirmed_look = None;
        self.lost_for += 1;
        if self.lost_for == NEW_PERSON_AFTER_FRAMES {
            self.aus.reset();
        }
    }

    /// The participant among the detections: the one overlapping the last tracked face,
    /// else the largest and most central (area divided by 1 + (distance from the image
    /// centre / a quarter of the diagonal)^2).
    fn choose<'a>(&self, dets: &'a [Detection], w: u32, h: u32) -> Option<&'a Detection> {
        if let Some(prev) = self.tracked {
            if let Some(d) = dets
                .iter()
                .map(|d| (d, d.face_roi().iou(&prev)))
                .filter(|(_, iou)| *iou > TRACK_MIN_IOU)
                .max_by(|a, b| a.1.total_cmp(&b.1))
            {
                return Some(d.0);
            }
        }
        let rank = |d: &Detection| bystanders::participant_rank(d, w, h);
        dets.iter().max_by(|a, b| rank(a).total_cmp(&rank(b)))
    }

    fn describe(
        &mut self,
        frame: &crop::FrameMat<'_>,
        mesh: Mesh,
        aligned_crop: Roi,
        k: &Intrinsics,
    ) -> Result<Option<Face>, ModelError> {
        let pts = &mesh.points;
        let Some((pose, sim)) = self.head.fit(pts, k) else {
            return Ok(None);
        };
        // Metric camera coordinates of every mesh point.
        let origin_depth_px = sim.translation.z;
        let metric: Vec<[f32; 3]> = pts
            .iter()
            .map(|p| {
                let z = pose.translation.z + (p[2] as f64 - origin_depth_px) / sim.scale;
                [
                    ((p[0] as f64 - k.cx) * z / k.fx) as f32,
                    ((p[1] as f64 - k.cy) * z / k.fy) as f32,
                    z as f32,
                ]
            })
            .collect();
        let pix: Vec<[f32; 2]> = pts.iter().map(|p| [p[0], p[1]]).collect();
        let landmarks_2d: Vec<(f64, f64)> = self
            .ibug
            .iter()
            .map(|b| {
                let p = b.apply(&pix);
                (p[0] as f64, p[1] as f64)
            })
            .collect();
        let landmarks_3d: Vec<Vector3<f64>> =
            self.ibug.iter().map(|b| vec3(b.apply(&metric))).collect();

        // Eyes: subject's right (mesh 33 outer, 133 inner) then left (263 outer, 362 inner),
        // each from its outer corner; the second is mirrored by the iris model.
        let corner = |i: usize| (pts[i][0], pts[i][1]);
        let iris_out = self.iris.run_pair(
            frame,
            [
                (corner(EYE_CORNERS[0].0), corner(EYE_CORNERS[0].1)),
                (corner(EYE_CORNERS[1].1), corner(EYE_CORNERS[1].0)),
            ],
        )?;
        let eye_openness = iris_out.iter().map(eye_openness).sum::<f64>() / 2.0;
        // MediaPipe's 478-point topology: the mesh, then the subject's right iris (centre,
        // then edge) and the left, as its own refinement places the iris model's points.
        let blendshapes = self
            .blendshapes
            .run(&pix, [&iris_out[0].iris, &iris_out[1].iris])?;
        let mut eyes = Vec::with_capacity(2);
        for (e, (&(a, b), eye)) in EYE_CORNERS.iter().zip(iris_out).enumerate() {
            let centre3 = match self.gaze_model {
                GazeModel::Anatomical => {
                    let lids = &self.eyelids[e];
                    let opening = lids
                        .iter()
                        .map(|bl| vec3(bl.apply(&metric)))
                        .sum::<Vector3<f64>>()
                        / lids.len() as f64;
                    let [ox, oy, oz] = EYEBALL_OFFSET_MM;
                    opening + pose.rotation * Vector3::new(ox, oy, oz)
                }
                GazeModel::OpenFace => {
                    // Subject's right eye: iBUG 36 and 39; left: 42 and 45.
                    let (c0, c1) = if e == 0 { (36, 39) } else { (42, 45) };
                    let corners = (landmarks_3d[c0] + landmarks_3d[c1]) / 2.0;
                    let [ox, oy, oz] = OPENFACE_EYEBALL_OFFSET_MM;
                    corners + pose.rotation * Vector3::new(ox, oy, oz)
                }
            };
            let iris_c = (eye.iris[0][0] as f64, eye.iris[0][1] as f64);
            let radius = eye.iris[1..]
                .iter()
                .map(|p| {
                    ((p[0] as f64 - iris_c.0).powi(2) + (p[1] as f64 - iris_c.1).powi(2)).sqrt()
                })
                .sum::<f64>()
                / 4.0;
            let pupil = on_eyeball(k, iris_c, &centre3);
            let gaze = (pupil - centre3).normalize();
            let mut e2 = Vec::with_capacity(28);
            let mut e3 = Vec::with_capacity(28);
            for (x, y) in iris_ring((iris_c.0 as f32, iris_c.1 as f32), radius as f32) {
                e2.push(Some((x as f64, y as f64)));
                e3.push(Some(on_eyeball(k, (x as f64, y as f64), &centre3)));
            }
            for bl in &self.eyelids[e] {
                let p = bl.apply(&pix);
                e2.push(Some((p[0] as f64, p[1] as f64)));
                e3.push(Some(vec3(bl.apply(&metric))));
            }
            // The pupil edge (20-27) is not measured.
            e2.extend(std::iter::repeat_n(None, 8));
            e3.extend(std::iter::repeat_n(None, 8));
            let mean_x = (pts[a][0] + pts[b][0]) / 2.0;
            eyes.push((mean_x, gaze, e2, e3));
        }
        eyes.sort_by(|p, q| p.0.total_cmp(&q.0));
        let gaze = [eyes[0].1, eyes[1].1];
        let g = (gaze[0] + gaze[1]) / 2.0;
        let gaze_angle = (g.x.atan2(-g.z), g.y.atan2(-g.z));
        let (mut eye_2d, mut eye_3d) = (Vec::with_capacity(56), Vec::with_capacity(56));
        for (_, _, e2, e3) in eyes {
            eye_2d.extend(e2);
            eye_3d.extend(e3);
        }

        // Head frame (rotation undone, origin at the model's) for the action units.
        let r_t: Matrix3<f64> = pose.rotation.transpose();
        let head: Vec<Vector3<f64>> = landmarks_3d
            .iter()
            .map(|p| r_t * (p - pose.translation))
            .collect();
        let cheeks = [205, 425].map(|i| r_t * (vec3(metric[i]) - pose.translation));
        let aus = self.aus.estimate(&HeadFrameGeometry {
            ibug: &head,
            cheeks,
            eye_openness: Some(eye_openness),
            blendshapes: Some(&blendshapes),
        });
        let (prx, pry, prz) = euler_xyz(&sim.rotation);
        Ok(Some(Face {
            aligned_crop,
            euler: euler_xyz(&pose.rotation),
            rigid: [
                sim.scale,
                prx,
                pry,
                prz,
                sim.translation.x,
                sim.translation.y,
            ],
            mesh,
            landmarks_2d,
            landmarks_3d,
            eye_2d,
            eye_3d,
            gaze,
            gaze_angle,
            pose,
            aus,
            blendshapes,
        }))
    }
}

/// Lid-to-lid distance over eye width on the iris model's contour (0 and 8 are the
/// corners, 1-7 one lid and 9-15 the other, in the same order).
fn eye_openness(eye: &models::Eye) -> f64 {
    let d = |a: usize, b: usize| {
        let (p, q) = (eye.contour[a], eye.contour[b]);
        (((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)) as f64).sqrt()
    };
    let width = d(0, 8).max(1e-6);
    (1..8).map(|k| d(k, k + 8)).sum::<f64>() / 7.0 / width
}

fn vec3(p: [f32; 3]) -> Vector3<f64> {
    Vector3::new(p[0] as f64, p[1] as f64, p[2] as f64)
}

/// Where the camera ray through pixel `uv` meets the eyeball (the nearer intersection; the
/// closest point of the ray when it misses).
pub fn on_eyeball(k: &Intrinsics, uv: (f64, f64), centre: &Vector3<f64>) -> Vector3<f64> {
    let d = Vector3::new((uv.0 - k.cx) / k.fx, (uv.1 - k.cy) / k.fy, 1.0).normalize();
    let b = d.dot(centre);
    let disc = b * b - centre.norm_squared() + EYEBALL_RADIUS_MM * EYEBALL_RADIUS_MM;
    let t = if disc >= 0.0 { b - disc.sqrt() } else { b };
    d * t
}
