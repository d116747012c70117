//! The tracked video of `extract face --tracked` and `extract body --tracked`: every frame
//! with what the facial (or body) stage found drawn over it, to check the tracking by eye
//! (OpenFace's `-tracked` output).
//!
//! Contract: one output frame per input frame, same size and frame rate, Motion-JPEG in
//! AVI. Drawn on a face: the 68 landmarks (green), the measured eye landmarks (yellow),
//! each eye's gaze (red, 6 cm from the iris centre), the head's axes (x red, y green,
//! z blue, 5 cm from the head origin); always a panel with the frame number, the
//! confidence, the faces seen, and the 17 AU intensities as bars (0-5). The file is written
//! under a temporary name and renamed into place by [`TrackedVideo::finish`] once it is
//! read back with every frame (OpenCV's writer does not report a full disk), so a failed
//! extraction leaves no partial video under the requested name. The video shows the
//! participant's face: it is made only on request, from a file the user already holds.

use std::path::Path;

use nalgebra::Vector3;
use opencv::core::{Mat, Point, Rect, Scalar, Size};
use opencv::imgproc;
use opencv::prelude::*;
use opencv::videoio::{self, VideoWriter};

use crate::capture::video_file::FileVideoSource;
use crate::capture::{BgrImage, VideoSource};
use crate::features::body::{Pose, BONES};
use crate::features::face::au::AU_R;
use crate::features::face::crop::mat_of;
use crate::features::face::pose::Intrinsics;
use crate::features::face::FaceObservation;
use crate::files::Partial;

/// Gaze lines' length (mm).
const GAZE_LENGTH_MM: f64 = 60.0;
/// Head axes' length (mm).
const AXIS_LENGTH_MM: f64 = 50.0;

/// BGR colours.
fn bgr(b: f64, g: f64, r: f64) -> Scalar {
    Scalar::new(b, g, r, 0.0)
}

/// A Motion-JPEG AVI being written.
pub struct TrackedVideo {
    writer: VideoWriter,
    /// Where the frames go until [`TrackedVideo::finish`] renames it (removed if dropped).
    partial: Option<Partial>,
    size: (u32, u32),
    written: u64,
}

impl TrackedVideo {
    /// Opens `path` (which must end in `.avi`) for frames of `width` x `height` at `fps`.
    pub fn create(path: &Path, fps: f64, width: u32, height: u32) -> Result<Self, String> {
        let is_avi = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("avi"));
        if !is_avi {
            return Err("the tracked video is Motion-JPEG in AVI: name it *.avi".into());
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.is_dir() {
                return Err(format!("no such directory: {}", dir.display()));
            }
        }
        let partial = Partial::reserve_keeping_extension(path).map_err(|e| e.to_string())?;
        let name = partial
            .path()
            .to_str()
            .ok_or_else(|| "the path is not valid UTF-8".to_string())?;
        let fourcc = VideoWriter::fourcc('M', 'J', 'P', 'G').map_err(|e| e.to_string())?;
        let fps = if fps.is_finite() && fps > 0.0 {
            fps
        } else {
            15.0
        };
        // FFmpeg only: other backends (GStreamer, image sequences) would only add noise.
        let writer = VideoWriter::new_with_backend(
            name,
            videoio::CAP_FFMPEG,
            fourcc,
            fps,
            Size::new(width as i32, height as i32),
            true,
        )
        .map_err(|e| e.to_string())?;
        if !writer.is_opened().map_err(|e| e.to_string())? {
            return Err(format!(
                "OpenCV cannot open {} for writing (directory missing or not writable?)",
                partial.path().display()
            ));
        }
        Ok(Self {
            writer,
            partial: Some(partial),
            size: (width, height),
            written: 0,
        })
    }

    /// Appends `image` with `obs` drawn over it.
    pub fn write(
        &mut self,
        frame_number: u64,
        image: &BgrImage,
        obs: &FaceObservation,
        k: &Intrinsics,
    ) -> Result<(), String> {
        self.write_drawn(frame_number, image, |mat| draw(mat, frame_number, obs, k))
    }

    /// Appends `image` with the body's pose (or "no person") drawn over it.
    pub fn write_body(
        &mut self,
        frame_number: u64,
        image: &BgrImage,
        pose: Option<&Pose>,
    ) -> Result<(), String> {
        self.write_drawn(frame_number, image, |mat| {
            draw_body(mat, frame_number, pose)
        })
    }

    fn write_drawn(
        &mut self,
        frame_number: u64,
        image: &BgrImage,
        draw: impl FnOnce(&mut Mat) -> opencv::Result<()>,
    ) -> Result<(), String> {
        if (image.width, image.height) != self.size {
            return Err(format!(
                "frame {frame_number} is {}x{}, the video {}x{}",
                image.width, image.height, self.size.0, self.size.1
            ));
        }
        let mut mat = mat_of(image)?.try_clone().map_err(|e| e.to_string())?;
        draw(&mut mat).map_err(|e| e.to_string())?;
        self.writer.write(&mat).map_err(|e| e.to_string())?;
        self.written += 1;
        Ok(())
    }

    /// Closes the file, checks it holds every frame (OpenCV's writer does not report a
    /// full disk), and moves it to its name. On error the partial file is removed (drop).
    pub fn finish(mut self) -> Result<(), String> {
        self.writer.release().map_err(|e| e.to_string())?;
        let partial = self
            .partial
            .take()
            .ok_or_else(|| "the tracked video was already finished".to_string())?;
        let declared = FileVideoSource::open(partial.path())
            .ok()
            .and_then(|source| source.info().declared_frames);
        if declared != Some(self.written) {
            return Err(format!(
                "the written video declares {} of its {} frames (disk full?)",
                declared.map_or_else(|| "none".to_string(), |n| n.to_string()),
                self.written
            ));
        }
        partial.commit().map_err(|e| e.to_string())
    }
}

