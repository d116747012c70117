//! The live station (`empathic run`): the control socket, the camera and microphone
//! threads, and one live session at a time through the same [`pipeline::run`](crate::runtime::pipeline::run) as replay.
//!
//! Contract: [`serve`] binds the control socket (mode and group from config), finishes
//! recordings a crash interrupted, applies the raw-media retention, tells systemd it is
//! ready (`READY=1`, then `WATCHDOG=1` at half the unit's interval) and answers requests
//! (`capture::control_protocol`) until the stop flag is set. `start_session` (a participant with
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
//! `incomplete`, [`repair_interrupted`](crate::capture::record::repair_interrupted) finishes the folder).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;

use super::queues::PolicySender;
use super::RunError;
use crate::capture::camera::CameraOpener;
use crate::capture::control_protocol::SessionRules;
use crate::capture::microphone::MicStream;
use crate::capture::record::{free_bytes, Recording};
use crate::clock::Clock;
use crate::config::Config;
use crate::features::text::SharedEncoder;
use crate::session::Event;
use crate::store::Store;
use crate::Nanos;

/// How a refusal by the service's state rather than the request begins (a session already
/// running, `recommend` busy): its answer carries `"busy": true`, the same request may pass
/// later, and `ctl` exits 1 for it, not 2 (bad input).
pub(crate) const BUSY: &str = "busy: ";

/// Camera buffers waiting for the video-capture thread (the oldest goes when full).
mod control_socket;
mod devices;
mod health;
mod lifecycle;
mod recommend;
mod refusals;
mod requests;
mod retention;
mod session_run;
mod subscribe;
mod watch;

use control_socket::{accept_loop, bind_socket};
use devices::pause;
use retention::{apply_retention, finish_interrupted_recordings};

pub use crate::capture::control_protocol::{request, request_ok, request_stream};
pub use control_socket::{IDLE_TIMEOUT, MAX_REQUEST_BYTES};

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
    /// Milliseconds since the camera's last frame and the microphone's last block were
    /// handed to the pipeline (since the session's start when none has been yet).
    pub frames_age_ms: u64,
    pub audio_age_ms: u64,
    pub recording: Option<String>,
    /// How the session is kept alive by its dialogue app (`lifecycle`).
    pub kept_by: serde_json::Value,
    /// Stages that failed during this session; it goes on without them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stage_failures: Vec<crate::report::StageFailure>,
    /// The bystander screen so far (`[privacy] bystanders = "mask"`): frames with someone
    /// other than the participant in view, frames masked, frames without the participant.
    /// Absent under `"keep"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bystanders: Option<BystanderStatus>,
}

/// The bystander screen's counts for the running session.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BystanderStatus {
    pub frames_with_bystanders: u64,
    pub frames_masked: u64,
    pub frames_without_participant: u64,
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
    /// When (on the service clock) the last frame and the last audio block were handed on,
    /// so `status` tells a device whose data stopped from one that works.
    frame_at_ns: AtomicU64,
    audio_at_ns: AtomicU64,
    /// The bystander screen's counts (frames screened, with bystanders, masked, without
    /// the participant).
    screened: AtomicU64,
    with_bystanders: AtomicU64,
    masked: AtomicU64,
    without_participant: AtomicU64,
}

impl Counters {
    fn screened(&self, s: &crate::capture::screening::Screening) {
        self.screened.fetch_add(1, Ordering::Relaxed);
        let add = |c: &AtomicU64, yes: bool| {
            c.fetch_add(u64::from(yes), Ordering::Relaxed);
        };
        add(&self.with_bystanders, s.bystanders > 0);
        add(&self.masked, s.masked > 0);
        add(&self.without_participant, !s.participant);
    }

