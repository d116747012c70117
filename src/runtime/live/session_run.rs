//! A live session: `start_session` checks everything before writing anything, then starts
//! the writer, the recording and the session thread; [`run_session`] runs the pipeline on
//! the live sources and ends the session through [`crate::runtime::sequence`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::capture::camera::Grab;
use crate::capture::control_protocol::SessionRules;
use crate::capture::record::{Recording, RecordingStart};
use crate::capture::{AudioBlock, AudioInfo, VideoInfo};
use crate::clock::{Clock, Pacer, Speed};
use crate::config::Config;
use crate::runtime::pipeline::{self, Observer, Outcome, PipelineOptions, Sinks, Sources, Topic};
use crate::runtime::queues::{policy_queue, Overflow, PolicyReceiver};
use crate::runtime::stages::Stages;
use crate::runtime::transcripts::{RunKind, TranscriptPlan};
use crate::runtime::RunError;
use crate::session::manifest::CameraIntrinsics;
use crate::session::Event;
use crate::store::rows::{EndStatus, SessionSource, SessionStart};
use crate::Nanos;

use super::devices::{camera_thread, microphone_thread, ControlEvents, LiveAudio, LiveVideo};
use super::{spawn, Counters, Running, Service};
use crate::runtime::sequence::{prepare_session, SessionWriter};

pub(super) const GRAB_QUEUE: usize = 4;
/// Events waiting for the pipeline's event thread.
pub(super) const EVENT_QUEUE: usize = 1024;

pub(super) fn start_session<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    participant: String,
    session_id: Option<String>,
    lease_s: Option<u64>,
    conn: u64,
) -> Result<serde_json::Value, String> {
    {
        let mut state = service.state();
        if state.running.is_some() || state.starting {
            return Err(format!(
                "{}a session is already running: stop it first",
                super::BUSY
            ));
        }
        state.starting = true;
    }
    let started = start_session_checked(scope, service, participant, session_id, lease_s, conn);
    service.state().starting = false;
    started
}

/// [`start_session`] once it holds the start: checks everything, then writes.
pub(super) fn start_session_checked<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    participant: String,
    session_id: Option<String>,
    lease_s: Option<u64>,
    conn: u64,
) -> Result<serde_json::Value, String> {
    let config = service.config;
    check_consent(service, &participant)?;
    let start_time = crate::clock::utc_now();
    let id = new_session_id(service, session_id, &start_time)?;
    let camera = intrinsics(config);
    let (stages, sessions) = begin_session(service, &participant, &id, &start_time, camera)?;
    // Retention holds on a service that runs for weeks without a restart: applied before
    // every session's recording, not only at start (issue 46's soak found it only at start).
    {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        super::retention::apply_retention(config, &store);
    }
    let recording = match create_recording(config, &participant, &id, &start_time, camera) {
        Ok(recording) => recording,
        Err(reason) => {
            // The row was begun: it is closed with the reason, not left `running`.
            sessions.record_failure(&id, &config.station.id, &reason);
            if let Err(e) = sessions.close() {
                tracing::error!(session = %id, "{e}");
            }
            return Err(reason);
        }
    };
    let recording_dir = recording.as_ref().map(|r| {
        r.lock()
            .unwrap_or_else(|p| p.into_inner())
            .dir()
            .to_path_buf()
    });
    let (event_tx, event_rx) = policy_queue::<Event>(EVENT_QUEUE, Overflow::Block);
    let end = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let start_clock_ns = service.clock.now_ns();
    counters
        .frame_at_ns
        .store(start_clock_ns, Ordering::Relaxed);
    counters
        .audio_at_ns
        .store(start_clock_ns, Ordering::Relaxed);
    let latest_window: crate::runtime::pipeline::LatestSlot = Default::default();
    let failures = pipeline::StageFailures::new();
    let tie = super::lifecycle::Tie::new(
        conn,
        lease_s,
        std::time::Duration::from_millis(config.live.app_grace_ms),
    );
    let kept_by = tie.describe();
    let token = tie.token.clone();
    let consent_withdrawn = Arc::new(AtomicBool::new(false));
    let store_failed = sessions
        .writer()
        .map(|w| w.failure_flag())
        .map_err(|e| e.to_string())?;
    let run = SessionRun {
        consent_withdrawn: consent_withdrawn.clone(),
        abandoned: tie.abandoned.clone(),
        latest_window: latest_window.clone(),
        failures: failures.clone(),
        id: id.clone(),
        start_clock_ns,
        end: end.clone(),
        counters: counters.clone(),
        recording: recording.clone(),
        events: event_rx,
    };
    service.state().running = Some(Running {
        id: id.clone(),
        participant: participant.clone(),
        start_clock_ns,
        rules: SessionRules::default(),
        events: event_tx,
        end,
        counters,
        recording,
        recording_dir: recording_dir.clone(),
        latest_window,
        failures,
        tie,
        consent_withdrawn,
        store_failed,
    });
    let session_id = id.clone();
    let started = spawn(scope, "live-session", move || {
        let outcome = run_session(scope, service, stages, run, &sessions);
        let closed = sessions.close();
        let error = outcome
            .and(closed)
            .err()
            .map(|e| format!("session {id}: {e}"));
        if let Some(e) = &error {
            service.set_error(e.clone());
        }
        let mut state = service.state();
        state.ended_on_error = error.map(|e| (id.clone(), e));
        state.running = None;
        state.status.sessions_run += 1;
    });
    if let Err(e) = started {
        service.state().running = None;
        return Err(e.to_string());
    }
    service.subscribers.set_session_start(start_clock_ns);
    service.subscribers.observe(
        Topic::Session,
        0,
        serde_json::json!({"event": "start", "session_id": session_id, "participant_id": participant}),
    );
    tracing::info!(session = %session_id, participant = %participant, "live session started");
    Ok(
        serde_json::json!({"session_id": session_id, "t_ms": 0, "recording": recording_dir, "kept_by": kept_by, "token": token}),
    )
}

