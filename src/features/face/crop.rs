//! Rotated regions of interest and the crops the face models read.
//!
//! Contract: a [`Roi`] is a rotated rectangle in image pixels (centre, width, height,
//! rotation in radians, positive clockwise on screen because image y points down). A crop
//! maps the ROI's corners onto the tensor's corners (MediaPipe's ImageToTensor convention:
//! tensor coordinate `u` in `[0, S]` is the fraction `u / S` across the ROI), bilinear, with
//! edge pixels repeated outside the image. [`Roi::to_image`] maps model outputs in tensor
//! coordinates back to image pixels, so crop and projection always agree.

use opencv::boxed_ref::BoxedRef;
use opencv::core::{Mat, Scalar, Size, Vec3b, BORDER_CONSTANT, BORDER_REPLICATE};
use opencv::imgproc;
use opencv::prelude::*;

use crate::capture::BgrImage;

/// A rotated rectangle in image pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roi {
    pub cx: f32,
    pub cy: f32,
    pub w: f32,
    pub h: f32,
    /// Radians, positive clockwise on screen.
    pub rotation: f32,
}

/// MediaPipe's rotation of a box: the angle that brings the vector from `start` to `end`
/// to horizontal (pointing right), in (-pi, pi].
pub fn rotation_between(start: (f32, f32), end: (f32, f32)) -> f32 {
    let angle = -(-(end.1 - start.1)).atan2(end.0 - start.0);
    normalize_radians(angle)
}

pub fn normalize_radians(a: f32) -> f32 {
    let two_pi = std::f32::consts::TAU;
    a - two_pi * ((a + std::f32::consts::PI) / two_pi).floor()
}

