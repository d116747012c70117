//! Facial action units from 3D landmark geometry and MediaPipe's blendshapes, relative to a
//! per-person neutral face.
//!
//! No registry offers an AU model (../shared/FACTS.md). Each AU is the equal-weight mean of
//! two readings of the same movement (when the blendshapes were measured; the geometric
//! one alone otherwise): 5 x the rise above neutral of the blendshape coefficient ARKit
//! defines for it (`BLEND_OF_AU`), and a documented geometric measure on the metric 3D
//! landmarks in the head's own frame (rotation undone, millimetres: x to the image right,
//! y down, z away from the camera), minus the person's neutral value, mapped linearly to
//! OpenFace's 0-5 intensity scale and clipped:
//!
//! | AU | measure (mm unless said) | intensity 5 at |
//! |----|---------------------------|----------------|
//! | 01 inner brow raiser | height of the inner brows (21, 22) above the inner eye corners (39, 42) | +6 |
//! | 02 outer brow raiser | height of the outer brows (17, 18, 25, 26) above the outer eye corners (36, 45) | +6 |
//! | 04 brow lowerer | fall of the mean brow height (17-26) plus the narrowing of the inner-brow gap (21-22) | 5 |
//! | 05 upper lid raiser | rise of the upper lids (37, 38, 43, 44) above the corner line | +2.5 |
//! | 06 cheek raiser | rise of the lower lids (40, 41, 46, 47) and of the cheeks (mesh 205, 425) towards the eyes | 3 |
//! | 07 lid tightener | narrowing of the eye aperture (upper to lower lid) | 3 |
//! | 09 nose wrinkler | shortening of the nasion (27) to nostril (31, 35) height | 3 |
//! | 10 upper lip raiser | shortening of the subnasale (33) to upper lip (51) height | 4 |
//! | 12 lip corner puller | rise of the lip corners (48, 54) relative to the subnasale plus half the mouth widening (a full smile: about 5 mm up, 10 mm wider) | 10 |
//! | 14 dimpler | corners pulled back (z) relative to the lip midline (51, 57) | 4 |
//! | 15 lip corner depressor | fall of the lip corners relative to the subnasale | 4 |
//! | 17 chin raiser | shortening of the lower lip (57) to chin (8) height while the lips touch | 4 |
//! | 20 lip stretcher | mouth widening not explained by the corners rising | 6 |
//! | 23 lip tightener | thinning of the lips (51-62 plus 66-57) | 4 |
//! | 25 lips part | inner lip gap (62-66) beyond 1 mm, absolute (closed lips are neutral for everyone) | 10 |
//! | 26 jaw drop | lengthening of the nasion (27) to chin (8) height, against the person's median only (face length is anatomy) | 12 |
//! | 45 blink | closed fraction of the eye opening relative to the person's neutral; opening = lid-to-lid distance over eye width on the iris model's eyelid contours | 100 % |
//!
//! Presence (`_c`) is intensity >= 1; AU28 (lip suck) is present when the visible lips are
//! thinner than a quarter of their neutral thickness.
//!
//! Neutral face: half the canonical (population-average, neutral) face's measure and half
//! the median of the measure over the person's last [`BASELINE_FRAMES`] successful frames
//! (OpenFace also subtracts a per-person median), updated online; a lasting jump in face
//! proportions (another person) restarts the median. Displacements below zero give 0.

use nalgebra::Vector3;

/// 17 intensity AUs in OpenFace's order.
pub const AU_R: [&str; 17] = [
    "AU01", "AU02", "AU04", "AU05", "AU06", "AU07", "AU09", "AU10", "AU12", "AU14", "AU15", "AU17",
    "AU20", "AU23", "AU25", "AU26", "AU45",
];
/// 18 presence AUs in OpenFace's order (AU28 has presence only).
pub const AU_C: [&str; 18] = [
    "AU01", "AU02", "AU04", "AU05", "AU06", "AU07", "AU09", "AU10", "AU12", "AU14", "AU15", "AU17",
    "AU20", "AU23", "AU25", "AU26", "AU28", "AU45",
];
/// Frames (60 s at 15 fps) over which the neutral face is the median.
pub const BASELINE_FRAMES: usize = 900;
/// The median is recomputed every this many frames (it moves slowly).
const BASELINE_REFRESH: usize = 15;

