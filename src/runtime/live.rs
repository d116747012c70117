//! The live station (`empathic run`): the control socket, the camera and microphone
//! threads, and one live session at a time through the same [`pipeline::run`] as replay.
//!
//! Contract: [`serve`] binds the control socket (mode and group from config), finishes
//! recordings a crash interrupted, applies the raw-media retention, tells systemd it is
//! ready (`READY=1`, then `WATCHDOG=1` at half the unit's interval) and answers requests
//! (`capture::control`) until the stop flag is set. `start_session` (a participant with
//! consent `given`) loads the stages, opens the session row (`source = live`), starts
//! recording (when enabled) and runs the pipeline with live sources: camera frames
//! (drop-oldest queue, counted), microphone blocks (never dropped) and the control
//! socket's events, held back `live.transcript_wait_ms` for transcripts. Session time 0 is
//! the `start_session` answer; stamps are whole milliseconds for the first frame and the
//! first sample of each microphone stretch, then frame-exact and sample-exact, so a replay
//! of the recording reproduces the live run. A camera or microphone absent or unplugged
//! never stops the service: its thread retries with backoff (0.25 s to 5 s), the gap shows
//! as missing frames or an audio discontinuity, and `status` says so. `stop_session`
//! ends the sources; the session is stored `complete`, the recording `finalised`. A stop
//! signal mid-session stores it `incomplete` with the reason and still finalises the
//! recording; SIGKILL leaves both to the next start (the store marks the session
//! `incomplete`, [`repair_interrupted`] finishes the folder).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;

use super::pipeline::{self, PipelineOptions, Sinks, Sources};
use super::queues::{policy_queue, Overflow, PolicyReceiver, PolicySender};
use super::replay::{close_session, prepare_session};
use super::stages::Stages;
use super::{RunError, WriterThread};
use crate::capture::camera::{decode_jpeg, CameraOpener, Grab};
use crate::capture::control::{parse_request, Request, SessionRules};
use crate::capture::events::{EventBatch, EventSource};
use crate::capture::microphone::MicStream;
use crate::capture::resample::StreamResampler;
use crate::capture::{
    samples_to_ns, AudioBlock, AudioInfo, AudioSource, CaptureError, VideoFrame, VideoInfo,
    VideoSource,
};
use crate::clock::{Clock, Pacer, Speed};
use crate::config::Config;
use crate::session::manifest::CameraIntrinsics;
use crate::session::record::{free_bytes, repair_interrupted, Recording, RecordingStart};
use crate::session::Event;
use crate::store::rows::{EndStatus, SessionSource, SessionStart};
use crate::store::Store;
use crate::Nanos;

/// Camera buffers waiting for the video-capture thread (the oldest goes when full).
const GRAB_QUEUE: usize = 4;
/// Events waiting for the pipeline's event thread.
const EVENT_QUEUE: usize = 1024;
/// How often the control events' source says how far the events are known: frames wait
/// for it (with no transcript wait, up to this long).
const EVENTS_TICK: Duration = Duration::from_millis(20);
/// A microphone that delivers nothing for this long is treated as unplugged (reopened).
const MIC_SILENT_AFTER: Duration = Duration::from_secs(1);
/// How long a freshly opened microphone may take to deliver its first samples.
const MIC_FIRST_SAMPLES_WITHIN: Duration = Duration::from_secs(5);
/// Control connections served at once.
const MAX_CLIENTS: usize = 16;
/// A request line longer than this is refused and the connection closed (a story's text is
/// a few KiB; without a bound, a line without a newline would grow without limit).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
/// A connection that sends no complete request for this long is closed (with an answer
/// saying so), so idle connections cannot hold every slot.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Backoff between attempts to open a device.
const BACKOFF_MIN_MS: u64 = 250;
const BACKOFF_MAX_MS: u64 = 5_000;

/// A device as `status` reports it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceStatus {
    pub name: String,
    pub present: bool,
    /// Why it is not present (or the last error), if anything is wrong.
    pub problem: Option<String>,
    /// Times it came back after going away, since the service started.
    pub reconnects: u64,
}

/// The running session as `status` reports it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SessionStatus {
    pub session_id: String,
    pub participant_id: String,
    pub t_ms: u64,
    pub phase: Option<String>,
    pub frames_captured: u64,
    /// Camera buffers dropped before decoding because the pipeline was behind.
    pub frames_dropped: u64,
    pub audio_samples: u64,
    pub audio_samples_lost: u64,
    pub recording: Option<String>,
}

/// What `empathic status` shows.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServiceStatus {
    pub station_id: String,
    pub pid: u32,
    pub camera: DeviceStatus,
    pub microphone: DeviceStatus,
    pub session: Option<SessionStatus>,
    pub sessions_run: u64,
    pub disk_free_mib: Option<u64>,
    pub last_error: Option<String>,
    /// The sync outbox (pending, sent, synced), when a broker is configured.
    pub sync: Option<serde_json::Value>,
}

