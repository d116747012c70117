//! The body at a lower rate than the video: [`SampledBody`] computes the pose on one frame
//! in every `every` slots of the nominal frame grid and holds it on the frames between.
//!
//! Contract: a frame's slot is its time rounded to the nominal frame period; the slots are
//! cut into blocks of `every` (slot `div` `every`), and the pose is computed on the first
//! frame that arrives in each block (so a dropped frame moves the computation to the next
//! frame of its block, and a live session and the replay of its recording compute on the
//! same frames). On the other frames of the block the last computed pose is given again,
//! with [`BodySample::held_frames`] the slots since it was computed; a block whose
//! computation found no person (or not the participant's) gives no pose until the next
//! block. `every = 1` computes every frame, as the tracker alone does. Why: the landmark
//! model is the station's costliest per-frame model (docs/performance.md), and posture and
//! nearness, which the body is read for, change over seconds, not frames.

use super::{BodyTracker, Pose};
use crate::features::face::crop::FrameMat;
use crate::models::ModelError;

/// A pose on one frame: computed on it (`held_frames` 0) or carried from the frame the body
/// was last computed on, `held_frames` nominal frame periods before.
#[derive(Debug, Clone, PartialEq)]
pub struct BodySample {
    pub pose: Pose,
    pub held_frames: u32,
}

/// The tracker run on one frame in every `every` of the nominal grid.
pub struct SampledBody {
    tracker: BodyTracker,
    every: i64,
    /// The slot the body was last computed on and what it found there.
    last: Option<(i64, Option<Pose>)>,
    computed: u64,
}

impl SampledBody {
    /// `every` is clamped to at least 1 (the configuration refuses 0).
    pub fn new(tracker: BodyTracker, every: u32) -> Self {
        Self {
            tracker,
            every: i64::from(every.max(1)),
            last: None,
            computed: 0,
        }
    }

    /// Frames on which the person detector ran.
    pub fn detections_run(&self) -> u64 {
        self.tracker.detections_run
    }

    /// Frames on which the body was computed (the others held it).
    pub fn frames_computed(&self) -> u64 {
        self.computed
    }

    /// The pose for the frame taken at `t_ns`: computed when the frame opens a block of the
    /// grid (and kept only when `keep` accepts it: the participant's), held otherwise.
    pub fn next(
        &mut self,
        frame: &FrameMat<'_>,
        width: u32,
        height: u32,
        t_ns: u64,
        keep: impl FnOnce(&Pose) -> bool,
    ) -> Result<Option<BodySample>, ModelError> {
        let slot = (t_ns as f64 / self.tracker.period_ns).round() as i64;
        if opens_block(self.last.as_ref().map(|(c, _)| *c), slot, self.every) {
            self.computed += 1;
            let pose = self
                .tracker
                .track(frame, width, height, t_ns)?
                .filter(|p| keep(p));
            self.last = Some((slot, pose));
        }
        Ok(self.last.as_ref().and_then(|(computed, pose)| {
            pose.as_ref().map(|pose| BodySample {
                pose: pose.clone(),
                held_frames: u32::try_from(slot - computed).unwrap_or(0),
            })
        }))
    }
}

/// Whether the frame in grid slot `slot` computes the body, the last computation having been
/// in slot `computed`: the first frame of the video, the first frame in a new block of
/// `every` slots, or a frame earlier than the last computation (a clock stepped back).
fn opens_block(computed: Option<i64>, slot: i64, every: i64) -> bool {
    computed.is_none_or(|c| slot < c || slot.div_euclid(every) != c.div_euclid(every))
}

#[cfg(test)]
mod tests {
    use super::opens_block;

    /// The slots of the frames that compute the body, and each frame's held count.
    fn run(slots: &[i64], every: i64) -> (Vec<i64>, Vec<i64>) {
        let (mut computed, mut at, mut held) = (vec![], None, vec![]);
        for &s in slots {
            if opens_block(at, s, every) {
                at = Some(s);
                computed.push(s);
            }
            held.push(s - at.unwrap_or(s));
        }
        (computed, held)
    }

    #[test]
    fn the_body_is_computed_on_the_first_frame_of_each_block_and_held_between() {
        // Every frame present: slots 0, 3, 6, 9 compute; the rest hold 1 and 2.
        let (c, h) = run(&(0..10).collect::<Vec<_>>(), 3);
        assert_eq!(c, [0, 3, 6, 9]);
        assert_eq!(h, [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]);
        // Slot 3 dropped: its block computes on slot 4; slot 6 opens the next block as
        // before, so a drop never shifts the frames computed after it.
        let (c, h) = run(&[0, 1, 2, 4, 5, 6, 7], 3);
        assert_eq!(c, [0, 4, 6]);
        assert_eq!(h, [0, 1, 2, 0, 1, 0, 1]);
        // A recording that starts mid-block computes on its first frame.
        assert_eq!(run(&[7, 8, 9], 3).0, [7, 9]);
        // every = 1: every frame; a clock stepped back computes again.
        assert_eq!(run(&[0, 1, 2], 1).0, [0, 1, 2]);
        assert_eq!(run(&[5, 2, 3], 3).0, [5, 2, 3]);
    }
}
