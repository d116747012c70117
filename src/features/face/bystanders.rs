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
//! - from frame to frame, the face overlapping the participant's last box (IoU >=
//!   [`FOLLOW_MIN_IOU`]), else the nearest within [`FOLLOW_RADIUS`] of its width (motion);
//! - after a loss, only a face near where they were lost (within [`REACQUIRE_RADIUS`]
//!   face widths of that place) is taken as the participant again; a face anywhere else
//!   stays a bystander, however large or central (the participant leaving while a visitor
//!   stays must not make the visitor "the participant");
//! - a face on a region masked as a bystander's ([`KNOWN_BYSTANDER_IOU`]) is never taken
//!   as the participant by nearness (after a loss, or by the motion fallback).
//!
//! Masks: a detected bystander's box enlarged to cover hair, ears and chin
//! ([`MASK_MARGIN_X`], [`MASK_MARGIN_TOP`], [`MASK_MARGIN_BOTTOM`]), filled flat: no detail
//! of the region is left at any strength of processing. A bystander's last region stays
//! masked for [`HOLD_FRAMES`] frames after the detector last found it, so a frame where the
//! detector misses a turned face does not show it.

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
/// Frames a bystander's last region stays masked after the detector last found it.
pub const HOLD_FRAMES: u32 = 8;
/// A face overlapping the participant's last box at least this much is theirs.
pub const FOLLOW_MIN_IOU: f32 = 0.3;
/// Otherwise the nearest face whose centre moved at most this many of their face widths.
pub const FOLLOW_RADIUS: f32 = 0.75;
/// After a loss, a face within this many of the participant's face widths of where they
/// were lost is taken as theirs again (people side by side sit about two face widths
/// apart, centre to centre).
pub const REACQUIRE_RADIUS: f32 = 1.0;
/// A face overlapping a region masked as a bystander's at least this much is that
/// bystander: never taken as the participant by nearness alone.
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

    /// The region masked for a face box.
    fn mask_region(&self) -> Rect {
        let (w, h) = (self.x1 - self.x0, self.y1 - self.y0);
        Rect {
            x0: self.x0 - MASK_MARGIN_X * w,
            y0: self.y0 - MASK_MARGIN_TOP * h,
            x1: self.x1 + MASK_MARGIN_X * w,
            y1: self.y1 + MASK_MARGIN_BOTTOM * h,
        }
    }
}

/// The participant's rank among faces when nothing else decides (the session's start, in
/// the facial stage too): area divided by 1 + (distance from the image centre / a quarter
/// of the diagonal)^2.
pub fn participant_rank(d: &Detection, w: u32, h: u32) -> f32 {
    let (cx, cy) = (w as f32 / 2.0, h as f32 / 2.0);
    let quarter_diag = ((w * w + h * h) as f32).sqrt() / 4.0;
    let (x, y) = d.centre();
    let dist = ((x - cx).powi(2) + (y - cy).powi(2)).sqrt() / quarter_diag;
    d.width * d.height / (1.0 + dist * dist)
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

/// The per-session screen (one per video stream; it keeps the participant's track).
pub struct BystanderScreen {
    detector: FaceDetector,
    participant: Participant,
    /// Bystander regions still masked, with the frames they stay masked for.
    held: Vec<(Rect, u32)>,
}

impl BystanderScreen {
    pub fn new(detector: FaceDetector) -> Self {
        Self {
            detector,
            participant: Participant::NotYetSeen,
            held: Vec::new(),
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
        let dets = {
            let frame = mat_of(image).map_err(|message| ModelError::Inference {
                name: super::DETECTOR_MODEL.into(),
                message,
            })?;
            self.detector.detect(&frame, image.width, image.height)?
        };
        let chosen = self.choose(&dets, image.width, image.height);
        self.participant = match (chosen, self.participant) {
            (Some(i), _) => Participant::At(Rect::of(&dets[i])),
            (None, Participant::At(r)) => Participant::LostAt(r),
            (None, p) => p,
        };
        for (_, left) in &mut self.held {
            *left = left.saturating_sub(1);
        }
        self.held.retain(|(_, left)| *left > 0);
        let bystanders: Vec<Rect> = dets
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != chosen)
            .map(|(_, d)| Rect::of(d))
            .collect();
        // A bystander found now replaces the held region it overlaps.
        self.held
            .retain(|(r, _)| bystanders.iter().all(|b| b.iou(r) < 0.1));
        self.held
            .extend(bystanders.iter().map(|b| (*b, HOLD_FRAMES + 1)));
        for (r, _) in &self.held {
            fill(image, &r.mask_region());
        }
        Ok(Screening {
            faces: dets.len().min(usize::from(u16::MAX)) as u16,
            bystanders: bystanders.len().min(usize::from(u16::MAX)) as u16,
            masked: self.held.len().min(usize::from(u16::MAX)) as u16,
            participant: chosen.is_some(),
        })
    }

    /// The participant's detection, by the rule of the module's contract.
    fn choose(&self, dets: &[Detection], w: u32, h: u32) -> Option<usize> {
        let known_bystander = |d: &Detection| {
            let r = Rect::of(d);
            self.held
                .iter()
                .any(|(b, _)| b.iou(&r) >= KNOWN_BYSTANDER_IOU)
        };
        let nearest_within = |to: &Rect, radius: f32| {
            dets.iter()
                .enumerate()
                .filter(|(_, d)| !known_bystander(d))
                .map(|(i, d)| (i, Rect::of(d).distance(to)))
                .filter(|(_, dist)| *dist <= radius * to.width())
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(i, _)| i)
        };
        match self.participant {
            Participant::NotYetSeen => (0..dets.len()).max_by(|&a, &b| {
                participant_rank(&dets[a], w, h).total_cmp(&participant_rank(&dets[b], w, h))
            }),
            Participant::At(last) => dets
                .iter()
                .enumerate()
                .map(|(i, d)| (i, Rect::of(d).iou(&last)))
                .filter(|(_, iou)| *iou >= FOLLOW_MIN_IOU)
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(i, _)| i)
                .or_else(|| nearest_within(&last, FOLLOW_RADIUS)),
            Participant::LostAt(last) => nearest_within(&last, REACQUIRE_RADIUS),
        }
    }
}

/// Fills `r` (clipped to the image) with [`MASK_GREY`].
fn fill(image: &mut BgrImage, r: &Rect) {
    let (w, h) = (image.width as f32, image.height as f32);
    let x0 = r.x0.clamp(0.0, w) as usize;
    let x1 = r.x1.clamp(0.0, w).ceil() as usize;
    let y0 = r.y0.clamp(0.0, h) as usize;
    let y1 = r.y1.clamp(0.0, h).ceil() as usize;
    let stride = image.width as usize * 3;
    for y in y0..y1 {
        let row = &mut image.data[y * stride..(y + 1) * stride];
        row[x0 * 3..x1 * 3].fill(MASK_GREY);
    }
}
