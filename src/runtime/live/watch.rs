//! The service's own `quality` checks, each a message to the subscribers when it changes
//! (the pipeline's are in `runtime::pipeline::observe`; the devices' in `Service::device`).
//!
//! Contract: [`ServiceWatch::disk`] says `disk_low` when the recording folder's free space
//! falls below `recording.min_free_mib` (raw media stop there, docs/station.md "Faults")
//! and `disk_ok` when it is back; [`ServiceWatch::drops`] says `frames_dropped` and
//! `samples_lost` with the count since the last message and the session's total, at most
//! once a poll, when the live camera queue dropped frames or the microphone's ring lost
//! samples. No message repeats a state already told. A new subscriber to `quality` is
//! first told the problems standing when it subscribes ([`standing`]: a device missing,
//! the disk low), each marked `"standing": true`.

use std::sync::atomic::Ordering;

use super::Service;
use crate::runtime::pipeline::{Observer, Topic};

#[derive(Default)]
pub(super) struct ServiceWatch {
    disk_low: bool,
    /// The session whose counters were last seen, and what they were.
    session: Option<String>,
    dropped: u64,
    lost: u64,
}

impl ServiceWatch {
    /// The free space just measured (bytes), against the configured floor.
    pub(super) fn disk(&mut self, service: &Service<'_>, free: Option<u64>) {
        let Some(free) = free else { return };
        let min = service.config.recording.min_free_mib << 20;
        let low = free < min;
        if low != self.disk_low {
            self.disk_low = low;
            let at_ms = service.subscribers.now_ms();
            service.subscribers.observe(
                Topic::Quality,
                at_ms,
                serde_json::json!({
                    "event": if low { "disk_low" } else { "disk_ok" },
                    "free_mib": free >> 20,
                    "min_free_mib": service.config.recording.min_free_mib,
                }),
            );
        }
    }

    /// The running session's drop counters.
    pub(super) fn drops(&mut self, service: &Service<'_>) {
        let (id, dropped, lost) = {
            let state = service.state();
            let Some(r) = state.running.as_ref() else {
                self.session = None;
                return;
            };
            (
                r.id.clone(),
                r.counters.frames_dropped.load(Ordering::Relaxed),
                r.counters.samples_lost.load(Ordering::Relaxed),
            )
        };
        if self.session.as_deref() != Some(id.as_str()) {
            self.session = Some(id);
            (self.dropped, self.lost) = (0, 0);
        }
        let at_ms = service.subscribers.now_ms();
        for (event, total, seen) in [
            ("frames_dropped", dropped, &mut self.dropped),
            ("samples_lost", lost, &mut self.lost),
        ] {
            if total > *seen {
                service.subscribers.observe(
                    Topic::Quality,
                    at_ms,
                    serde_json::json!({ "event": event, "count": total - *seen, "total": total }),
                );
                *seen = total;
            }
        }
    }
}

/// The quality problems standing now, as messages (`at_ms` is now).
pub(super) fn standing(service: &Service<'_>) -> Vec<String> {
    let at_ms = service.subscribers.now_ms();
    let status = service.state().status.clone();
    let mut fields = Vec::new();
    for (which, d) in [
        ("camera", &status.camera),
        ("microphone", &status.microphone),
    ] {
        if !d.present && d.problem.is_some() {
            fields.push(serde_json::json!({
                "event": "device_lost", "device": which, "problem": d.problem, "standing": true,
            }));
        }
    }
    let min = service.config.recording.min_free_mib;
    if let Some(free) = status.disk_free_mib.filter(|&f| f < min) {
        fields.push(serde_json::json!({
            "event": "disk_low", "free_mib": free, "min_free_mib": min, "standing": true,
        }));
    }
    fields
        .into_iter()
        .map(|f| crate::runtime::pipeline::message(Topic::Quality, at_ms, at_ms, f).to_string())
        .collect()
}
