//! The `body` modality as the pipeline stores it (layout version [`BODY_LAYOUT_VERSION`])
//! and [`BodyStage`], the frame stage that computes it.
//!
//! Contract: the vector is `confidence`, then per landmark (MediaPipe's order, 0-32) `x_i`,
//! `y_i` in image pixels, `z_i` (relative depth at the scale of x), `visibility_i`,
//! `presence_i`, then the world points `X_i`, `Y_i`, `Z_i` in metres, then `held_frames`
//! (0: computed on this frame; k: the pose computed k nominal frames before, held at the
//! body's lower rate, `rate.rs`); absent (no vector) on frames where no person is found. The
//! CSV of `extract body` ([`csv_header`], [`csv_row`]) has OpenFace's leading columns and the
//! issue's order, `held_frames` last.

use super::rate::{BodySample, SampledBody};
use super::{Pose, POINTS};
use crate::capture::screening::Screening;
use crate::capture::VideoFrame;
use crate::core::ModalitySpec;
use crate::features::face::crop::mat_of;
use crate::features::{FrameContext, FrameStage, StageError};

/// Bumped whenever a column's meaning changes (2: `held_frames` appended, the body at a
/// lower rate than the video).
pub const BODY_LAYOUT_VERSION: u32 = 2;

/// The `body` modality's columns.
pub fn body_columns() -> Vec<String> {
    let mut c = vec!["confidence".to_string()];
    for name in ["x", "y", "z", "visibility", "presence", "X", "Y", "Z"] {
        c.extend((0..POINTS).map(|i| format!("{name}_{i}")));
    }
    c.push("held_frames".to_string());
    c
}

/// Where each group of columns starts in the vector (after `confidence`).
pub fn column_of(name: &str, landmark: usize) -> Option<usize> {
    let group = ["x", "y", "z", "visibility", "presence", "X", "Y", "Z"]
        .iter()
        .position(|g| *g == name)?;
    (landmark < POINTS).then_some(1 + group * POINTS + landmark)
}

impl BodySample {
    /// The `body` modality vector (see [`body_columns`]).
    pub fn vector(&self) -> Vec<f32> {
        let p = &self.pose;
        let mut v = Vec::with_capacity(2 + 8 * POINTS);
        v.push(p.confidence);
        for axis in 0..3 {
            v.extend(p.image.iter().map(|q| q[axis]));
        }
        v.extend(p.visibility);
        v.extend(p.presence);
        for axis in 0..3 {
            v.extend(p.world.iter().map(|q| q[axis]));
        }
        v.push(self.held_frames as f32);
        v
    }
}