impl Roi {
    /// The image-axis bounding box of `points`, then given `rotation` about its centre (as
    /// MediaPipe's DetectionsToRects does for landmarks).
    pub fn around(points: &[(f32, f32)], rotation: f32) -> Option<Roi> {
        if points.is_empty() {
            return None;
        }
        let (mut x0, mut y0, mut x1, mut y1) = (f32::MAX, f32::MAX, f32::MIN, f32::MIN);
        for &(x, y) in points {
            x0 = x0.min(x);
            y0 = y0.min(y);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        Some(Roi {
            cx: (x0 + x1) / 2.0,
            cy: (y0 + y1) / 2.0,
            w: x1 - x0,
            h: y1 - y0,
            rotation,
        })
    }

    /// Square on the long side, then scaled (MediaPipe's RectTransformation with
    /// `square_long`).
    pub fn squared_scaled(self, scale: f32) -> Roi {
        let side = self.w.max(self.h) * scale;
        Roi {
            w: side,
            h: side,
            ..self
        }
    }

    /// Image pixel of the tensor coordinate (u, v) of an `size` x `size` crop of this ROI.
    pub fn to_image(&self, u: f32, v: f32, size: f32) -> (f32, f32) {
        let lx = (u / size - 0.5) * self.w;
        let ly = (v / size - 0.5) * self.h;
        let (s, c) = self.rotation.sin_cos();
        (self.cx + lx * c - ly * s, self.cy + lx * s + ly * c)
    }

    /// The 2x3 matrix taking tensor coordinates to image pixels (for `WARP_INVERSE_MAP`);
    /// `flip` mirrors the crop left to right.
    fn inverse_map(&self, size: f32, flip: bool) -> [f64; 6] {
        let (s, c) = (self.rotation.sin() as f64, self.rotation.cos() as f64);
        let w = if flip { -self.w } else { self.w } as f64;
        let h = self.h as f64;
        let n = size as f64;
        [
            c * w / n,
            -s * h / n,
            self.cx as f64 - c * w / 2.0 + s * h / 2.0,
            s * w / n,
            c * h / n,
            self.cy as f64 - s * w / 2.0 - c * h / 2.0,
        ]
    }

    /// Intersection over union of the axis-aligned boxes (rotation ignored).
    pub fn iou(&self, other: &Roi) -> f32 {
        let ix = ((self.cx + self.w / 2.0).min(other.cx + other.w / 2.0)
            - (self.cx - self.w / 2.0).max(other.cx - other.w / 2.0))
        .max(0.0);
        let iy = ((self.cy + self.h / 2.0).min(other.cy + other.h / 2.0)
            - (self.cy - self.h / 2.0).max(other.cy - other.h / 2.0))
        .max(0.0);
        let inter = ix * iy;
        let union = self.w * self.h + other.w * other.h - inter;
        if union > 0.0 {
            inter / union
        } else {
            0.0
        }
    }
}

/// Side of the [`appearance_signature`] grid.
pub const SIGNATURE_SIDE: usize = 16;

/// A coarse grey-level picture of what lies inside `roi`: the mean of B, G and R at the
/// centres of a 16 x 16 grid over the rotated rectangle (nearest pixel; points outside the
/// image read the nearest edge pixel). Two frames' signatures of the same tracked face
/// correlate highly; a camera cut or a crop left on the background does not.
pub fn appearance_signature(image: &BgrImage, roi: &Roi) -> [f32; SIGNATURE_SIDE * SIGNATURE_SIDE] {
    let mut out = [0.0f32; SIGNATURE_SIDE * SIGNATURE_SIDE];
    let n = SIGNATURE_SIDE as f32;
    let (w, h) = (image.width as i64, image.height as i64);
    if w == 0 || h == 0 {
        return out;
    }
    for (k, value) in out.iter_mut().enumerate() {
        let (u, v) = (
            (k % SIGNATURE_SIDE) as f32 + 0.5,
            (k / SIGNATURE_SIDE) as f32 + 0.5,
        );
        let (x, y) = roi.to_image(u, v, n);
        let xi = (x.round() as i64).clamp(0, w - 1);
        let yi = (y.round() as i64).clamp(0, h - 1);
        let at = ((yi * w + xi) * 3) as usize;
        let px = &image.data[at..at + 3];
        *value = (px[0] as f32 + px[1] as f32 + px[2] as f32) / 3.0;
    }
    out
}

/// An OpenCV view borrowing a frame's pixels.
pub type FrameMat<'a> = BoxedRef<'a, Mat>;

/// A borrowed OpenCV view of a BGR frame (no copy of the pixels: the facial stage and
/// the encoder each read every frame; `try_clone` it to draw on it).
pub fn mat_of(image: &BgrImage) -> Result<FrameMat<'_>, String> {
    Mat::new_rows_cols_with_bytes::<Vec3b>(image.height as i32, image.width as i32, &image.data)
        .map_err(|e| e.to_string())
}

/// How the pixels outside the image are filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Border {
    /// Repeat the edge pixels (MediaPipe's default for face and eye crops).
    Replicate,
    /// Black (the detector's letterbox).
    Zero,
}

