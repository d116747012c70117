//! A device that delivered nothing: the camera or microphone of a station recording that was
//! missing for the whole session, so the recorder never created its file.
//!
//! Contract: each source hands out no frame or block and ends at once. Replaying such a
//! recording stores the modality as missing on every frame, as the live run did.

use super::{AudioBlock, AudioInfo, AudioSource, CaptureError, VideoFrame, VideoInfo, VideoSource};

/// A camera that delivered no frame.
pub struct AbsentVideo {
    info: VideoInfo,
}

impl AbsentVideo {
    /// `origin` says why there is nothing (shown where a source is named).
    pub fn new(fps: f64, origin: String) -> Self {
        Self {
            info: VideoInfo {
                width: 0,
                height: 0,
                declared_fps: fps,
                declared_frames: Some(0),
                origin,
            },
        }
    }
}

impl VideoSource for AbsentVideo {
    fn info(&self) -> &VideoInfo {
        &self.info
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        Ok(None)
    }
}

/// A microphone that delivered no sample.
pub struct AbsentAudio {
    info: AudioInfo,
}

impl AbsentAudio {
    pub fn new(sample_rate_hz: u32, origin: String) -> Self {
        Self {
            info: AudioInfo {
                input_rate_hz: sample_rate_hz,
                input_channels: 1,
                sample_rate_hz,
                expected_samples: Some(0),
                origin,
            },
        }
    }
}

impl AudioSource for AbsentAudio {
    fn info(&self) -> &AudioInfo {
        &self.info
    }

    fn next_block(&mut self) -> Result<Option<AudioBlock>, CaptureError> {
        Ok(None)
    }
}
