//! Sources: where stamped video frames and audio blocks come from.
//!
//! Contract: a source hands out items in order, each stamped at capture in integer
//! nanoseconds on the session timeline (0 = session start) with a sequence number, so gaps
//! show. Recorded files ([`video_file`], [`audio_file`]) implement [`VideoSource`] and
//! [`AudioSource`] now; the live camera and microphone implement the same traits, so the
//! runtime and stages never know which they have. Sources do no pacing: the runtime paces.
//! Audio leaves a source mono at the configured rate (16 kHz by default), resampled with
//! rubato when the input rate differs. Session events (utterances, phases, stories,
//! ratings) come from an [`events::EventSource`] the same way: a recorded file, or the
//! live control socket.

pub mod absent;
pub mod audio_file;
pub mod avi;
#[cfg(feature = "sensing")]
pub mod camera;
pub mod control_protocol;
pub mod events;
#[cfg(feature = "sensing")]
pub mod microphone;
pub mod record;
pub mod resample;
pub mod screening;
pub mod timeline;
#[cfg(feature = "sensing")]
pub mod video_file;

use std::path::PathBuf;

use crate::exit::{Classify, ExitKind};
use crate::Nanos;

/// An 8-bit BGR image, rows packed without padding (OpenCV's default channel order).
#[derive(Debug, Clone, PartialEq)]
pub struct BgrImage {
    pub width: u32,
    pub height: u32,
    /// `width * height * 3` bytes.
    pub data: Vec<u8>,
}

/// One video frame as captured.
#[derive(Debug, Clone)]
pub struct VideoFrame {
    /// Position in the source's output: 0, 1, 2, ... (a gap in stamps shows a dropped frame).
    pub seq: u64,
    /// Capture time on the session timeline.
    pub t_ns: Nanos,
    pub image: BgrImage,
    /// What the bystander screen found and masked in this frame (`None`: not screened,
    /// `[privacy] bystanders = "keep"`).
    pub screening: Option<screening::Screening>,
}

/// A block of mono audio samples at the pipeline rate.
#[derive(Debug, Clone)]
pub struct AudioBlock {
    pub seq: u64,
    /// Time of the first sample on the session timeline.
    pub t_ns: Nanos,
    pub sample_rate_hz: u32,
    /// Samples in [-1, 1] (full scale), mono.
    pub samples: Vec<f32>,
    /// Live capture: the session time at which the capture thread took the block's last
    /// samples from the device and handed it on (what came before is the device's and the
    /// sound server's delivery; what comes after is the runtime's). `None` from files.
    pub handed_ns: Option<Nanos>,
}

/// What a video source knows about itself before the first frame.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoInfo {
    pub width: u32,
    pub height: u32,
    /// The rate the container or device declares.
    pub declared_fps: f64,
    /// Frames the container declares (files only).
    pub declared_frames: Option<u64>,
    /// Human-readable origin, e.g. the file path or device.
    pub origin: String,
}

/// What an audio source knows about itself before the first block.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioInfo {
    /// Rate of the raw input.
    pub input_rate_hz: u32,
    pub input_channels: u16,
    /// Rate of the blocks handed out (after resampling).
    pub sample_rate_hz: u32,
    /// Samples at `sample_rate_hz` the source will hand out, when known (files).
    pub expected_samples: Option<u64>,
    pub origin: String,
}

/// A source of stamped video frames: a recorded file now, a camera later.
pub trait VideoSource: Send {
    fn info(&self) -> &VideoInfo;
    /// The next frame, or `None` at the end of the stream.
    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError>;
}

/// A video source whose first frame was read ahead (so an undecodable file fails before
/// any thread starts) and is handed out first.
pub struct ReadAhead {
    first: Option<VideoFrame>,
    inner: Box<dyn VideoSource>,
}

impl ReadAhead {
    /// Reads the first frame of `inner` now.
    pub fn new(mut inner: Box<dyn VideoSource>) -> Result<Self, CaptureError> {
        let first = inner.next_frame()?;
        Ok(Self { first, inner })
    }
}

impl VideoSource for ReadAhead {
    fn info(&self) -> &VideoInfo {
        self.inner.info()
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        match self.first.take() {
            Some(f) => Ok(Some(f)),
            None => self.inner.next_frame(),
        }
    }
}

/// A source of stamped mono audio blocks: a recorded file now, a microphone later.
pub trait AudioSource: Send {
    fn info(&self) -> &AudioInfo;
    /// The next block, or `None` at the end of the stream.
    fn next_block(&mut self) -> Result<Option<AudioBlock>, CaptureError>;
}

/// Errors from opening or reading a source.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot open {what}: {message}: {path}")]
    Open {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("corrupt {what} at {position}: {message}: {path}")]
    Corrupt {
        what: &'static str,
        path: PathBuf,
        position: String,
        message: String,
    },
    #[error("truncated audio: the header declares {declared_bytes} bytes of samples but the file holds {present_bytes}: {path}")]
    TruncatedAudio {
        path: PathBuf,
        declared_bytes: u64,
        present_bytes: u64,
    },
    #[error("unsupported {what}: {message}: {path}")]
    Unsupported {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("capture device {device} failed: {message}")]
    Device { device: String, message: String },
    /// The bystander screen failed on a frame: no frame goes on unscreened.
    #[error("the bystander screen failed on frame {frame}: {message}")]
    Screen { frame: u64, message: String },
}

impl Classify for CaptureError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            // A device that stops working is the machine's problem, not the user's input.
            CaptureError::Device { .. } | CaptureError::Screen { .. } => ExitKind::Runtime,
            _ => ExitKind::BadInput,
        }
    }
}

/// Converts a sample index at `rate_hz` to nanoseconds, exactly (no float drift).
pub fn samples_to_ns(samples: u64, rate_hz: u32) -> Nanos {
    let ns = u128::from(samples) * u128::from(crate::NANOS_PER_SEC) / u128::from(rate_hz);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_stamps_are_exact_over_long_sessions() {
        assert_eq!(samples_to_ns(16_000, 16_000), 1_000_000_000);
        // Three hours at 16 kHz: no drift.
        assert_eq!(
            samples_to_ns(16_000 * 3600 * 3, 16_000),
            3 * 3600 * 1_000_000_000
        );
        assert_eq!(samples_to_ns(1, 16_000), 62_500);
    }
}
