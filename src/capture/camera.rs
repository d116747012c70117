//! Cameras: Motion-JPEG buffers from a V4L2 webcam (nokhwa) or from an AVI file played in
//! real time (the test and demo camera), decoded with OpenCV's `imdecode`.
//!
//! Contract: a [`FrameGrabber`] hands out the camera's own JPEG buffers stamped on the
//! run's [`Clock`] (the driver's buffer time where the driver gives one); a
//! [`CameraOpener`] opens one, again after an unplug. [`MjpegFileSource`] replays an AVI
//! written by the live recorder (`capture::avi`) through the same decoder the live run
//! used, stamping slot `k` at the recording's first-frame time plus `k` nominal periods, so
//! a replayed recording reproduces the live frames bit for bit.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use opencv::core::{Mat, Vector};
use opencv::imgcodecs;
use opencv::prelude::*;

use super::avi::{self, AviContents};
use super::{BgrImage, CaptureError, VideoFrame, VideoInfo, VideoSource};
use crate::clock::Clock;
use crate::Nanos;

/// One buffer from a camera.
#[derive(Debug, Clone)]
pub struct Grab {
    pub jpeg: Vec<u8>,
    /// When it was captured, on the run's clock.
    pub clock_ns: Nanos,
}

/// An open camera delivering Motion-JPEG buffers. `grab` blocks until the next one.
/// Not `Send`: a V4L2 camera lives and dies on the thread that opened it.
pub trait FrameGrabber {
    fn grab(&mut self) -> Result<Grab, CaptureError>;
}

/// Opens a camera (again after it went away).
pub trait CameraOpener: Send + Sync {
    /// What it opens, for logs and status.
    fn describe(&self) -> String;
    fn open(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn FrameGrabber>, CaptureError>;
}

/// Decodes a JPEG buffer into packed BGR8.
pub fn decode_jpeg(jpeg: &[u8]) -> Result<BgrImage, String> {
    if jpeg.len() < 4 || jpeg[0] != 0xFF || jpeg[1] != 0xD8 {
        return Err("the buffer is not a JPEG image".into());
    }
    let buf = Vector::<u8>::from_slice(jpeg);
    let mat: Mat = imgcodecs::imdecode(&buf, imgcodecs::IMREAD_COLOR).map_err(|e| e.to_string())?;
    if mat.empty() {
        return Err("the JPEG image does not decode".into());
    }
    super::video_file::to_bgr_image(&mat)
}

/// The camera a config names: a V4L2 device under `/dev`, else a Motion-JPEG AVI file
/// played as a camera.
pub fn opener_for(device: &Path, width: u32, height: u32, fps: f64) -> Box<dyn CameraOpener> {
    if device.starts_with("/dev") {
        Box::new(V4l2Camera {
            device: device.to_path_buf(),
            width,
            height,
            fps,
        })
    } else {
        Box::new(FileCamera {
            path: device.to_path_buf(),
        })
    }
}

/// A V4L2 webcam asked for Motion-JPEG at the configured size and rate.
pub struct V4l2Camera {
    pub device: PathBuf,
    pub width: u32,
    pub height: u32,
    pub fps: f64,
}

impl CameraOpener for V4l2Camera {
    fn describe(&self) -> String {
        format!(
            "V4L2 camera {} ({}x{} MJPG at {} fps)",
            self.device.display(),
            self.width,
            self.height,
            self.fps
        )
    }

    fn open(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn FrameGrabber>, CaptureError> {
        use nokhwa::utils::{
            CameraFormat, CameraIndex, FrameFormat, RequestedFormat, RequestedFormatType,
        };
        let err = |message: String| CaptureError::Device {
            device: self.device.display().to_string(),
            message,
        };
        if !self.device.exists() {
            return Err(err("no such device (is the camera plugged in?)".into()));
        }
        let index = self
            .device
            .to_str()
            .and_then(|s| s.strip_prefix("/dev/video"))
            .and_then(|n| n.parse::<u32>().ok())
            .map_or_else(
                || CameraIndex::String(self.device.display().to_string()),
                CameraIndex::Index,
            );
        let format = CameraFormat::new_from(
            self.width,
            self.height,
            FrameFormat::MJPEG,
            self.fps.round() as u32,
        );
        let requested = RequestedFormat::with_formats(
            RequestedFormatType::Closest(format),
            &[FrameFormat::MJPEG],
        );
        let mut camera = nokhwa::Camera::new(index, requested).map_err(|e| err(e.to_string()))?;
        camera.open_stream().map_err(|e| err(e.to_string()))?;
        Ok(Box::new(V4l2Grabber {
            camera,
            device: self.device.display().to_string(),
            clock,
        }))
    }
}

struct V4l2Grabber {
    camera: nokhwa::Camera,
    device: String,
    clock: Arc<dyn Clock>,
}

impl FrameGrabber for V4l2Grabber {
    fn grab(&mut self) -> Result<Grab, CaptureError> {
        let buffer = self.camera.frame().map_err(|e| CaptureError::Device {
            device: self.device.clone(),
            message: e.to_string(),
        })?;
        let now = self.clock.now_ns();
        // The driver stamps buffers on CLOCK_MONOTONIC: its age is how long ago it was taken.
        let age = buffer
            .capture_timestamp()
            .and_then(|ts| monotonic_now().checked_sub(ts))
            .filter(|age| age.as_secs() < 2)
            .map_or(0, |age| u64::try_from(age.as_nanos()).unwrap_or(0));
        Ok(Grab {
            jpeg: buffer.buffer().to_vec(),
            clock_ns: now.saturating_sub(age),
        })
    }
}

/// CLOCK_MONOTONIC now (the clock V4L2 buffer timestamps are on).
fn monotonic_now() -> std::time::Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    std::time::Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// A Motion-JPEG AVI played as a camera: its frames in a loop at the file's rate, paced
/// on the clock from when it was opened. The file vanishing is an unplug (each grab checks
/// it is there); it coming back is a replug, from its first frame.
pub struct FileCamera {
    pub path: PathBuf,
}

impl CameraOpener for FileCamera {
    fn describe(&self) -> String {
        format!("file camera {}", self.path.display())
    }

