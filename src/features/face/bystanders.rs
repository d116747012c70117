//! The bystander screen: in a home, only the participant is measured and kept.
//!
//! Contract: [`BystanderScreen::screen`] looks at every frame with the face detector (the
//! short-range model the facial stage uses), decides which face is the participant's and
//! fills every other face's region with flat grey ([`MASK_GREY`]) in the image itself,
//! before anything downstream (the stages, the recorder) sees it. It returns the frame's
//! [`Screening`] (counts only: nothing about a bystander is kept, no landmark, crop or
//! embedding). No identity model and no face recognition are involved: the participant is
//! found by place and continuity alone.
//!
//! The rule (docs/station.md, "Bystanders"):
//! - at the session's start, the participant is the face the facial stage would choose:
//!   the largest and most central ([`participant_rank`]), in the first frame with a face;
//! - every bystander is followed too, by place and motion: each keeps its last box and its
//!   smoothed motion per frame, which predicts where it is next;
//! - from frame to frame, each face goes to the person whose expected box it overlaps
//!   most (the participant's last box, a bystander's predicted one; IoU >=
//!   [`FOLLOW_MIN_IOU`] for the participant, [`KNOWN_BYSTANDER_IOU`] for a bystander),
//!   closest pairs first: a visitor walking in front of the participant overlaps their own
//!   predicted box more than the participant's still one, so they stay a bystander, and
//!   the participant, hidden behind them, is lost, not replaced;
//! - the participant with no overlapping face: the nearest face no bystander claimed,
//!   within [`FOLLOW_RADIUS`] of their width (motion), or, after a loss, within
//!   [`REACQUIRE_RADIUS`] face widths of where they were lost; a face anywhere else stays
//!   a bystander, however large or central (the participant leaving while a visitor stays
//!   must not make the visitor "the participant").
//!
//! Masks: a detected bystander's box enlarged to cover hair, ears and chin
//! ([`MASK_MARGIN_X`], [`MASK_MARGIN_TOP`], [`MASK_MARGIN_BOTTOM`]), filled flat: no detail
//! of the region is left at any strength of processing. The participant's face box (found
//! on this frame, widened by [`PARTICIPANT_MARGIN`]) is left out of that enlargement when
//! the bystander's face (widened by [`BYSTANDER_FACE_REACH`]) is clear of it, so a
//! bystander sitting beside them does not grey the edge of their face; a bystander's face
//! near or over the participant's is masked whole. A bystander the detector misses
//! stays masked for [`HOLD_FRAMES`] frames, at its last box and where its motion takes it,
//! so a frame where the detector misses a turned or passing face does not show it.
//!
//! Bodies: below every masked face, the column where that person's body is (shoulders and
//! arms: [`BODY_HALF_WIDTH`] face widths on each side of the face's centre, from the
//! face's foot to the image's foot) is filled too. The participant's own column
//! ([`PARTICIPANT_BODY_HALF_WIDTH`] of their face widths, from their face's top down) is
//! left out of it while the bystander's face is clear of theirs, so someone sitting beside
//! them does not grey their shoulders; a bystander in front of them is masked whole. The
//! body is found from the face by geometry, not by the body model (which runs after the
//! recorder on the participant alone): a body whose face the detector does not see is not
//! masked.

use super::crop::mat_of;
use super::models::{Detection, FaceDetector};
use crate::capture::screening::Screening;
use crate::capture::BgrImage;
use crate::models::ModelError;