/// Crops `roi` out of a BGR frame into `out`: `size` x `size` RGB, NHWC, values mapped
/// from [0, 255] to [lo, 1].
pub fn crop_to_tensor(
    frame: &FrameMat<'_>,
    roi: &Roi,
    size: i32,
    flip: bool,
    border: Border,
    lo: f32,
    out: &mut Vec<f32>,
) -> Result<(), String> {
    let m = roi.inverse_map(size as f32, flip);
    let m =
        Mat::from_slice_2d(&[[m[0], m[1], m[2]], [m[3], m[4], m[5]]]).map_err(|e| e.to_string())?;
    let mut crop = Mat::default();
    imgproc::warp_affine(
        frame,
        &mut crop,
        &m,
        Size::new(size, size),
        imgproc::INTER_LINEAR | imgproc::WARP_INVERSE_MAP,
        match border {
            Border::Replicate => BORDER_REPLICATE,
            Border::Zero => BORDER_CONSTANT,
        },
        Scalar::all(0.0),
    )
    .map_err(|e| e.to_string())?;
    let bytes = crop.data_bytes().map_err(|e| e.to_string())?;
    let scale = (1.0 - lo) / 255.0;
    out.clear();
    out.reserve(bytes.len());
    for px in bytes.chunks_exact(3) {
        out.extend(
            [px[2], px[1], px[0]]
                .iter()
                .map(|&v| lo + f32::from(v) * scale),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::pearson;

    #[test]
    fn signature_correlation_ignores_brightness_and_sees_a_move() {
        // A diagonal ramp with a bright square: the same place correlates fully even when
        // the frame gets brighter; a crop moved off the square does not.
        let (w, h) = (200u32, 100u32);
        let mut data = Vec::with_capacity((w * h * 3) as usize);
        for y in 0..h {
            for x in 0..w {
                let v = if (40..80).contains(&x) && (30..70).contains(&y) {
                    220
                } else {
                    (x + y) / 3
                };
                data.extend_from_slice(&[v as u8; 3]);
            }
        }
        let img = BgrImage {
            width: w,
            height: h,
            data,
        };
        let brighter = BgrImage {
            data: img.data.iter().map(|&v| v / 2 + 20).collect(),
            ..img.clone()
        };
        let roi = Roi {
            cx: 60.0,
            cy: 50.0,
            w: 60.0,
            h: 60.0,
            rotation: 0.0,
        };
        let a = appearance_signature(&img, &roi);
        assert!((pearson(&a, &appearance_signature(&brighter, &roi)) - 1.0).abs() < 1e-3);
        let moved = Roi { cx: 150.0, ..roi };
        assert!(pearson(&a, &appearance_signature(&img, &moved)) < 0.5);
        assert_eq!(pearson(&a, &[5.0; SIGNATURE_SIDE * SIGNATURE_SIDE]), 0.0);
    }

    #[test]
    fn to_image_maps_corners_and_centre() {
        let roi = Roi {
            cx: 100.0,
            cy: 50.0,
            w: 40.0,
            h: 20.0,
            rotation: 0.0,
        };
        assert_eq!(roi.to_image(96.0, 96.0, 192.0), (100.0, 50.0));
        assert_eq!(roi.to_image(0.0, 0.0, 192.0), (80.0, 40.0));
        let turned = Roi {
            rotation: std::f32::consts::FRAC_PI_2,
            ..roi
        };
        // A quarter turn clockwise on screen: the crop's right points down in the image.
        let (x, y) = turned.to_image(192.0, 96.0, 192.0);
        assert!((x - 100.0).abs() < 1e-4 && (y - 70.0).abs() < 1e-4);
    }

    #[test]
    fn rotation_levels_a_tilted_pair() {
        assert!(rotation_between((0.0, 0.0), (10.0, 0.0)).abs() < 1e-6);
        // The right point lower on screen: the face is turned clockwise.
        let r = rotation_between((0.0, 0.0), (10.0, 10.0));
        assert!((r - std::f32::consts::FRAC_PI_4).abs() < 1e-6);
    }

    #[test]
    fn crop_and_projection_agree() {
        let (w, h) = (64usize, 48usize);
        let mut data = vec![0u8; w * h * 3];
        // One bright pixel at (40, 10).
        let i = (10 * w + 40) * 3;
        data[i..i + 3].copy_from_slice(&[255, 255, 255]);
        let img = BgrImage {
            width: w as u32,
            height: h as u32,
            data,
        };
        let mat = mat_of(&img).expect("mat");
        let roi = Roi {
            cx: 40.0,
            cy: 10.0,
            w: 16.0,
            h: 16.0,
            rotation: 0.3,
        };
        let mut out = Vec::new();
        crop_to_tensor(&mat, &roi, 32, false, Border::Zero, 0.0, &mut out).expect("crop");
        let (best, _) = out
            .chunks_exact(3)
            .enumerate()
            .max_by(|a, b| a.1[0].total_cmp(&b.1[0]))
            .expect("pixels");
        let (u, v) = ((best % 32) as f32, (best / 32) as f32);
        let (x, y) = roi.to_image(u, v, 32.0);
        assert!(
            (x - 40.0).abs() <= 1.0 && (y - 10.0).abs() <= 1.0,
            "{x} {y}"
        );
    }
}