impl Drop for TrackedVideo {
    /// An unfinished video (an error anywhere in the extraction) leaves no file behind.
    fn drop(&mut self) {
        if self.partial.is_some() {
            // Closed before the partial file is removed (the `Partial`'s own drop).
            let _ = self.writer.release();
        }
    }
}

fn point(p: (f64, f64)) -> Point {
    Point::new(p.0.round() as i32, p.1.round() as i32)
}

/// Draws one frame's body pose onto `img` (BGR): the bones (cyan, fading with the lower
/// visibility of their two ends), the 33 landmarks (orange when visible >= 0.5, grey
/// otherwise) and a panel with the frame number, the pose flag and the shoulders' depth
/// (the world points' mean z, metres from the hips: negative leans toward the camera).
pub fn draw_body(img: &mut Mat, frame_number: u64, pose: Option<&Pose>) -> opencv::Result<()> {
    let aa = imgproc::LINE_AA;
    let px = |p: [f32; 3]| point((f64::from(p[0]), f64::from(p[1])));
    if let Some(pose) = pose {
        for &(a, b) in &BONES {
            let v = f64::from(pose.visibility[a].min(pose.visibility[b]));
            let c = bgr(255.0 * v, 255.0 * v, 60.0 * v);
            imgproc::line(img, px(pose.image[a]), px(pose.image[b]), c, 2, aa, 0)?;
        }
        for (i, &p) in pose.image.iter().enumerate() {
            let colour = if pose.visibility[i] >= 0.5 {
                bgr(0.0, 140.0, 255.0)
            } else {
                bgr(150.0, 150.0, 150.0)
            };
            imgproc::circle(img, px(p), 3, colour, -1, aa, 0)?;
        }
    }
    let title = match pose {
        Some(p) => format!(
            "#{frame_number} body {:.2} shoulders z {:+.2} m",
            p.confidence,
            (p.world[11][2] + p.world[12][2]) / 2.0
        ),
        None => format!("#{frame_number} no person"),
    };
    let shade = Rect::new(0, 0, 260.min(img.cols()), 20.min(img.rows()));
    let mut roi = Mat::roi_mut(img, shade)?;
    let mut dark = Mat::default();
    roi.convert_to(&mut dark, -1, 0.35, 0.0)?;
    dark.copy_to(&mut roi)?;
    imgproc::put_text(
        img,
        &title,
        Point::new(4, 14),
        imgproc::FONT_HERSHEY_SIMPLEX,
        0.4,
        bgr(255.0, 255.0, 255.0),
        1,
        aa,
        false,
    )
}

