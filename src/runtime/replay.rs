//! Replay: the front end that runs a recorded session folder through the pipeline.
//!
//! Contract: [`replay`] opens the store (recovering abandoned sessions), reads the session
//! folder and builds the recorded sources (video file, WAV file, `events.jsonl`); the
//! session's sequence around [`pipeline::run`] is [`super::sequence`]'s: the session is
//! closed `complete`, or `incomplete` when stopped, or `failed` with the reason when its
//! input turns out bad (partial frames and windows are then removed, the reason kept). Replays
//! never drop data: every queue blocks when full, so two replays of one session store
//! identical frames and windows whatever the machine's load.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use super::pipeline::{self, Observer, PipelineOptions, Progress, Recorded, Sinks, Sources};
use super::queues::Overflow;
use super::screen::{open_screen, ScreenedVideo};
use super::sequence::{prepare_session, SessionWriter};
use super::stages::Stages;
use super::transcripts::{RunKind, TranscriptPlan};
use super::RunError;
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
use crate::session::SessionManifest;
use crate::session::{RecordedSession, SessionError};
use crate::store::rows::{SessionSource, SessionStart};
use crate::store::Store;
use crate::Nanos;

/// What to replay and how.
#[derive(Clone)]
pub struct ReplayOptions {
    pub session_dir: PathBuf,
    pub db_path: PathBuf,
    pub config: Config,
    pub speed: Speed,
    /// Replace a session already stored complete under the same id.
    pub replace: bool,
    /// Advanced by one per stored frame; its length is set to the video's declared frames.
    pub progress: std::sync::Arc<dyn Progress>,
    /// Write here the stream a control-socket subscriber to every topic would have
    /// received (JSON lines), as `empathic replay --emit FILE`.
    pub emit: Option<PathBuf>,
    /// Leave bad lines of `events.jsonl` out (each stored with why in the quality report
    /// and named in the session's reason) instead of refusing the session.
    pub skip_bad_events: bool,
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
    let sessions = SessionWriter::start(&opts.db_path, &config.store, SessionSource::Replay)?;
    let session = open_recorded(opts, &sessions)?;
    let m = &session.manifest;
    let fail = |e: RunError| -> RunError {
        sessions.record_failure(&m.session_id, &m.station_id, &e.to_string());
        e
    };
    let mut stages = Stages::load(config, m.nominal_fps, m.camera).map_err(fail)?;
    let kind = match &m.recording {
        Some(_) => RunKind::LiveRecording,
        None => RunKind::Recording(&session.events),
    };
    let transcripts = TranscriptPlan::resolve(config, kind).apply(&mut stages, config);
    prepare_session(
        &mut stages,
        &store,
        config,
        m.participant_id.as_deref(),
        &m.session_id,
        m.start_time.as_deref(),
    )
    .map_err(fail)?;
    sessions.begin(SessionStart {
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
        recovers_recording: m
            .recording
            .as_ref()
            .is_some_and(|r| r.state == RecordingState::Repaired),
        text_source: transcripts.text_from,
    })?;
    let setup_secs = started.elapsed().as_secs_f64();
    tracing::info!(session = %m.session_id, dir = %opts.session_dir.display(), setup_secs, "replay started");