    fn open(&self, clock: Arc<dyn Clock>) -> Result<Box<dyn FrameGrabber>, CaptureError> {
        let contents = avi::read_chunks(&self.path)?;
        if !contents.chunks.iter().any(|c| c.1 > 0) {
            return Err(CaptureError::Corrupt {
                what: "video",
                path: self.path.clone(),
                position: "movi".into(),
                message: "the file holds no frame".into(),
            });
        }
        let file = File::open(&self.path).map_err(|e| CaptureError::Open {
            what: "video",
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        Ok(Box::new(FileGrabber {
            path: self.path.clone(),
            period_ns: 1e9 / contents.format.fps,
            contents,
            file,
            epoch_ns: clock.now_ns(),
            clock,
            next: 0,
        }))
    }
}

struct FileGrabber {
    path: PathBuf,
    contents: AviContents,
    file: File,
    period_ns: f64,
    clock: Arc<dyn Clock>,
    epoch_ns: Nanos,
    next: u64,
}

impl FrameGrabber for FileGrabber {
    fn grab(&mut self) -> Result<Grab, CaptureError> {
        loop {
            let due = self.epoch_ns + (self.next as f64 * self.period_ns).round() as Nanos;
            self.clock.sleep_until_ns(due);
            if !self.path.exists() {
                return Err(CaptureError::Device {
                    device: self.path.display().to_string(),
                    message: "the camera went away (file camera: the file is gone)".into(),
                });
            }
            let n = self.contents.chunks.len() as u64;
            let chunk = self.contents.chunks[(self.next % n) as usize];
            self.next += 1;
            if chunk.1 == 0 {
                continue;
            }
            let jpeg = avi::read_chunk(&mut self.file, &self.path, chunk)?;
            return Ok(Grab {
                jpeg,
                clock_ns: due,
            });
        }
    }
}

/// A recording's `video.avi` as a [`VideoSource`]: JPEG chunks decoded like the live run
/// decoded them, slot `k` stamped at `offset_ns + round(k * period)`; empty chunks (slots
/// the live run had no frame for) give no frame.
pub struct MjpegFileSource {
    path: PathBuf,
    file: File,
    contents: AviContents,
    info: VideoInfo,
    offset_ns: Nanos,
    period_ns: f64,
    slot: usize,
    seq: u64,
}

impl MjpegFileSource {
    pub fn open(path: &Path, nominal_fps: f64, offset_ns: Nanos) -> Result<Self, CaptureError> {
        let contents = avi::read_chunks(path)?;
        let file = File::open(path).map_err(|e| CaptureError::Open {
            what: "video",
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let info = VideoInfo {
            width: contents.format.width,
            height: contents.format.height,
            declared_fps: nominal_fps,
            declared_frames: Some(contents.chunks.len() as u64),
            origin: path.display().to_string(),
        };
        Ok(Self {
            path: path.to_path_buf(),
            file,
            contents,
            info,
            offset_ns,
            period_ns: 1e9 / nominal_fps,
            slot: 0,
            seq: 0,
        })
    }
}

impl VideoSource for MjpegFileSource {
    fn info(&self) -> &VideoInfo {
        &self.info
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        while let Some(&chunk) = self.contents.chunks.get(self.slot) {
            let slot = self.slot;
            self.slot += 1;
            if chunk.1 == 0 {
                continue;
            }
            let jpeg = avi::read_chunk(&mut self.file, &self.path, chunk)?;
            let image = decode_jpeg(&jpeg).map_err(|message| CaptureError::Corrupt {
                what: "video",
                path: self.path.clone(),
                position: format!("frame slot {slot}"),
                message,
            })?;
            let frame = VideoFrame {
                seq: self.seq,
                t_ns: self.offset_ns + (slot as f64 * self.period_ns).round() as Nanos,
                image,
                // Screened when it was recorded: the replay takes that, not a second look
                // at a frame whose bystanders are already masked.
                screening: super::screening::read_mark(&jpeg),
            };
            self.seq += 1;
            return Ok(Some(frame));
        }
        Ok(None)
    }
}
