//! A recorded `video.avi` (any file OpenCV's FFmpeg backend reads) as a [`VideoSource`].
//!
//! Contract: frames come out in file order as packed BGR8, stamped with the container's
//! presentation time of that frame (`CAP_PROP_POS_MSEC` after the read), rounded to the
//! nanosecond; when the container gives no usable time, the stamp is `seq / declared fps`.
//! A file that OpenCV cannot open, whose first frame cannot be decoded, or that stops
//! decoding well before the frame count its header declares is reported as corrupt.

use std::path::{Path, PathBuf};

use opencv::core::Mat;
use opencv::prelude::*;
use opencv::videoio::{self, VideoCapture};

use super::{BgrImage, CaptureError, VideoFrame, VideoInfo, VideoSource};
use crate::Nanos;

/// Frames that may be missing at the end of a file before it counts as corrupt: containers
/// written by some encoders declare one or two frames more than they hold.
const END_TOLERANCE_FRAMES: u64 = 2;

pub struct FileVideoSource {
    path: PathBuf,
    capture: VideoCapture,
    info: VideoInfo,
    mat: Mat,
    seq: u64,
    last_t_ns: Option<Nanos>,
}

impl FileVideoSource {
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let open_err = |message: String| CaptureError::Open {
            what: "video",
            path: path.to_path_buf(),
            message,
        };
        let name = path
            .to_str()
            .ok_or_else(|| open_err("the path is not valid UTF-8".into()))?;
        let capture = VideoCapture::from_file(name, videoio::CAP_FFMPEG)
            .map_err(|e| open_err(e.to_string()))?;
        // OpenCV returns Ok for a file it cannot read; is_opened tells the truth.
        if !capture.is_opened().map_err(|e| open_err(e.to_string()))? {
            return Err(open_err(
                "OpenCV (FFmpeg backend) cannot read this file: missing, not a video, or corrupt"
                    .into(),
            ));
        }
        let prop = |id: i32| capture.get(id).unwrap_or(0.0);
        let width = prop(videoio::CAP_PROP_FRAME_WIDTH);
        let height = prop(videoio::CAP_PROP_FRAME_HEIGHT);
        let fps = prop(videoio::CAP_PROP_FPS);
        let frames = prop(videoio::CAP_PROP_FRAME_COUNT);
        let info = VideoInfo {
            width: width.max(0.0) as u32,
            height: height.max(0.0) as u32,
            declared_fps: if fps.is_finite() && fps > 0.0 {
                fps
            } else {
                0.0
            },
            declared_frames: (frames.is_finite() && frames > 0.0).then_some(frames as u64),
            origin: path.display().to_string(),
        };
        Ok(Self {
            path: path.to_path_buf(),
            capture,
            info,
            mat: Mat::default(),
            seq: 0,
            last_t_ns: None,
        })
    }

    fn corrupt(&self, message: String) -> CaptureError {
        CaptureError::Corrupt {
            what: "video",
            path: self.path.clone(),
            position: format!("frame {}", self.seq),
            message,
        }
    }

    fn stamp(&self, pos_msec: f64) -> Nanos {
        let fallback = || {
            if self.info.declared_fps > 0.0 {
                (self.seq as f64 * 1e9 / self.info.declared_fps).round() as Nanos
            } else {
                self.last_t_ns.map_or(0, |t| t + 1)
            }
        };
        if !pos_msec.is_finite() || pos_msec < 0.0 {
            return fallback();
        }
        let t = (pos_msec * 1e6).round() as Nanos;
        // Some backends report 0 for every frame: fall back rather than stamp all at 0.
        if self.seq > 0 && t == 0 {
            return fallback();
        }
        t
    }
}

impl VideoSource for FileVideoSource {
    fn info(&self) -> &VideoInfo {
        &self.info
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        let got = self
            .capture
            .read(&mut self.mat)
            .map_err(|e| self.corrupt(e.to_string()))?;
        if !got || self.mat.empty() {
            // End of stream: check it is the end the header promised.
            if self.seq == 0 {
                return Err(self.corrupt("no frame could be decoded".into()));
            }
            if let Some(declared) = self.info.declared_frames {
                if self.seq + END_TOLERANCE_FRAMES < declared {
                    return Err(self.corrupt(format!(
                        "decoding stopped after {} of the {declared} frames the file declares",
                        self.seq
                    )));
                }
            }
            return Ok(None);
        }
        let image = to_bgr_image(&self.mat).map_err(|m| self.corrupt(m))?;
        if self.info.width == 0 {
            self.info.width = image.width;
            self.info.height = image.height;
        }
        if image.width != self.info.width || image.height != self.info.height {
            return Err(self.corrupt(format!(
                "frame is {}x{}, the stream is {}x{}",
                image.width, image.height, self.info.width, self.info.height
            )));
        }
        let pos = self
            .capture
            .get(videoio::CAP_PROP_POS_MSEC)
            .unwrap_or(f64::NAN);
        let t_ns = self.stamp(pos);
        let frame = VideoFrame {
            seq: self.seq,
            t_ns,
            image,
            screening: None,
        };
        self.seq += 1;
        self.last_t_ns = Some(t_ns);
        Ok(Some(frame))
    }
}

/// Copies a decoded OpenCV matrix into a packed BGR8 image.
pub(crate) fn to_bgr_image(mat: &Mat) -> Result<BgrImage, String> {
    let (rows, cols) = (mat.rows(), mat.cols());
    if mat.typ() != opencv::core::CV_8UC3 {
        return Err(format!(
            "decoded frame has OpenCV type {}, expected 8-bit BGR",
            mat.typ()
        ));
    }
    let data = if mat.is_continuous() {
        mat.data_bytes().map_err(|e| e.to_string())?.to_vec()
    } else {
        let mut data = Vec::with_capacity((rows * cols * 3) as usize);
        for r in 0..rows {
            let row = mat.row(r).map_err(|e| e.to_string())?;
            let row = row.try_clone().map_err(|e| e.to_string())?;
            data.extend_from_slice(row.data_bytes().map_err(|e| e.to_string())?);
        }
        data
    };
    Ok(BgrImage {
        width: cols as u32,
        height: rows as u32,
        data,
    })
}
