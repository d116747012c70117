//! Head pose: a weak-perspective similarity fit (OpenFace's rigid `p_*` parameters) and a
//! perspective PnP fit of the metric canonical face to the mesh (OpenFace's `pose_*`).
//!
//! Conventions (OpenFace 2.0): camera axes x right, y down, z away from the camera, in
//! millimetres; the head model's origin is the centroid of its 68 iBUG points; rotation
//! R = Rx * Ry * Rz with (pose_Rx, pose_Ry, pose_Rz) = (pitch, yaw, roll) in radians; a face
//! looking straight into the camera has R = I.
//!
//! Contract: [`similarity`] is a closed-form weighted Umeyama fit; [`refine_pnp`] is a
//! Levenberg-Marquardt fit of the reprojection error started from it. Both are
//! deterministic and never fail: degenerate input gives a non-finite result the caller
//! treats as "no face".

use nalgebra::{Matrix3, Rotation3, SMatrix, SVector, Vector3};

/// Pinhole camera intrinsics in pixels (the session format's type; OpenFace's default
/// from [`Intrinsics::default_for`]).
pub type Intrinsics = crate::session::manifest::CameraIntrinsics;

impl Intrinsics {
    pub fn project(&self, p: &Vector3<f64>) -> (f64, f64) {
        (self.fx * p.x / p.z + self.cx, self.fy * p.y / p.z + self.cy)
    }
}

/// Camera intrinsics as given (command line, config); missing ones take OpenFace's
/// defaults for the frame size.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IntrinsicsArgs {
    pub fx: Option<f64>,
    pub fy: Option<f64>,
    pub cx: Option<f64>,
    pub cy: Option<f64>,
}

pub use crate::session::manifest::check_intrinsic;

impl IntrinsicsArgs {
    /// Checks every given value with [`check_intrinsic`] and, for an image of
    /// `width` x `height`, that the principal point lies inside it.
    pub fn check(&self, image: Option<(u32, u32)>) -> Result<(), String> {
        for (field, v) in [
            ("fx", self.fx),
            ("fy", self.fy),
            ("cx", self.cx),
            ("cy", self.cy),
        ] {
            if let Some(v) = v {
                check_intrinsic(field, v)?;
            }
        }
        if let Some((w, h)) = image {
            for (field, v, limit) in [("cx", self.cx, w), ("cy", self.cy, h)] {
                if let Some(v) = v.filter(|v| *v > f64::from(limit)) {
                    return Err(format!("{field} = {v} lies outside the {w}x{h} image"));
                }
            }
        }
        Ok(())
    }

    pub fn resolve(&self, width: u32, height: u32) -> Intrinsics {
        let d = Intrinsics::default_for(width, height);
        let fx = self.fx.or(self.fy).unwrap_or(d.fx);
        Intrinsics {
            fx,
            fy: self.fy.unwrap_or(fx),
            cx: self.cx.unwrap_or(d.cx),
            cy: self.cy.unwrap_or(d.cy),
        }
    }
}

impl From<Intrinsics> for IntrinsicsArgs {
    fn from(k: Intrinsics) -> Self {
        Self {
            fx: Some(k.fx),
            fy: Some(k.fy),
            cx: Some(k.cx),
            cy: Some(k.cy),
        }
    }
}

/// Weak-perspective fit: `image ≈ scale * R * model + t` (image z in pixels at the scale
/// of x, as the mesh gives it).
#[derive(Debug, Clone, Copy)]
pub struct Similarity {
    pub scale: f64,
    pub rotation: Matrix3<f64>,
    pub translation: Vector3<f64>,
}

/// Weighted Umeyama fit of `model` (mm) onto `image` (pixels).
pub fn similarity(model: &[Vector3<f64>], image: &[Vector3<f64>], weights: &[f64]) -> Similarity {
    let total: f64 = weights.iter().sum();
    let mean = |pts: &[Vector3<f64>]| {
        pts.iter()
            .zip(weights)
            .fold(Vector3::zeros(), |a, (p, w)| a + p * *w)
            / total
    };
    let (mm, mi) = (mean(model), mean(image));
    let mut cov = Matrix3::zeros();
    let mut var = 0.0;
    for ((m, i), w) in model.iter().zip(image).zip(weights) {
        let (dm, di) = (m - mm, i - mi);
        cov += di * dm.transpose() * *w;
        var += dm.norm_squared() * w;
    }
    let svd = cov.svd(true, true);
    let (Some(u), Some(v_t)) = (svd.u, svd.v_t) else {
        return Similarity {
            scale: f64::NAN,
            rotation: Matrix3::identity(),
            translation: Vector3::zeros(),
        };
    };
    let mut d = Matrix3::identity();
    if (u * v_t).determinant() < 0.0 {
        d[(2, 2)] = -1.0;
    }
    let rotation = u * d * v_t;
    let scale = (svd.singular_values.component_mul(&d.diagonal())).sum() / var;
    Similarity {
        scale,
        rotation,
        translation: mi - scale * rotation * mm,
    }
}

/// A head pose in camera coordinates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pose {
    pub rotation: Matrix3<f64>,
    /// Millimetres.
    pub translation: Vector3<f64>,
}

impl Pose {
    /// The perspective pose a weak-perspective fit implies: depth from the scale.
    pub fn from_similarity(s: &Similarity, k: &Intrinsics) -> Pose {
        let z = k.fx / s.scale;
        Pose {
            rotation: s.rotation,
            translation: Vector3::new(
                (s.translation.x - k.cx) * z / k.fx,
                (s.translation.y - k.cy) * z / k.fy,
                z,
            ),
        }
    }

