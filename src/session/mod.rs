//! The recorded-session folder (format versions 1 and 2, specified in docs/formats.md).
//!
//! Contract: a folder holds `video.avi` and `audio.wav`, and optionally `session.json`
//! ([`manifest`]) and `events.jsonl` ([`events`]). Both media files are required, except in a
//! station's own recording where the camera or microphone delivered nothing all session (its
//! recorder never created the file, and `session.json` names no start time for it): that
//! modality replays as missing, as it was live. [`RecordedSession::open`]
//! checks the folder and parses the small files up front, so a malformed session is rejected
//! before any media is decoded. The media files are opened by [`crate::capture`].

pub mod events;
pub mod manifest;

use std::path::{Path, PathBuf};

pub use events::{Event, EventKind, PhaseSpan, TimePoint};
pub use manifest::{CameraIntrinsics, SessionManifest, FORMAT_VERSION};

use crate::exit::{Classify, ExitKind};

/// Errors in a recorded session's files. All are bad input (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("not a recorded-session folder ({why}): {path}")]
    NotAFolder { path: PathBuf, why: &'static str },
    #[error("recorded session is missing its {what}: {path}")]
    Missing { what: &'static str, path: PathBuf },
    #[error("cannot read: {source}: {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "unsupported recorded-session format version {found} (this build reads versions 1 to {}): {path}",
        FORMAT_VERSION
    )]
    UnsupportedVersion { path: PathBuf, found: String },
    #[error("invalid session.json: {message}: {path}")]
    Manifest { path: PathBuf, message: String },
    #[error("{what} must be a regular file of at most {max} bytes; this is {found}: {path}")]
    NotBounded {
        what: &'static str,
        path: PathBuf,
        found: String,
        max: u64,
    },
    #[error("invalid event on line {line}: {message}: {path}")]
    Events {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

impl Classify for SessionError {
    fn exit_kind(&self) -> ExitKind {
        ExitKind::BadInput
    }
}

/// `session.json` at most this size (a few hundred bytes in practice).
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// `events.jsonl` at most this size (a session's events are tens of KiB).
pub const MAX_EVENTS_BYTES: u64 = 64 << 20;
/// No time on a session's timeline lies past this (a session lasts hours, not days).
pub const MAX_SESSION_MS: u64 = 24 * 3600 * 1000;

/// Reads one of a session's small files: a regular file (not a FIFO, device or folder,
/// which would block or never end) of at most `max` bytes.
pub fn read_bounded(path: &Path, what: &'static str, max: u64) -> Result<Vec<u8>, SessionError> {
    use std::io::Read as _;
    let io = |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    let bounded = |found: String| SessionError::NotBounded {
        what,
        path: path.to_path_buf(),
        found,
        max,
    };
    if !meta.is_file() {
        return Err(bounded("not a regular file".into()));
    }
    if meta.len() > max {
        return Err(bounded(format!("{} bytes", meta.len())));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(bounded("growing past the bound while read".into()));
    }
    Ok(bytes)
}

/// A recorded session whose small files have been read and checked.
#[derive(Debug, Clone)]
pub struct RecordedSession {
    pub dir: PathBuf,
    /// `None`: a station recording whose camera delivered nothing.
    pub video_path: Option<PathBuf>,
    /// `None`: a station recording whose microphone delivered nothing.
    pub audio_path: Option<PathBuf>,
    pub manifest: SessionManifest,
    /// Time-sorted events; empty when there is no `events.jsonl`.
    pub events: Vec<Event>,
    /// Lines of `events.jsonl` left out as bad (only when asked: `open_skipping`).
    pub skipped_events: Vec<events::SkippedLine>,
}

impl RecordedSession {
    /// Opens a session folder. `default_station_id` and `default_fps` come from the config and
    /// fill in what `session.json` leaves out.
    pub fn open(
        dir: &Path,
        default_station_id: &str,
        default_fps: f64,
    ) -> Result<Self, SessionError> {
        Self::open_skipping(dir, default_station_id, default_fps, false)
    }

    /// [`RecordedSession::open`]; with `skip_bad_events`, bad lines of `events.jsonl` are
    /// left out and listed in `skipped_events` instead of refusing the session.
    pub fn open_skipping(
        dir: &Path,
        default_station_id: &str,
        default_fps: f64,
        skip_bad_events: bool,
    ) -> Result<Self, SessionError> {
        if !dir.is_dir() {
            return Err(SessionError::NotAFolder {
                path: dir.to_path_buf(),
                why: if dir.exists() {
                    "it is a file"
                } else {
                    "nothing exists at that path"
                },
            });
        }
        let manifest = SessionManifest::load(dir, default_station_id, default_fps)?;
        let media = |what: &'static str, file: &str, started: bool| {
            let path = dir.join(file);
            if path.is_file() {
                return Ok(Some(path));
            }
            match &manifest.recording {
                // The station's recorder creates the file with the device's first delivery.
                Some(_) if !started => Ok(None),
                Some(_) => Err(SessionError::Missing {
                    what: if what == "video" {
                        "video (the recording's session.json says the camera delivered frames: deleted since, perhaps by [recording] retention_days)"
                    } else {
                        "audio (the recording's session.json says the microphone delivered samples: deleted since, perhaps by [recording] retention_days)"
                    },
                    path,
                }),
                None => Err(SessionError::Missing { what, path }),
            }
        };
        let video_path = media("video", "video.avi", manifest.video_started)?;
        let audio_path = media("audio", "audio.wav", manifest.audio_started)?;
        let events_path = events::events_path(dir);
        let (events, skipped_events) = if events_path.exists() {
            events::read_events_skipping(&events_path, skip_bad_events)?
        } else {
            (Vec::new(), Vec::new())
        };
        events::check_against_manifest(&events, manifest.participant_id.as_deref(), &events_path)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            video_path,
            audio_path,
            manifest,
            events,
            skipped_events,
        })
    }

    /// The session id from `session.json`, or the folder name when the file does not exist,
    /// cannot be read, is of another format version or has no valid id. Used to mark a
    /// session failed even when its manifest or events are bad.
    pub fn fallback_id(dir: &Path) -> String {
        // The file's id when the file is of this format and the id a valid one (a file of
        // another version may mean anything by it).
        let from_file = std::fs::read_to_string(dir.join("session.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .filter(|v| {
                v.get("format_version")
                    .and_then(|f| f.as_u64())
                    .is_some_and(|f| (1..=u64::from(manifest::FORMAT_VERSION)).contains(&f))
            })
            .and_then(|v| v.get("session_id")?.as_str().map(str::to_string))
            .filter(|id| manifest::check_id("session_id", id).is_ok());
        from_file.unwrap_or_else(|| Self::folder_id(dir))
    }

    /// The folder's name: the session id when `session.json` gives none.
    pub fn folder_id(dir: &Path) -> String {
        dir.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "session".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_folder_and_a_file_are_told_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope");
        let e = RecordedSession::open(&missing, "st", 15.0).unwrap_err();
        assert!(e.to_string().contains("nothing exists at that path"), "{e}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let e = RecordedSession::open(&file, "st", 15.0).unwrap_err();
        assert!(e.to_string().contains("it is a file"), "{e}");
    }
}