    fn bystanders(&self) -> Option<BystanderStatus> {
        (self.screened.load(Ordering::Relaxed) > 0).then(|| BystanderStatus {
            frames_with_bystanders: self.with_bystanders.load(Ordering::Relaxed),
            frames_masked: self.masked.load(Ordering::Relaxed),
            frames_without_participant: self.without_participant.load(Ordering::Relaxed),
        })
    }
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
    /// The latest window the session's predictors represented (`recommend`).
    latest_window: crate::runtime::pipeline::LatestSlot,
    /// Stages that failed so far; the session goes on without them.
    failures: Arc<crate::runtime::pipeline::StageFailures>,
    /// How the session is kept alive by its dialogue app.
    tie: lifecycle::Tie,
    /// Set when the participant's consent was withdrawn during the session: capture
    /// stopped, and the session's raw recording is deleted when it ends.
    consent_withdrawn: Arc<AtomicBool>,
    /// Why the store stopped writing this session (the disk full, an I/O error), once it
    /// did: capture stops, and the app's requests are refused with it.
    store_failed: Arc<std::sync::OnceLock<String>>,
}

impl Running {
    /// The refusal of a request for this session once its store has failed.
    fn store_refusal(&self) -> Result<(), String> {
        match self.store_failed.get() {
            Some(reason) => Err(format!(
                "session `{}` cannot be stored any more ({reason}): capture stopped; what was stored before is kept",
                self.id
            )),
            None => Ok(()),
        }
    }
}

struct State {
    status: ServiceStatus,
    running: Option<Running>,
    /// A `start_session` is between its checks and `running`: a second one is refused
    /// (two at the same moment would both pass the `running` check).
    starting: bool,
    /// The last session that ended on an error, and the error: a request for it after it
    /// ended is told why, not only that no session runs.
    ended_on_error: Option<(String, String)>,
}

impl State {
    /// The service's state before its first session: its devices named, nothing run.
    fn at_start(config: &Config, camera: &dyn CameraOpener) -> Self {
        State {
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
            ended_on_error: None,
        }
    }
}

/// What the service's threads share.
struct Service<'a> {
    config: &'a Config,
    camera: &'a dyn CameraOpener,
    clock: Arc<dyn Clock>,
    stop: &'a AtomicBool,
    state: Mutex<State>,
    clients: AtomicU64,
    /// Connections on the reserved slots (`control_socket::RESERVED_SLOTS`).
    reserved: AtomicU64,
    /// Connections turned into subscriptions (`control_socket::MAX_SUBSCRIBERS`).
    subscriber_slots: AtomicU64,
    /// Subscriptions held per peer user (`control_socket::MAX_SUBSCRIBERS_PER_USER`).
    subscribers_by_user: Mutex<std::collections::HashMap<u32, usize>>,
    /// Numbers the control connections (a session is bound to one).
    connections: AtomicU64,
    store: Mutex<Store>,
    /// The control socket's subscribers (`subscribe`), the pipeline's observer.
    subscribers: Arc<subscribe::Subscribers>,
    /// Refused requests, logged without their content and rate-limited.
    refusals: refusals::RefusalLog,
    /// `recommend` requests, answered one at a time by the `recommend` thread.
    recommender: recommend::Recommender,
    /// The station's one sentence encoder, opened on first use and shared by every
    /// session's text stage and the `recommend` thread (one copy of the model in memory).
    sentence_encoder: Mutex<Option<SharedEncoder>>,
}

