//! `session.json`: what a recorded session says about itself (format versions 1 and 2:
//! docs/formats.md).
//!
//! Contract: the file is optional; every field but `format_version` is optional and has a
//! documented default; unknown fields are rejected (new fields mean a new format version);
//! a `format_version` outside 1..=[`FORMAT_VERSION`] is rejected with a message naming it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::SessionError;

/// The newest recorded-session format version this build reads (it reads 1 and 2) and the
/// one the live recorder writes. Version 2 adds `video_offset_ms` and `recording`.
pub const FORMAT_VERSION: u32 = 2;

/// Pinhole camera intrinsics in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CameraIntrinsics {
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// Refuses a focal length or principal point coordinate that is not finite or not within
/// 1 to 100,000 pixels (no camera a station uses is outside; 1e-300 or 1e308 poison the
/// pose fit with NaN and infinity).
pub fn check_intrinsic(field: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && (1.0..=100_000.0).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "{field} must be a number of pixels between 1 and 100000, got {v}"
        ))
    }
}

impl CameraIntrinsics {
    /// Checks each value with [`check_intrinsic`].
    pub fn check(&self) -> Result<(), String> {
        for (field, v) in [
            ("fx", self.fx),
            ("fy", self.fy),
            ("cx", self.cx),
            ("cy", self.cy),
        ] {
            check_intrinsic(field, v)?;
        }
        Ok(())
    }

    /// OpenFace's default for a camera without calibration: fx = fy = 500 * width / 640,
    /// principal point at the image centre.
    pub fn default_for(width: u32, height: u32) -> Self {
        let f = 500.0 * f64::from(width) / 640.0;
        Self {
            fx: f,
            fy: f,
            cx: f64::from(width) / 2.0,
            cy: f64::from(height) / 2.0,
        }
    }
}

/// `session.json` as written in the file. See docs/formats.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionManifestFile {
    pub format_version: u32,
    pub session_id: Option<String>,
    pub station_id: Option<String>,
    pub participant_id: Option<String>,
    /// RFC 3339 wall-clock time of session time 0, e.g. `2026-11-01T18:30:00Z`.
    pub start_time: Option<String>,
    pub camera: Option<CameraIntrinsics>,
    pub nominal_fps: Option<f64>,
    /// Time of the first audio sample on the session timeline, relative to the first video
    /// frame (positive: audio started later). Stations measure it on one clock.
    pub audio_offset_ms: Option<i64>,
    /// Version 2: the first video frame's time on the session timeline (session time 0 is
    /// when the live session started). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video_offset_ms: Option<u64>,
    /// Version 2: written by the live recorder; its video is the camera's own Motion-JPEG
    /// buffers, one AVI chunk per nominal frame slot (empty: no frame in that slot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<RecordingInfo>,
}

/// How a live recording was made and ended (`session.json`, version 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingInfo {
    /// `recording` while it runs, `finalised` after a clean stop, `repaired` when a later
    /// start finished a folder a crash or power loss interrupted.
    pub state: RecordingState,
    /// e.g. `empathic 0.1.0`.
    pub software: String,
    /// Frame slots written with a frame.
    pub video_frames: u64,
    /// Slots with no frame (the camera delivered none: dropped, unplugged).
    pub video_slots_empty: u64,
    /// Frames that landed on a slot already written (not recorded).
    pub video_frames_duplicated: u64,
    /// Zero samples written where the microphone delivered none (gaps, reconnects).
    pub audio_samples_inserted: u64,
    /// Why raw media stopped being recorded before the end (disk nearly full), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_media_stopped: Option<String>,
    /// What a repair did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordingState {
    Recording,
    Finalised,
    Repaired,
}