/// Counters the capture threads update while a session runs.
#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    frames_dropped: AtomicU64,
    samples: AtomicU64,
    samples_lost: AtomicU64,
}

/// A running session, as the control clients see it.
struct Running {
    id: String,
    participant: String,
    start_clock_ns: Nanos,
    rules: SessionRules,
    events: PolicySender<Event>,
    /// Set by stop_session or the service's stop: the sources end.
    end: Arc<AtomicBool>,
    counters: Arc<Counters>,
    recording: Option<Arc<Mutex<Recording>>>,
    recording_dir: Option<PathBuf>,
}

struct State {
    status: ServiceStatus,
    running: Option<Running>,
    /// A `start_session` is between its checks and `running`: a second one is refused
    /// (two at the same moment would both pass the `running` check).
    starting: bool,
}

/// What the service's threads share.
struct Service<'a> {
    config: &'a Config,
    camera: &'a dyn CameraOpener,
    clock: Arc<dyn Clock>,
    stop: &'a AtomicBool,
    state: Mutex<State>,
    clients: AtomicU64,
    store: Mutex<Store>,
}

impl Service<'_> {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicked client thread must not take the service down with a poisoned lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_error(&self, message: String) {
        tracing::error!("{message}");
        self.state().status.last_error = Some(message);
    }
}

/// Runs the service until `stop` is set.
pub fn serve(
    config: &Config,
    camera: &dyn CameraOpener,
    clock: Arc<dyn Clock>,
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let store = Store::open_with(&config.store.db_path, (&config.store).into())?;
    store.set_sync_content(&config.sync.content())?;
    finish_interrupted_recordings(config);
    apply_retention(config);
    let listener = bind_socket(config)?;
    let service = Service {
        config,
        camera,
        clock,
        stop,
        state: Mutex::new(State {
            status: ServiceStatus {
                station_id: config.station.id.clone(),
                pid: std::process::id(),
                camera: DeviceStatus {
                    name: camera.describe(),
                    ..DeviceStatus::default()
                },
                microphone: DeviceStatus {
                    name: format!("microphone `{}`", config.audio.device),
                    ..DeviceStatus::default()
                },
                ..ServiceStatus::default()
            },
            running: None,
            starting: false,
        }),
        clients: AtomicU64::new(0),
        store: Mutex::new(store),
    };
    let service = &service;
    std::thread::scope(|scope| -> Result<(), RunError> {
        spawn(scope, "control-listener", move || {
            accept_loop(scope, service, &listener);
        })?;
        if !config.sync.broker.is_empty() {
            spawn(scope, "sync-publisher", move || publish_loop(service))?;
        }
        notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(socket = %config.live.socket.display(), station = %config.station.id, "live service ready");
        let (watchdog, watchdog_us) = watchdog_usec();
        if watchdog {
            tracing::info!("systemd watchdog every {} ms", watchdog_us / 1000);
        }
        let mut last_probe: Option<std::time::Instant> = None;
        let mut last_ping = std::time::Instant::now();
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(200));
            // Fed at half the unit's interval, from the loop that would stall if anything did.
            if watchdog && last_ping.elapsed().as_micros() >= u128::from(watchdog_us / 2) {
                notify(&[sd_notify::NotifyState::Watchdog]);
                last_ping = std::time::Instant::now();
            }
            // Every 5 s: the disk's free space, and, when idle, the devices (so status
            // shows them appear and go).
            if last_probe.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
                if service.state().running.is_none() {
                    probe_devices(service);
                }
                let free = free_bytes(&config.recording.dir).or_else(|| free_bytes(Path::new("/")));
                service.state().status.disk_free_mib = free.map(|f| f >> 20);
                last_probe = Some(std::time::Instant::now());
            }
        }
        notify(&[sd_notify::NotifyState::Stopping]);
        tracing::info!("stopping: ending the running session, if any");
        if let Some(r) = service.state().running.as_ref() {
            r.end.store(true, Ordering::SeqCst);
        }
        Ok(())
    })?;
    let _ = std::fs::remove_file(&config.live.socket);
    Ok(())
}

/// Whether systemd watches this process, and its interval: `WATCHDOG_USEC` set and
/// `WATCHDOG_PID`, when set, naming this process (sd_watchdog_enabled(3)).
fn watchdog_usec() -> (bool, u64) {
    let usec = std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let for_us = std::env::var("WATCHDOG_PID")
        .ok()
        .is_none_or(|p| p.parse::<u32>().ok() == Some(std::process::id()));
    match usec {
        Some(u) if u > 0 && for_us => (true, u),
        _ => (false, 0),
    }
}

fn notify(states: &[sd_notify::NotifyState]) {
    // Outside systemd there is no socket to tell: that is fine.
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!("sd_notify: {e}");
    }
}

fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    f: impl FnOnce() + Send + 'scope,
) -> Result<(), RunError> {
    let span_name = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, move || {
            let _span = tracing::info_span!("thread", name = %span_name).entered();
            f();
        })
        .map(|_| ())
        .map_err(|e| RunError::Thread {
            thread: name.into(),
            message: format!("cannot start: {e}"),
        })
}

