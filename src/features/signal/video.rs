//! The `video_signal` stage: per-frame brightness, contrast and sharpness (contract in the
//! parent module), with OpenCV splitting the interleaved channels.

use opencv::prelude::*;

use super::VideoSignalTotals;
use crate::capture::{BgrImage, VideoFrame};
use crate::core::ModalitySpec;
use crate::features::face::crop;
use crate::features::{FrameContext, FrameStage, StageError};

/// Per-frame brightness, contrast and sharpness.
pub struct VideoSignalStage {
    spec: ModalitySpec,
    totals: VideoSignalTotals,
    scratch: Scratch,
}

impl VideoSignalStage {
    pub fn new() -> Self {
        Self {
            spec: ModalitySpec::by_algorithm(
                "video_signal",
                vec!["brightness".into(), "contrast".into(), "sharpness".into()],
                "signal::VideoSignalStage",
                1,
            ),
            totals: VideoSignalTotals::default(),
            scratch: Scratch::default(),
        }
    }

    pub fn totals(&self) -> &VideoSignalTotals {
        &self.totals
    }
}

impl Default for VideoSignalStage {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameStage for VideoSignalStage {
    fn spec(&self) -> &ModalitySpec {
        &self.spec
    }

    fn process(
        &mut self,
        frame: &VideoFrame,
        _ctx: &mut FrameContext,
    ) -> Result<Option<Vec<f32>>, StageError> {
        let img = &frame.image;
        let (w, h) = (img.width as usize, img.height as usize);
        if w == 0 || h == 0 || img.data.len() != w * h * 3 {
            return Err(StageError {
                stage: "video_signal",
                message: format!(
                    "frame {} has {} bytes for {w}x{h} BGR",
                    frame.seq,
                    img.data.len()
                ),
            });
        }
        let (mean, var, sharpness) =
            frame_statistics(img, &mut self.scratch).map_err(|e| StageError {
                stage: "video_signal",
                message: format!("frame {}: {e}", frame.seq),
            })?;
        self.totals.frames += 1;
        self.totals.brightness_sum += mean / 255.0;
        self.totals.sharpness_sum += sharpness;
        if let Some(s) = frame.screening {
            let t = &mut self.totals;
            t.screened_frames += 1;
            t.frames_with_bystanders += u64::from(s.bystanders > 0);
            t.frames_masked += u64::from(s.masked > 0);
            t.frames_without_participant += u64::from(!s.participant);
        }
        Ok(Some(vec![
            (mean / 255.0) as f32,
            (var.sqrt() / 255.0) as f32,
            sharpness as f32,
        ]))
    }
}

/// Luma is computed exactly as 1000 x (0.299 R + 0.587 G + 0.114 B), an integer.
const LUMA_SCALE: f64 = 1000.0;

/// Mean and variance of luma (0-255) and the variance of its 4-neighbour Laplacian over
/// the interior pixels, with `scratch` reused between frames.
///
/// Why integers: luma x 1000 is an integer (at most 255,000), so its sums, sums of
/// squares and Laplacians are exact in u64/i64 per row and u128 per frame, and each
/// statistic is an exact integer fraction, evaluated in f64 only at the end. Integer
/// additions may be taken in any order, so the compiler vectorises the loops; the f64
/// running sums this replaced had to be added one after another (a dependent chain per
/// pixel) and held the stage near 1 ms a 640x480 frame (issue 18). OpenCV's `split`
/// (SIMD, dispatched at run time) separates the interleaved channels, which plain Rust
/// for the baseline x86-64 target could not vectorise. The results are the definition's
/// exact values; the f32 luma before differed from them by its rounding (about 1e-7
/// relative), which is the size of the change in the stored values.
fn frame_statistics(bgr: &BgrImage, scratch: &mut Scratch) -> Result<(f64, f64, f64), String> {
    let (w, h) = (bgr.width as usize, bgr.height as usize);
    let mat = crop::mat_of(bgr)?;
    let cv = |e: opencv::Error| e.to_string();
    opencv::core::split(&mat, &mut scratch.planes).map_err(cv)?;
    let plane = |i| scratch.planes.get(i).map_err(cv);
    let (b, g, r) = (plane(0)?, plane(1)?, plane(2)?);
    let luma = &mut scratch.luma;
    luma.clear();
    luma.extend(
        b.data_bytes()
            .map_err(cv)?
            .iter()
            .zip(g.data_bytes().map_err(cv)?)
            .zip(r.data_bytes().map_err(cv)?)
            .map(|((&b, &g), &r)| 114 * u32::from(b) + 587 * u32::from(g) + 299 * u32::from(r)),
    );
    Ok(luma_statistics(luma, w, h))
}

/// The statistics of [`frame_statistics`] from luma x 1000, row-major `w` x `h`.
fn luma_statistics(luma: &[u32], w: usize, h: usize) -> (f64, f64, f64) {
    let n = luma.len() as u128;
    let (mut sum, mut sum_sq) = (0u128, 0u128);
    for row in luma.chunks(w.max(1)) {
        // Per row at most w x 255,000^2, below 2^64 for any width under 280 million pixels.
        let (s, q) = row.iter().fold((0u64, 0u64), |(s, q), &v| {
            (s + u64::from(v), q + u64::from(v) * u64::from(v))
        });
        sum += u128::from(s);
        sum_sq += u128::from(q);
    }
    let mean = sum as f64 / n as f64 / LUMA_SCALE;
    let var = variance(n, sum, sum_sq);
    if w < 3 || h < 3 {
        return (mean, var, 0.0);
    }
    let (mut lap_sum, mut lap_sq) = (0i128, 0u128);
    for y in 1..h - 1 {
        let (up, mid, down) = (
            &luma[(y - 1) * w + 1..y * w - 1],
            &luma[y * w..(y + 1) * w],
            &luma[(y + 1) * w + 1..(y + 2) * w - 1],
        );
        let (left, centre, right) = (&mid[..w - 2], &mid[1..w - 1], &mid[2..]);
        // |lap| <= 4 x 255,000 < 2^21, so lap^2 < 2^42 and a row's sums fit 64 bits.
        let (mut s, mut q) = (0i64, 0u64);
        for i in 0..w - 2 {
            let lap = (left[i] + right[i] + up[i] + down[i]) as i32 - 4 * centre[i] as i32;
            s += i64::from(lap);
            let a = u64::from(lap.unsigned_abs());
            q += a * a;
        }
        lap_sum += i128::from(s);
        lap_sq += u128::from(q);
    }
    let m = ((w - 2) * (h - 2)) as u128;
    // (Σlap)² = |Σlap|²: the unsigned form serves either sign.
    (mean, var, variance(m, lap_sum.unsigned_abs(), lap_sq))
}

/// Per-stage buffers reused from frame to frame.
#[derive(Default)]
struct Scratch {
    planes: opencv::core::Vector<opencv::core::Mat>,
    luma: Vec<u32>,
}

/// Population variance, on the 0-255 scale, of `n` scaled values with these sums:
/// (n Σv² - (Σv)²) / n², the numerator exact.
fn variance(n: u128, sum: u128, sum_sq: u128) -> f64 {
    let numerator = n * sum_sq - sum * sum;
    numerator as f64 / (n as f64 * n as f64) / (LUMA_SCALE * LUMA_SCALE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(width: u32, height: u32, f: impl Fn(u32, u32) -> u8) -> VideoFrame {
        let mut data = Vec::new();
        for y in 0..height {
            for x in 0..width {
                let v = f(x, y);
                data.extend_from_slice(&[v, v, v]);
            }
        }
        VideoFrame {
            seq: 0,
            t_ns: 0,
            image: BgrImage {
                width,
                height,
                data,
            },
            screening: None,
        }
    }

    /// The plain definition in f64 (luma 0.299 R + 0.587 G + 0.114 B, two-pass variance)
    /// that the exact integer [`frame_statistics`] must agree with to f64 rounding.
    fn statistics_by_definition(bgr: &[u8], w: usize, h: usize) -> (f64, f64, f64) {
        let luma: Vec<f64> = bgr
            .chunks_exact(3)
            .map(|p| 0.114 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.299 * f64::from(p[2]))
            .collect();
        let n = luma.len() as f64;
        let mean = luma.iter().sum::<f64>() / n;
        let var = luma.iter().map(|&v| (v - mean).powi(2)).sum::<f64>() / n;
        if w < 3 || h < 3 {
            return (mean, var, 0.0);
        }
        let mut laps = Vec::new();
        for y in 1..h - 1 {
            for x in 1..w - 1 {
                let i = y * w + x;
                laps.push(luma[i - 1] + luma[i + 1] + luma[i - w] + luma[i + w] - 4.0 * luma[i]);
            }
        }
        let m = laps.len() as f64;
        let lap_mean = laps.iter().sum::<f64>() / m;
        let lap_var = laps.iter().map(|&l| (l - lap_mean).powi(2)).sum::<f64>() / m;
        (mean, var, lap_var)
    }

    fn statistics_of(bgr: &[u8], w: usize, h: usize, scratch: &mut Scratch) -> (f64, f64, f64) {
        let image = BgrImage {
            width: w as u32,
            height: h as u32,
            data: bgr.to_vec(),
        };
        frame_statistics(&image, scratch).unwrap()
    }

    #[test]
    fn integer_statistics_equal_the_definition() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut scratch = Scratch::default();
        for (w, h) in [(640, 480), (37, 23), (3, 3), (2, 9), (9, 1), (1920, 1080)] {
            let bgr: Vec<u8> = (0..w * h * 3)
                .map(|i| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // smooth gradients plus noise, like a camera frame
                    ((i / 3 % w) as u64 / 3 + (state % 40)) as u8
                })
                .collect();
            let got = statistics_of(&bgr, w, h, &mut scratch);
            let want = statistics_by_definition(&bgr, w, h);
            let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
            assert!(close(got.0, want.0), "mean {w}x{h}: {got:?} {want:?}");
            assert!(close(got.1, want.1), "variance {w}x{h}: {got:?} {want:?}");
            assert!(close(got.2, want.2), "sharpness {w}x{h}: {got:?} {want:?}");
        }
    }