/// `session.json` with the defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionManifest {
    pub format_version: u32,
    /// Default: the session folder's name.
    pub session_id: String,
    /// Default: `station.id` from the config.
    pub station_id: String,
    /// Default: none (an anonymous session).
    pub participant_id: Option<String>,
    /// Default: none.
    pub start_time: Option<String>,
    /// Default: none, meaning OpenFace's default for the video's size.
    pub camera: Option<CameraIntrinsics>,
    /// Default: `video.nominal_fps` from the config (15).
    pub nominal_fps: f64,
    /// Default: 0.
    pub audio_offset_ms: i64,
    /// Default: 0.
    pub video_offset_ms: u64,
    /// Present for folders the live recorder wrote.
    pub recording: Option<RecordingInfo>,
    /// Whether the file names the first video frame's and the first audio sample's time.
    /// A live recorder writes each once its device delivered something, so in a station
    /// recording `false` means the camera (microphone) delivered nothing all session.
    pub video_started: bool,
    pub audio_started: bool,
    /// Whether a `session.json` was found.
    pub from_file: bool,
}

impl SessionManifest {
    /// Reads `session.json` from `dir` when present, else builds the defaults.
    pub fn load(
        dir: &Path,
        default_station_id: &str,
        default_fps: f64,
    ) -> Result<Self, SessionError> {
        let path = dir.join("session.json");
        let folder_name = super::RecordedSession::folder_id(dir);
        let file = if path.exists() {
            let bytes = super::read_bounded(&path, "session.json", super::MAX_MANIFEST_BYTES)?;
            let text = String::from_utf8(bytes).map_err(|_| SessionError::Manifest {
                path: path.clone(),
                message: "not UTF-8 text".into(),
            })?;
            // Look at the version first, so a newer file is reported as such rather than as
            // an unknown field.
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| SessionError::Manifest {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            match value.get("format_version").and_then(|v| v.as_u64()) {
                Some(v) if (1..=u64::from(FORMAT_VERSION)).contains(&v) => {}
                Some(v) => {
                    return Err(SessionError::UnsupportedVersion {
                        path,
                        found: v.to_string(),
                    })
                }
                None => {
                    return Err(SessionError::UnsupportedVersion {
                        path,
                        found: value
                            .get("format_version")
                            .map_or("none".to_string(), |v| v.to_string()),
                    })
                }
            }
            let file: SessionManifestFile =
                serde_json::from_value(value).map_err(|e| SessionError::Manifest {
                    path: path.clone(),
                    message: e.to_string(),
                })?;
            Some(file)
        } else {
            None
        };
        let from_file = file.is_some();
        let file = file.unwrap_or(SessionManifestFile {
            // A folder without session.json is version 1 (what it was before version 2).
            format_version: 1,
            session_id: None,
            station_id: None,
            participant_id: None,
            start_time: None,
            camera: None,
            nominal_fps: None,
            audio_offset_ms: None,
            video_offset_ms: None,
            recording: None,
        });
        let manifest = SessionManifest {
            format_version: file.format_version,
            session_id: file.session_id.unwrap_or(folder_name),
            station_id: file
                .station_id
                .unwrap_or_else(|| default_station_id.to_string()),
            participant_id: file.participant_id,
            start_time: file.start_time,
            camera: file.camera,
            nominal_fps: file.nominal_fps.unwrap_or(default_fps),
            audio_offset_ms: file.audio_offset_ms.unwrap_or(0),
            video_offset_ms: file.video_offset_ms.unwrap_or(0),
            video_started: file.video_offset_ms.is_some(),
            audio_started: file.audio_offset_ms.is_some(),
            recording: file.recording,
            from_file,
        };
        manifest.validate(&path)?;
        Ok(manifest)
    }

    fn validate(&self, path: &Path) -> Result<(), SessionError> {
        let bad = |message: String| SessionError::Manifest {
            path: path.to_path_buf(),
            message,
        };
        for (field, value) in [
            ("session_id", Some(&self.session_id)),
            ("station_id", Some(&self.station_id)),
            ("participant_id", self.participant_id.as_ref()),
        ] {
            if let Some(v) = value {
                check_id(field, v).map_err(bad)?;
            }
        }
        if !(self.nominal_fps.is_finite() && (1.0..=240.0).contains(&self.nominal_fps)) {
            return Err(bad(format!(
                "nominal_fps must be between 1 and 240, got {}",
                self.nominal_fps
            )));
        }
        if let Some(c) = &self.camera {
            c.check().map_err(|m| bad(format!("camera: {m}")))?;
        }
        // An hour either way: more is no recording of one session.
        if self.audio_offset_ms.unsigned_abs() > MAX_AUDIO_OFFSET_MS {
            return Err(bad(format!(
                "audio_offset_ms must be within +-{MAX_AUDIO_OFFSET_MS} ms, got {}",
                self.audio_offset_ms
            )));
        }
        if let Some(t) = &self.start_time {
            if let Err(why) = crate::clock::check_rfc3339(t) {
                return Err(bad(format!(
                    "start_time must be an RFC 3339 time that exists, like 2026-11-01T18:30:00Z, got `{t}`: {why}"
                )));
            }
        }
        Ok(())
    }
}

/// Largest audio offset accepted (one hour), in ms.
pub const MAX_AUDIO_OFFSET_MS: u64 = 3_600_000;

/// Longest id accepted for a session, station or participant.
pub const MAX_ID_LEN: usize = 128;

/// Ids name rows, files and (with sync) MQTT topics: 1 to [`MAX_ID_LEN`] characters from
/// ASCII letters, digits and `-`, `_`, `.`, `:`, `@`. (`~` is kept for the store's staged
/// replacements, `/`, `+` and `#` are MQTT topic syntax.)
pub fn check_id(field: &str, id: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@');
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(format!(
            "{field} must have 1 to {MAX_ID_LEN} characters, got {}",
            id.len()
        ));
    }
    // `.` and `..` (any run of dots) name a folder itself or its parent: a path built from
    // such an id would escape the folder it belongs in.
    if id.chars().all(|c| c == '.') {
        return Err(format!(
            "{field} `{id}` is only dots: as a folder name it means the folder itself or its parent; use letters or digits"
        ));
    }
    if let Some(c) = id.chars().find(|c| !ok_char(*c)) {
        // The id is shown escaped: it may come from anyone (an envelope, a command line)
        // and must not reach a terminal or a log with its control characters.
        let shown: String = id
            .chars()
            .take(80)
            .collect::<String>()
            .escape_debug()
            .to_string();
        return Err(format!(
            "{field} `{shown}` has the character {c:?}; use ASCII letters, digits and - _ . : @ (for a folder without session.json the folder's name is the session_id)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) {
        std::fs::write(dir.join("session.json"), text).unwrap();
    }

    #[test]
    fn ids_of_only_dots_are_refused_at_every_door() {
        for id in [".", "..", "..."] {
            let e = check_id("session_id", id).unwrap_err();
            assert!(e.contains("only dots"), "{e}");
        }
        for id in ["a.b", ".tmp1", "s-1", "x..y"] {
            assert!(check_id("session_id", id).is_ok(), "{id}");
        }
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), r#"{"format_version":1,"session_id":".."}"#);
        let e = SessionManifest::load(dir.path(), "st", 15.0).unwrap_err();
        assert!(e.to_string().contains("only dots"), "{e}");
    }

    #[test]
    fn missing_file_gives_documented_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let m = SessionManifest::load(dir.path(), "st-9", 15.0).unwrap();
        let name = dir.path().file_name().unwrap().to_string_lossy();
        assert_eq!(m.session_id, name);
        assert_eq!(m.station_id, "st-9");
        assert_eq!(m.nominal_fps, 15.0);
        assert_eq!(m.audio_offset_ms, 0);
        assert!(!m.from_file);
    }

