//! Replay: the front end that runs a recorded session folder through the pipeline.
//!
//! Contract: [`replay`] opens the store (recovering abandoned sessions), reads the session
//! folder, sets up the stages, writes the session row, builds the recorded sources (video
//! file, WAV file, `events.jsonl`) and calls [`pipeline::run`], then closes the session
//! `complete`, or `incomplete` when stopped, or `failed` with the reason when its input
//! turns out bad (partial frames and windows are then removed, the reason kept). Replays
//! never drop data: every queue blocks when full, so two replays of one session store
//! identical frames and windows whatever the machine's load.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use indicatif::ProgressBar;

use super::pipeline::{self, PipelineOptions, Sinks, Sources};
use super::queues::Overflow;
use super::stages::Stages;
use super::{RunError, WriterThread};
use crate::capture::absent::{AbsentAudio, AbsentVideo};
use crate::capture::audio_file::WavAudioSource;
use crate::capture::camera::MjpegFileSource;
use crate::capture::events::RecordedEvents;
use crate::capture::video_file::FileVideoSource;
use crate::capture::{AudioSource, ReadAhead, VideoSource};
use crate::clock::{Clock, Pacer, Speed};
use crate::config::Config;
use crate::features::face::pose::IntrinsicsArgs;
use crate::report::ReplaySummary;
use crate::session::manifest::RecordingState;
use crate::session::{RecordedSession, SessionError};
use crate::store::rows::{EndStatus, SessionEnd, SessionSource, SessionStart};
use crate::store::{Store, StoreWriter};
use crate::stories::StoryIndex;

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub session_dir: PathBuf,
    pub db_path: PathBuf,
    pub config: Config,
    pub speed: Speed,
    /// Replace a session already stored complete under the same id.
    pub replace: bool,
    /// Advanced by one per stored frame; its length is set to the video's declared frames.
    pub progress: ProgressBar,
}