    pub fn is_finite(&self) -> bool {
        self.rotation.iter().all(|v| v.is_finite())
            && self.translation.iter().all(|v| v.is_finite())
    }
}

/// Levenberg-Marquardt refinement of `start` minimising the weighted reprojection error of
/// `model` onto the 2D `image` points.
pub fn refine_pnp(
    model: &[Vector3<f64>],
    image: &[(f64, f64)],
    weights: &[f64],
    k: &Intrinsics,
    start: Pose,
) -> Pose {
    let residuals = |pose: &Pose| -> Vec<f64> {
        let mut r = Vec::with_capacity(model.len() * 2);
        for ((m, &(u, v)), w) in model.iter().zip(image).zip(weights) {
            let (pu, pv) = k.project(&(pose.rotation * m + pose.translation));
            let sw = w.sqrt();
            r.push((pu - u) * sw);
            r.push((pv - v) * sw);
        }
        r
    };
    let apply = |pose: &Pose, delta: &SVector<f64, 6>| Pose {
        rotation: Rotation3::new(Vector3::new(delta[0], delta[1], delta[2])).into_inner()
            * pose.rotation,
        translation: pose.translation + Vector3::new(delta[3], delta[4], delta[5]),
    };
    let cost = |r: &[f64]| r.iter().map(|x| x * x).sum::<f64>();
    let mut pose = start;
    let mut r = residuals(&pose);
    let mut c = cost(&r);
    let mut lambda = 1e-3;
    for _ in 0..30 {
        // Numerical Jacobian (6 columns); steps sized to radians and millimetres.
        let steps = [1e-5, 1e-5, 1e-5, 1e-3, 1e-3, 1e-3];
        let mut jtj = SMatrix::<f64, 6, 6>::zeros();
        let mut jtr = SVector::<f64, 6>::zeros();
        let mut cols: Vec<Vec<f64>> = Vec::with_capacity(6);
        for (j, &h) in steps.iter().enumerate() {
            let mut d = SVector::<f64, 6>::zeros();
            d[j] = h;
            let rj = residuals(&apply(&pose, &d));
            cols.push(rj.iter().zip(&r).map(|(a, b)| (a - b) / h).collect());
        }
        for a in 0..6 {
            for b in 0..6 {
                jtj[(a, b)] = cols[a].iter().zip(&cols[b]).map(|(x, y)| x * y).sum();
            }
            jtr[a] = cols[a].iter().zip(&r).map(|(x, y)| x * y).sum();
        }
        let mut improved = false;
        for _ in 0..8 {
            let mut damped = jtj;
            for a in 0..6 {
                damped[(a, a)] *= 1.0 + lambda;
            }
            let Some(step) = damped.lu().solve(&(-jtr)) else {
                lambda *= 10.0;
                continue;
            };
            let candidate = apply(&pose, &step);
            let rc = residuals(&candidate);
            let cc = cost(&rc);
            if cc < c {
                let gain = c - cc;
                pose = candidate;
                r = rc;
                c = cc;
                lambda = (lambda / 10.0).max(1e-9);
                improved = gain > 1e-10 * c.max(1e-12);
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    pose
}

/// (Rx, Ry, Rz) with R = Rx * Ry * Rz (OpenFace's Euler convention), radians.
pub fn euler_xyz(r: &Matrix3<f64>) -> (f64, f64, f64) {
    let ry = r[(0, 2)].clamp(-1.0, 1.0).asin();
    let rx = (-r[(1, 2)]).atan2(r[(2, 2)]);
    let rz = (-r[(0, 1)]).atan2(r[(0, 0)]);
    (rx, ry, rz)
}

/// R = Rx * Ry * Rz from Euler angles (radians).
pub fn rotation_xyz(rx: f64, ry: f64, rz: f64) -> Matrix3<f64> {
    let x = Rotation3::from_axis_angle(&Vector3::x_axis(), rx);
    let y = Rotation3::from_axis_angle(&Vector3::y_axis(), ry);
    let z = Rotation3::from_axis_angle(&Vector3::z_axis(), rz);
    (x * y * z).into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn euler_round_trips() {
        for (a, b, c) in [(0.1, -0.4, 0.3), (-0.5, 0.2, -0.1), (0.0, 0.0, 0.0)] {
            let (x, y, z) = euler_xyz(&rotation_xyz(a, b, c));
            assert!((x - a).abs() < 1e-9 && (y - b).abs() < 1e-9 && (z - c).abs() < 1e-9);
        }
    }

    #[test]
    fn similarity_recovers_a_known_transform() {
        let model: Vec<Vector3<f64>> = (0..20)
            .map(|i| {
                let t = i as f64;
                Vector3::new(
                    t.sin() * 40.0,
                    (t * 1.3).cos() * 50.0,
                    (t * 0.7).sin() * 30.0,
                )
            })
            .collect();
        let rot = rotation_xyz(0.2, -0.3, 0.1);
        let image: Vec<Vector3<f64>> = model
            .iter()
            .map(|m| 1.7 * rot * m + Vector3::new(320.0, 240.0, 5.0))
            .collect();
        let s = similarity(&model, &image, &vec![1.0; model.len()]);
        assert!((s.scale - 1.7).abs() < 1e-9);
        assert!((s.rotation - rot).norm() < 1e-9);
    }
}