/// Binds the control socket, replacing a stale one, with the configured mode and group.
fn bind_socket(config: &Config) -> Result<UnixListener, RunError> {
    let path = &config.live.socket;
    let err = |message: String| {
        RunError::Capture(CaptureError::Device {
            device: format!("control socket {}", path.display()),
            message,
        })
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create its folder: {e}")))?;
    }
    if UnixStream::connect(path).is_ok() {
        return Err(err("another empathic service is listening on it".into()));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|e| err(format!("cannot bind: {e}")))?;
    let mode = u32::from_str_radix(&config.live.socket_mode, 8).unwrap_or(0o660);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| err(format!("cannot set its mode: {e}")))?;
    if !config.live.socket_group.is_empty() {
        let gid = group_id(&config.live.socket_group).ok_or_else(|| {
            err(format!(
                "no group `{}` in /etc/group",
                config.live.socket_group
            ))
        })?;
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
            err(format!(
                "cannot give it to group `{}`: {e}",
                config.live.socket_group
            ))
        })?;
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| err(e.to_string()))?;
    Ok(listener)
}

fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

fn accept_loop<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    listener: &UnixListener,
) {
    while !service.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                if service.clients.load(Ordering::SeqCst) >= MAX_CLIENTS as u64 {
                    let mut s = stream;
                    let _ = writeln!(s, "{}", error_reply("too many control connections"));
                    continue;
                }
                service.clients.fetch_add(1, Ordering::SeqCst);
                let started = spawn(scope, "control-client", move || {
                    serve_client(scope, service, stream);
                    service.clients.fetch_sub(1, Ordering::SeqCst);
                });
                if let Err(e) = started {
                    service.clients.fetch_sub(1, Ordering::SeqCst);
                    service.set_error(e.to_string());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                service.set_error(format!("control socket: {e}"));
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

fn error_reply(reason: &str) -> String {
    serde_json::json!({"ok": false, "error": reason}).to_string()
}

/// What a connection sent next.
enum Incoming {
    Line(String),
    Closed,
    Idle,
    TooLong,
    NotUtf8,
}

/// Reads the next request line (without its newline), at most [`MAX_REQUEST_BYTES`], giving
/// up after [`IDLE_TIMEOUT`] without one or when the service stops.
fn next_request(reader: &mut BufReader<UnixStream>, stop: &AtomicBool) -> Incoming {
    use std::io::BufRead as _;
    let mut bytes = Vec::new();
    let idle_since = std::time::Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Incoming::Closed;
        }
        let available = match reader.fill_buf() {
            Ok([]) => return Incoming::Closed,
            Ok(buf) => buf,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if idle_since.elapsed() >= IDLE_TIMEOUT {
                    return Incoming::Idle;
                }
                continue;
            }
            Err(_) => return Incoming::Closed,
        };
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        bytes.extend_from_slice(&available[..take]);
        reader.consume(take);
        if bytes.len() > MAX_REQUEST_BYTES + 1 {
            return Incoming::TooLong;
        }
        if done {
            bytes.pop();
            return match String::from_utf8(bytes) {
                Ok(line) => Incoming::Line(line),
                Err(_) => Incoming::NotUtf8,
            };
        }
    }
}

/// What a refused request is logged as: its type and size, never its content (an
/// utterance carries the participant's words; a huge line would flood the journal).
fn request_summary(line: &str) -> String {
    let kind = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_string))
        .unwrap_or_else(|| "unparsed".into());
    format!("{kind} request, {} bytes", line.len())
}

/// Answers one connection's requests, a line each, until it closes, idles past
/// [`IDLE_TIMEOUT`], sends a line past [`MAX_REQUEST_BYTES`], or the service stops. Every
/// request line gets an answer, a refused one too.
fn serve_client<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    stream: UnixStream,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let line = match next_request(&mut reader, service.stop) {
            Incoming::Line(line) => line,
            Incoming::Closed => return,
            Incoming::Idle => {
                let _ = writeln!(
                    out,
                    "{}",
                    error_reply(&format!(
                        "no request for {} s: connection closed",
                        IDLE_TIMEOUT.as_secs()
                    ))
                );
                return;
            }
            Incoming::TooLong => {
                tracing::warn!("refused: a request line longer than {MAX_REQUEST_BYTES} bytes (connection closed)");
                let _ = writeln!(
                    out,
                    "{}",
                    error_reply(&format!(
                        "request longer than {MAX_REQUEST_BYTES} bytes: connection closed"
                    ))
                );
                return;
            }
            Incoming::NotUtf8 => {
                tracing::warn!("refused: a request line that is not UTF-8");
                if writeln!(out, "{}", error_reply("request is not UTF-8 text")).is_err() {
                    return;
                }
                continue;
            }
        };
        let reply = match parse_request(line.trim()) {
            Ok(request) => handle(scope, service, request),
            Err(reason) => Err(reason),
        };
        let text = match reply {
            Ok(mut v) => {
                v["ok"] = true.into();
                v.to_string()
            }
            Err(reason) => {
                tracing::warn!(request = %request_summary(line.trim()), "refused: {reason}");
                error_reply(&reason)
            }
        };
        if writeln!(out, "{text}").is_err() {
            return;
        }
    }
}