    let sources = open_sources(&session, config).map_err(fail)?;
    let emitted = opts.emit.as_ref().map(|_| {
        let r = Arc::new(Recorded::default());
        emit_session_start(&r, &session);
        r
    });
    if let Some(n) = sources.video.info().declared_frames {
        opts.progress.set_total(n);
    }
    let run = pipeline::run(
        stages,
        sources,
        Sinks {
            writer: sessions.writer()?.clone(),
            window_consumers: Vec::new(),
            observer: emitted.clone().map(|r| r as Arc<dyn pipeline::Observer>),
            latest_window: None,
        },
        config,
        replay_options(opts, config, m, clock.now_ns()),
        clock,
        &stop,
    );
    let run = run.map(|mut o| {
        o.quality.skipped_events = session.skipped_events.clone();
        o
    });
    let replace = opts.replace;
    let ended = sessions.end(&m.session_id, &m.station_id, run, |outcome| {
        ended_short(m, outcome, replace)
    })?;
    sessions.close()?;
    let outcome = ended.outcome;
    if let (Some(r), Some(path)) = (&emitted, &opts.emit) {
        r.observe(
            pipeline::Topic::Session,
            outcome.duration_ns / 1_000_000,
            serde_json::json!({"event": "ended", "session_id": m.session_id, "status": ended.status.as_str(), "frames": outcome.frames, "windows": outcome.windows}),
        );
        write_stream(path, &r.lines())?;
    }
    tracing::info!(session = %m.session_id, frames = outcome.frames, windows = outcome.windows, "replay finished");
    let predictions = store.session_predictions(&m.session_id)?;
    let no_story_bank = no_story_bank(&store, opts);
    let kept = kept_stored(&store, &m.session_id, replace, ended.status.as_str())?;
    Ok(ReplaySummary {
        kept,
        session_id: m.session_id.clone(),
        status: ended.status.as_str().to_string(),
        status_reason: ended.reason,
        input_cut: !outcome.cut_inputs.is_empty(),
        db_path: display_path(&opts.db_path),
        frames: outcome.frames,
        windows: outcome.windows,
        duration_secs: outcome.duration_ns as f64 / 1e9,
        elapsed_secs: started.elapsed().as_secs_f64(),
        setup_secs,
        speed: opts.speed.to_string(),
        quality: outcome.quality,
        predictions,
        no_story_bank,
    })
}

/// Without a bank nothing is retrieved while the participant shares (and a session whose
/// events show no story gets no prediction), and with fewer than
/// [`MIN_BANK_STORIES`](crate::fusion::zero_shot::MIN_BANK_STORIES) the zero-shot scores fall
/// back to the absolute map, which reads lower than the bank-relative one (a trial compared
/// 1.4-1.5 against the demo's 2.9-3.4 and found nothing saying why): said on the summary
/// with its fix (it was only an INFO log line).
fn no_story_bank(store: &Store, opts: &ReplayOptions) -> Option<String> {
    use crate::fusion::zero_shot::MIN_BANK_STORIES;
    let fix = format!(
        "import a bank (`empathic stories import STORIES.jsonl --db {}`), then replay again with --replace",
        display_path(&opts.db_path)
    );
    let absolute = "text-zero-shot scores the stories shown on its absolute map (1 + 4 x cosine), which reads lower than a bank's (docs/prediction.md)";
    match crate::stories::load_index(store, &opts.config.models.sentence_encoder) {
        Err(e) => Some(format!(
            "no story bank: {e}; nothing was retrieved while the participant shared and {absolute}: {fix}"
        )),
        Ok(index) if index.len() < MIN_BANK_STORIES => Some(format!(
            "a small story bank: it holds {} stor{} (fewer than {MIN_BANK_STORIES}), so {absolute}: {fix}",
            index.len(),
            if index.len() == 1 { "y" } else { "ies" }
        )),
        Ok(_) => None,
    }
}

/// The recorded session at `opts.session_dir`. A folder that is not one (a typo) is no
/// session: nothing is recorded. A session folder with bad contents is recorded failed
/// under its id, when that id is a valid one.
fn open_recorded(
    opts: &ReplayOptions,
    sessions: &SessionWriter,
) -> Result<RecordedSession, RunError> {
    let config = &opts.config;
    // Kept on the row of a session that fails before it begins (a bad events line).
    let participant = crate::session::SessionManifest::load(
        &opts.session_dir,
        &config.station.id,
        config.video.nominal_fps,
    )
    .ok()
    .and_then(|m| m.participant_id);
    sessions.set_origin(participant, Some(display_path(&opts.session_dir)));
    match RecordedSession::open_skipping(
        &opts.session_dir,
        &config.station.id,
        config.video.nominal_fps,
        opts.skip_bad_events,
    ) {
        Ok(s) => Ok(s),
        Err(e) => {
            let id = RecordedSession::fallback_id(&opts.session_dir);
            let is_session = !matches!(e, SessionError::NotAFolder { .. })
                && crate::session::manifest::check_id("session_id", &id).is_ok();
            if is_session {
                sessions.record_failure(&id, &config.station.id, &e.to_string());
            }
            Err(e.into())
        }
    }
}