/// Draws one frame's observation onto `img` (BGR).
pub fn draw(
    img: &mut Mat,
    frame_number: u64,
    obs: &FaceObservation,
    k: &Intrinsics,
) -> opencv::Result<()> {
    let aa = imgproc::LINE_AA;
    if let Some(face) = &obs.face {
        // Gaze from each iris centre (the mean of its 8 iris-edge points in 3D).
        for (eye, gaze) in face.gaze.iter().enumerate() {
            let ring: Vec<Vector3<f64>> = face.eye_3d[eye * 28..eye * 28 + 8]
                .iter()
                .flatten()
                .copied()
                .collect();
            if ring.is_empty() {
                continue;
            }
            let centre = ring.iter().sum::<Vector3<f64>>() / ring.len() as f64;
            let end = centre + gaze * GAZE_LENGTH_MM;
            if centre.z > 0.0 && end.z > 0.0 {
                let (a, b) = (point(k.project(&centre)), point(k.project(&end)));
                imgproc::line(img, a, b, bgr(0.0, 0.0, 255.0), 2, aa, 0)?;
            }
        }
        let origin = face.pose.translation;
        if origin.z > 0.0 {
            let o = point(k.project(&origin));
            for (axis, colour) in [
                (Vector3::x(), bgr(0.0, 0.0, 255.0)),
                (Vector3::y(), bgr(0.0, 255.0, 0.0)),
                (Vector3::z(), bgr(255.0, 0.0, 0.0)),
            ] {
                let end = origin + face.pose.rotation * axis * AXIS_LENGTH_MM;
                if end.z > 0.0 {
                    imgproc::line(img, o, point(k.project(&end)), colour, 2, aa, 0)?;
                }
            }
        }
    }
    if let Some(face) = &obs.face {
        // Points last, so the lines never hide them.
        for &p in &face.landmarks_2d {
            imgproc::circle(img, point(p), 2, bgr(0.0, 255.0, 0.0), -1, aa, 0)?;
        }
        for p in face.eye_2d.iter().flatten() {
            imgproc::circle(img, point(*p), 1, bgr(0.0, 255.0, 255.0), -1, aa, 0)?;
        }
    }
    panel(img, frame_number, obs)
}

/// The text and AU bars in the top-left corner, on a dark box so they read on any frame.
fn panel(img: &mut Mat, frame_number: u64, obs: &FaceObservation) -> opencv::Result<()> {
    let (row, bar_max) = (12, 60);
    let height = 22 + row * AU_R.len() as i32 + 4;
    let width = 170;
    let shade = Rect::new(0, 0, width.min(img.cols()), height.min(img.rows()));
    let mut roi = Mat::roi_mut(img, shade)?;
    let mut dark = Mat::default();
    roi.convert_to(&mut dark, -1, 0.35, 0.0)?;
    dark.copy_to(&mut roi)?;
    let font = imgproc::FONT_HERSHEY_SIMPLEX;
    let white = bgr(255.0, 255.0, 255.0);
    let title = match &obs.face {
        Some(_) => format!(
            "#{frame_number} conf {:.2} faces {}",
            obs.confidence, obs.faces_seen
        ),
        None => format!("#{frame_number} no face (faces {})", obs.faces_seen),
    };
    imgproc::put_text(
        img,
        &title,
        Point::new(4, 14),
        font,
        0.4,
        white,
        1,
        imgproc::LINE_AA,
        false,
    )?;
    let Some(face) = &obs.face else {
        return Ok(());
    };
    for (i, (name, &value)) in AU_R.iter().zip(&face.aus.intensity).enumerate() {
        let y = 22 + row * i as i32;
        imgproc::put_text(
            img,
            &name[2..],
            Point::new(4, y + 9),
            font,
            0.3,
            white,
            1,
            imgproc::LINE_AA,
            false,
        )?;
        let length = (value.clamp(0.0, 5.0) / 5.0 * bar_max as f32).round() as i32;
        if length > 0 {
            imgproc::rectangle(
                img,
                Rect::new(28, y + 2, length, row - 4),
                bgr(0.0, 200.0, 255.0),
                -1,
                imgproc::LINE_8,
                0,
            )?;
        }
    }
    Ok(())
}