/// The fill of a masked region (mid grey, in each of B, G, R).
pub const MASK_GREY: u8 = 128;
/// A masked region extends the detection box by this fraction of its width on each side,
pub const MASK_MARGIN_X: f32 = 0.45;
/// by this fraction of its height above (hair, forehead),
pub const MASK_MARGIN_TOP: f32 = 0.7;
/// and by this fraction below (chin).
pub const MASK_MARGIN_BOTTOM: f32 = 0.45;
/// The participant's face box widened by this much on each side is kept out of a
/// bystander's widened region (not out of the bystander's own face box).
pub const PARTICIPANT_MARGIN: f32 = 0.15;
/// A bystander's face box widened by this much on each side (ears, cheeks) must be clear
/// of the participant's spared box for the sparing to apply.
pub const BYSTANDER_FACE_REACH: f32 = 0.2;
pub use crate::capture::screening::HOLD_FRAMES;
/// A bystander's body: the column this many of their face widths on each side of their
/// face's centre (by typical adult proportions, not measured here, shoulders are about
/// 2.6-2.9 face widths across, arms at the sides about 3.5), from the foot of their
/// face's box to the image's foot.
pub const BODY_HALF_WIDTH: f32 = 1.75;
/// The participant's body, kept out of a bystander's column while their faces are apart:
/// this many of their face widths on each side of their face's centre (their shoulders),
/// from their face's top down.
pub const PARTICIPANT_BODY_HALF_WIDTH: f32 = 1.25;
/// A face overlapping the participant's last box at least this much is theirs.
pub const FOLLOW_MIN_IOU: f32 = 0.3;
/// Otherwise the nearest face whose centre moved at most this many of their face widths.
pub const FOLLOW_RADIUS: f32 = 0.75;
/// After a loss, a face within this many of the participant's face widths of where they
/// were lost is taken as theirs again (people side by side sit about two face widths
/// apart, centre to centre).
pub const REACQUIRE_RADIUS: f32 = 1.0;
/// A face overlapping a bystander's predicted box at least this much may be that
/// bystander (and then is never taken as the participant by nearness).
pub const KNOWN_BYSTANDER_IOU: f32 = 0.3;

/// An axis-aligned box in image pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rect {
    x0: f32,
    y0: f32,
    x1: f32,
    y1: f32,
}

impl Rect {
    fn of(d: &Detection) -> Self {
        Rect {
            x0: d.xmin,
            y0: d.ymin,
            x1: d.xmin + d.width,
            y1: d.ymin + d.height,
        }
    }

    fn width(&self) -> f32 {
        self.x1 - self.x0
    }

    fn centre(&self) -> (f32, f32) {
        ((self.x0 + self.x1) / 2.0, (self.y0 + self.y1) / 2.0)
    }

    fn iou(&self, o: &Rect) -> f32 {
        let w = (self.x1.min(o.x1) - self.x0.max(o.x0)).max(0.0);
        let h = (self.y1.min(o.y1) - self.y0.max(o.y0)).max(0.0);
        let inter = w * h;
        let area = |r: &Rect| (r.x1 - r.x0) * (r.y1 - r.y0);
        let union = area(self) + area(o) - inter;
        if union > 0.0 {
            inter / union
        } else {
            0.0
        }
    }

    fn distance(&self, o: &Rect) -> f32 {
        let (a, b) = (self.centre(), o.centre());
        ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
    }

    /// This box widened by fractions of its width on the sides (`x`) and of its height
    /// above (`top`) and below (`bottom`).
    fn widened(&self, x: f32, top: f32, bottom: f32) -> Rect {
        let (w, h) = (self.x1 - self.x0, self.y1 - self.y0);
        Rect {
            x0: self.x0 - x * w,
            y0: self.y0 - top * h,
            x1: self.x1 + x * w,
            y1: self.y1 + bottom * h,
        }
    }

    /// This box widened by `margin` of its width and height on each side.
    fn grown(&self, margin: f32) -> Rect {
        self.widened(margin, margin, margin)
    }

    /// This box moved by `(dx, dy)`.
    fn shifted(&self, (dx, dy): (f32, f32)) -> Rect {
        Rect {
            x0: self.x0 + dx,
            y0: self.y0 + dy,
            x1: self.x1 + dx,
            y1: self.y1 + dy,
        }
    }

    fn intersects(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.y0 < o.y1 && o.y0 < self.y1
    }

    /// The region masked for a face box.
    fn mask_region(&self) -> Rect {
        self.widened(MASK_MARGIN_X, MASK_MARGIN_TOP, MASK_MARGIN_BOTTOM)
    }