/// How a replay runs: every queue blocks (never drops), paced from `start_clock_ns` at the
/// asked speed, and a live recording's words reach its frames as they did live.
fn replay_options(
    opts: &ReplayOptions,
    config: &Config,
    m: &SessionManifest,
    start_clock_ns: Nanos,
) -> PipelineOptions {
    PipelineOptions {
        // Replay never drops: every queue blocks (see `queues`).
        video_overflow: Overflow::Block,
        pacer: Pacer {
            start_clock_ns,
            speed: opts.speed,
        },
        progress: opts.progress.clone(),
        realtime_priority: 0,
        live_events_lag_ns: None,
        failures: pipeline::StageFailures::new(),
        // A live recording's words reach its frames as they did live.
        words_reach_ns: m
            .recording
            .is_some()
            .then(|| config.live.transcript_wait_ms * 1_000_000),
    }
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
    // The screen runs on the source's thread, ahead of every stage.
    let video: Box<dyn VideoSource> = match open_screen(config, false)? {
        Some(screen) => Box::new(ScreenedVideo::new(video, screen)),
        None => video,
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

/// The session's start and the phases its events declare, as the live service sends them.
fn emit_session_start(r: &Recorded, session: &RecordedSession) {
    let m = &session.manifest;
    r.observe(
        pipeline::Topic::Session,
        0,
        serde_json::json!({"event": "start", "session_id": m.session_id, "participant_id": m.participant_id}),
    );
    for e in &session.events {
        if let crate::session::EventKind::Phase { phase } = e.kind {
            r.observe(
                pipeline::Topic::Session,
                e.t_ns / 1_000_000,
                serde_json::json!({"event": "phase", "phase": phase.as_str()}),
            );
        }
    }
}

/// Writes the stream beside, then renames it into place (never half a file).
fn write_stream(path: &Path, lines: &[String]) -> Result<(), RunError> {
    let mut text = lines.join("\n");
    text.push('\n');
    Ok(crate::files::write_atomically(path, text.as_bytes())?)
}

fn display_path(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Why a replayed session holds less than a whole session, when it does: a live recording
/// that a later start repaired was cut short (the service killed, the power lost), and
/// replayed it is still the session it was; a replay stopped by a signal.
fn ended_short(m: &SessionManifest, outcome: &pipeline::Outcome, replace: bool) -> Option<String> {
    let cut_short = m.recording.as_ref().and_then(|r| {
        (r.state == RecordingState::Repaired).then(|| {
            format!(
                "recorded live until the service was killed or the station lost power; the recording was repaired at a later start ({}) and holds what was recorded until then",
                r.repair.as_deref().unwrap_or("no repair noted")
            )
        })
    });
    let stopped = outcome.stopped.then(|| {
        format!(
            "stopped by a signal after {:.1} s of the session; everything computed until then is stored{}",
            outcome.duration_ns as f64 / 1e9,
            if replace {
                " (with --replace: a session already stored complete under this id is kept, not replaced)"
            } else {
                ""
            }
        )
    });
    let why: Vec<String> = cut_short.into_iter().chain(stopped).collect();
    (!why.is_empty()).then(|| why.join("; "))
}

/// A `--replace` run that did not finish leaves a complete stored session as it was: the
/// summary must not call this run stored (a trial read "stored incomplete" and thought the
/// 8-minute session was cut to 73 s). The words that say so, or `None`.
fn kept_stored(
    store: &Store,
    id: &str,
    replace: bool,
    ended: &str,
) -> Result<Option<String>, RunError> {
    Ok(match store.session_status(id)? {
        Some(stored) if replace && stored == "complete" && ended != "complete" => Some(format!(
            "this run was not stored: the session already stored under this id ({stored}) is kept as it was; the figures above are this run's, the predictions below the stored session's"
        )),
        _ => None,
    })
}
