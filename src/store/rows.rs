//! What the writer writes: rows built from pipeline values.
//!
//! Contract: vectors are stored as little-endian f32 blobs; presence masks as one byte
//! (0 or 1) per frame of the window. [`WindowRow::from_window`] is the one place that turns
//! an in-memory [`Window`] into its stored form (quality figures included), so replay and
//! live runs store windows identically.

use serde::Serialize;

use crate::session::{Event, Phase, PhaseSpan};
use crate::windows::{ModalityLayout, Stream, Window};
use crate::Nanos;

/// Everything written when a session starts.
#[derive(Debug, Clone)]
pub struct SessionStart {
    pub id: String,
    pub station_id: String,
    pub participant_id: Option<String>,
    /// `replay` or `live`.
    pub source: &'static str,
    pub source_path: Option<String>,
    pub format_version: Option<u32>,
    pub start_time: Option<String>,
    pub nominal_fps: f64,
    pub events: Vec<Event>,
    /// Phase spans; the last one's end is only known at the end of the session.
    pub phases: Vec<PhaseSpan>,
    pub layout: ModalityLayout,
    /// Replace a complete session with the same id (otherwise that is an error).
    pub replace: bool,
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
    /// Fraction of frames with a decoded video frame / with audio.
    pub video_presence: f64,
    pub audio_presence: f64,
    pub brightness: Option<f64>,
    pub sharpness: Option<f64>,
    pub level_dbfs: Option<f64>,
    pub voice_activity: Option<f64>,
    pub clipped_fraction: Option<f64>,
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
    pub fn from_window(window: &Window, layout: &ModalityLayout, phase: Option<Phase>) -> Self {
        let n = window.frames.len().max(1) as f64;
        let stream_presence = |stream: Stream| {
            let present = window
                .frames
                .iter()
                .filter(|f| {
                    layout
                        .modalities
                        .iter()
                        .zip(&f.features)
                        .any(|((s, _), v)| *s == stream && v.is_some())
                })
                .count();
            present as f64 / n
        };
        let video_presence = window.frames.iter().filter(|f| f.decoded).count() as f64 / n;
        let modalities: Vec<WindowModalityRow> = layout
            .modalities
            .iter()
            .enumerate()
            .map(|(m, (_, spec))| {
                let presence: Vec<u8> = window.presence(m).into_iter().map(u8::from).collect();
                WindowModalityRow {
                    name: spec.name,
                    present_frames: presence.iter().map(|&p| u64::from(p)).sum(),
                    presence,
                    mean: window.mean(m),
                }
            })
            .collect();
        let column = |modality: &str, column: &str| -> Option<f64> {
            let m = layout.index_of(modality)?;
            let c = layout.modalities[m]
                .1
                .columns
                .iter()
                .position(|x| x == column)?;
            modalities[m].mean.as_ref().map(|v| f64::from(v[c]))
        };
        WindowRow {
            index: window.index,
            start_frame: window.start_frame,
            end_frame: window.end_frame,
            start_ns: window.start_ns,
            end_ns: window.end_ns,
            phase,
            video_presence,
            audio_presence: stream_presence(Stream::Audio),
            brightness: column("video_signal", "brightness"),
            sharpness: column("video_signal", "sharpness"),
            level_dbfs: column("audio_signal", "level_dbfs"),
            voice_activity: column("audio_signal", "voice_activity"),
            clipped_fraction: column("audio_signal", "clipped_fraction"),
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
    use crate::features::ModalitySpec;
    use crate::windows::FrameRecord;
    use std::sync::Arc;

    #[test]
    fn blob_round_trip() {
        let v = vec![1.5f32, -0.0, f32::MAX, 1e-30];
        assert_eq!(blob_to_vec(&vec_to_blob(&v)), v);
    }

    #[test]
    fn window_row_has_presence_and_quality() {
        let layout = ModalityLayout {
            modalities: vec![
                (
                    Stream::Video,
                    ModalitySpec {
                        name: "video_signal",
                        columns: vec!["brightness".into(), "contrast".into(), "sharpness".into()],
                    },
                ),
                (
                    Stream::Audio,
                    ModalitySpec {
                        name: "audio_signal",
                        columns: vec![
                            "level_dbfs".into(),
                            "clipped_fraction".into(),
                            "voice_activity".into(),
                        ],
                    },
                ),
            ],
        };
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
            frames,
        };
        let row = WindowRow::from_window(&window, &layout, Some(Phase::WarmUp));
        assert_eq!(row.video_presence, 0.75);
        assert_eq!(row.audio_presence, 0.5);
        assert_eq!(row.brightness, Some(0.5));
        assert_eq!(row.sharpness, Some(10.0));
        assert_eq!(row.voice_activity, Some(1.0));
        assert_eq!(row.modalities[0].presence, vec![1, 1, 1, 0]);
        assert_eq!(row.modalities[1].present_frames, 2);
    }
}