impl Service<'_> {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicked client thread must not take the service down with a poisoned lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared sentence encoder, opened by the first caller.
    fn sentence_encoder(&self) -> Result<SharedEncoder, String> {
        let mut slot = self
            .sentence_encoder
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let encoder = crate::runtime::stages::open_sentence_encoder(self.config)
            .map_err(|e| e.to_string())?;
        *slot = Some(encoder.clone());
        Ok(encoder)
    }

    /// Records a device's state; a change is a `quality` message to the subscribers.
    fn device(&self, which: &str, result: Result<(), String>) {
        let change = {
            let mut state = self.state();
            let d = if which == "camera" {
                &mut state.status.camera
            } else {
                &mut state.status.microphone
            };
            let before = (d.present, d.problem.clone());
            set_device(d, result);
            (before != (d.present, d.problem.clone())).then(|| (d.present, d.problem.clone()))
        };
        if let Some((present, problem)) = change {
            use crate::runtime::pipeline::{Observer, Topic};
            let at_ms = self.subscribers.now_ms();
            self.subscribers.observe(
                Topic::Quality,
                at_ms,
                serde_json::json!({
                    "event": if present { "device_back" } else { "device_lost" },
                    "device": which,
                    "problem": problem,
                }),
            );
        }
    }

    fn set_error(&self, message: String) {
        tracing::error!("{message}");
        self.state().status.last_error = Some(message);
    }
}

/// Why [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// `stop` was set (SIGTERM, SIGINT).
    Stopped,
    /// The binary on disk was replaced (a package upgrade, `make install`) and no session
    /// was running: the service ends so that systemd starts the new build
    /// (`RestartForceExitStatus=`), between sessions rather than in the middle of one.
    Replaced,
}

/// Whether this process's executable was replaced on disk since it started: the kernel
/// names a deleted executable `... (deleted)`.
fn binary_replaced() -> bool {
    std::fs::read_link("/proc/self/exe").is_ok_and(|p| p.to_string_lossy().ends_with(" (deleted)"))
}

/// Runs the service until `stop` is set, or until its binary was replaced and no session
/// runs.
pub fn serve(
    config: &Config,
    camera: &dyn CameraOpener,
    clock: Arc<dyn Clock>,
    stop: &AtomicBool,
) -> Result<Served, RunError> {
    let store = Store::open_with(&config.store.db_path, (&config.store).into())?;
    store.set_sync_content(&config.sync.content())?;
    finish_interrupted_recordings(config);
    apply_retention(config, &store);
    let listener = bind_socket(config)?;
    let subscribers = Arc::new(subscribe::Subscribers::new(clock.clone()));
    let service = Service {
        config,
        camera,
        clock,
        stop,
        state: Mutex::new(State::at_start(config, camera)),
        clients: AtomicU64::new(0),
        reserved: AtomicU64::new(0),
        subscriber_slots: AtomicU64::new(0),
        subscribers_by_user: Mutex::new(std::collections::HashMap::new()),
        connections: AtomicU64::new(0),
        store: Mutex::new(store),
        subscribers,
        refusals: refusals::RefusalLog::default(),
        recommender: recommend::Recommender::default(),
        sentence_encoder: Mutex::new(None),
    };
    let service = &service;
    let mut replaced = false;
    std::thread::scope(|scope| -> Result<(), RunError> {
        spawn(scope, "control-listener", move || {
            accept_loop(scope, service, &listener);
        })?;
        spawn(scope, "recommend", move || recommend::serve(service))?;
        if !config.sync.broker.is_empty() {
            spawn(scope, "sync-publisher", move || publish_loop(service))?;
            spawn(scope, "health-publisher", move || {
                health::health_loop(service)
            })?;
        }
        notify(&[sd_notify::NotifyState::Ready]);
        tracing::info!(socket = %config.live.socket.display(), station = %config.station.id, "live service ready");
        let (watchdog, watchdog_us) = watchdog_usec();
        if watchdog {
            tracing::info!("systemd watchdog every {} ms", watchdog_us / 1000);
        }
        let mut last_probe: Option<std::time::Instant> = None;
        let mut last_drops = std::time::Instant::now();
        let mut watch = watch::ServiceWatch::default();
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
                // Checked and claimed under the lock a start takes: no session can begin
                // between "idle" and the end (a start is refused as busy meanwhile).
                let upgrade = {
                    let mut state = service.state();
                    let claim = state.running.is_none() && !state.starting && binary_replaced();
                    state.starting |= claim;
                    claim
                };
                if upgrade {
                    tracing::info!("the binary was replaced (an upgrade): ending between sessions so systemd starts the new build");
                    replaced = true;
                    stop.store(true, Ordering::SeqCst);
                    break;
                }
                let idle = service.state().running.is_none();
                if idle {
                    probe_devices(service);
                }
                let free = free_bytes(&config.recording.dir).or_else(|| free_bytes(Path::new("/")));
                service.state().status.disk_free_mib = free.map(|f| f >> 20);
                watch.disk(service, free);
                last_probe = Some(std::time::Instant::now());
            }
            if last_drops.elapsed() >= Duration::from_secs(1) {
                watch.drops(service);
                end_withdrawn_session(service);
                last_drops = std::time::Instant::now();
            }
            end_abandoned_session(service);
        }
        notify(&[sd_notify::NotifyState::Stopping]);
        tracing::info!("stopping: ending the running session, if any");
        if let Some(r) = service.state().running.as_ref() {
            r.end.store(true, Ordering::SeqCst);
        }
        Ok(())
    })?;
    control_socket::remove_socket(&config.live.socket);
    Ok(if replaced {
        Served::Replaced
    } else {
        Served::Stopped
    })
}