/// Replays one session. On error the session row (when one could be written) says
/// `failed` and why.
pub fn replay(
    opts: &ReplayOptions,
    clock: Arc<dyn Clock>,
    stop: Arc<AtomicBool>,
) -> Result<ReplaySummary, RunError> {
    let started = Instant::now();
    let config = &opts.config;
    // Opening migrates and marks sessions abandoned by a killed process as incomplete.
    // Kept for the set-up reads (bank, calibration history) and the summary: one
    // connection, never in a transaction while the writer works (WAL).
    let store = Store::open_with(&opts.db_path, (&config.store).into())?;
    store.set_sync_content(&config.sync.content())?;
    let writer_thread = WriterThread::spawn(&opts.db_path, &config.store)?;
    let writer = writer_thread.writer()?.clone();
    let session = match RecordedSession::open(
        &opts.session_dir,
        &config.station.id,
        config.video.nominal_fps,
    ) {
        Ok(s) => s,
        Err(e) => {
            // A folder that is not one (a typo) is no session: nothing is recorded. A
            // session folder with bad contents is recorded failed under its id, when that
            // id is a valid one.
            let id = RecordedSession::fallback_id(&opts.session_dir);
            let is_session = !matches!(e, SessionError::NotAFolder { .. })
                && crate::session::manifest::check_id("session_id", &id).is_ok();
            if is_session {
                record_failure(&writer, &id, &config.station.id, &e.to_string());
            }
            return Err(e.into());
        }
    };
    let m = &session.manifest;
    let fail = |e: RunError| -> RunError {
        record_failure(&writer, &m.session_id, &m.station_id, &e.to_string());
        e
    };
    let mut stages = Stages::load(config, m.nominal_fps, m.camera).map_err(fail)?;
    prepare_session(
        &mut stages,
        &store,
        config,
        m.participant_id.as_deref(),
        &m.session_id,
        m.start_time.as_deref(),
    )
    .map_err(fail)?;
    writer
        .begin(SessionStart {
            id: m.session_id.clone(),
            station_id: m.station_id.clone(),
            participant_id: m.participant_id.clone(),
            source: SessionSource::Replay,
            source_path: Some(display_path(&opts.session_dir)),
            format_version: Some(m.format_version),
            start_time: m.start_time.clone(),
            nominal_fps: m.nominal_fps,
            layout: stages.layout.clone(),
            replace: opts.replace,
        })
        .map_err(RunError::from)?;
    let setup_secs = started.elapsed().as_secs_f64();
    tracing::info!(session = %m.session_id, dir = %opts.session_dir.display(), setup_secs, "replay started");

    let sources = open_sources(&session, config).map_err(fail)?;
    if let Some(n) = sources.video.info().declared_frames {
        opts.progress.set_length(n);
    }
    let outcome = pipeline::run(
        stages,
        sources,
        Sinks {
            writer: writer.clone(),
            window_consumers: Vec::new(),
        },
        config,
        PipelineOptions {
            // Replay never drops: every queue blocks (see `queues`).
            video_overflow: Overflow::Block,
            pacer: Pacer {
                start_clock_ns: clock.now_ns(),
                speed: opts.speed,
            },
            progress: opts.progress.clone(),
            realtime_priority: 0,
            events_lag_ns: 0,
        },
        clock,
        &stop,
    )
    .map_err(fail)?;
    let (status, reason) = if outcome.stopped {
        (
            EndStatus::Incomplete,
            Some(format!(
                "stopped by a signal after {:.1} s of the session; everything computed until then is stored{}",
                outcome.duration_ns as f64 / 1e9,
                if opts.replace {
                    " (with --replace: a session already stored complete under this id is kept, not replaced)"
                } else {
                    ""
                }
            )),
        )
    } else {
        (EndStatus::Complete, None)
    };
    close_session(&writer, &outcome, status, reason.clone()).map_err(fail)?;
    drop(writer);
    writer_thread.close()?;
    tracing::info!(session = %m.session_id, frames = outcome.frames, windows = outcome.windows, "replay finished");
    Ok(ReplaySummary {
        session_id: m.session_id.clone(),
        status: status.as_str().to_string(),
        status_reason: reason,
        db_path: display_path(&opts.db_path),
        frames: outcome.frames,
        windows: outcome.windows,
        duration_secs: outcome.duration_ns as f64 / 1e9,
        elapsed_secs: started.elapsed().as_secs_f64(),
        setup_secs,
        speed: opts.speed.to_string(),
        quality: outcome.quality,
        predictions: store.session_predictions(&m.session_id)?,
    })
}

/// Closes a session that ran to the end of its sources (or was stopped): its counts, its
/// quality report and how it ended. Replay and live both.
pub(super) fn close_session(
    writer: &StoreWriter,
    outcome: &super::pipeline::Outcome,
    status: EndStatus,
    reason: Option<String>,
) -> Result<(), RunError> {
    let quality_json = serde_json::to_string(&outcome.quality).map_err(|e| RunError::Thread {
        thread: "main".into(),
        message: format!("cannot encode the quality report: {e}"),
    })?;
    writer.finish(SessionEnd {
        status,
        reason,
        frames: outcome.frames,
        windows: outcome.windows,
        duration_ns: outcome.duration_ns,
        quality_json,
    })?;
    Ok(())
}

/// Sets up what a session's stages need from the store: the stories the bank offers while
/// the participant shares (leaving out those they saw before), and each predictor's
/// per-participant calibration from their earlier sessions only. Replay and live both.
pub(super) fn prepare_session(
    stages: &mut Stages,
    store: &Store,
    config: &Config,
    participant: Option<&str>,
    session_id: &str,
    start_time: Option<&str>,
) -> Result<(), RunError> {
    // The bank, read once: the zero-shot map is relative to it (fusion::zero_shot::BankRelative)
    // and retrieval draws from it.
    let bank = stages
        .fusion
        .is_some()
        .then(|| StoryIndex::load(store, &config.models.sentence_encoder));
    if let (Some(fusion), Some(Ok(index))) = (stages.fusion.as_mut(), &bank) {
        let (vectors, dims) = index.vectors();
        fusion.set_story_bank(vectors, dims);
    }
    if let Some(bank) = bank.filter(|_| config.fusion.retrieve_k > 0) {
        match bank {
            Ok(index) => {
                let seen = match participant {
                    Some(p) => store.stories_seen_before(p, session_id, start_time)?,
                    None => Vec::new(),
                };
                stages
                    .text
                    .1
                    .set_retrieval(index, config.fusion.retrieve_k, seen);
            }
            Err(e) => tracing::info!("no retrieval while the participant shares: {e}"),
        }
    }
    if let (Some(fusion), Some(participant)) = (stages.fusion.as_mut(), participant) {
        for id in fusion.predictor_ids() {
            let pairs = store.calibration_pairs(participant, &id, session_id, start_time)?;
            if let Some(label) = fusion.calibrate(&id, &pairs) {
                tracing::info!(predictor = %id, participant = %participant, "calibrated on {} earlier rated stories ({label})", pairs.len());
            }
        }
    }
    Ok(())
}