/// Refuses a participant without recorded consent (`given`).
fn check_consent(service: &Service<'_>, participant: &str) -> Result<(), String> {
    let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
    match store.participant_consent(participant).map_err(|e| e.to_string())? {
        Some((consent, _)) if consent == "given" => {}
        Some((consent, _)) => {
            return Err(format!(
                "participant `{participant}` has consent `{consent}`: nothing is captured without recorded consent"
            ))
        }
        None => {
            return Err(format!(
                "unknown participant `{participant}`: study staff record consent first (`empathic participant consent {participant} --given`)"
            ))
        }
    }
    Ok(())
}

/// The new session's id: the one asked for, or the station's id and the start time.
fn new_session_id(
    service: &Service<'_>,
    session_id: Option<String>,
    start_time: &str,
) -> Result<String, String> {
    let config = service.config;
    let id = session_id.unwrap_or_else(|| {
        format!(
            "{}-{}",
            config.station.id,
            start_time
                .replace([':', '-'], "")
                .trim_end_matches('Z')
                .replace('.', "")
        )
    });
    // A live session is new: an id already stored (a crashed session's, say) or already
    // recorded is refused before anything is written.
    {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(status) = store.session_status(&id).map_err(|e| e.to_string())? {
            return Err(format!(
                "session id `{id}` is already stored ({status}): a live session needs a new id (leave session_id out to get one)"
            ));
        }
    }
    let folder = config.recording.dir.join(&id);
    if config.recording.enabled && folder.exists() {
        return Err(format!(
            "session id `{id}` already has a recording at {}: a live session needs a new id",
            folder.display()
        ));
    }
    Ok(id)
}

/// Opens the stages (with the transcript plan) and begins the session's row.
fn begin_session(
    service: &Service<'_>,
    participant: &str,
    id: &str,
    start_time: &str,
    camera: Option<CameraIntrinsics>,
) -> Result<(Stages, SessionWriter), String> {
    let config = service.config;
    let encoder = service.sentence_encoder()?;
    let mut stages = Stages::load_sharing(config, config.video.nominal_fps, camera, encoder)
        .map_err(|e| e.to_string())?;
    let transcripts = TranscriptPlan::resolve(config, RunKind::Live).apply(&mut stages, config);
    {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        prepare_session(
            &mut stages,
            &store,
            config,
            Some(participant),
            id,
            Some(start_time),
        )
        .map_err(|e| e.to_string())?;
    }
    let sessions = SessionWriter::start(&config.store.db_path, &config.store, SessionSource::Live)
        .map_err(|e| e.to_string())?;
    sessions
        .begin(SessionStart {
            id: id.to_string(),
            station_id: config.station.id.clone(),
            participant_id: Some(participant.to_string()),
            source: SessionSource::Live,
            source_path: None,
            format_version: None,
            start_time: Some(start_time.to_string()),
            nominal_fps: config.video.nominal_fps,
            layout: stages.layout.clone(),
            replace: false,
            recovers_recording: false,
            text_source: transcripts.text_from,
        })
        .map_err(|e| e.to_string())?;
    Ok((stages, sessions))
}