    #[test]
    fn unknown_version_is_named() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), r#"{"format_version": 7}"#);
        let err = SessionManifest::load(dir.path(), "s", 15.0).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("version 7"), "{msg}");
        assert!(msg.contains("session.json"), "{msg}");
    }

    #[test]
    fn full_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            r#"{"format_version":1,"session_id":"S1","station_id":"st","participant_id":"P1",
               "start_time":"2026-11-01T18:30:00Z","camera":{"fx":600,"fy":600,"cx":320,"cy":240},
               "nominal_fps":15,"audio_offset_ms":-20}"#,
        );
        let m = SessionManifest::load(dir.path(), "x", 15.0).unwrap();
        assert_eq!(m.session_id, "S1");
        assert_eq!(m.participant_id.as_deref(), Some("P1"));
        assert_eq!(m.camera.unwrap().fx, 600.0);
        assert_eq!(m.audio_offset_ms, -20);
    }

    #[test]
    fn typo_field_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), r#"{"format_version":1,"sesion_id":"S1"}"#);
        let msg = SessionManifest::load(dir.path(), "x", 15.0)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("sesion_id"), "{msg}");
    }

    #[test]
    fn default_intrinsics_follow_openface() {
        let c = CameraIntrinsics::default_for(640, 480);
        assert_eq!((c.fx, c.fy, c.cx, c.cy), (500.0, 500.0, 320.0, 240.0));
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        /// A JSON value of the kinds `session.json` fields take, extremes included.
        fn value() -> impl Strategy<Value = serde_json::Value> {
            prop_oneof![
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>().prop_map(serde_json::Value::from),
                prop_oneof![
                    Just(1e-300),
                    Just(1e308),
                    Just(-0.0),
                    Just(500.0),
                    Just(0.5)
                ]
                .prop_map(serde_json::Value::from),
                "\\PC{0,12}".prop_map(serde_json::Value::from),
                Just(serde_json::Value::Null),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]
            // Untrusted input: any session.json gives a manifest within the bounds, or an
            // error naming the file; never a panic.
            #[test]
            fn arbitrary_manifests_are_bounded_or_refused(
                fields in proptest::collection::vec(
                    (prop_oneof![
                        Just("session_id"), Just("station_id"), Just("participant_id"),
                        Just("nominal_fps"), Just("audio_offset_ms"), Just("start_time"),
                        Just("fx"), Just("cx"), Just("other"),
                    ], value()),
                    0..6,
                ),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let mut obj = serde_json::Map::new();
                obj.insert("format_version".into(), 1.into());
                let mut camera = serde_json::Map::new();
                for (k, v) in fields {
                    match k {
                        "fx" | "cx" => {
                            camera.insert(k.into(), v.clone());
                            camera.insert(if k == "fx" { "fy" } else { "cy" }.into(), v);
                        }
                        _ => { obj.insert(k.into(), v); }
                    }
                }
                if !camera.is_empty() {
                    for (k, d) in [("fx", 500.0), ("fy", 500.0), ("cx", 320.0), ("cy", 240.0)] {
                        camera.entry(k).or_insert(d.into());
                    }
                    obj.insert("camera".into(), camera.into());
                }
                std::fs::write(
                    dir.path().join("session.json"),
                    serde_json::Value::Object(obj).to_string(),
                ).unwrap();
                match SessionManifest::load(dir.path(), "st", 15.0) {
                    Ok(m) => {
                        prop_assert!(check_id("session_id", &m.session_id).is_ok());
                        prop_assert!(m.audio_offset_ms.unsigned_abs() <= MAX_AUDIO_OFFSET_MS);
                        prop_assert!((1.0..=240.0).contains(&m.nominal_fps));
                        if let Some(c) = m.camera {
                            for v in [c.fx, c.fy, c.cx, c.cy] {
                                prop_assert!(v.is_finite() && (1.0..=100_000.0).contains(&v));
                            }
                        }
                    }
                    Err(e) => prop_assert!(e.to_string().contains("session.json"), "{e}"),
                }
            }
        }
    }
}