/// Ends the running session at once when its participant's consent is no longer `given`
/// (withdrawn by `participant consent`, from any process, at any moment): nothing is
/// captured without consent, like at the start. The session is stored `incomplete` with the
/// reason, its raw recording deleted when it ends (`session_run::run_session`); what it
/// stored until then stays until a purge (`participant purge`) erases it.
fn end_withdrawn_session(service: &Service<'_>) {
    let Some((id, participant)) = service
        .state()
        .running
        .as_ref()
        .filter(|r| !r.end.load(Ordering::SeqCst))
        .map(|r| (r.id.clone(), r.participant.clone()))
    else {
        return;
    };
    let consent = service
        .store
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .participant_consent(&participant);
    let consent = match consent {
        Ok(Some((c, _))) if c == "given" => return,
        Ok(Some((c, _))) => c,
        Ok(None) => "unknown".into(),
        // A busy database is asked again at the next poll.
        Err(_) => return,
    };
    let told = {
        let mut state = service.state();
        let Some(r) = state.running.as_mut().filter(|r| r.id == id) else {
            return;
        };
        let t_ms = service.clock.now_ns().saturating_sub(r.start_clock_ns) / 1_000_000;
        let reason = format!(
            "consent {consent} {:.1} s into the session: capture stopped at once and the session's raw recording deleted; what was stored before stays until `participant purge`",
            t_ms as f64 / 1000.0
        );
        tracing::warn!(session = %r.id, "{reason}");
        *r.tie.abandoned.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
        r.consent_withdrawn.store(true, Ordering::SeqCst);
        r.end.store(true, Ordering::SeqCst);
        (t_ms, reason)
    };
    use crate::runtime::pipeline::{Observer, Topic};
    service.subscribers.observe(
        Topic::Session,
        told.0,
        serde_json::json!({"event": "abandoned", "session_id": id, "reason": told.1}),
    );
}

/// Ends the running session when its dialogue app has gone (`lifecycle`): its reason is
/// kept for the stored status, capture stops, and the subscribers are told.
fn end_abandoned_session(service: &Service<'_>) {
    let told = {
        let mut state = service.state();
        let Some(r) = state.running.as_mut() else {
            return;
        };
        if r.end.load(Ordering::SeqCst) {
            return;
        }
        let Some(reason) = r.tie.expired() else {
            return;
        };
        tracing::warn!(session = %r.id, "{reason}");
        *r.tie.abandoned.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
        r.end.store(true, Ordering::SeqCst);
        let t_ms = service.clock.now_ns().saturating_sub(r.start_clock_ns) / 1_000_000;
        (r.id.clone(), t_ms, reason)
    };
    use crate::runtime::pipeline::{Observer, Topic};
    service.subscribers.observe(
        Topic::Session,
        told.1,
        serde_json::json!({"event": "abandoned", "session_id": told.0, "reason": told.2}),
    );
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

/// Starts a service thread in `scope` (its handle is joined by the scope).
fn spawn<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    f: impl FnOnce() + Send + 'scope,
) -> Result<(), RunError> {
    super::spawn_in(scope, name, f).map(|_| ())
}

