//! From MediaPipe's 468-point mesh to OpenFace's 68 iBUG 300-W landmarks and its 28 eye
//! landmarks per eye.
//!
//! Contract: every derived point is a fixed blend of at most two mesh vertices, computed
//! once from the canonical mesh, so 2D pixels and 3D millimetres are mapped identically.
//! The mapping (also in docs/features.md, "Facial behaviour"):
//! - jaw 0-16: 17 points at equal arc length (on the canonical mesh) along the face oval
//!   from vertex 127 (subject's right, at eye-corner height) through the chin 152 to 356;
//! - brows 17-21: 70, 63, 105, 66, 107; 22-26: 336, 296, 334, 293, 300 (upper brow edge);
//! - nose ridge 27-30: equal arc length along 168, 6, 197, 195, 5, 4 (nasion to tip);
//!   nostrils 31-35: 98, 97, 2, 326, 327;
//! - eyes 36-41: 33, 160, 158, 133, 153, 144; 42-47: 362, 385, 387, 263, 373, 380;
//! - outer lips 48-59: 61, 40, 37, 0, 267, 270, 291, 321, 314, 17, 84, 91;
//!   inner lips 60-67: 78, 82, 13, 312, 308, 317, 14, 87.
//!
//! OpenFace's eye landmarks per eye (order checked on OpenFace 2.0 output): 0-7 the iris
//! edge starting at the image-left point and going over the top; 8-19 the eyelids: 8 the
//! image-left corner, 9-13 the upper lid, 14 the image-right corner, 15-19 the lower lid
//! back to the left; 20-27 the pupil edge. Eyelids come from the mesh's eye contours (five
//! points at equal arc length per lid), the iris edge from the iris model's circle. The
//! pupil is not measured by any model here: points 20-27 are not computed.

use super::canonical::VERTICES_MM;

/// A point derived from the mesh: `a * (1 - t) + b * t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Blend {
    pub a: usize,
    pub b: usize,
    pub t: f32,
}

impl Blend {
    const fn vertex(i: usize) -> Self {
        Blend { a: i, b: i, t: 0.0 }
    }

    pub fn apply<const N: usize>(&self, points: &[[f32; N]]) -> [f32; N] {
        let (p, q) = (points[self.a], points[self.b]);
        std::array::from_fn(|k| p[k] + (q[k] - p[k]) * self.t)
    }
}

const JAW_PATH: [usize; 23] = [
    127, 234, 93, 132, 58, 172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288,
    361, 323, 454, 356,
];
const NOSE_RIDGE: [usize; 6] = [168, 6, 197, 195, 5, 4];
const FIXED_17_67: [usize; 51] = [
    70, 63, 105, 66, 107, 336, 296, 334, 293, 300, // brows 17-26
    0, 0, 0, 0, // nose ridge 27-30 (arc, filled below)
    98, 97, 2, 326, 327, // nostrils 31-35
    33, 160, 158, 133, 153, 144, // eye 36-41
    362, 385, 387, 263, 373, 380, // eye 42-47
    61, 40, 37, 0, 267, 270, 291, 321, 314, 17, 84, 91, // outer lips 48-59
    78, 82, 13, 312, 308, 317, 14, 87, // inner lips 60-67
];

/// Mesh eye contours, image-left corner to image-right corner (upper lid), then back
/// (lower lid), for the subject's right eye (image-left) and left eye (image-right).
const RIGHT_EYE_UPPER: [usize; 9] = [33, 246, 161, 160, 159, 158, 157, 173, 133];
const RIGHT_EYE_LOWER: [usize; 9] = [133, 155, 154, 153, 145, 144, 163, 7, 33];
const LEFT_EYE_UPPER: [usize; 9] = [362, 398, 384, 385, 386, 387, 388, 466, 263];
const LEFT_EYE_LOWER: [usize; 9] = [263, 249, 390, 373, 374, 380, 381, 382, 362];