    #[test]
    fn extreme_frames_do_not_overflow() {
        let mut scratch = Scratch::default();
        // A full-HD checkerboard of black and white: the largest Laplacians there are.
        let (w, h) = (1920, 1080);
        let bgr: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                let v = if (i % w + i / w) % 2 == 0 { 0 } else { 255 };
                [v, v, v]
            })
            .collect();
        let (mean, var, sharpness) = statistics_of(&bgr, w, h, &mut scratch);
        let want = statistics_by_definition(&bgr, w, h);
        assert!((mean - 127.5).abs() < 1e-6, "{mean}");
        assert!((var - 127.5 * 127.5).abs() < 1e-3, "{var}");
        assert!(
            (sharpness - want.2).abs() <= 1e-9 * want.2,
            "{sharpness} {want:?}"
        );
    }

    #[test]
    fn the_video_columns_sit_where_window_quality_reads_them() {
        use crate::core::quality::video_columns::*;
        let stage = VideoSignalStage::new();
        let columns = &stage.spec().columns;
        assert_eq!(columns[BRIGHTNESS], "brightness");
        assert_eq!(columns[CONTRAST], "contrast");
        assert_eq!(columns[SHARPNESS], "sharpness");
    }

    #[test]
    fn flat_grey_frame_has_its_brightness_and_no_sharpness() {
        let mut stage = VideoSignalStage::new();
        let v = stage
            .process(&frame(16, 8, |_, _| 51), &mut FrameContext::default())
            .unwrap()
            .unwrap();
        assert!((v[0] - 0.2).abs() < 1e-3, "{v:?}");
        assert!(v[1].abs() < 1e-6);
        assert!(v[2].abs() < 1e-6);
    }

    #[test]
    fn checkerboard_is_sharper_than_smooth_ramp() {
        let mut stage = VideoSignalStage::new();
        let sharp = stage
            .process(
                &frame(32, 32, |x, y| if (x + y) % 2 == 0 { 0 } else { 255 }),
                &mut FrameContext::default(),
            )
            .unwrap()
            .unwrap();
        let smooth = stage
            .process(
                &frame(32, 32, |x, _| (x * 8) as u8),
                &mut FrameContext::default(),
            )
            .unwrap()
            .unwrap();
        assert!(
            sharp[2] > 100.0 * smooth[2].max(1.0),
            "{sharp:?} {smooth:?}"
        );
        assert_eq!(stage.totals().frames, 2);
    }
}
