//! A live session's tie to the dialogue app that started it.
//!
//! Contract: a session is either **bound to a connection** (started without `lease_s`: the
//! app keeps its control connection open and sends a request, `heartbeat` at least, more
//! often than the socket's idle timeout) or **leased** (started with `lease_s`, for
//! one-shot clients such as `empathic ctl` that connect once per command: every accepted
//! request that concerns the session renews the lease). A bound session whose connection
//! closes without `stop_session` (the app crashed, was killed, or went idle past the
//! socket's timeout) ends `[live] app_grace_ms` later; a leased one ends when its lease runs
//! out. Either is stored `incomplete` with the reason ([`Tie::abandoned`]), and capture
//! stops. A bound session's app is alive while it sends requests, not while its connection
//! is merely open: a connection that sends none for the socket's idle timeout plus the grace
//! (an app that hung, or one that turned the connection into a subscription and never asked
//! anything again) ends the session too (issue 56: a hung app kept the camera on for ever).
//! Within the grace, a request naming the session (`session_id`) from a new
//! connection binds the session to it (an app that restarted).
//!
//! Who may act on a session: the connection it is bound to; any other client only with the
//! session's token (`start_session` answers it; `status` never shows it), or when the
//! client runs as the service's own user or root (the station's own commands: a purge
//! stopping a session, `empathic ctl` as staff). Learning a `session_id` from `status` lets
//! a neighbour act on nothing (issue 56). Requests that name a session
//! other than the running one are refused with the reason ([`check_addressed`]); a request
//! that names none is taken from the bound connection, or for a leased session.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::capture::control_protocol::Request;

/// A connection that sends no complete request for this long is closed (with an answer
/// saying so), so idle connections cannot hold every slot.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How a running session is kept alive.
pub(super) struct Tie {
    /// The connection the session is bound to (`None`: leased).
    owner: Option<u64>,
    /// When the bound connection closed (the grace runs from there).
    owner_left: Option<Instant>,
    /// Grace after the connection closed, or the lease.
    lease: Duration,
    renewed: Instant,
    /// The session's token (128 random bits, hex): handed to the client that started it.
    pub(super) token: String,
    /// Why the session was ended for want of its app, for its stored reason.
    pub(super) abandoned: Arc<Mutex<Option<String>>>,
}

/// What a request's sender proves: the token it carried, and whether it runs as the
/// service's own user or root.
#[derive(Clone, Copy, Default)]
pub(super) struct Proof<'a> {
    pub(super) token: Option<&'a str>,
    pub(super) trusted: bool,
}

/// A new session token ([`crate::digest::nonce_hex`]).
fn new_token() -> String {
    crate::digest::nonce_hex()
}

impl Tie {
    /// A session started by connection `conn`, with the lease it asked for (seconds, already
    /// bounded by `[live] max_lease_s`) or bound to `conn` with `grace`.
    pub(super) fn new(conn: u64, lease_s: Option<u64>, grace: Duration) -> Self {
        Self {
            owner: lease_s.is_none().then_some(conn),
            owner_left: None,
            lease: lease_s.map_or(grace, Duration::from_secs),
            renewed: Instant::now(),
            token: new_token(),
            abandoned: Arc::new(Mutex::new(None)),
        }
    }

    /// How the session is kept alive, for `status` and the start's answer.
    pub(super) fn describe(&self) -> serde_json::Value {
        match self.owner {
            Some(_) => serde_json::json!({
                "bound_to": "connection",
                "grace_ms": self.lease.as_millis() as u64,
                "connection_open": self.owner_left.is_none(),
            }),
            None => serde_json::json!({
                "bound_to": "lease",
                "lease_s": self.lease.as_secs(),
                "expires_in_ms": self.lease.saturating_sub(self.renewed.elapsed()).as_millis() as u64,
            }),
        }
    }

    /// Connection `conn` closed.
    pub(super) fn connection_closed(&mut self, conn: u64) {
        if self.owner == Some(conn) && self.owner_left.is_none() {
            self.owner_left = Some(Instant::now());
            self.renewed = Instant::now();
        }
    }

    /// Any request came on connection `conn`: the bound app is alive.
    pub(super) fn heard_from(&mut self, conn: u64) {
        if self.owner == Some(conn) && self.owner_left.is_none() {
            self.renewed = Instant::now();
        }
    }

    /// Why the session must end now for want of its app, if it must.
    pub(super) fn expired(&self) -> Option<String> {
        let idle = self.renewed.elapsed();
        let silent = IDLE_TIMEOUT + self.lease;
        match (self.owner, self.owner_left) {
            (Some(_), None) if idle >= silent => Some(format!(
                "the dialogue app sent no request for {:.0} s on the connection that started the session (it hung, or only listens on it); the session was ended",
                silent.as_secs_f64()
            )),
            (Some(_), None) => None,
            (Some(_), Some(_)) if idle >= self.lease => Some(format!(
                "the dialogue app's connection closed without stop_session; the session was ended {:.0} s later ([live] app_grace_ms)",
                self.lease.as_secs_f64()
            )),
            (None, _) if idle >= self.lease => Some(format!(
                "no request named the session for its lease of {} s (start_session `lease_s`); the session was ended",
                self.lease.as_secs()
            )),
            _ => None,
        }
    }
}