    /// The column `half_width` of this face's widths on each side of its centre, from
    /// `top` down past any image's foot ([`fill`] clips it): where this face's body is.
    fn column(&self, half_width: f32, top: f32) -> Rect {
        let (cx, _) = self.centre();
        let half = half_width * self.width();
        Rect {
            x0: cx - half,
            y0: top,
            x1: cx + half,
            y1: f32::MAX,
        }
    }

    /// A bystander's body below this face box.
    fn body_below(&self) -> Rect {
        self.column(BODY_HALF_WIDTH, self.y1)
    }
}

/// The participant's rank among faces when nothing else decides (the session's start, in
/// the facial stage too): area divided by 1 + (distance from the image centre / a quarter
/// of the diagonal)^2.
pub fn participant_rank(d: &Detection, w: u32, h: u32) -> f32 {
    rank(d.centre(), d.width * d.height, w, h)
}

/// [`participant_rank`] of a face centred at `(x, y)` covering `area` square pixels.
fn rank((x, y): (f32, f32), area: f32, w: u32, h: u32) -> f32 {
    let (cx, cy) = (w as f32 / 2.0, h as f32 / 2.0);
    let quarter_diag = ((w * w + h * h) as f32).sqrt() / 4.0;
    let dist = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt() / quarter_diag;
    area / (1.0 + dist * dist)
}

/// Where the participant is, as far as the screen knows.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Participant {
    /// No face seen yet this session.
    NotYetSeen,
    /// Found in the last frame at this box.
    At(Rect),
    /// Lost; last seen at this box.
    LostAt(Rect),
}

impl Participant {
    fn last(&self) -> Option<Rect> {
        match *self {
            Participant::NotYetSeen => None,
            Participant::At(r) | Participant::LostAt(r) => Some(r),
        }
    }
}

/// A bystander followed from frame to frame (by place and motion only): its last box, its
/// motion per frame, and the frames its region stays masked without a detection.
#[derive(Debug, Clone, Copy, PartialEq)]
struct BystanderTrack {
    last: Rect,
    /// Centre's motion per frame (smoothed), to predict where a passing person is next.
    velocity: (f32, f32),
    /// Frames since the detector last found it.
    missed: u32,
}

impl BystanderTrack {
    /// Where its motion takes it `frames` frames after it was last found.
    fn after(&self, frames: u32) -> Rect {
        let k = frames as f32;
        self.last
            .shifted((self.velocity.0 * k, self.velocity.1 * k))
    }

    /// Where it is expected on the next frame.
    fn predicted(&self) -> Rect {
        self.after(self.missed + 1)
    }

    fn found_at(&mut self, r: Rect) {
        let (a, b) = (self.last.centre(), r.centre());
        let k = (self.missed + 1) as f32;
        let v = ((b.0 - a.0) / k, (b.1 - a.1) / k);
        self.velocity = (
            VELOCITY_SMOOTHING * v.0 + (1.0 - VELOCITY_SMOOTHING) * self.velocity.0,
            VELOCITY_SMOOTHING * v.1 + (1.0 - VELOCITY_SMOOTHING) * self.velocity.1,
        );
        self.last = r;
        self.missed = 0;
    }
}

/// Weight of the newest motion in a bystander's smoothed velocity.
const VELOCITY_SMOOTHING: f32 = 0.5;

/// Who each of a frame's detections is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Owner {
    Participant,
    Bystander(usize),
    New,
}

/// The per-session screen (one per video stream; it keeps the participant's track and
/// the bystanders').
pub struct BystanderScreen {
    detector: FaceDetector,
    participant: Participant,
    /// Bystanders in view or seen in the last [`HOLD_FRAMES`] frames.
    bystanders: Vec<BystanderTrack>,
}

impl BystanderScreen {
    pub fn new(detector: FaceDetector) -> Self {
        Self {
            detector,
            participant: Participant::NotYetSeen,
            bystanders: Vec::new(),
        }
    }

