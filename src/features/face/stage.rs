//! The facial stages as the pipeline runs them: the stored `face` columns (layout version
//! [`FACE_LAYOUT_VERSION`]), [`FaceStage`] and [`BlendshapeStage`] over one [`FaceAnalyzer`].

use super::*;

/// The `face` modality's columns: the replay's per-frame visual feature vector.
pub fn face_columns() -> Vec<String> {
    let mut c: Vec<String> = ["confidence", "faces_seen"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    c.extend(
        [
            "pose_Tx", "pose_Ty", "pose_Tz", "pose_Rx", "pose_Ry", "pose_Rz",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    c.extend(
        [
            "gaze_0_x",
            "gaze_0_y",
            "gaze_0_z",
            "gaze_1_x",
            "gaze_1_y",
            "gaze_1_z",
            "gaze_angle_x",
            "gaze_angle_y",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    c.extend(au::AU_R.iter().map(|a| format!("{a}_r")));
    c.extend(au::AU_C.iter().map(|a| format!("{a}_c")));
    for axis in ["x", "y"] {
        c.extend((0..68).map(|i| format!("{axis}_{i}")));
    }
    for axis in ["X", "Y", "Z"] {
        c.extend((0..68).map(|i| format!("{axis}_{i}")));
    }
    c
}

impl Face {
    /// The `face` modality vector (see [`face_columns`]).
    pub fn vector(&self, confidence: f32, faces_seen: u32) -> Vec<f32> {
        let mut v = Vec::with_capacity(391);
        v.push(confidence);
        v.push(faces_seen as f32);
        let t = self.pose.translation;
        v.extend([t.x, t.y, t.z, self.euler.0, self.euler.1, self.euler.2].map(|x| x as f32));
        for g in &self.gaze {
            v.extend([g.x as f32, g.y as f32, g.z as f32]);
        }
        v.extend([self.gaze_angle.0 as f32, self.gaze_angle.1 as f32]);
        v.extend(self.aus.intensity);
        v.extend(self.aus.presence);
        v.extend(self.landmarks_2d.iter().map(|p| p.0 as f32));
        v.extend(self.landmarks_2d.iter().map(|p| p.1 as f32));
        for axis in 0..3 {
            v.extend(self.landmarks_3d.iter().map(|p| p[axis] as f32));
        }
        v
    }
}

/// The `face` modality's layout version: 2 since gaze follows [`GazeModel`] (OpenFace's
/// geometry by default) and the AUs read the blendshapes too; 1 had the anatomical gaze and
/// geometric AUs.
pub const FACE_LAYOUT_VERSION: u32 = 2;

/// The `blendshapes` modality: MediaPipe's 52 coefficients per frame (ARKit names, in the
/// model's order, `_neutral` first), present when the facial stage found a face. It reads
/// what the facial stage computed on the frame (its own thread does no model work), so
/// it comes after the facial stage in the layout. Made by
/// [`FaceAnalyzer::blendshape_stage`], whose model's id and sha256 are its producer.
pub struct BlendshapeStage {
    pub(super) spec: ModalitySpec,
}

impl FrameStage for BlendshapeStage {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(
        &mut self,
        _frame: &VideoFrame,
        ctx: &mut FrameContext,
    ) -> Result<Option<Vec<f32>>, StageError> {
        Ok(ctx.blendshapes.map(|b| b.to_vec()))
    }
}

/// The replay's facial stage: the face vector, present when a face was found (the
/// replay counts presence; `faces_seen` is in the vector).
pub struct FaceStage {
    analyzer: FaceAnalyzer,
    spec: ModalitySpec,
}

impl FaceStage {
    pub fn new(analyzer: FaceAnalyzer) -> Self {
        let producer = format!("face::FaceStage gaze={}", analyzer.gaze_model().name());
        Self {
            analyzer,
            spec: ModalitySpec::by_model("face", face_columns(), producer, FACE_LAYOUT_VERSION),
        }
    }
}

impl FrameStage for FaceStage {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(
        &mut self,
        frame: &VideoFrame,
        ctx: &mut FrameContext,
    ) -> Result<Option<Vec<f32>>, StageError> {
        let obs = self
            .analyzer
            .analyze(&frame.image)
            .map_err(|e| StageError {
                stage: "face",
                message: e.to_string(),
            })?;
        ctx.face_roi = obs.face.as_ref().map(|f| f.aligned_crop);
        ctx.blendshapes = obs.face.as_ref().map(|f| f.blendshapes);
        Ok(obs.face.map(|f| f.vector(obs.confidence, obs.faces_seen)))
    }
}
