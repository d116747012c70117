//! The live recorder: writes a recorded-session folder (format version 2) that
//! `empathic replay` reads, while the live session runs.
//!
//! Contract: [`Recording::create`] makes `<root>/<session_id>/` with `session.json`
//! (`recording.state = "recording"`) and `events.jsonl`; `video.avi` (the camera's JPEG
//! buffers, one chunk per nominal frame slot, see `capture::avi`) and `audio.wav` (16-bit
//! mono at the pipeline rate, gaps filled with counted zeros so sample `n` is always at
//! `offset + n / rate`) are created at the first frame and block. Every event line is
//! flushed as it is written; media are flushed every second, so a power cut loses at most
//! the last second. [`Recording::finish`] writes the AVI index, the WAV sizes and
//! `session.json` (`finalised`) by write-beside-then-rename. [`repair_interrupted`], run
//! when the service starts, finds folders still marked `recording` (the process died) and
//! finishes them (`repaired`, with what was done), so nothing recorded is silently lost.
//! When the disk's free space falls below the configured floor, raw media stop first (the
//! reason is kept in `session.json`); events, features and the database carry on.

use std::fs::File;

use crate::files::beneath::{Beneath, Kind};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::avi::{self, AviFormat, MjpegAviWriter};
use super::timeline::slot_of;
use super::CaptureError;
use crate::session::manifest::{
    CameraIntrinsics, RecordingInfo, RecordingState, SessionManifestFile,
};
use crate::session::{Event, FORMAT_VERSION};
use crate::Nanos;

/// Media are flushed to the operating system this often (and synced to disk).
const FLUSH_EVERY_NS: Nanos = 1_000_000_000;

/// What the recorder needs to know at the start.
#[derive(Debug, Clone)]
pub struct RecordingStart {
    pub root: PathBuf,
    pub session_id: String,
    pub station_id: String,
    pub participant_id: Option<String>,
    pub start_time: String,
    pub nominal_fps: f64,
    pub camera: Option<CameraIntrinsics>,
    pub sample_rate_hz: u32,
    /// Raw media stop when the disk has less free space than this.
    pub min_free_bytes: u64,
}

/// An open recording.
pub struct Recording {
    dir: PathBuf,
    /// The session's folder, open: every file of the recording is made through it.
    folder: Beneath,
    start: RecordingStart,
    info: RecordingInfo,
    events: BufWriter<File>,
    video: Option<MjpegAviWriter>,
    video_first_ns: Option<Nanos>,
    video_last_slot: Option<u64>,
    audio: Option<hound::WavWriter<BufWriter<File>>>,
    audio_first_ns: Option<Nanos>,
    audio_samples: u64,
    last_flush_ns: Nanos,
    raw_stopped: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("recording {path}: {message}")]
    Io { path: PathBuf, message: String },
    #[error(transparent)]
    Capture(#[from] CaptureError),
}

fn io(path: &Path, doing: &str, e: impl std::fmt::Display) -> RecordError {
    RecordError::Io {
        path: path.to_path_buf(),
        message: format!("cannot {doing}: {e}"),
    }
}