fn handle<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    request: Request,
) -> Result<serde_json::Value, String> {
    match request {
        Request::Status => {
            let status = current_status(service);
            serde_json::to_value(status).map_err(|e| e.to_string())
        }
        Request::StartSession {
            participant_id,
            session_id,
        } => start_session(scope, service, participant_id, session_id),
        Request::StopSession => {
            let state = service.state();
            let r = state.running.as_ref().ok_or("no session is running")?;
            r.end.store(true, Ordering::SeqCst);
            let t_ms = service.clock.now_ns().saturating_sub(r.start_clock_ns) / 1_000_000;
            Ok(serde_json::json!({"session_id": r.id, "t_ms": t_ms, "recording": r.recording_dir}))
        }
        Request::Event(kind) => {
            let mut state = service.state();
            let r = state.running.as_mut().ok_or("no session is running")?;
            if r.end.load(Ordering::SeqCst) {
                return Err("the session is stopping".into());
            }
            let now = service.clock.now_ns().saturating_sub(r.start_clock_ns);
            let t_ns = r.rules.accept(&kind, now)?;
            let event = Event {
                t_ns,
                line: 0,
                kind,
            };
            if let Some(rec) = &r.recording {
                let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = rec.event(&event) {
                    // The event still reaches the database; the recording says what it lost.
                    tracing::error!("{e}");
                }
            }
            let t_ms = event.t_ns / 1_000_000;
            r.events
                .send(event)
                .map_err(|_| "the session's pipeline has stopped".to_string())?;
            Ok(serde_json::json!({"t_ms": t_ms}))
        }
    }
}

/// The outbox publisher of `empathic sync`, as a thread of the service: every ended
/// session goes to the study's broker while the station runs (exactly once, see `sync`).
fn publish_loop(service: &Service<'_>) {
    let config = service.config;
    if config.station.id == crate::config::DEFAULT_STATION_ID {
        service.set_error(format!(
            "sync: not publishing: [station] id is not set (records would go out as `{}`, mixed with every other unnamed station's)",
            crate::config::DEFAULT_STATION_ID
        ));
        return;
    }
    let opts = match crate::sync::parse_broker(&config.sync.broker) {
        Ok(address) => crate::sync::SyncOptions {
            auth: crate::sync::BrokerAuth::from_config(&config.sync, address.tls),
            host: address.host,
            port: address.port,
            study: config.sync.study.clone(),
            station: config.station.id.clone(),
            collectors: config.sync.collectors.clone(),
        },
        Err(e) => {
            service.set_error(format!("sync: {e}"));
            return;
        }
    };
    while !service.stop.load(Ordering::SeqCst) {
        // Runs until the stop flag; it reconnects with backoff on its own. A store error
        // (the disk) is retried after a pause.
        if let Err(e) =
            crate::sync::publish(&config.store.db_path, &opts, false, None, service.stop)
        {
            service.set_error(format!("sync: {e}"));
            pause(service.stop, 30_000);
        }
    }
}

fn current_status(service: &Service<'_>) -> ServiceStatus {
    let sync = if service.config.sync.broker.is_empty() {
        None
    } else {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        crate::store::sql::outbox::status(store.connection())
            .ok()
            .and_then(|s| serde_json::to_value(s).ok())
    };
    let state = service.state();
    let mut status = state.status.clone();
    status.sync = sync;
    status.session = state.running.as_ref().map(|r| SessionStatus {
        session_id: r.id.clone(),
        participant_id: r.participant.clone(),
        t_ms: service.clock.now_ns().saturating_sub(r.start_clock_ns) / 1_000_000,
        phase: r.rules.phase().map(|p| p.as_str().to_string()),
        frames_captured: r.counters.frames.load(Ordering::Relaxed),
        frames_dropped: r.counters.frames_dropped.load(Ordering::Relaxed),
        audio_samples: r.counters.samples.load(Ordering::Relaxed),
        audio_samples_lost: r.counters.samples_lost.load(Ordering::Relaxed),
        recording: r.recording_dir.as_ref().map(|d| d.display().to_string()),
    });
    status
}

/// Checks the devices while no session runs (opening the microphone records nothing: the
/// stream is closed at once).
fn probe_devices(service: &Service<'_>) {
    let camera = service.camera.open(service.clock.clone()).map(|_| ());
    let mic = MicStream::open(
        &service.config.audio.device,
        service.config.audio.sample_rate_hz,
        service.clock.clone(),
    )
    .map(|_| ());
    let mut state = service.state();
    set_device(&mut state.status.camera, camera.map_err(|e| e.to_string()));
    set_device(&mut state.status.microphone, mic.map_err(|e| e.to_string()));
}