    /// Opens the face detector of the manifest for a screen.
    pub fn open(
        dir: &std::path::Path,
        manifest: &crate::models::manifest::Manifest,
        library: Option<&std::path::Path>,
    ) -> Result<Self, ModelError> {
        let entry = manifest.get(super::DETECTOR_MODEL, dir)?;
        Ok(Self::new(FaceDetector::open(dir, entry, library)?))
    }

    /// Screens `image` in place: finds the faces, follows the participant, masks the rest.
    pub fn screen(&mut self, image: &mut BgrImage) -> Result<Screening, ModelError> {
        let dets: Vec<Rect> = {
            let frame = mat_of(image).map_err(|message| ModelError::Inference {
                name: super::DETECTOR_MODEL.into(),
                message,
            })?;
            self.detector
                .detect(&frame, image.width, image.height)?
                .iter()
                .map(Rect::of)
                .collect()
        };
        let owners = self.assign(&dets, image.width, image.height);
        let found = owners.iter().position(|o| *o == Owner::Participant);
        self.participant = match (found, self.participant) {
            (Some(i), _) => Participant::At(dets[i]),
            (None, Participant::At(r)) => Participant::LostAt(r),
            (None, p) => p,
        };
        let mut matched = vec![false; self.bystanders.len()];
        for (d, owner) in dets.iter().zip(&owners) {
            match *owner {
                Owner::Bystander(j) => {
                    self.bystanders[j].found_at(*d);
                    matched[j] = true;
                }
                Owner::New => {
                    self.bystanders.push(BystanderTrack {
                        last: *d,
                        velocity: (0.0, 0.0),
                        missed: 0,
                    });
                    matched.push(true);
                }
                Owner::Participant => {}
            }
        }
        for (t, m) in self.bystanders.iter_mut().zip(&matched) {
            if !m {
                t.missed += 1;
            }
        }
        self.bystanders.retain(|t| t.missed <= HOLD_FRAMES);
        // The participant's face (with a margin) is left out of a bystander's widened
        // region when the two sit apart: people side by side keep their faces whole; a
        // bystander's face near or over the participant's is masked whole.
        let spared = found.map(|i| dets[i].grown(PARTICIPANT_MARGIN));
        let participant_body =
            found.map(|i| dets[i].column(PARTICIPANT_BODY_HALF_WIDTH, dets[i].y0));
        for t in &self.bystanders {
            // A bystander found now is masked where it is; one missed, where it was last
            // and where its motion takes it (a passing person keeps moving).
            let missed = (t.missed > 0).then(|| t.after(t.missed));
            for at in std::iter::once(t.last).chain(missed) {
                let beside = spared_beside(spared, &at);
                fill(image, &at.mask_region(), beside);
                // Their body below; the participant's shoulders are theirs to keep only
                // while the two faces are apart (the same test as for the face).
                fill(image, &at.body_below(), beside.and(participant_body));
            }
        }
        let bystanders = owners.iter().filter(|o| **o != Owner::Participant).count();
        Ok(Screening {
            faces: dets.len().min(usize::from(u16::MAX)) as u16,
            bystanders: bystanders.min(usize::from(u16::MAX)) as u16,
            masked: self.bystanders.len().min(usize::from(u16::MAX)) as u16,
            participant: found.is_some(),
            participant_box: found.map(|i| {
                let r = &dets[i];
                let px = |v: f32| v.round().clamp(f32::from(i16::MIN), f32::from(i16::MAX)) as i16;
                [px(r.x0), px(r.y0), px(r.x1), px(r.y1)]
            }),
        })
    }