/// Points at equal arc length `fractions` along a vertex path of the canonical mesh.
fn along(path: &[usize], fractions: impl Iterator<Item = f32>) -> Vec<Blend> {
    let dist = |a: usize, b: usize| {
        let (p, q) = (VERTICES_MM[a], VERTICES_MM[b]);
        ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2) + (p[2] - q[2]).powi(2)).sqrt()
    };
    let seg: Vec<f32> = path.windows(2).map(|w| dist(w[0], w[1])).collect();
    let total: f32 = seg.iter().sum();
    fractions
        .map(|f| {
            let mut target = f.clamp(0.0, 1.0) * total;
            for (k, &len) in seg.iter().enumerate() {
                if target <= len || k == seg.len() - 1 {
                    let t = if len > 0.0 {
                        (target / len).min(1.0)
                    } else {
                        0.0
                    };
                    return Blend {
                        a: path[k],
                        b: path[k + 1],
                        t,
                    };
                }
                target -= len;
            }
            Blend::vertex(path[path.len() - 1])
        })
        .collect()
}

/// The 68 iBUG points as blends of mesh vertices.
pub fn ibug68() -> Vec<Blend> {
    let mut out = along(&JAW_PATH, (0..17).map(|k| k as f32 / 16.0));
    out.extend(FIXED_17_67.iter().map(|&i| Blend::vertex(i)));
    let nose = along(&NOSE_RIDGE, (0..4).map(|k| k as f32 / 3.0));
    out[27..31].copy_from_slice(&nose);
    out
}

/// The 12 eyelid points of one eye in OpenFace's order (8-19): image-left corner, five on
/// the upper lid, image-right corner, five on the lower lid. `image_left_eye` is the
/// subject's right eye.
pub fn eyelids(image_left_eye: bool) -> Vec<Blend> {
    let (upper, lower) = if image_left_eye {
        (&RIGHT_EYE_UPPER, &RIGHT_EYE_LOWER)
    } else {
        (&LEFT_EYE_UPPER, &LEFT_EYE_LOWER)
    };
    let mut out = vec![Blend::vertex(upper[0])];
    out.extend(along(upper, (1..6).map(|k| k as f32 / 6.0)));
    out.push(Blend::vertex(upper[8]));
    out.extend(along(lower, (1..6).map(|k| k as f32 / 6.0)));
    out
}

/// Mesh vertices of the eye corners (image-left corner first) of each eye: the subject's
/// right eye (outer 33, inner 133) and left eye (inner 362, outer 263).
pub const EYE_CORNERS: [(usize, usize); 2] = [(33, 133), (362, 263)];

/// The 8 points of OpenFace's iris edge around a circle (image pixels): starting at the
/// image-left point and going over the top.
pub fn iris_ring(centre: (f32, f32), radius: f32) -> [(f32, f32); 8] {
    std::array::from_fn(|k| {
        let a = std::f32::consts::PI + k as f32 * std::f32::consts::FRAC_PI_4;
        (centre.0 + radius * a.cos(), centre.1 + radius * a.sin())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_68_points_are_symmetric_on_the_canonical_face() {
        let pts = ibug68();
        assert_eq!(pts.len(), 68);
        let v: Vec<[f32; 3]> = pts.iter().map(|b| b.apply(&VERTICES_MM)).collect();
        // iBUG mirror pairs: jaw, brows, eyes corners, mouth corners.
        for (l, r) in [
            (0, 16),
            (4, 12),
            (17, 26),
            (21, 22),
            (36, 45),
            (39, 42),
            (48, 54),
            (31, 35),
        ] {
            assert!(
                (v[l][0] + v[r][0]).abs() < 0.5,
                "{l} {r}: {:?} {:?}",
                v[l],
                v[r]
            );
            assert!((v[l][1] - v[r][1]).abs() < 0.5, "{l} {r}");
        }
        // The chin is on the midline and lowest; the nose tip is nearest the camera.
        assert!(v[8][0].abs() < 0.5);
        assert!(v.iter().all(|p| p[1] <= v[8][1] + 1e-3));
        assert!(v.iter().all(|p| p[2] >= v[30][2] - 1e-3));
        // Subject's right side is on the image left.
        assert!(v[36][0] < v[45][0] && v[0][0] < v[16][0]);
    }

    #[test]
    fn eyelids_run_left_to_right_over_the_top() {
        for left in [true, false] {
            let v: Vec<[f32; 3]> = eyelids(left)
                .iter()
                .map(|b| b.apply(&VERTICES_MM))
                .collect();
            assert_eq!(v.len(), 12);
            assert!(v[0][0] < v[6][0]);
            for k in 1..6 {
                assert!(v[k][0] > v[k - 1][0] && v[k][1] < v[0][1].max(v[6][1]));
                // The lower lid point below its upper counterpart.
                assert!(v[12 - k][1] > v[k][1]);
            }
        }
    }
}