fn set_device(d: &mut DeviceStatus, result: Result<(), String>) {
    match result {
        Ok(()) => {
            if !d.present && d.problem.is_some() {
                d.reconnects += 1;
                tracing::info!(device = %d.name, "device is back");
            }
            d.present = true;
            d.problem = None;
        }
        Err(e) => {
            if d.present || d.problem.is_none() {
                tracing::warn!(device = %d.name, "device missing: {e}");
            }
            d.present = false;
            d.problem = Some(e);
        }
    }
}

fn start_session<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    participant: String,
    session_id: Option<String>,
) -> Result<serde_json::Value, String> {
    {
        let mut state = service.state();
        if state.running.is_some() || state.starting {
            return Err("a session is already running: stop it first".into());
        }
        state.starting = true;
    }
    let started = start_session_checked(scope, service, participant, session_id);
    service.state().starting = false;
    started
}

/// [`start_session`] once it holds the start: checks everything, then writes.
fn start_session_checked<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    participant: String,
    session_id: Option<String>,
) -> Result<serde_json::Value, String> {
    let config = service.config;
    {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        match store.participant_consent(&participant).map_err(|e| e.to_string())? {
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
    }
    let start_time = crate::clock::utc_now();
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
    let camera = intrinsics(config);
    let mut stages =
        Stages::load(config, config.video.nominal_fps, camera).map_err(|e| e.to_string())?;
    {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        prepare_session(
            &mut stages,
            &store,
            config,
            Some(&participant),
            &id,
            Some(&start_time),
        )
        .map_err(|e| e.to_string())?;
    }
    let writer_thread =
        WriterThread::spawn(&config.store.db_path, &config.store).map_err(|e| e.to_string())?;
    let writer = writer_thread.writer().map_err(|e| e.to_string())?.clone();
    writer
        .begin(SessionStart {
            id: id.clone(),
            station_id: config.station.id.clone(),
            participant_id: Some(participant.clone()),
            source: SessionSource::Live,
            source_path: None,
            format_version: None,
            start_time: Some(start_time.clone()),
            nominal_fps: config.video.nominal_fps,
            layout: stages.layout.clone(),
            replace: false,
        })
        .map_err(|e| e.to_string())?;
    let recording = if config.recording.enabled {
        let rec = Recording::create(RecordingStart {
            root: config.recording.dir.clone(),
            session_id: id.clone(),
            station_id: config.station.id.clone(),
            participant_id: Some(participant.clone()),
            start_time: start_time.clone(),
            nominal_fps: config.video.nominal_fps,
            camera,
            sample_rate_hz: config.audio.sample_rate_hz,
            min_free_bytes: config.recording.min_free_mib << 20,
        });
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                // The row was begun: it is closed with the reason, not left `running`.
                let reason = format!("the recording could not be created: {e}");
                let _ = writer.fail(&id, &config.station.id, SessionSource::Live, &reason);
                let _ = writer_thread.close();
                return Err(reason);
            }
        };
        run_hook(&config.recording.on_start, &id, "recording.on_start");
        Some(Arc::new(Mutex::new(rec)))
    } else {
        None
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
    let run = SessionRun {
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
    });
    let session_id = id.clone();
    let started = spawn(scope, "live-session", move || {
        let outcome = run_session(scope, service, stages, run, writer);
        let closed = writer_thread.close();
        if let Err(e) = outcome.and(closed) {
            service.set_error(format!("session {id}: {e}"));
        }
        let mut state = service.state();
        state.running = None;
        state.status.sessions_run += 1;
    });
    if let Err(e) = started {
        service.state().running = None;
        return Err(e.to_string());
    }
    tracing::info!(session = %session_id, participant = %participant, "live session started");
    Ok(serde_json::json!({"session_id": session_id, "t_ms": 0, "recording": recording_dir}))
}

fn intrinsics(config: &Config) -> Option<CameraIntrinsics> {
    let f = &config.face;
    match (f.fx, f.fy, f.cx, f.cy) {
        (Some(fx), Some(fy), Some(cx), Some(cy)) => Some(CameraIntrinsics { fx, fy, cx, cy }),
        _ => None,
    }
}

/// What the session thread owns.
struct SessionRun {
    id: String,
    start_clock_ns: Nanos,
    end: Arc<AtomicBool>,
    counters: Arc<Counters>,
    recording: Option<Arc<Mutex<Recording>>>,
    events: PolicyReceiver<Event>,
}