/// The recorded folder's media and events as pipeline sources. The first video frame is
/// decoded now, so an undecodable file fails before any thread starts.
fn open_sources(session: &RecordedSession, config: &Config) -> Result<Sources, RunError> {
    let m = &session.manifest;
    if m.recording
        .as_ref()
        .is_some_and(|r| r.state == RecordingState::Recording)
    {
        return Err(SessionError::Manifest {
            path: session.dir.join("session.json"),
            message: "this recording was interrupted and is not finished yet; `empathic run` finishes it when it starts (or run `empathic recording repair FOLDER`)".into(),
        }
        .into());
    }
    let video: Box<dyn VideoSource> = match (&session.video_path, &m.recording) {
        // A station recording whose camera delivered nothing all session.
        (None, _) => Box::new(AbsentVideo::new(
            m.nominal_fps,
            format!(
                "no video: the camera delivered nothing while {} was recorded",
                session.dir.display()
            ),
        )),
        // A live recording: the camera's JPEG buffers, decoded as the live run decoded them.
        (Some(path), Some(_)) => Box::new(MjpegFileSource::open(
            path,
            m.nominal_fps,
            m.video_offset_ms * 1_000_000,
        )?),
        (Some(path), None) => Box::new(FileVideoSource::open(path)?),
    };
    let video = ReadAhead::new(video)?;
    if let (Some(camera), Some(_)) = (session.manifest.camera, &session.video_path) {
        let info = video.info();
        IntrinsicsArgs::from(camera)
            .check(Some((info.width, info.height)))
            .map_err(|m| SessionError::Manifest {
                path: session.dir.join("session.json"),
                message: format!("camera: {m}"),
            })?;
    }
    let audio: Box<dyn AudioSource> = match &session.audio_path {
        Some(path) => Box::new(WavAudioSource::open_session_track(
            path,
            config.audio.sample_rate_hz,
            config.audio.block_ms,
            // Audio's offset is relative to the first frame, which is at video_offset_ms.
            session.manifest.audio_offset_ms + i64::try_from(m.video_offset_ms).unwrap_or(0),
        )?),
        None => Box::new(AbsentAudio::new(
            config.audio.sample_rate_hz,
            format!(
                "no audio: the microphone delivered nothing while {} was recorded",
                session.dir.display()
            ),
        )),
    };
    Ok(Sources {
        video: Box::new(video),
        audio,
        events: Box::new(RecordedEvents::new(session.events.clone())),
    })
}

fn display_path(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Marks a session failed; a failure to do so is logged (the original error is what the
/// user needs to see, and is returned by the caller).
fn record_failure(writer: &StoreWriter, id: &str, station_id: &str, reason: &str) {
    // A lock held elsewhere or a full disk may clear: try a few times (each attempt waits
    // up to the busy timeout), so the row does not stay `running` with no reason.
    let mut last = None;
    for attempt in 0..3u64 {
        match writer.fail(id, station_id, SessionSource::Replay, reason) {
            Ok(()) => return,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(200 * (attempt + 1)));
    }
    if let Some(e) = last {
        tracing::error!(session = id, "could not mark the session failed: {e}");
    }
}
