//! A window's quality figures, computed from its frames through the modality layout.
//!
//! Contract: [`WindowQuality::of`] gives the fraction of frames with a decoded video frame,
//! the fraction with any audio modality present, and the window means of the signal
//! stages' brightness, sharpness, level, voice activity and clipped fraction (absent when
//! the window has no such frame, or the run has no such modality). The columns are read by
//! the column constants here ([`video_columns`], [`audio_columns`]), where the signal stages
//! put those columns (their tests hold them to it), never looked up by name.

use super::{ModalityId, ModalityLayout, Stream, Window};

/// Column positions of the `video_signal` vector (window quality reads them by these).
pub mod video_columns {
    pub const BRIGHTNESS: usize = 0;
    pub const CONTRAST: usize = 1;
    pub const SHARPNESS: usize = 2;
}

/// Column positions of the `audio_signal` vector.
pub mod audio_columns {
    pub const LEVEL_DBFS: usize = 0;
    pub const CLIPPED_FRACTION: usize = 1;
    pub const VOICE_ACTIVITY: usize = 2;
}

/// Where the quality figures come from in a layout, resolved once at set-up.
#[derive(Debug, Clone)]
pub struct QualitySources {
    video_signal: Option<ModalityId>,
    audio_signal: Option<ModalityId>,
    audio: Vec<ModalityId>,
}

impl QualitySources {
    pub fn new(layout: &ModalityLayout) -> Self {
        Self {
            video_signal: layout.id("video_signal"),
            audio_signal: layout.id("audio_signal"),
            audio: layout.of_stream(Stream::Audio),
        }
    }
}

/// The quality figures of one window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowQuality {
    /// Fraction of frames with a decoded video frame / with audio.
    pub video_presence: f64,
    pub audio_presence: f64,
    pub brightness: Option<f64>,
    pub sharpness: Option<f64>,
    pub level_dbfs: Option<f64>,
    pub voice_activity: Option<f64>,
    pub clipped_fraction: Option<f64>,
}

impl WindowQuality {
    /// `means` are the window's per-modality means in layout order (computed once by the
    /// caller, who stores them too).
    pub fn of(window: &Window, sources: &QualitySources, means: &[Option<Vec<f32>>]) -> Self {
        let n = window.frames.len().max(1) as f64;
        let video_presence = window.frames.iter().filter(|f| f.decoded).count() as f64 / n;
        let with_audio = window
            .frames
            .iter()
            .filter(|f| sources.audio.iter().any(|&m| f.get(m).is_some()))
            .count();
        let column = |m: Option<ModalityId>, c: usize| -> Option<f64> {
            let mean = means.get(m?.index())?.as_ref()?;
            mean.get(c).map(|&v| f64::from(v))
        };
        Self {
            video_presence,
            audio_presence: with_audio as f64 / n,
            brightness: column(sources.video_signal, video_columns::BRIGHTNESS),
            sharpness: column(sources.video_signal, video_columns::SHARPNESS),
            level_dbfs: column(sources.audio_signal, audio_columns::LEVEL_DBFS),
            voice_activity: column(sources.audio_signal, audio_columns::VOICE_ACTIVITY),
            clipped_fraction: column(sources.audio_signal, audio_columns::CLIPPED_FRACTION),
        }
    }
}