/// The session's recording, when `[recording]` is on; the reason when it cannot be
/// created.
fn create_recording(
    config: &Config,
    participant: &str,
    id: &str,
    start_time: &str,
    camera: Option<CameraIntrinsics>,
) -> Result<Option<Arc<Mutex<Recording>>>, String> {
    Ok(if config.recording.enabled {
        let rec = Recording::create(RecordingStart {
            root: config.recording.dir.clone(),
            session_id: id.to_string(),
            station_id: config.station.id.clone(),
            participant_id: Some(participant.to_string()),
            start_time: start_time.to_string(),
            nominal_fps: config.video.nominal_fps,
            camera,
            sample_rate_hz: config.audio.sample_rate_hz,
            min_free_bytes: config.recording.min_free_mib << 20,
        });
        let rec = rec.map_err(|e| format!("the recording could not be created: {e}"))?;
        run_hook(&config.recording.on_start, id, "recording.on_start");
        Some(Arc::new(Mutex::new(rec)))
    } else {
        None
    })
}

pub(super) fn intrinsics(config: &Config) -> Option<CameraIntrinsics> {
    let f = &config.face;
    match (f.fx, f.fy, f.cx, f.cy) {
        (Some(fx), Some(fy), Some(cx), Some(cy)) => Some(CameraIntrinsics { fx, fy, cx, cy }),
        _ => None,
    }
}

/// What the session thread owns.
pub(super) struct SessionRun {
    id: String,
    start_clock_ns: Nanos,
    end: Arc<AtomicBool>,
    counters: Arc<Counters>,
    recording: Option<Arc<Mutex<Recording>>>,
    events: PolicyReceiver<Event>,
    latest_window: crate::runtime::pipeline::LatestSlot,
    failures: Arc<pipeline::StageFailures>,
    /// Set when the session was ended because its dialogue app went away (the reason).
    abandoned: Arc<Mutex<Option<String>>>,
    /// Set when consent was withdrawn during it: the raw recording is deleted at the end.
    consent_withdrawn: Arc<AtomicBool>,
}

pub(super) fn run_session<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    stages: Stages,
    run: SessionRun,
    sessions: &SessionWriter,
) -> Result<(), RunError> {
    let config = service.config;
    let clock = service.clock.clone();
    // Opened before the devices: a screen that cannot open starts no session.
    let screen = crate::runtime::screen::open_screen(config, false)?;
    let (grab_rx, block_rx) = start_devices(scope, service, &run, clock.clone())?;
    let sources = Sources {
        video: Box::new(LiveVideo {
            screen,
            rx: grab_rx,
            start_clock_ns: run.start_clock_ns,
            recording: run.recording.clone(),
            counters: run.counters.clone(),
            info: VideoInfo {
                width: config.video.width,
                height: config.video.height,
                declared_fps: config.video.nominal_fps,
                declared_frames: None,
                origin: service.camera.describe(),
            },
            seq: 0,
        }),
        audio: Box::new(LiveAudio {
            rx: block_rx,
            recording: run.recording.clone(),
            info: AudioInfo {
                input_rate_hz: config.audio.sample_rate_hz,
                input_channels: 1,
                sample_rate_hz: config.audio.sample_rate_hz,
                expected_samples: None,
                origin: format!("microphone `{}`", config.audio.device),
            },
        }),
        events: Box::new(ControlEvents {
            rx: run.events,
            end: run.end.clone(),
            done: false,
            clock: clock.clone(),
            start_clock_ns: run.start_clock_ns,
            wait_ns: config.live.transcript_wait_ms * 1_000_000,
        }),
    };
    let outcome = pipeline::run(
        stages,
        sources,
        Sinks {
            writer: sessions.writer()?.clone(),
            window_consumers: Vec::new(),
            observer: Some(service.subscribers.clone()),
            latest_window: Some(run.latest_window.clone()),
        },
        config,
        PipelineOptions {
            video_overflow: Overflow::DropOldest,
            pacer: Pacer {
                start_clock_ns: run.start_clock_ns,
                speed: Speed::Realtime,
            },
            progress: std::sync::Arc::new(crate::runtime::pipeline::NoProgress),
            realtime_priority: config.live.realtime_priority,
            live_events_lag_ns: Some(config.live.transcript_wait_ms * 1_000_000),
            failures: run.failures.clone(),
            words_reach_ns: Some(config.live.transcript_wait_ms * 1_000_000),
        },
        clock,
        service.stop,
    );
    run.end.store(true, Ordering::SeqCst);
    // The control side no longer writes events into the recording (the session has ended).
    if let Some(r) = service.state().running.as_mut() {
        r.recording = None;
    }
    finish_recording(
        service,
        run.recording,
        &run.id,
        run.consent_withdrawn.load(Ordering::SeqCst),
    );
    // Camera buffers dropped before decoding (or undecodable) are drops of the live video
    // queue too: the stored count covers both queues.
    let outcome = outcome.map(|mut o| {
        o.quality.video_queue_drops += run.counters.frames_dropped.load(Ordering::Relaxed);
        o
    });
    let abandoned = run
        .abandoned
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let ended = sessions.end(&run.id, &config.station.id, outcome, |outcome| {
        if abandoned.is_some() {
            return abandoned;
        }
        (outcome.stopped || service.stop.load(Ordering::SeqCst)).then(|| {
            format!(
                "the service was stopped {:.1} s into the session; everything captured until then is stored",
                outcome.duration_ns as f64 / 1e9
            )
        })
    })?;
    tell_ended(service, &run.id, &ended.outcome, ended.status);
    Ok(())
}

