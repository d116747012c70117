//! What the writer writes: rows built from pipeline values.
//!
//! Contract: vectors are stored as little-endian f32 blobs; presence masks as one byte
//! (0 or 1) per frame of the window. [`WindowRow::from_window`] is the one place that turns
//! an in-memory [`Window`] into its stored form (its quality figures come from
//! [`crate::core::quality`]), so replay and live runs store windows identically.

use serde::Serialize;

use crate::core::Phase;
use crate::core::QualitySources;
use crate::core::{ModalityLayout, Window, WindowQuality};
use crate::Nanos;

/// Where a session's media came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSource {
    Replay,
    Live,
}

impl SessionSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionSource::Replay => "replay",
            SessionSource::Live => "live",
        }
    }
}

/// Everything written when a session starts (its events follow as they arrive).
#[derive(Debug, Clone)]
pub struct SessionStart {
    pub id: String,
    pub station_id: String,
    pub participant_id: Option<String>,
    pub source: SessionSource,
    pub source_path: Option<String>,
    pub format_version: Option<u32>,
    pub start_time: Option<String>,
    pub nominal_fps: f64,
    pub layout: ModalityLayout,
    /// Replace a complete session with the same id (otherwise that is an error).
    pub replace: bool,
    /// The run replays a live recording that was cut short and repaired (its service was
    /// killed): a rerun that is not complete may still displace a stored session that is
    /// not complete either, when it holds more frames.
    pub recovers_recording: bool,
    /// Whose utterances feed the text modality (the dialogue app's or the station's
    /// recogniser's); both may be stored.
    pub text_source: crate::core::TranscriptSource,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndStatus {
    Complete,
    /// Stopped before the end of its input (signal); what was computed is kept.
    Incomplete,
}

impl EndStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EndStatus::Complete => "complete",
            EndStatus::Incomplete => "incomplete",
        }
    }
}

/// Everything written when a session ends normally or is stopped.
#[derive(Debug, Clone)]
pub struct SessionEnd {
    pub status: EndStatus,
    pub reason: Option<String>,
    pub frames: u64,
    pub windows: u64,
    pub duration_ns: Nanos,
    pub quality_json: String,
}

/// A window as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowRow {
    pub index: u64,
    pub start_frame: u64,
    pub end_frame: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub phase: Option<Phase>,
    pub quality: WindowQuality,
    pub modalities: Vec<WindowModalityRow>,
}

/// One modality of a stored window.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowModalityRow {
    pub name: &'static str,
    pub present_frames: u64,
    /// One byte per frame, 0 or 1.
    pub presence: Vec<u8>,
    pub mean: Option<Vec<f32>>,
}

impl WindowRow {
    pub fn from_window(window: &Window, layout: &ModalityLayout, sources: &QualitySources) -> Self {
        let modalities: Vec<WindowModalityRow> = layout
            .iter()
            .map(|(id, m)| {
                let presence: Vec<u8> = window.presence(id).into_iter().map(u8::from).collect();
                WindowModalityRow {
                    name: m.spec.name,
                    present_frames: presence.iter().map(|&p| u64::from(p)).sum(),
                    presence,
                    mean: window.mean(id),
                }
            })
            .collect();
        let means: Vec<Option<Vec<f32>>> = modalities.iter().map(|m| m.mean.clone()).collect();
        WindowRow {
            index: window.index,
            start_frame: window.start_frame,
            end_frame: window.end_frame,
            start_ns: window.start_ns,
            end_ns: window.end_ns,
            phase: window.phase,
            quality: WindowQuality::of(window, sources, &means),
            modalities,
        }
    }
}

/// Little-endian f32 bytes of a vector.
pub fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The vector stored in a blob.
pub fn blob_to_vec(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ModalitySpec;
    use crate::core::{FrameRecord, Stream};
    use std::sync::Arc;

    #[test]
    fn blob_round_trip() {
        let v = vec![1.5f32, -0.0, f32::MAX, 1e-30];
        assert_eq!(blob_to_vec(&vec_to_blob(&v)), v);
    }

    #[test]
    fn window_row_has_presence_and_quality() {
        let mut layout = ModalityLayout::new();
        layout
            .add(
                Stream::Video,
                ModalitySpec::by_algorithm(
                    "video_signal",
                    vec!["brightness".into(), "contrast".into(), "sharpness".into()],
                    "test",
                    1,
                ),
            )
            .unwrap();
        layout
            .add(
                Stream::Audio,
                ModalitySpec::by_algorithm(
                    "audio_signal",
                    vec![
                        "level_dbfs".into(),
                        "clipped_fraction".into(),
                        "voice_activity".into(),
                    ],
                    "test",
                    1,
                ),
            )
            .unwrap();
        let frames: Vec<Arc<FrameRecord>> = (0..4)
            .map(|i| {
                Arc::new(FrameRecord {
                    index: i,
                    t_ns: i * 10,
                    decoded: i != 3,
                    features: vec![
                        (i != 3).then(|| vec![0.5, 0.1, 10.0 * i as f32]),
                        (i < 2).then(|| vec![-20.0, 0.0, 1.0]),
                    ],
                })
            })
            .collect();
        let window = Window {
            index: 0,
            start_frame: 0,
            end_frame: 4,
            start_ns: 0,
            end_ns: 40,
            phase: Some(Phase::WarmUp),
            frames,
            stories: Vec::new(),
        };
        let row = WindowRow::from_window(&window, &layout, &QualitySources::new(&layout));
        assert_eq!(row.quality.video_presence, 0.75);
        assert_eq!(row.quality.audio_presence, 0.5);
        assert_eq!(row.quality.brightness, Some(0.5));
        assert_eq!(row.quality.sharpness, Some(10.0));
        assert_eq!(row.quality.voice_activity, Some(1.0));
        assert_eq!(row.phase, Some(Phase::WarmUp));
        assert_eq!(row.modalities[0].presence, vec![1, 1, 1, 0]);
        assert_eq!(row.modalities[1].present_frames, 2);
    }
}

/// One story of the bank, as written in a bank file and stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Story {
    pub id: String,
    pub title: String,
    pub text: String,
    pub source: String,
    pub licence: String,
}