fn run_session<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    stages: Stages,
    run: SessionRun,
    writer: crate::store::StoreWriter,
) -> Result<(), RunError> {
    let config = service.config;
    let clock = service.clock.clone();
    // Camera and microphone threads: each owns its device (neither is `Send`).
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
    let sources = Sources {
        video: Box::new(LiveVideo {
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
            writer: writer.clone(),
            window_consumers: Vec::new(),
        },
        config,
        PipelineOptions {
            video_overflow: Overflow::DropOldest,
            pacer: Pacer {
                start_clock_ns: run.start_clock_ns,
                speed: Speed::Realtime,
            },
            progress: indicatif::ProgressBar::hidden(),
            realtime_priority: config.live.realtime_priority,
            events_lag_ns: config.live.transcript_wait_ms * 1_000_000,
        },
        clock,
        service.stop,
    );
    run.end.store(true, Ordering::SeqCst);
    // The control side no longer writes events into the recording (the session has ended).
    if let Some(r) = service.state().running.as_mut() {
        r.recording = None;
    }
    let recording_result = run.recording.map(|rec| {
        let rec = match Arc::try_unwrap(rec) {
            Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
            Err(_) => return Err("the recording is still in use".to_string()),
        };
        rec.finish().map_err(|e| e.to_string())
    });
    run_hook(&config.recording.on_stop, &run.id, "recording.on_stop");
    match &recording_result {
        Some(Ok(dir)) => {
            tracing::info!(session = %run.id, dir = %dir.display(), "recording finalised")
        }
        Some(Err(e)) => service.set_error(format!("session {}: recording: {e}", run.id)),
        None => {}
    }
    let mut outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            let _ = writer.fail(
                &run.id,
                &config.station.id,
                SessionSource::Live,
                &e.to_string(),
            );
            return Err(e);
        }
    };
    let (status, reason) = if outcome.stopped || service.stop.load(Ordering::SeqCst) {
        (
            EndStatus::Incomplete,
            Some(format!(
                "the service was stopped {:.1} s into the session; everything captured until then is stored",
                outcome.duration_ns as f64 / 1e9
            )),
        )
    } else {
        (EndStatus::Complete, None)
    };
    // Camera buffers dropped before decoding (or undecodable) are drops of the live video
    // queue too: the stored count covers both queues.
    outcome.quality.video_queue_drops += run.counters.frames_dropped.load(Ordering::Relaxed);
    close_session(&writer, &outcome, status, reason)?;
    tracing::info!(session = %run.id, frames = outcome.frames, windows = outcome.windows, status = status.as_str(), "live session ended");
    if let Some(l) = outcome.latency {
        tracing::info!(
            session = %run.id,
            frames = l.frames,
            p50_ms = format_args!("{:.1}", l.p50_ms),
            p95_ms = format_args!("{:.1}", l.p95_ms),
            max_ms = format_args!("{:.1}", l.max_ms),
            "capture to store writer latency"
        );
    }
    Ok(())
}