/// The outbox publisher of `empathic sync`, as a thread of the service: every ended
/// session goes to the study's broker while the station runs (exactly once, see `sync`).
fn publish_loop(service: &Service<'_>) {
    let opts = match sync_options(service.config) {
        Ok(o) => o,
        Err(e) => {
            service.set_error(format!("sync: {e}"));
            return;
        }
    };
    while !service.stop.load(Ordering::SeqCst) {
        // Runs until the stop flag; it reconnects with backoff on its own. A store error
        // (the disk) is retried after a pause.
        if let Err(e) = crate::sync::publish(
            &service.config.store.db_path,
            &opts,
            false,
            None,
            service.stop,
        ) {
            service.set_error(format!("sync: {e}"));
            pause(service.stop, 30_000);
        }
    }
}

/// Where and as whom the station publishes (its records and its health).
fn sync_options(config: &Config) -> Result<crate::sync::SyncOptions, String> {
    if config.station.id == crate::config::DEFAULT_STATION_ID {
        return Err(format!(
            "not publishing: [station] id is not set (records would go out as `{}`, mixed with every other unnamed station's)",
            crate::config::DEFAULT_STATION_ID
        ));
    }
    let sealing = crate::sync::Sealing::from_config(&config.sync)
        .map_err(|e| format!("not publishing: {e}"))?;
    let address = crate::sync::parse_broker(&config.sync.broker).map_err(|e| e.to_string())?;
    Ok(crate::sync::SyncOptions {
        announce_status: true,
        sealing,
        auth: crate::sync::BrokerAuth::from_config(&config.sync, address.tls),
        host: address.host,
        port: address.port,
        study: config.sync.study.clone(),
        station: config.station.id.clone(),
        collectors: config.sync.collectors.clone(),
    })
}

fn current_status(service: &Service<'_>) -> ServiceStatus {
    let sync = if service.config.sync.broker.is_empty() {
        None
    } else {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        store
            .outbox()
            .status()
            .ok()
            .and_then(|s| serde_json::to_value(s).ok())
            .map(|mut v| {
                v["security"] = service.config.sync.security.name().into();
                v
            })
    };
    let state = service.state();
    let mut status = state.status.clone();
    status.sync = sync;
    let now = service.clock.now_ns();
    let age_ms = |at: &AtomicU64| {
        let at = at.load(Ordering::Relaxed);
        now.saturating_sub(at) / 1_000_000
    };
    if let Some(e) = state.running.as_ref().and_then(|r| r.store_refusal().err()) {
        status.last_error = Some(e);
    }
    status.session = state.running.as_ref().map(|r| SessionStatus {
        session_id: r.id.clone(),
        participant_id: r.participant.clone(),
        t_ms: service.clock.now_ns().saturating_sub(r.start_clock_ns) / 1_000_000,
        phase: r.rules.phase().map(|p| p.as_str().to_string()),
        frames_captured: r.counters.frames.load(Ordering::Relaxed),
        frames_dropped: r.counters.frames_dropped.load(Ordering::Relaxed),
        audio_samples: r.counters.samples.load(Ordering::Relaxed),
        audio_samples_lost: r.counters.samples_lost.load(Ordering::Relaxed),
        frames_age_ms: age_ms(&r.counters.frame_at_ns),
        audio_age_ms: age_ms(&r.counters.audio_at_ns),
        recording: r.recording_dir.as_ref().map(|d| d.display().to_string()),
        stage_failures: r.failures.list(),
        kept_by: r.tie.describe(),
        bystanders: r.counters.bystanders(),
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
