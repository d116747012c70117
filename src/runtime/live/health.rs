//! The `health-publisher` thread: the station's health to study staff over MQTT
//! (`sync::health`), with no participant data.
//!
//! Contract: while the service runs with a broker configured, it publishes one health
//! message at start, one whenever what it reports changes (a device found or lost or its
//! problem, the disk falling below `recording.min_free_mib` or back, a session ended), and
//! one every `[sync] health_interval_min` otherwise. A publish that fails (broker down) is
//! tried again every 30 s until one goes through; the outbox's records never wait for it
//! (it has its own short connection).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Service;
use crate::sync::health::{DeviceHealth, Health, HEALTH_FORMAT, HEALTH_VERSION};

/// What a change of makes a health message go out at once.
#[derive(PartialEq)]
struct Watched {
    camera: (bool, Option<String>),
    microphone: (bool, Option<String>),
    disk_low: bool,
    sessions_run: u64,
    stage_failures: usize,
    /// Messages a collector refused and the station holds.
    sync_refused: u64,
}

pub(super) fn health_loop(service: &Service<'_>) {
    let Ok(opts) = super::sync_options(service.config) else {
        return; // `sync-publisher` says why.
    };
    let started = Instant::now();
    let interval = Duration::from_secs(u64::from(service.config.sync.health_interval_min) * 60);
    let mut told: Option<Watched> = None;
    let mut last_sent: Option<Instant> = None;
    let mut last_try: Option<Instant> = None;
    while !service.stop.load(Ordering::SeqCst) {
        let now = watched(service);
        let due = told.as_ref() != Some(&now) || last_sent.is_none_or(|t| t.elapsed() >= interval);
        let may_try = last_try.is_none_or(|t| t.elapsed() >= Duration::from_secs(30))
            || told.as_ref() != Some(&now);
        if due && may_try {
            last_try = Some(Instant::now());
            match crate::sync::health::publish(&opts, health(service, started)) {
                Ok(()) => {
                    tracing::debug!("health published");
                    told = Some(now);
                    last_sent = Some(Instant::now());
                }
                Err(e) => tracing::warn!("health not published (tried again in 30 s): {e}"),
            }
        }
        super::devices::pause(service.stop, 1_000);
    }
}

fn watched(service: &Service<'_>) -> Watched {
    let status = service.state().status.clone();
    Watched {
        camera: (status.camera.present, status.camera.problem),
        microphone: (status.microphone.present, status.microphone.problem),
        disk_low: status
            .disk_free_mib
            .is_some_and(|f| f < service.config.recording.min_free_mib),
        sessions_run: status.sessions_run,
        stage_failures: service.state().running.as_ref().map_or(0, |r| {
            r.failures.list().len() + usize::from(r.store_failed.get().is_some())
        }),
        sync_refused: {
            let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
            store.outbox().held().unwrap_or(0)
        },
    }
}

/// The health message now: the service's status, the outbox, today's sessions.
fn health(service: &Service<'_>, started: Instant) -> Health {
    let config = service.config;
    let status = service.state().status.clone();
    let sent_at = crate::clock::utc_now();
    let (outbox_pending, outbox_oldest_pending, today, last, refused) = {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        let outbox = store.outbox().status().ok();
        let sessions = store.list_sessions().unwrap_or_default();
        let day = &sent_at[..10];
        let today = sessions
            .iter()
            .filter(|s| s.created_at.starts_with(day))
            .count() as u64;
        let last = sessions
            .iter()
            .find(|s| s.status != "running")
            .map(|s| (s.status.clone(), s.updated_at.clone()));
        let refused = outbox.as_ref().and_then(|o| {
            o.last_refusal
                .as_ref()
                .filter(|_| o.refused > 0)
                .map(|r| (o.refused, format!("{} ({}): {}", r.by, r.code, r.reason)))
        });
        (
            outbox.as_ref().map_or(0, |o| o.pending + o.sent),
            outbox.and_then(|o| o.oldest_pending),
            today,
            last,
            refused,
        )
    };
    // A store that failed under the running session is one of its failures too (the
    // session ends on it within a batch; `last_session_status` says `incomplete` after).
    let (failures, store_failed) = service
        .state()
        .running
        .as_ref()
        .map(|r| (r.failures.list(), r.store_failed.get().cloned()))
        .unwrap_or_default();
    let stage_failures: Vec<String> = store_failed
        .map(|e| format!("session database: {e}"))
        .into_iter()
        .chain(
            failures
                .into_iter()
                .map(|f| format!("{}: {}", f.stage, f.error)),
        )
        .take(16)
        .map(|f| f.chars().take(500).collect())
        .collect();
    let device = |d: &super::DeviceStatus| DeviceHealth {
        present: d.present,
        problem: d.problem.clone(),
    };
    Health {
        format: HEALTH_FORMAT.into(),
        v: HEALTH_VERSION,
        study: config.sync.study.clone(),
        station: config.station.id.clone(),
        sent_at,
        software: crate::BUILD.into(),
        uptime_s: started.elapsed().as_secs(),
        camera: device(&status.camera),
        microphone: device(&status.microphone),
        disk_free_mib: status.disk_free_mib,
        disk_min_free_mib: config.recording.min_free_mib,
        outbox_pending,
        outbox_oldest_pending,
        sessions_today: today,
        last_session_status: last.as_ref().map(|l| l.0.clone()),
        last_session_ended_at: last.map(|l| l.1),
        clock_offset_ms: None,
        stage_failures,
        interval_s: Some(u64::from(config.sync.health_interval_min) * 60),
        sync_refused: refused.as_ref().map_or(0, |r| r.0),
        sync_refusal: refused.map(|r| r.1),
        signer: None,
        sig: None,
    }
}