/// Runs a configured hook through `sh -c` (the station's ring light); failures are logged.
fn run_hook(command: &str, session: &str, field: &str) {
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

/// Sleeps up to `ms`, in steps, returning early when `end` is set.
fn pause(end: &AtomicBool, ms: u64) {
    let mut left = ms;
    while left > 0 && !end.load(Ordering::SeqCst) {
        let step = left.min(50);
        std::thread::sleep(Duration::from_millis(step));
        left -= step;
    }
}

fn camera_thread(
    service: &Service<'_>,
    clock: Arc<dyn Clock>,
    end: &AtomicBool,
    tx: PolicySender<Grab>,
    counters: &Counters,
) {
    super::realtime_priority(service.config.live.realtime_priority);
    let mut backoff = BACKOFF_MIN_MS;
    while !end.load(Ordering::SeqCst) {
        let mut grabber = match service.camera.open(clock.clone()) {
            Ok(g) => {
                set_device(&mut service.state().status.camera, Ok(()));
                backoff = BACKOFF_MIN_MS;
                g
            }
            Err(e) => {
                set_device(&mut service.state().status.camera, Err(e.to_string()));
                pause(end, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                continue;
            }
        };
        while !end.load(Ordering::SeqCst) {
            match grabber.grab() {
                Ok(g) => {
                    counters.frames.fetch_add(1, Ordering::Relaxed);
                    if tx.send(g).is_err() {
                        return;
                    }
                    counters
                        .frames_dropped
                        .store(tx.dropped(), Ordering::Relaxed);
                }
                Err(e) => {
                    set_device(&mut service.state().status.camera, Err(e.to_string()));
                    break;
                }
            }
        }
    }
}

fn microphone_thread(
    service: &Service<'_>,
    clock: Arc<dyn Clock>,
    start_clock_ns: Nanos,
    end: &AtomicBool,
    tx: PolicySender<AudioBlock>,
    counters: &Counters,
) {
    let config = service.config;
    super::realtime_priority(config.live.realtime_priority);
    let rate = config.audio.sample_rate_hz;
    let block = (u64::from(rate) * u64::from(config.audio.block_ms) / 1000).max(1) as usize;
    let mut backoff = BACKOFF_MIN_MS;
    let mut seq = 0u64;
    while !end.load(Ordering::SeqCst) {
        // Present once it delivers samples (an open that delivers nothing is not a
        // microphone: through ALSA's plugin a missing sound server can look like that).
        let mut mic = match MicStream::open(&config.audio.device, rate, clock.clone()) {
            Ok(m) => m,
            Err(e) => {
                set_device(&mut service.state().status.microphone, Err(e.to_string()));
                pause(end, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                continue;
            }
        };
        let mut resampler = if mic.rate_hz() == rate {
            None
        } else {
            match StreamResampler::new(mic.rate_hz(), rate) {
                Ok(r) => Some(r),
                Err(e) => {
                    set_device(&mut service.state().status.microphone, Err(e.to_string()));
                    pause(end, BACKOFF_MAX_MS);
                    continue;
                }
            }
        };
        // One stretch: stamps count samples from its first, placed in whole milliseconds.
        let mut origin: Option<Nanos> = None;
        let mut emitted = 0u64;
        let mut lost_seen = 0u64;
        let mut raw = Vec::new();
        let mut ready = Vec::new();
        let mut last_samples = std::time::Instant::now();
        let mut delivering = false;
        let finished = loop {
            let stopping = end.load(Ordering::SeqCst);
            raw.clear();
            if let Err(e) = mic.take(&mut raw) {
                set_device(&mut service.state().status.microphone, Err(e.to_string()));
                break false;
            }
            // A device that goes silent without an error (a sound server gone, through
            // ALSA's plugin) is lost all the same.
            if !raw.is_empty() {
                if !delivering {
                    delivering = true;
                    backoff = BACKOFF_MIN_MS;
                    set_device(&mut service.state().status.microphone, Ok(()));
                }
                last_samples = std::time::Instant::now();
            } else {
                // A fresh stream may take a while to start (a sound server's first
                // fragment); once delivering, a gap of a second is a loss.
                let limit = if delivering {
                    MIC_SILENT_AFTER
                } else {
                    MIC_FIRST_SAMPLES_WITHIN
                };
                if last_samples.elapsed() > limit && !stopping {
                    set_device(
                        &mut service.state().status.microphone,
                        Err(format!(
                            "no samples for {} s: the microphone {}",
                            limit.as_secs(),
                            if delivering {
                                "stopped delivering"
                            } else {
                                "delivers nothing"
                            }
                        )),
                    );
                    break false;
                }
            }
            match resampler.as_mut() {
                Some(r) => {
                    if let Err(e) = r.push(&raw, &mut ready) {
                        service.set_error(format!("microphone resampling: {e}"));
                        break false;
                    }
                }
                None => ready.extend_from_slice(&raw),
            }
            if origin.is_none() {
                if let Some(first) = mic.first_clock_ns() {
                    let t = first.saturating_sub(start_clock_ns);
                    origin = Some(t / 1_000_000 * 1_000_000);
                }
            }
            let lost = mic.lost_frames();
            if lost > lost_seen {
                // Samples the ring dropped: the stamps jump over them (a discontinuity).
                let at_rate = (lost - lost_seen) * u64::from(rate) / u64::from(mic.rate_hz());
                emitted += at_rate;
                counters.samples_lost.fetch_add(at_rate, Ordering::Relaxed);
                lost_seen = lost;
            }
            if let Some(origin) = origin {
                while ready.len() >= block || (stopping && !ready.is_empty()) {
                    let n = block.min(ready.len());
                    let samples: Vec<f32> = ready.drain(..n).collect();
                    let b = AudioBlock {
                        seq,
                        t_ns: origin + samples_to_ns(emitted, rate),
                        sample_rate_hz: rate,
                        samples,
                    };
                    if seq % 250 == 0 {
                        let end = start_clock_ns + b.t_ns + samples_to_ns(n as u64, rate);
                        tracing::debug!(
                            age_ms = clock.now_ns().saturating_sub(end) / 1_000_000,
                            "microphone block handed on"
                        );
                    }
                    seq += 1;
                    emitted += n as u64;
                    counters.samples.fetch_add(n as u64, Ordering::Relaxed);
                    let sent_at = std::time::Instant::now();
                    if tx.send(b).is_err() {
                        return;
                    }
                    if sent_at.elapsed() > Duration::from_millis(200) {
                        tracing::debug!(
                            waited_ms = sent_at.elapsed().as_millis() as u64,
                            "microphone block waited for the pipeline"
                        );
                    }
                }
            }
            if stopping {
                break true;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if finished {
            return;
        }
        // Closed before the next open, which refreshes ALSA's configuration (only safe
        // with no stream open).
        drop(mic);
        pause(end, backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX_MS);
    }
}

/// Camera buffers as a [`VideoSource`]: stamped in whole milliseconds of session time,
/// decoded, recorded.
struct LiveVideo {
    rx: PolicyReceiver<Grab>,
    start_clock_ns: Nanos,
    recording: Option<Arc<Mutex<Recording>>>,
    counters: Arc<Counters>,
    info: VideoInfo,
    seq: u64,
}

impl VideoSource for LiveVideo {
    fn info(&self) -> &VideoInfo {
        &self.info
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        // The camera thread ends (dropping its queue) when the session ends.
        while let Some(grab) = self.rx.recv() {
            let t_ns = grab.clock_ns.saturating_sub(self.start_clock_ns) / 1_000_000 * 1_000_000;
            let image = match decode_jpeg(&grab.jpeg) {
                Ok(i) => i,
                Err(e) => {
                    // A torn buffer from the camera: a missing frame, not a failed session.
                    tracing::warn!(t_ns, "camera buffer skipped: {e}");
                    self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            if let Some(rec) = &self.recording {
                let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = rec.video_frame(t_ns, &grab.jpeg, image.width, image.height) {
                    tracing::error!("{e}");
                }
            }
            let frame = VideoFrame {
                seq: self.seq,
                t_ns,
                image,
            };
            self.seq += 1;
            return Ok(Some(frame));
        }
        Ok(None)
    }
}

/// Microphone blocks as an [`AudioSource`], recorded as they pass.
struct LiveAudio {
    rx: PolicyReceiver<AudioBlock>,
    recording: Option<Arc<Mutex<Recording>>>,
    info: AudioInfo,
}

impl AudioSource for LiveAudio {
    fn info(&self) -> &AudioInfo {
        &self.info
    }

    fn next_block(&mut self) -> Result<Option<AudioBlock>, CaptureError> {
        let Some(block) = self.rx.recv() else {
            return Ok(None);
        };
        if let Some(rec) = &self.recording {
            let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = rec.audio(block.t_ns, &block.samples) {
                tracing::error!("{e}");
            }
        }
        Ok(Some(block))
    }
}

/// The control socket's events as an [`EventSource`]: a batch every [`EVENTS_TICK`], known up to
/// now minus the transcript wait; everything once the session ends.
struct ControlEvents {
    rx: PolicyReceiver<Event>,
    /// Set when the session ends: what is queued is the last of it.
    end: Arc<AtomicBool>,
    done: bool,
    clock: Arc<dyn Clock>,
    start_clock_ns: Nanos,
    wait_ns: Nanos,
}

impl EventSource for ControlEvents {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, CaptureError> {
        use crossbeam_channel::RecvTimeoutError;
        if self.done {
            return Ok(None);
        }
        let mut events = Vec::new();
        // Read the flag first: every event accepted before it was set is already queued.
        let mut ended = self.end.load(Ordering::SeqCst);
        match self.rx.receiver().recv_timeout(EVENTS_TICK) {
            Ok(e) => events.push(e),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => ended = true,
        }
        while let Ok(e) = self.rx.receiver().try_recv() {
            events.push(e);
        }
        self.done = ended;
        events.sort_by_key(|e| e.t_ns);
        let now = self.clock.now_ns().saturating_sub(self.start_clock_ns);
        Ok(Some(EventBatch {
            events,
            known_until_ns: if ended {
                Nanos::MAX
            } else {
                now.saturating_sub(self.wait_ns)
            },
        }))
    }
}

/// Finishes folders a crash left `recording`, and says what was done.
fn finish_interrupted_recordings(config: &Config) {
    for (dir, result) in repair_interrupted(&config.recording.dir) {
        match result {
            Ok(note) => tracing::warn!(dir = %dir.display(), "recording repaired: {note}"),
            Err(e) => {
                tracing::error!(dir = %dir.display(), "recording could not be repaired (left as it is): {e}")
            }
        }
    }
}

/// Deletes the raw media of recordings older than `recording.retention_days`.
fn apply_retention(config: &Config) {
    let days = config.recording.retention_days;
    if days == 0 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(&config.recording.dir) else {
        return;
    };
    let limit = Duration::from_secs(days * 86_400);
    for entry in entries.flatten() {
        let dir = entry.path();
        let age = std::fs::metadata(dir.join("session.json"))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if age.is_some_and(|a| a > limit) {
            for media in ["video.avi", "audio.wav"] {
                let p = dir.join(media);
                if p.exists() {
                    match std::fs::remove_file(&p) {
                        Ok(()) => {
                            tracing::info!(file = %p.display(), "raw media past retention deleted")
                        }
                        Err(e) => {
                            tracing::warn!(file = %p.display(), "cannot delete raw media past retention: {e}")
                        }
                    }
                }
            }
        }
    }
}

/// Sends one request to a running service and returns its answer line.
pub fn request(socket: &Path, request: &serde_json::Value) -> Result<serde_json::Value, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach the empathic service at {}: {e} (is `empathic run` running?)",
            socket.display()
        )
    })?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    writeln!(stream, "{request}")
        .map_err(|e| format!("cannot send to {}: {e}", socket.display()))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| format!("no answer from {}: {e}", socket.display()))?;
    if line.is_empty() {
        return Err(format!(
            "no answer from {}: the service closed the connection",
            socket.display()
        ));
    }
    serde_json::from_str(&line).map_err(|e| format!("bad answer from {}: {e}", socket.display()))
}

/// [`request`] for a request that must be answered `ok`: a refusal (say, too many
/// connections) is an error, not an answer to print.
pub fn request_ok(socket: &Path, body: &serde_json::Value) -> Result<serde_json::Value, String> {
    let answer = request(socket, body)?;
    if answer["ok"] == true {
        Ok(answer)
    } else {
        Err(format!(
            "the service at {} refused: {}",
            socket.display(),
            answer["error"].as_str().unwrap_or("no reason given")
        ))
    }
}