/// Raw measures per frame: 17 geometric, then 17 blendshape ones.
const GEOMETRIC: usize = 17;
const MEASURES: usize = GEOMETRIC + BLEND_MEASURES;
const INNER_BROW: usize = 0;
const OUTER_BROW: usize = 1;
const BROW_HEIGHT: usize = 2;
const BROW_GAP: usize = 3;
const UPPER_LID: usize = 4;
const LOWER_LID: usize = 5;
const CHEEK: usize = 6;
const NOSE: usize = 7;
const UPPER_LIP: usize = 8;
const CORNER_HEIGHT: usize = 9;
const WIDTH: usize = 10;
const CORNER_DEPTH: usize = 11;
const CHIN: usize = 12;
const LIPS: usize = 13;
const GAP: usize = 14;
const JAW: usize = 15;
const EYE_OPEN: usize = 16;

/// MediaPipe's blendshape coefficients that carry each AU (ARKit's definitions of the
/// coefficients against FACS's of the AUs; left and right averaged), in [`AU_R`] order:
/// AU01 browInnerUp, AU02 browOuterUp, AU04 browDown, AU05 eyeWide, AU06 cheekSquint, AU07
/// eyeSquint, AU09 noseSneer, AU10 mouthUpperUp, AU12 mouthSmile, AU14 mouthDimple, AU15
/// mouthFrown, AU17 mouthShrugLower, AU20 mouthStretch, AU23 mouthPress, AU25 jawOpen
/// less mouthClose (ARKit's mouthClose closes the lips whatever the jaw does, so lips part
/// by what the jaw opens and the lips do not hold closed), AU26 jawOpen, AU45 eyeBlink.
/// Each is (the coefficients averaged, the one subtracted), as indices into the 52 of
/// `models::BLENDSHAPE_NAMES`.
const BLEND_OF_AU: [(&[usize], Option<usize>); 17] = [
    (&[3], None),
    (&[4, 5], None),
    (&[1, 2], None),
    (&[21, 22], None),
    (&[7, 8], None),
    (&[19, 20], None),
    (&[50, 51], None),
    (&[48, 49], None),
    (&[44, 45], None),
    (&[28, 29], None),
    (&[30, 31], None),
    (&[42], None),
    (&[46, 47], None),
    (&[36, 37], None),
    (&[25], Some(27)),
    (&[25], None),
    (&[9, 10], None),
];
const BLEND_MEASURES: usize = BLEND_OF_AU.len();

/// Weight of the population-average neutral face (MediaPipe's canonical face) against the
/// person's running median in the neutral face the AUs are measured from. Half and half:
/// someone who smiles through most of a session still reads as smiling (a pure median
/// would call their smile neutral), and someone whose resting face differs from the
/// average still reads mostly relative to themselves.
const PRIOR_WEIGHT: f64 = 0.5;

/// Inner-lip gap (mm) still counted as closed lips (mesh noise).
const LIPS_CLOSED_MM: f64 = 1.0;

/// Geometry of one frame in the head frame (mm).
pub struct HeadFrameGeometry<'a> {
    /// The 68 iBUG points.
    pub ibug: &'a [Vector3<f64>],
    /// Cheek points (mesh 205 and 425).
    pub cheeks: [Vector3<f64>; 2],
    /// Eye openness from the iris model's eyelid contours: lid-to-lid distance over eye
    /// width, mean of both eyes (`None` for the canonical face, which has no such contour).
    pub eye_openness: Option<f64>,
    /// MediaPipe's 52 blendshape coefficients (`None`: not measured; the AUs are then
    /// geometric alone).
    pub blendshapes: Option<&'a [f32; 52]>,
}