/// Deletes recording folder `dir` beneath its parent (`files::beneath`: nothing through a
/// link).
fn remove_recording(dir: &std::path::Path) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(std::io::Error::other("not a recording folder"));
    };
    crate::files::beneath::Beneath::open(parent)?
        .remove_all(name)
        .map(|_| ())
}

/// Starts the camera and microphone threads (each owns its device: neither is `Send`) and
/// returns the queues they fill.
fn start_devices<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    run: &SessionRun,
    clock: Arc<dyn Clock>,
) -> Result<(PolicyReceiver<Grab>, PolicyReceiver<AudioBlock>), RunError> {
    let config = service.config;
    let (grab_tx, grab_rx) = policy_queue::<Grab>(GRAB_QUEUE, Overflow::DropOldest);
    let (block_tx, block_rx) =
        policy_queue::<AudioBlock>(config.runtime.audio_queue_blocks, Overflow::Block);
    {
        let end = run.end.clone();
        let counters = run.counters.clone();
        let clock = clock.clone();
        spawn(scope, "camera", move || {
            camera_thread(service, clock, &end, grab_tx, &counters);
        })?;
    }
    {
        let end = run.end.clone();
        let counters = run.counters.clone();
        let clock = clock.clone();
        let start = run.start_clock_ns;
        spawn(scope, "microphone", move || {
            microphone_thread(service, clock, start, &end, block_tx, &counters);
        })?;
    }
    Ok((grab_rx, block_rx))
}

/// Finishes the session's recording (deleted at once when consent was withdrawn during the
/// session) and runs `recording.on_stop`; what fails is the service's error, not the
/// session's.
fn finish_recording(
    service: &Service<'_>,
    recording: Option<Arc<Mutex<Recording>>>,
    id: &str,
    consent_withdrawn: bool,
) {
    let config = service.config;
    let recording_result = recording.map(|rec| {
        let rec = match Arc::try_unwrap(rec) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
            Err(_) => return Err("the recording is still in use".to_string()),
        };
        rec.finish().map_err(|e| e.to_string())
    });
    run_hook(&config.recording.on_stop, id, "recording.on_stop");
    match &recording_result {
        Some(Ok(dir)) if consent_withdrawn => match remove_recording(dir) {
            Ok(()) => {
                tracing::info!(session = %id, dir = %dir.display(), "consent withdrawn: the session's raw recording deleted")
            }
            Err(e) => service.set_error(format!(
                "session {}: consent withdrawn, but its raw recording {} could not be deleted: {e}",
                id,
                dir.display()
            )),
        },
        Some(Ok(dir)) => {
            tracing::info!(session = %id, dir = %dir.display(), "recording finalised")
        }
        Some(Err(e)) => service.set_error(format!("session {}: recording: {e}", id)),
        None => {}
    }
}

/// Tells the subscribers and the log that the session ended, with its latency figures.
fn tell_ended(service: &Service<'_>, id: &str, outcome: &Outcome, status: EndStatus) {
    service.subscribers.observe(
        Topic::Session,
        outcome.duration_ns / 1_000_000,
        serde_json::json!({"event": "ended", "session_id": id, "status": status.as_str(), "frames": outcome.frames, "windows": outcome.windows}),
    );
    service.subscribers.set_session_start(0);
    tracing::info!(session = %id, frames = outcome.frames, windows = outcome.windows, status = status.as_str(), "live session ended");
    if let Some(l) = outcome.latency {
        tracing::info!(
            session = %id,
            frames = l.frames,
            p50_ms = format_args!("{:.1}", l.p50_ms),
            p95_ms = format_args!("{:.1}", l.p95_ms),
            max_ms = format_args!("{:.1}", l.max_ms),
            "capture to store writer latency"
        );
    }
}

/// Runs a configured hook through `sh -c` (the station's ring light); failures are logged.
pub(super) fn run_hook(command: &str, session: &str, field: &str) {
    if command.is_empty() {
        return;
    }
    match std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("EMPATHIC_SESSION", session)
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => tracing::warn!("{field} `{command}` exited with {s}"),
        Err(e) => tracing::warn!("{field} `{command}` could not run: {e}"),
    }
}