impl Recording {
    pub fn create(start: RecordingStart) -> Result<Self, RecordError> {
        let dir = start.root.join(&start.session_id);
        std::fs::create_dir_all(&start.root).map_err(|e| io(&start.root, "create", e))?;
        // The session's folder and every file in it are made through descriptors: a link
        // put in the recordings folder is never followed out of it.
        let folder = Beneath::open(&start.root)
            .and_then(|root| root.create_folder(&start.session_id))
            .map_err(|e| io(&dir, "create the session folder", e))?;
        let events_path = dir.join("events.jsonl");
        let events = folder
            .create_new("events.jsonl")
            .map_err(|e| io(&events_path, "create", e))?;
        let rec = Self {
            dir,
            folder,
            info: RecordingInfo {
                state: RecordingState::Recording,
                software: format!("empathic {}", crate::BUILD),
                video_frames: 0,
                video_slots_empty: 0,
                video_frames_duplicated: 0,
                audio_samples_inserted: 0,
                raw_media_stopped: None,
                repair: None,
            },
            start,
            events: BufWriter::new(events),
            video: None,
            video_first_ns: None,
            video_last_slot: None,
            audio: None,
            audio_first_ns: None,
            audio_samples: 0,
            last_flush_ns: 0,
            raw_stopped: false,
        };
        rec.write_manifest()?;
        Ok(rec)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one event line (flushed at once: events are small and precious).
    pub fn event(&mut self, event: &Event) -> Result<(), RecordError> {
        let line = event_line(event).map_err(|e| io(&self.dir, "encode an event", e))?;
        let path = self.dir.join("events.jsonl");
        self.events
            .write_all(line.as_bytes())
            .and_then(|()| self.events.write_all(b"\n"))
            .and_then(|()| self.events.flush())
            .map_err(|e| io(&path, "write", e))
    }

    /// Records one camera buffer captured at `t_ns` (session time, whole milliseconds).
    pub fn video_frame(
        &mut self,
        t_ns: Nanos,
        jpeg: &[u8],
        width: u32,
        height: u32,
    ) -> Result<(), RecordError> {
        if self.raw_stopped {
            return Ok(());
        }
        let period = 1e9 / self.start.nominal_fps;
        let first = *self.video_first_ns.get_or_insert(t_ns);
        let slot = slot_of(t_ns, first, period);
        if self.video_last_slot.is_some_and(|last| slot <= last) {
            self.info.video_frames_duplicated += 1;
            return Ok(());
        }
        if self.video.is_none() {
            let path = self.dir.join("video.avi");
            let file = self
                .folder
                .create_new("video.avi")
                .map_err(|e| io(&path, "create", e))?;
            self.video = Some(MjpegAviWriter::new(
                file,
                &path,
                AviFormat {
                    width,
                    height,
                    fps: self.start.nominal_fps,
                },
            )?);
            self.write_manifest()?;
        }
        if let Some(video) = self.video.as_mut() {
            let from = self.video_last_slot.map_or(0, |l| l + 1);
            for _ in from..slot {
                video.write_slot(None)?;
                self.info.video_slots_empty += 1;
            }
            video.write_slot(Some(jpeg))?;
            self.info.video_frames += 1;
        }
        self.video_last_slot = Some(slot);
        self.maybe_flush(t_ns)
    }

    /// Records mono samples whose first is at `t_ns` on the session timeline.
    pub fn audio(&mut self, t_ns: Nanos, samples: &[f32]) -> Result<(), RecordError> {
        if self.raw_stopped {
            return Ok(());
        }
        let rate = self.start.sample_rate_hz;
        let path = self.dir.join("audio.wav");
        if self.audio.is_none() {
            let spec = hound::WavSpec {
                channels: 1,
                sample_rate: rate,
                bits_per_sample: 16,
                sample_format: hound::SampleFormat::Int,
            };
            let file = self
                .folder
                .create_new("audio.wav")
                .map_err(|e| io(&path, "create", e))?;
            self.audio = Some(
                hound::WavWriter::new(BufWriter::new(file), spec)
                    .map_err(|e| io(&path, "create", e))?,
            );
            self.audio_first_ns = Some(t_ns);
            self.write_manifest()?;
        }
        let first = self.audio_first_ns.unwrap_or(t_ns);
        // Where this block should start, in samples from the first.
        let at = ((t_ns.saturating_sub(first)) as f64 * f64::from(rate) / 1e9).round() as u64;
        let mut skip = 0usize;
        if let Some(w) = self.audio.as_mut() {
            if at > self.audio_samples {
                let gap = at - self.audio_samples;
                for _ in 0..gap {
                    w.write_sample(0i16).map_err(|e| io(&path, "write", e))?;
                }
                self.info.audio_samples_inserted += gap;
                self.audio_samples = at;
            } else if at < self.audio_samples {
                skip = usize::try_from(self.audio_samples - at).unwrap_or(usize::MAX);
            }
            for &s in samples.iter().skip(skip) {
                // Exact for samples that came in as 16-bit (s * 32768 is an integer).
                let v = (f64::from(s) * 32768.0).round().clamp(-32768.0, 32767.0) as i16;
                w.write_sample(v).map_err(|e| io(&path, "write", e))?;
            }
        }
        self.audio_samples += samples.len().saturating_sub(skip) as u64;
        self.maybe_flush(t_ns)
    }

    fn maybe_flush(&mut self, t_ns: Nanos) -> Result<(), RecordError> {
        if t_ns < self.last_flush_ns + FLUSH_EVERY_NS {
            return Ok(());
        }
        self.last_flush_ns = t_ns;
        if let Some(v) = self.video.as_mut() {
            v.flush(true)?;
        }
        if let Some(a) = self.audio.as_mut() {
            a.flush().map_err(|e| io(&self.dir, "flush the audio", e))?;
        }
        if let Some(free) = free_bytes(&self.dir) {
            if free < self.start.min_free_bytes {
                let why = format!(
                    "raw media stopped at {:.1} s: {} MiB free on the disk, below the {} MiB floor",
                    t_ns as f64 / 1e9,
                    free >> 20,
                    self.start.min_free_bytes >> 20
                );
                tracing::warn!(dir = %self.dir.display(), "{why}");
                self.info.raw_media_stopped = Some(why);
                self.raw_stopped = true;
                self.close_media()?;
                self.write_manifest()?;
            }
        }
        Ok(())
    }

    fn close_media(&mut self) -> Result<(), RecordError> {
        if let Some(v) = self.video.take() {
            v.finish()?;
        }
        if let Some(a) = self.audio.take() {
            a.finalize()
                .map_err(|e| io(&self.dir, "finish the audio", e))?;
        }
        Ok(())
    }

    /// Finishes the media and writes `session.json` as `finalised`. Returns the folder.
    pub fn finish(mut self) -> Result<PathBuf, RecordError> {
        self.close_media()?;
        self.events
            .flush()
            .map_err(|e| io(&self.dir, "write the events", e))?;
        self.info.state = RecordingState::Finalised;
        self.write_manifest()?;
        Ok(self.dir)
    }

    fn write_manifest(&self) -> Result<(), RecordError> {
        let video_offset_ms = self.video_first_ns.map(|t| t / 1_000_000);
        let audio_offset_ms = self.audio_first_ns.map(|a| {
            let a = i64::try_from(a / 1_000_000).unwrap_or(i64::MAX);
            a - i64::try_from(video_offset_ms.unwrap_or(0)).unwrap_or(0)
        });
        let manifest = SessionManifestFile {
            format_version: FORMAT_VERSION,
            session_id: Some(self.start.session_id.clone()),
            station_id: Some(self.start.station_id.clone()),
            participant_id: self.start.participant_id.clone(),
            start_time: Some(self.start.start_time.clone()),
            camera: self.start.camera,
            nominal_fps: Some(self.start.nominal_fps),
            audio_offset_ms,
            video_offset_ms,
            recording: Some(self.info.clone()),
        };
        write_manifest(&self.folder, &manifest)
    }
}

fn write_manifest(dir: &Beneath, manifest: &SessionManifestFile) -> Result<(), RecordError> {
    let path = dir.shown("session.json");
    let text = serde_json::to_string_pretty(manifest).map_err(|e| io(&path, "encode", e))?;
    // Written beside, synced, renamed: a crash leaves the previous manifest whole.
    dir.write_atomically("session.json", text.as_bytes())
        .map_err(|e| io(&path, "write", e))
}

/// One `events.jsonl` line for an event.
pub fn event_line(event: &Event) -> Result<String, serde_json::Error> {
    let mut v = serde_json::to_value(&event.kind)?;
    if let serde_json::Value::Object(map) = &mut v {
        let mut out = serde_json::Map::new();
        out.insert("t_ms".into(), (event.t_ns / 1_000_000).into());
        out.extend(std::mem::take(map));
        return serde_json::to_string(&out);
    }
    serde_json::to_string(&v)
}

/// What [`delete_recordings_of`] did: the folders deleted, and what it would not follow
/// (links in their folders, removed as links with their targets left as they were; and
/// links in `root` itself, left, since whose they are cannot be read without following).
#[derive(Debug, Default)]
pub struct Deleted {
    pub folders: Vec<PathBuf>,
    pub links_not_followed: Vec<PathBuf>,
}

/// Deletes every recording folder under `root` whose `session.json` names participant
/// `participant` (a withdrawal): video, audio, events and manifest, beneath `root` only
/// (`files::beneath`: no link is followed). The first folder that cannot be deleted is the
/// error (the others are still tried first).
pub fn delete_recordings_of(root: &Path, participant: &str) -> Result<Deleted, RecordError> {
    let mut out = Deleted::default();
    let Ok(root_dir) = Beneath::open(root) else {
        return Ok(out);
    };
    let entries = root_dir.entries().map_err(|e| io(root, "list", e))?;
    let mut first_error = None;
    for (name, kind) in entries {
        match kind {
            Kind::Folder => {}
            Kind::Link => {
                out.links_not_followed.push(root_dir.shown(&name));
                continue;
            }
            Kind::File | Kind::Other => continue,
        }
        let theirs = root_dir
            .folder(&name)
            .and_then(|d| d.read_to_string("session.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["participant_id"].as_str() == Some(participant));
        if !theirs {
            continue;
        }
        match root_dir.remove_all(&name) {
            Ok(links) => {
                out.folders.push(root_dir.shown(&name));
                out.links_not_followed.extend(links);
            }
            Err(e) => {
                first_error.get_or_insert(io(&root_dir.shown(&name), "delete the recording", e));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Free bytes on the file system holding `path` (for an unprivileged user).
pub fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Finishes every folder under `root` still marked `recording` (the recorder died): the
/// AVI is indexed up to its last whole frame, the WAV's sizes set to the samples it holds,
/// `session.json` marked `repaired` with what was done. Returns each folder and the repair
/// done or why it failed; a folder that cannot be repaired is left untouched.
pub fn repair_interrupted(root: &Path) -> Vec<(PathBuf, Result<String, RecordError>)> {
    let Ok(root_dir) = Beneath::open(root) else {
        return Vec::new();
    };
    let Ok(entries) = root_dir.entries() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, kind) in entries {
        if kind != Kind::Folder {
            continue;
        }
        let shown = root_dir.shown(&name);
        let Ok(dir) = root_dir.folder(&name) else {
            continue;
        };
        let Ok(text) = dir.read_to_string("session.json") else {
            continue;
        };
        let Ok(mut manifest) = serde_json::from_str::<SessionManifestFile>(&text) else {
            continue;
        };
        let Some(info) = manifest.recording.as_mut() else {
            continue;
        };
        if info.state != RecordingState::Recording {
            continue;
        }
        let result = repair_folder(&dir, info).and_then(|note| {
            let path = dir.shown("session.json");
            let text =
                serde_json::to_string_pretty(&manifest).map_err(|e| io(&path, "encode", e))?;
            dir.write_atomically("session.json", text.as_bytes())
                .map_err(|e| io(&path, "write", e))?;
            Ok(note)
        });
        out.push((shown, result));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Repairs the media of one folder, opened beneath it: a `video.avi` or `audio.wav` that is
/// a link (or not a regular file) is refused, never written through.
fn repair_folder(dir: &Beneath, info: &mut RecordingInfo) -> Result<String, RecordError> {
    let mut notes = Vec::new();
    if dir.kind("video.avi").ok().flatten().is_some() {
        let path = dir.shown("video.avi");
        let file = dir
            .file("video.avi", true)
            .map_err(|e| io(&path, "open", e))?;
        let c = avi::finalize_file(file, &path)?;
        info.video_frames = c.chunks.iter().filter(|c| c.1 > 0).count() as u64;
        info.video_slots_empty = c.chunks.len() as u64 - info.video_frames;
        notes.push(format!(
            "video indexed up to its last whole frame ({} slots{})",
            c.chunks.len(),
            if c.torn_tail {
                ", a torn last frame dropped"
            } else {
                ""
            }
        ));
    }
    if dir.kind("audio.wav").ok().flatten().is_some() {
        let path = dir.shown("audio.wav");
        let file = dir
            .file("audio.wav", true)
            .map_err(|e| io(&path, "open", e))?;
        let samples = repair_wav(file, &path)?;
        notes.push(format!("audio sizes set to the {samples} samples it holds"));
    }
    info.state = RecordingState::Repaired;
    let note = format!(
        "interrupted (the recorder stopped without finishing): {}",
        notes.join("; ")
    );
    info.repair = Some(note.clone());
    Ok(note)
}

/// Sets a 16-bit PCM WAV's RIFF and data sizes from the file's length (hound writes the
/// canonical 44-byte header for mono 16-bit).
fn repair_wav(mut f: File, path: &Path) -> Result<u64, RecordError> {
    let len = f.metadata().map_err(|e| io(path, "open", e))?.len();
    let mut head = [0u8; 44];
    std::io::Read::read_exact(&mut f, &mut head).map_err(|e| io(path, "read the header of", e))?;
    if &head[..4] != b"RIFF" || &head[8..12] != b"WAVE" || &head[36..40] != b"data" {
        return Err(io(path, "repair", "not a canonical 16-bit PCM WAV header"));
    }
    let data = (len - 44) & !1;
    f.set_len(44 + data).map_err(|e| io(path, "truncate", e))?;
    let riff = u32::try_from(36 + data).unwrap_or(u32::MAX);
    let data32 = u32::try_from(data).unwrap_or(u32::MAX);
    f.seek(SeekFrom::Start(4))
        .and_then(|_| f.write_all(&riff.to_le_bytes()))
        .and_then(|()| f.seek(SeekFrom::Start(40)))
        .and_then(|_| f.write_all(&data32.to_le_bytes()))
        .and_then(|()| f.sync_all())
        .map_err(|e| io(path, "write the header of", e))?;
    Ok(data / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(root: &Path, id: &str) -> RecordingStart {
        RecordingStart {
            root: root.to_path_buf(),
            session_id: id.into(),
            station_id: "st".into(),
            participant_id: None,
            start_time: "2026-11-29T00:00:00Z".into(),
            nominal_fps: 15.0,
            camera: None,
            sample_rate_hz: 16_000,
            min_free_bytes: 0,
        }
    }

    #[test]
    fn a_recording_is_written_beneath_its_folder_and_never_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("recordings");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // A session folder that is a link out of the recordings: refused, nothing written.
        std::os::unix::fs::symlink(&outside, root.join("s-link")).unwrap();
        let Err(e) = Recording::create(start(&root, "s-link")) else {
            panic!("a linked session folder was recorded into");
        };
        assert!(e.to_string().contains("s-link"), "{e}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);

        // An ordinary recording: every file made in its own folder, the AVI indexed.
        let mut rec = Recording::create(start(&root, "s-1")).unwrap();
        rec.audio(0, &[0.25; 1600]).unwrap();
        rec.video_frame(0, &[0xff, 0xd8, 0xff, 0xd9], 4, 4).unwrap();
        rec.video_frame(66_666_667, &[0xff, 0xd8, 0xff, 0xd9], 4, 4)
            .unwrap();
        let dir = rec.finish().unwrap();
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for n in ["session.json", "events.jsonl", "video.avi", "audio.wav"] {
            assert!(names.contains(&n.to_string()), "{n} missing from {names:?}");
        }
        let avi = avi::read_chunks(&dir.join("video.avi")).unwrap();
        assert!(avi.indexed && avi.chunks.len() == 2, "{avi:?}");
        let wav = hound::WavReader::open(dir.join("audio.wav")).unwrap();
        assert_eq!(wav.len(), 1600);
    }
}