fn measures(g: &HeadFrameGeometry) -> [f64; MEASURES] {
    let p = |i: usize| g.ibug[i];
    let mean_y = |ids: &[usize]| ids.iter().map(|&i| p(i).y).sum::<f64>() / ids.len() as f64;
    let corner_line = mean_y(&[36, 39, 42, 45]);
    let mut m = [0.0; MEASURES];
    m[INNER_BROW] = mean_y(&[39, 42]) - mean_y(&[21, 22]);
    m[OUTER_BROW] = mean_y(&[36, 45]) - mean_y(&[17, 18, 25, 26]);
    m[BROW_HEIGHT] = corner_line - mean_y(&[17, 18, 19, 20, 21, 22, 23, 24, 25, 26]);
    m[BROW_GAP] = (p(22) - p(21)).norm();
    m[UPPER_LID] = corner_line - mean_y(&[37, 38, 43, 44]);
    m[LOWER_LID] = mean_y(&[40, 41, 46, 47]) - corner_line;
    m[CHEEK] = (g.cheeks[0].y + g.cheeks[1].y) / 2.0 - corner_line;
    m[NOSE] = mean_y(&[31, 35]) - p(27).y;
    m[UPPER_LIP] = p(51).y - p(33).y;
    m[CORNER_HEIGHT] = p(33).y - mean_y(&[48, 54]);
    m[WIDTH] = (p(54) - p(48)).norm();
    m[CORNER_DEPTH] = (p(48).z + p(54).z) / 2.0 - (p(51).z + p(57).z) / 2.0;
    m[CHIN] = p(8).y - p(57).y;
    m[LIPS] = (p(62).y - p(51).y) + (p(57).y - p(66).y);
    m[GAP] = (p(66).y - p(62).y).max(0.0);
    m[JAW] = p(8).y - p(27).y;
    m[EYE_OPEN] = g.eye_openness.unwrap_or(f64::NAN);
    for (k, (averaged, less)) in BLEND_OF_AU.iter().enumerate() {
        m[GEOMETRIC + k] = match g.blendshapes {
            Some(b) => {
                let mean =
                    averaged.iter().map(|&i| b[i] as f64).sum::<f64>() / averaged.len() as f64;
                mean - less.map_or(0.0, |i| b[i] as f64)
            }
            None => f64::NAN,
        };
    }
    m
}

/// One frame's action units.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionUnits {
    /// Intensities 0-5 in the order of [`AU_R`].
    pub intensity: [f32; 17],
    /// Presence 0/1 in the order of [`AU_C`].
    pub presence: [f32; 18],
}

/// Face proportions that expressions barely move (relative to the outer eye-corner
/// distance): inner eye-corner distance, nose ridge length, nostril width, jaw width.
/// A lasting jump means another person is in front of the camera.
fn identity(g: &HeadFrameGeometry) -> [f64; 4] {
    let d = |a: usize, b: usize| (g.ibug[a] - g.ibug[b]).norm();
    let base = d(36, 45).max(1e-6);
    [
        d(39, 42) / base,
        d(27, 30) / base,
        d(31, 35) / base,
        d(0, 16) / base,
    ]
}
/// Relative change of a proportion that counts as a jump, and how many frames in a row it
/// must last before the neutral face starts again.
const IDENTITY_JUMP: f64 = 0.08;
const IDENTITY_FRAMES: usize = 3;

/// The per-person neutral face and the AU mapping.
pub struct AuEstimator {
    /// The measures of MediaPipe's canonical (population-average, neutral) face.
    prior: [f64; MEASURES],
    history: std::collections::VecDeque<[f64; MEASURES]>,
    neutral: Option<[f64; MEASURES]>,
    since_refresh: usize,
    identity: Option<[f64; 4]>,
    jumped_for: usize,
}

impl AuEstimator {
    /// `canonical`: the canonical face's geometry in its own head frame.
    pub fn new(canonical: &HeadFrameGeometry) -> Self {
        // The blendshape model's own neutral is 0 (it is trained so): the canonical face's
        // coefficients are taken as 0 rather than computed from a mesh it never saw.
        let mut prior = measures(canonical);
        for p in &mut prior[GEOMETRIC..] {
            *p = 0.0;
        }
        Self {
            prior,
            history: std::collections::VecDeque::with_capacity(BASELINE_FRAMES),
            neutral: None,
            since_refresh: 0,
            identity: None,
            jumped_for: 0,
        }
    }

    /// Follows the face's proportions; a lasting jump (a new person) restarts the neutral
    /// face.
    fn follow_identity(&mut self, g: &HeadFrameGeometry) {
        let now = identity(g);
        let Some(known) = self.identity else {
            self.identity = Some(now);
            return;
        };
        let jump = now
            .iter()
            .zip(&known)
            .any(|(a, b)| (a - b).abs() > IDENTITY_JUMP * b.abs().max(1e-6));
        if jump {
            self.jumped_for += 1;
            if self.jumped_for >= IDENTITY_FRAMES {
                self.reset();
                self.identity = Some(now);
            }
        } else {
            self.jumped_for = 0;
            // Slow average: proportions drift with pose errors, not with identity.
            self.identity = Some(std::array::from_fn(|k| 0.95 * known[k] + 0.05 * now[k]));
        }
    }

    /// Forgets the person (a different participant, or the face was lost for long).
    pub fn reset(&mut self) {
        self.history.clear();
        self.neutral = None;
        self.since_refresh = 0;
        self.identity = None;
        self.jumped_for = 0;
    }

