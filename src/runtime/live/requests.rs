//! What each control request does ([`handle`]), and who may ask it ([`Caller`]: its
//! connection, its session token, whether its peer is the service's own user or root).
//! The socket's side (binding, slots, reading lines) is `control_socket.rs`.

use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::capture::control_protocol::Request;
use crate::session::Event;

use super::lifecycle::{check_addressed, Proof};
use super::session_run::start_session;
use super::{current_status, Service};

/// Who sent a request: its connection, the session token it carried, and whether its
/// peer runs as the service's own user or root (`SO_PEERCRED`).
pub(super) struct Caller {
    pub(super) conn: u64,
    pub(super) token: Option<String>,
    pub(super) trusted: bool,
}

impl Caller {
    fn proof(&self) -> Proof<'_> {
        Proof {
            token: self.token.as_deref(),
            trusted: self.trusted,
        }
    }
}

/// Whether the peer of `stream` runs as this service's user or as root: the station's own
/// commands (a purge, staff's `ctl`), trusted with any session.
pub(super) fn trusted_peer(stream: &UnixStream) -> bool {
    rustix::net::sockopt::socket_peercred(stream).is_ok_and(|c| {
        let uid = c.uid.as_raw();
        uid == 0 || uid == rustix::process::getuid().as_raw()
    })
}

/// Why `request` cannot act when no session runs; when the session it is for (or, naming
/// none, the last one) ended on an error, that error too.
fn no_session(request: &Request, caller: &Caller, ended: Option<&(String, String)>) -> String {
    let why = check_addressed(None, request, caller.conn, caller.proof())
        .err()
        .unwrap_or_default();
    match ended {
        Some((id, error)) if request.names_session().is_none_or(|n| n == id) => {
            format!("{why}: it ended on an error: {error}")
        }
        _ => why,
    }
}

/// The running session, when `request` from `caller` may act on it and its store still
/// writes (heartbeats and events); else why not.
fn addressed_running<'s>(
    state: &'s mut super::State,
    request: &Request,
    caller: &Caller,
) -> Result<&'s mut super::Running, String> {
    let Some(r) = state.running.as_mut() else {
        return Err(no_session(request, caller, state.ended_on_error.as_ref()));
    };
    check_addressed(
        Some((r.id.as_str(), &mut r.tie)),
        request,
        caller.conn,
        caller.proof(),
    )?;
    r.store_refusal()?;
    Ok(r)
}

/// `stop_session`: the running session ends; answered once it is stored and closed.
fn stop_session(
    service: &Service<'_>,
    request: &Request,
    caller: &Caller,
) -> Result<serde_json::Value, String> {
    let (id, answer) = {
        let mut state = service.state();
        let r = state.running.as_mut();
        let r = match r {
            Some(r) => {
                check_addressed(
                    Some((r.id.as_str(), &mut r.tie)),
                    request,
                    caller.conn,
                    caller.proof(),
                )?;
                r
            }
            None => return Err(no_session(request, caller, state.ended_on_error.as_ref())),
        };
        let t_ms = service.clock.now_ns().saturating_sub(r.start_clock_ns) / 1_000_000;
        // Ended early by the app's own word: stored `incomplete`, saying why.
        if let Request::StopSession {
            cut_short: Some(why),
            ..
        } = request
        {
            let reason = format!(
                "the dialogue app ended the session {:.1} s in, before its end: {why}",
                t_ms as f64 / 1000.0
            );
            tracing::info!(session = %r.id, "{reason}");
            *r.tie.abandoned.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
        }
        r.end.store(true, Ordering::SeqCst);
        (
            r.id.clone(),
            serde_json::json!({"session_id": r.id, "t_ms": t_ms, "recording": r.recording_dir}),
        )
    };
    use crate::runtime::pipeline::{Observer, Topic};
    service.subscribers.observe(
        Topic::Session,
        answer["t_ms"].as_u64().unwrap_or(0),
        serde_json::json!({"event": "stop", "session_id": id}),
    );
    // Answered once the session is stored and closed: the next start is accepted.
    wait_session_gone(service, &id)?;
    Ok(answer)
}

pub(super) fn handle<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    request: Request,
    caller: &Caller,
) -> Result<serde_json::Value, String> {
    match request {
        Request::Status => {
            let status = current_status(service);
            serde_json::to_value(status).map_err(|e| e.to_string())
        }
        Request::StartSession {
            participant_id,
            session_id,
            lease_s,
        } => {
            let max = service.config.live.max_lease_s;
            if lease_s.is_some_and(|l| l > max) {
                return Err(format!(
                    "start_session: `lease_s` {} is over this station's [live] max_lease_s ({max})",
                    lease_s.unwrap_or_default()
                ));
            }
            start_session(
                scope,
                service,
                participant_id,
                session_id,
                lease_s,
                caller.conn,
            )
        }
        Request::StopSession { .. } => stop_session(service, &request, caller),
        Request::Heartbeat { .. } => {
            let mut state = service.state();
            let r = addressed_running(&mut state, &request, caller)?;
            Ok(serde_json::json!({"session_id": r.id, "kept_by": r.tie.describe()}))
        }
        Request::Subscribe { .. } => Err("subscribe is answered by the connection".into()),
        Request::Recommend { k, text, policy } => service.recommender.ask(k, text, policy),
        Request::Event { ref kind, .. } => {
            let mut state = service.state();
            let r = addressed_running(&mut state, &request, caller)?;
            if r.end.load(Ordering::SeqCst) {
                return Err(format!("session `{}` is stopping", r.id));
            }
            let now = service.clock.now_ns().saturating_sub(r.start_clock_ns);
            let t_ns = r.rules.accept(kind, now)?;
            let event = Event {
                t_ns,
                line: 0,
                kind: kind.clone(),
            };
            if let Some(rec) = &r.recording {
                let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = rec.event(&event) {
                    // The event still reaches the database; the recording says what it lost.
                    tracing::error!("{e}");
                }
            }
            let t_ms = event.t_ns / 1_000_000;
            if let crate::session::EventKind::Phase { phase } = &event.kind {
                use crate::runtime::pipeline::{Observer, Topic};
                service.subscribers.observe(
                    Topic::Session,
                    t_ms,
                    serde_json::json!({"event": "phase", "phase": phase.as_str()}),
                );
            }
            r.events
                .send(event)
                .map_err(|_| "the session's pipeline has stopped".to_string())?;
            Ok(serde_json::json!({"t_ms": t_ms}))
        }
    }
}

/// How long `stop_session` waits for the session to be stored and closed.
const STOP_WAIT: Duration = Duration::from_secs(120);

/// Waits until session `id` is no longer the running one (stored, its writer closed).
fn wait_session_gone(service: &Service<'_>, id: &str) -> Result<(), String> {
    let since = std::time::Instant::now();
    loop {
        let gone = service.state().running.as_ref().is_none_or(|r| r.id != id);
        if gone {
            return Ok(());
        }
        if since.elapsed() >= STOP_WAIT || service.stop.load(Ordering::SeqCst) {
            return Err(format!(
                "session `{id}` was told to stop but is still closing after {} s (status shows it)",
                since.elapsed().as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