/// The header of `extract body`'s CSV: OpenFace's `frame, timestamp, confidence, success`,
/// then `x_0..x_32`, `y_0..y_32` (pixels), `visibility_0..32`, `X_0..Z_32` (metres), then
/// `z_0..32` and `presence_0..32`.
pub fn csv_header() -> String {
    let mut c: Vec<String> = ["frame", "timestamp", "confidence", "success"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for name in ["x", "y", "visibility", "X", "Y", "Z", "z", "presence"] {
        c.extend((0..POINTS).map(|i| format!("{name}_{i}")));
    }
    c.push("held_frames".to_string());
    c.join(",")
}

/// One CSV row: `frame` 1-based, `timestamp` in seconds; a frame without a person has
/// `success` 0 and empty landmark fields.
pub fn csv_row(frame: u64, timestamp_s: f64, sample: Option<&BodySample>) -> String {
    let mut row = format!("{frame},{timestamp_s:.3}");
    match sample {
        None => {
            row.push_str(",0,0");
            for _ in 0..8 * POINTS + 1 {
                row.push(',');
            }
        }
        Some(BodySample {
            pose: p,
            held_frames,
        }) => {
            row.push_str(&format!(",{:.4},1", p.confidence));
            let mut put = |v: f32, digits: usize| row.push_str(&format!(",{v:.digits$}"));
            for axis in 0..2 {
                p.image.iter().for_each(|q| put(q[axis], 2));
            }
            p.visibility.iter().for_each(|&v| put(v, 4));
            for axis in 0..3 {
                p.world.iter().for_each(|q| put(q[axis], 5));
            }
            p.image.iter().for_each(|q| put(q[2], 2));
            p.presence.iter().for_each(|&v| put(v, 4));
            row.push_str(&format!(",{held_frames}"));
        }
    }
    row
}

/// The frame stage: one tracker at the body's rate, one vector per frame with a person.
pub struct BodyStage {
    body: SampledBody,
    spec: ModalitySpec,
}

impl BodyStage {
    pub fn new(body: SampledBody) -> Self {
        Self {
            body,
            spec: ModalitySpec::by_model(
                "body",
                body_columns(),
                format!("body::BodyStage {}", super::LANDMARK_MODEL),
                BODY_LAYOUT_VERSION,
            ),
        }
    }
}

impl FrameStage for BodyStage {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(
        &mut self,
        frame: &VideoFrame,
        ctx: &mut FrameContext,
    ) -> Result<Option<Vec<f32>>, StageError> {
        let fail = |message: String| StageError {
            stage: "body",
            message,
        };
        let mat = mat_of(&frame.image).map_err(fail)?;
        let sample = self
            .body
            .next(
                &mat,
                frame.image.width,
                frame.image.height,
                frame.t_ns,
                |p| participants_body(p, frame.screening.as_ref(), ctx.face_roi.as_ref()),
            )
            .map_err(|e| fail(e.to_string()))?;
        Ok(sample.map(|s| s.vector()))
    }
}

/// How far from the participant's face crop's centre, in crop sides, the body's nose may
/// be and still be theirs (the crop is 1.5 faces wide: the nose is well inside it).
const NOSE_IN_FACE_CROP: f32 = 0.75;

/// Under the bystander screen (the frame was screened), a body counts only when it is the
/// participant's: its nose within their face crop when the facial stage found their face;
/// when it did not, any body while no bystander is in view (a participant turned away keeps
/// their body), and with someone else in view, only one whose nose is near the
/// participant's face as the screen found it (none when the screen did not find them: it
/// cannot be told whose it is). Frames that were not screened (`[privacy] bystanders =
/// "keep"`) keep the body as before.
pub fn participants_body(
    pose: &Pose,
    screening: Option<&Screening>,
    face_roi: Option<&crate::features::face::crop::Roi>,
) -> bool {
    let Some(screening) = screening else {
        return true;
    };
    let face = match (face_roi, screening.participant_box) {
        (Some(f), _) => (f.cx, f.cy, f.w.max(f.h)),
        (None, _) if screening.bystanders == 0 => return true,
        // The detector's box is tighter than the facial stage's crop (1.5 faces wide).
        (None, Some([x0, y0, x1, y1])) => {
            let (x0, y0, x1, y1) = (f32::from(x0), f32::from(y0), f32::from(x1), f32::from(y1));
            (
                (x0 + x1) / 2.0,
                (y0 + y1) / 2.0,
                1.5 * (x1 - x0).max(y1 - y0),
            )
        }
        (None, None) => return false,
    };
    let [x, y, _] = pose.image[0];
    let reach = NOSE_IN_FACE_CROP * face.2;
    (x - face.0).abs() <= reach && (y - face.1).abs() <= reach
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_vector_and_csv_agree_on_their_shapes() {
        let cols = body_columns();
        assert_eq!(cols.len(), 2 + 8 * POINTS);
        assert_eq!(cols[column_of("x", 0).unwrap()], "x_0");
        assert_eq!(cols[column_of("Z", 32).unwrap()], "Z_32");
        assert_eq!(cols[column_of("presence", 11).unwrap()], "presence_11");
        let roi = crate::features::face::crop::Roi {
            cx: 1.0,
            cy: 2.0,
            w: 3.0,
            h: 3.0,
            rotation: 0.0,
        };
        let mut pose = Pose {
            confidence: 0.9,
            image: [[0.0; 3]; POINTS],
            visibility: [0.5; POINTS],
            presence: [0.7; POINTS],
            world: [[0.0; 3]; POINTS],
            roi,
            next_roi: roi,
            alignment: ((0.0, 0.0), (0.0, 0.0)),
        };
        pose.image[11] = [320.0, 200.0, -5.0];
        pose.world[32] = [0.1, 0.2, 0.3];
        let sample = BodySample {
            pose,
            held_frames: 2,
        };
        let v = sample.vector();
        assert_eq!(v.len(), cols.len());
        assert_eq!(v[cols.len() - 1], 2.0);
        assert_eq!(v[column_of("x", 11).unwrap()], 320.0);
        assert_eq!(v[column_of("z", 11).unwrap()], -5.0);
        assert_eq!(v[column_of("Z", 32).unwrap()], 0.3);
        let header = csv_header();
        let row = csv_row(3, 0.1333, Some(&sample));
        assert!(row.ends_with(",2"));
        assert_eq!(header.split(',').count(), row.split(',').count());
        assert_eq!(
            header.split(',').count(),
            csv_row(4, 0.2, None).split(',').count()
        );
        assert!(header.starts_with("frame,timestamp,confidence,success,x_0,"));
        assert!(row.starts_with("3,0.133,0.9000,1,"));
    }
}