/// Checks that `request`, from connection `conn`, may act on the running session `id` (or on
/// none, when `running` is `None`), and renews the session's tie when it may.
pub(super) fn check_addressed(
    running: Option<(&str, &mut Tie)>,
    request: &Request,
    conn: u64,
    proof: Proof<'_>,
) -> Result<(), String> {
    let named = request.names_session();
    let Some((id, tie)) = running else {
        return Err(match named {
            Some(n) => format!("session `{n}` is not running (no session is running)"),
            None => "no session is running".into(),
        });
    };
    match named {
        Some(n) if n != id => Err(format!(
            "session `{n}` is not running (the running session is `{id}`)"
        )),
        // Not its bound connection: only with the token, or as the station's own user.
        _ if tie.owner != Some(conn)
            && !proof.trusted
            && proof.token != Some(tie.token.as_str()) =>
        {
            Err(format!(
                "session `{id}` is another client's: send its `token` (from start_session's answer) to act on it"
            ))
        }
        Some(_) => {
            if tie.owner.is_some() && tie.owner_left.is_some() {
                tracing::info!(session = %id, "a new connection named the session within its grace: bound to it");
                tie.owner = Some(conn);
                tie.owner_left = None;
            }
            tie.renewed = Instant::now();
            Ok(())
        }
        None => match tie.owner {
            Some(owner) if owner != conn => Err(format!(
                "name the session (`session_id`): session `{id}` belongs to the connection that started it"
            )),
            _ => {
                tie.renewed = Instant::now();
                Ok(())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Phase;
    use crate::session::EventKind;

    fn event(session_id: Option<&str>) -> Request {
        Request::Event {
            kind: EventKind::Phase {
                phase: Phase::WarmUp,
            },
            session_id: session_id.map(str::to_string),
        }
    }

    const STRANGER: Proof<'static> = Proof {
        token: None,
        trusted: false,
    };
    const STAFF: Proof<'static> = Proof {
        token: None,
        trusted: true,
    };

    #[test]
    fn requests_for_another_session_or_from_a_stranger_are_refused() {
        let mut bound = Tie::new(1, None, Duration::from_secs(30));
        let token = bound.token.clone();
        let holder = Proof {
            token: Some(&token),
            trusted: false,
        };
        assert!(check_addressed(Some(("s-2", &mut bound)), &event(None), 1, STRANGER).is_ok());
        let e = check_addressed(Some(("s-2", &mut bound)), &event(Some("s-1")), 1, STRANGER)
            .unwrap_err();
        assert!(
            e.contains("`s-1` is not running") && e.contains("`s-2`"),
            "{e}"
        );
        // Issue 56: a neighbour that learnt the id from `status` cannot act on the session.
        let e = check_addressed(Some(("s-2", &mut bound)), &event(Some("s-2")), 7, STRANGER)
            .unwrap_err();
        assert!(e.contains("token"), "{e}");
        let wrong = Proof {
            token: Some("00"),
            trusted: false,
        };
        assert!(check_addressed(Some(("s-2", &mut bound)), &event(Some("s-2")), 7, wrong).is_err());
        assert!(check_addressed(Some(("s-2", &mut bound)), &event(Some("s-2")), 7, holder).is_ok());
        let e = check_addressed(Some(("s-2", &mut bound)), &event(None), 7, STAFF).unwrap_err();
        assert!(e.contains("name the session"), "{e}");
        assert!(check_addressed(Some(("s-2", &mut bound)), &event(Some("s-2")), 7, STAFF).is_ok());
        let e = check_addressed(None, &event(Some("s-1")), 1, STRANGER).unwrap_err();
        assert!(e.contains("`s-1` is not running"), "{e}");
        // A leased session takes requests from any connection that holds its token (one-shot
        // clients), or the station's own user.
        let mut leased = Tie::new(1, Some(600), Duration::from_secs(30));
        let token = leased.token.clone();
        let holder = Proof {
            token: Some(&token),
            trusted: false,
        };
        assert!(check_addressed(Some(("s-3", &mut leased)), &event(None), 9, holder).is_ok());
        assert!(check_addressed(Some(("s-3", &mut leased)), &event(None), 9, STAFF).is_ok());
        assert!(check_addressed(Some(("s-3", &mut leased)), &event(None), 9, STRANGER).is_err());
    }

    #[test]
    fn a_bound_session_whose_open_connection_stays_silent_expires() {
        let mut tie = Tie::new(1, None, Duration::from_millis(10));
        assert!(tie.expired().is_none());
        // Silent past the idle timeout and the grace, the connection still open.
        tie.renewed = Instant::now() - IDLE_TIMEOUT - Duration::from_millis(20);
        assert!(tie.expired().is_some_and(|r| r.contains("sent no request")));
        // Any request on it keeps it alive; one on another connection does not.
        tie.heard_from(2);
        assert!(tie.expired().is_some());
        tie.heard_from(1);
        assert!(tie.expired().is_none());
    }

    #[test]
    fn a_bound_session_expires_only_after_its_connection_closed_and_the_grace() {
        let mut tie = Tie::new(1, None, Duration::from_millis(50));
        std::thread::sleep(Duration::from_millis(80));
        assert!(tie.expired().is_none(), "the connection is open");
        tie.connection_closed(2); // another connection: nothing
        assert!(tie.expired().is_none());
        tie.connection_closed(1);
        assert!(tie.expired().is_none(), "the grace runs from the close");
        std::thread::sleep(Duration::from_millis(80));
        assert!(tie.expired().unwrap().contains("connection closed"));
        // Re-bound within the grace by a request naming it.
        let mut tie = Tie::new(1, None, Duration::from_millis(200));
        tie.connection_closed(1);
        let token = tie.token.clone();
        let holder = Proof {
            token: Some(&token),
            trusted: false,
        };
        assert!(check_addressed(Some(("s", &mut tie)), &event(Some("s")), 5, holder).is_ok());
        std::thread::sleep(Duration::from_millis(250));
        assert!(tie.expired().is_none(), "bound to connection 5 now");
    }

    #[test]
    fn a_lease_runs_out_without_requests() {
        let tie = Tie::new(1, Some(0), Duration::from_secs(30));
        assert!(tie.expired().unwrap().contains("lease"));
    }
}