    /// Who each detection is, by the rule of the module's contract: first, by overlap with
    /// where each known person is expected (the participant's last box, each bystander's
    /// predicted one), the closest pairs first, so a bystander passing in front of the
    /// participant stays a bystander; then, when the participant has no detection, by
    /// nearness among the faces no bystander claimed; every other face is a new bystander.
    fn assign(&self, dets: &[Rect], w: u32, h: u32) -> Vec<Owner> {
        let mut owners = vec![Owner::New; dets.len()];
        let mut pairs: Vec<(f32, usize, Owner)> = Vec::new();
        for (i, d) in dets.iter().enumerate() {
            if let Some(last) = self.participant.last() {
                pairs.push((d.iou(&last), i, Owner::Participant));
            }
            for (j, t) in self.bystanders.iter().enumerate() {
                pairs.push((d.iou(&t.predicted()), i, Owner::Bystander(j)));
            }
        }
        pairs.retain(|(iou, _, owner)| {
            let least = match owner {
                Owner::Participant => FOLLOW_MIN_IOU,
                _ => KNOWN_BYSTANDER_IOU,
            };
            *iou >= least
        });
        pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut taken = Vec::new();
        for (_, i, owner) in pairs {
            if owners[i] == Owner::New && !taken.contains(&owner) {
                owners[i] = owner;
                taken.push(owner);
            }
        }
        if !taken.contains(&Owner::Participant) {
            let free = || (0..dets.len()).filter(|&i| owners[i] == Owner::New);
            let nearest_within = |to: &Rect, radius: f32| {
                free()
                    .map(|i| (i, dets[i].distance(to)))
                    .filter(|(_, dist)| *dist <= radius * to.width())
                    .min_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|(i, _)| i)
            };
            let chosen = match self.participant {
                Participant::NotYetSeen => free()
                    .max_by(|&a, &b| rank_box(&dets[a], w, h).total_cmp(&rank_box(&dets[b], w, h))),
                Participant::At(last) => nearest_within(&last, FOLLOW_RADIUS),
                Participant::LostAt(last) => nearest_within(&last, REACQUIRE_RADIUS),
            };
            if let Some(i) = chosen {
                owners[i] = Owner::Participant;
            }
        }
        owners
    }
}

/// [`participant_rank`] of a box.
fn rank_box(r: &Rect, w: u32, h: u32) -> f32 {
    rank(r.centre(), (r.x1 - r.x0) * (r.y1 - r.y0), w, h)
}

/// The participant's spared face box when a bystander's face (`face`, widened by
/// [`BYSTANDER_FACE_REACH`] for the ears and cheeks the detector's box leaves out) is clear
/// of it; `None` (mask whole) when the two are near or overlap.
fn spared_beside(spared: Option<Rect>, face: &Rect) -> Option<Rect> {
    spared.filter(|s| !s.intersects(&face.grown(BYSTANDER_FACE_REACH)))
}

/// Fills `r` (clipped to the image) with [`MASK_GREY`], except the pixels in `spared` (the
/// participant's face, when it is clear of the bystander's).
fn fill(image: &mut BgrImage, r: &Rect, spared: Option<Rect>) {
    let (w, h) = (image.width as f32, image.height as f32);
    let span = |a: f32, b: f32, max: f32| {
        (
            a.clamp(0.0, max) as usize,
            b.clamp(0.0, max).ceil() as usize,
        )
    };
    let (x0, x1) = span(r.x0, r.x1, w);
    let (y0, y1) = span(r.y0, r.y1, h);
    let stride = image.width as usize * 3;
    for y in y0..y1 {
        let row = &mut image.data[y * stride..(y + 1) * stride];
        let fy = y as f32 + 0.5;
        // The spared columns of this row: those whose pixel centre is inside the box.
        let centre_from = |v: f32| (v - 0.5).ceil().clamp(0.0, w) as usize;
        let (s0, s1) = match spared.filter(|s| (s.y0..s.y1).contains(&fy)) {
            Some(s) => (centre_from(s.x0), centre_from(s.x1)),
            None => (x1, x1),
        };
        let s0 = s0.clamp(x0, x1);
        let s1 = s1.clamp(s0, x1);
        row[x0 * 3..s0 * 3].fill(MASK_GREY);
        row[s1 * 3..x1 * 3].fill(MASK_GREY);
    }
}