    /// The AUs of one successful frame; updates the neutral face.
    pub fn estimate(&mut self, g: &HeadFrameGeometry) -> ActionUnits {
        self.follow_identity(g);
        let m = measures(g);
        if self.history.len() == BASELINE_FRAMES {
            self.history.pop_front();
        }
        self.history.push_back(m);
        self.since_refresh += 1;
        // Refresh often while the history is short, then once a second.
        if self.neutral.is_none()
            || self.history.len() < BASELINE_FRAMES / 4
            || self.since_refresh >= BASELINE_REFRESH
        {
            self.neutral = Some(self.median());
            self.since_refresh = 0;
        }
        let person = self.neutral.unwrap_or(m);
        let w = PRIOR_WEIGHT;
        // Face length is anatomy, not expression: the jaw is measured against the person
        // alone.
        let n: [f64; MEASURES] = std::array::from_fn(|k| {
            if k == JAW || k == EYE_OPEN {
                person[k]
            } else {
                w * self.prior[k] + (1.0 - w) * person[k]
            }
        });
        let d = |k: usize| m[k] - n[k];
        let scale = |x: f64, at5: f64| (5.0 * x / at5).clamp(0.0, 5.0) as f32;
        let corner_rise = d(CORNER_HEIGHT);
        let widen = d(WIDTH);
        // Blinks from the iris model's eyelids (made for eyes, finer than the mesh's).
        let closed = if n[EYE_OPEN] > 1e-6 && m[EYE_OPEN].is_finite() {
            1.0 - m[EYE_OPEN] / n[EYE_OPEN]
        } else {
            0.0
        };
        let mut intensity = [
            scale(d(INNER_BROW), 6.0),
            scale(d(OUTER_BROW), 6.0),
            scale(-d(BROW_HEIGHT) - d(BROW_GAP), 5.0),
            scale(d(UPPER_LID), 2.5),
            scale(-(d(LOWER_LID) + d(CHEEK)) / 2.0, 3.0),
            scale(-(d(UPPER_LID) + d(LOWER_LID)), 3.0),
            scale(-d(NOSE), 3.0),
            scale(-d(UPPER_LIP), 4.0),
            scale(corner_rise + widen / 2.0, 10.0),
            scale(d(CORNER_DEPTH), 4.0),
            scale(-corner_rise, 4.0),
            scale(if m[GAP] < 1.0 { -d(CHIN) } else { 0.0 }, 4.0),
            scale(widen - corner_rise.max(0.0) * 2.0, 6.0),
            scale(-d(LIPS), 4.0),
            // Lips apart is a state, not a change: closed lips (gap within 1 mm) are
            // neutral for everyone, so the gap is absolute.
            scale(m[GAP] - LIPS_CLOSED_MM, 10.0),
            scale(d(JAW), 12.0),
            scale(closed, 1.0),
        ];
        // Where the blendshapes were measured, each AU is the mean of its geometric
        // intensity and 5 x its coefficient's rise above the neutral face: two independent
        // readings of one movement (the mesh's 3D geometry, and a model trained on
        // expressions), each blind where the other is not.
        for (k, v) in intensity.iter_mut().enumerate() {
            let rise = d(GEOMETRIC + k);
            if rise.is_finite() {
                *v = ((*v as f64 + scale(rise, 1.0) as f64) / 2.0) as f32;
            }
        }
        let mut presence = [0.0f32; 18];
        for (k, name) in AU_C.iter().enumerate() {
            presence[k] = if *name == "AU28" {
                f32::from(n[LIPS] > 1e-6 && m[LIPS] < 0.25 * n[LIPS])
            } else {
                let r = AU_R
                    .iter()
                    .position(|r| r == name)
                    .map_or(0.0, |i| intensity[i]);
                f32::from(r >= 1.0)
            };
        }
        ActionUnits {
            intensity,
            presence,
        }
    }

    fn median(&self) -> [f64; MEASURES] {
        let mut out = [0.0; MEASURES];
        let mut column: Vec<f64> = Vec::with_capacity(self.history.len());
        for (k, o) in out.iter_mut().enumerate() {
            column.clear();
            column.extend(self.history.iter().map(|m| m[k]));
            let mid = column.len() / 2;
            let (_, v, _) = column.select_nth_unstable_by(mid, f64::total_cmp);
            *o = *v;
        }
        out
    }
}
