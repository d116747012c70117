//! The control socket's server side: bind, accept, one thread per client, bounded lines,
//! idle timeout, answers. The client side (`request`, used by `empathic ctl`, `status` and
//! `participant purge`) is in `capture::control_protocol` with the protocol, so the collector build
//! has it too.

use std::io::{BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::capture::control_protocol::{parse_request, Request, Topic};
use crate::capture::CaptureError;
use crate::config::Config;
use crate::runtime::RunError;

use super::requests::{handle, trusted_peer, Caller};

/// The subscription stream's version (docs/station.md, "Subscriptions"). 2: `voice` also
/// from the energy rule, with `decided_ms` and `handed_ms`; `quality` for darkness,
/// clipping, disk and drops, and the standing problems first.
const STREAM_VERSION: u32 = 2;
use super::{spawn, Service, BUSY};

/// Request connections served at once (subscriptions are counted apart: [`MAX_SUBSCRIBERS`]).
pub(super) const MAX_CLIENTS: usize = 16;
/// Subscriptions held at once; one more is refused (a subscriber that stops reading is
/// dropped: `subscribe::SLOW_CONSUMER`), so listeners never take the request slots.
pub(super) const MAX_SUBSCRIBERS: usize = 16;
/// Subscriptions one user (the peer's uid) may hold at once, but the station's own user and
/// root: a neighbour in the control group who subscribes and never reads cannot take every
/// slot and lock the robot's app out (a trial held 16 and the app's `subscribe` was
/// refused).
pub(super) const MAX_SUBSCRIBERS_PER_USER: usize = 4;
/// Beyond [`MAX_CLIENTS`], this many more connections are each answered one `status` or
/// `stop_session` (what a withdrawal and the package's upgrade check need), sent within
/// [`RESERVED_WAIT`]; anything else is refused as busy. A flood of idle connections cannot
/// lock the station out of being asked or stopped.
pub(super) const RESERVED_SLOTS: usize = 4;
pub(super) const RESERVED_WAIT: Duration = Duration::from_secs(2);
/// What a connection refused for want of a slot is told (`busy`: the same request may pass
/// later; `empathic ctl` exits 1 for it).
const TOO_MANY: &str = "busy: too many control connections";
/// A request line longer than this is refused and the connection closed (a story's text is
/// a few KiB; without a bound, a line without a newline would grow without limit).
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
/// (The idle timeout lives with the session's tie, which counts on it: `lifecycle`.)
pub use super::lifecycle::IDLE_TIMEOUT;

/// Binds the control socket, replacing a stale one, with the configured mode and group.
pub(super) fn bind_socket(config: &Config) -> Result<UnixListener, RunError> {
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
    // A stale socket of an earlier run is replaced; anything else at that path is not ours
    // to delete (a typo in `[live] socket` must not cost a file).
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            let _ = std::fs::remove_file(path);
        }
        Ok(_) => {
            return Err(err(
                "something that is not a socket is there; name a free path in [live] socket".into(),
            ))
        }
        Err(_) => {}
    }
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
        let group = &config.live.socket_group;
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(|e| {
            err(format!(
                "cannot give it to group `{group}` ({e}): the service's user must be a member (the package makes it one of `{CONTROL_GROUP}`; otherwise `adduser USER {group}`, then restart the service)"
            ))
        })?;
        open_runtime_folder(path, gid)
            .map_err(|e| err(format!("cannot let group `{group}` into its folder: {e}")))?;
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| err(e.to_string()))?;
    Ok(listener)
}

/// The group the packages make for the apps that drive the station (docker's pattern): the
/// service's user is a member, the shipped config names it as `[live] socket_group`, and an
/// app's user added to it may connect to the socket and read nothing else of the station.
pub const CONTROL_GROUP: &str = "empathic-ctl";

/// The unit's runtime folder (systemd's `RUNTIME_DIRECTORY`, `0750 empathic:empathic`)
/// holding the socket is given to the socket's group (owner rwx, group r-x, others
/// nothing), so its members can reach the socket and nothing else of the service's: no
/// other file lives there. A socket elsewhere keeps its folder as the admin made it
/// (`doctor --live` says when the group cannot reach it).
fn open_runtime_folder(socket: &std::path::Path, gid: u32) -> std::io::Result<()> {
    let (Some(dir), Some(runtime)) = (socket.parent(), std::env::var_os("RUNTIME_DIRECTORY"))
    else {
        return Ok(());
    };
    // systemd may list several folders, separated by colons.
    let ours = std::env::split_paths(&runtime).any(|r| r == dir);
    if !ours {
        return Ok(());
    }
    std::os::unix::fs::chown(dir, None, Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
}

pub(super) fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

pub(super) fn accept_loop<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    listener: &UnixListener,
) {
    while !service.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, _)) => {
                let full = service.clients.load(Ordering::SeqCst) >= MAX_CLIENTS as u64;
                if full && service.reserved.load(Ordering::SeqCst) >= RESERVED_SLOTS as u64 {
                    let mut s = stream;
                    let _ = writeln!(s, "{}", error_reply(TOO_MANY));
                    continue;
                }
                // A request slot, or (all taken) a reserved one: counted while served.
                let (slots, name) = if full {
                    (&service.reserved, "control-reserved")
                } else {
                    (&service.clients, "control-client")
                };
                slots.fetch_add(1, Ordering::SeqCst);
                let started = spawn(scope, name, move || {
                    if full {
                        serve_reserved(scope, service, stream);
                    } else {
                        serve_client(scope, service, stream);
                    }
                    slots.fetch_sub(1, Ordering::SeqCst);
                });
                if let Err(e) = started {
                    slots.fetch_sub(1, Ordering::SeqCst);
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

/// Removes the service's socket at exit, only when it is still a socket ([`bind_socket`]
/// refuses any other file there, and nothing else is ours to delete).
pub(super) fn remove_socket(path: &std::path::Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

/// A connection on a reserved slot: one `status` or `stop_session` answered within
/// [`RESERVED_WAIT`], then closed; anything else refused as busy.
fn serve_reserved<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    stream: UnixStream,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let deadline = std::time::Instant::now() + RESERVED_WAIT;
    let reply = match next_request_until(&mut reader, service.stop, deadline) {
        Incoming::Line(line) => {
            match parse_request(line.trim()) {
                Ok(request @ (Request::Status | Request::StopSession { .. })) => {
                    // Not the connection of any session: u64::MAX is never a real one.
                    let caller = Caller {
                        conn: u64::MAX,
                        token: crate::capture::control_protocol::token_of(line.trim()),
                        trusted: trusted_peer(reader.get_ref()),
                    };
                    match handle(scope, service, request, &caller) {
                        Ok(mut v) => {
                            v["ok"] = true.into();
                            v.to_string()
                        }
                        Err(reason) => error_reply(&reason),
                    }
                }
                _ => error_reply(&format!(
                    "{TOO_MANY}: only status and stop_session are answered now"
                )),
            }
        }
        Incoming::Closed => return,
        _ => error_reply(TOO_MANY),
    };
    let _ = writeln!(out, "{reply}");
}

pub(super) fn error_reply(reason: &str) -> String {
    if reason.starts_with(BUSY) {
        serde_json::json!({"ok": false, "error": reason, "busy": true}).to_string()
    } else {
        serde_json::json!({"ok": false, "error": reason}).to_string()
    }
}

/// What a connection sent next.
pub(super) enum Incoming {
    Line(String),
    Closed,
    Idle,
    TooLong,
    NotUtf8,
}

/// Reads the next request line (without its newline), at most [`MAX_REQUEST_BYTES`], giving
/// up after [`IDLE_TIMEOUT`] without one or when the service stops.
pub(super) fn next_request(reader: &mut BufReader<UnixStream>, stop: &AtomicBool) -> Incoming {
    next_request_until(reader, stop, std::time::Instant::now() + IDLE_TIMEOUT)
}

/// [`next_request`] giving up at `deadline`.
fn next_request_until(
    reader: &mut BufReader<UnixStream>,
    stop: &AtomicBool,
    deadline: std::time::Instant,
) -> Incoming {
    use std::io::BufRead as _;
    let mut bytes = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Incoming::Closed;
        }
        let available = match reader.fill_buf() {
            // A last line ended by the end of the stream instead of a newline (`printf` with
            // no `\n`, a client that shut down its writing side) is a request too: answered.
            Ok([]) if bytes.iter().all(u8::is_ascii_whitespace) => return Incoming::Closed,
            Ok([]) => {
                return match String::from_utf8(bytes) {
                    Ok(line) => Incoming::Line(line),
                    Err(_) => Incoming::NotUtf8,
                }
            }
            Ok(buf) => buf,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if std::time::Instant::now() >= deadline {
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

/// Answers one connection's requests, a line each, until it closes, idles past
/// [`IDLE_TIMEOUT`], sends a line past [`MAX_REQUEST_BYTES`], or the service stops. Every
/// request line gets an answer, a refused one too.
pub(super) fn serve_client<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    stream: UnixStream,
) {
    let conn = service.connections.fetch_add(1, Ordering::SeqCst);
    serve_connection(scope, service, stream, conn);
    // A session bound to this connection now has its grace running.
    if let Some(r) = service.state().running.as_mut() {
        r.tie.connection_closed(conn);
    }
}

/// [`serve_client`]'s loop on connection number `conn`.
fn serve_connection<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    service: &'scope Service<'scope>,
    stream: UnixStream,
    conn: u64,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let trusted = trusted_peer(&stream);
    let peer_uid = rustix::net::sockopt::socket_peercred(&stream)
        .ok()
        .map(|c| c.uid.as_raw());
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
        // Any request on the connection a session is bound to says its app is alive.
        if let Some(r) = service.state().running.as_mut() {
            r.tie.heard_from(conn);
        }
        let reply = match parse_request(line.trim()) {
            Ok(Request::Subscribe { topics }) => {
                match subscribe(
                    service,
                    out,
                    line.trim(),
                    topics,
                    peer_uid.filter(|_| !trusted),
                ) {
                    Some(back) => {
                        out = back;
                        continue;
                    }
                    None => return,
                }
            }
            Ok(request) => {
                let caller = Caller {
                    conn,
                    token: crate::capture::control_protocol::token_of(line.trim()),
                    trusted,
                };
                handle(scope, service, request, &caller)
            }
            Err(reason) => Err(reason),
        };
        let text = match reply {
            Ok(mut v) => {
                v["ok"] = true.into();
                v.to_string()
            }
            Err(reason) => {
                service.refusals.refused(line.trim(), &reason);
                error_reply(&reason)
            }
        };
        if writeln!(out, "{text}").is_err() {
            return;
        }
    }
}

/// Turns the connection into a subscriber's stream of `topics` (no more requests on it), or
/// refuses: one user (`user`, the peer's uid unless it is the station's own or root) holds at
/// most [`MAX_SUBSCRIBERS_PER_USER`], and all at most [`MAX_SUBSCRIBERS`]. Returns the
/// connection back when refused and still open (its next request is read), `None` when it
/// is done.
fn subscribe(
    service: &Service<'_>,
    mut out: UnixStream,
    line: &str,
    topics: Vec<Topic>,
    user: Option<u32>,
) -> Option<UnixStream> {
    // One user holds at most a few (the station's own user and root: any).
    if let Some(uid) = user {
        let mut held = service
            .subscribers_by_user
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let n = held.entry(uid).or_insert(0);
        if *n >= MAX_SUBSCRIBERS_PER_USER {
            drop(held);
            let reason = format!(
                "{BUSY}this user (uid {uid}) holds {MAX_SUBSCRIBERS_PER_USER} subscriptions already: close one, or subscribe to several topics on one connection"
            );
            service.refusals.refused(line, &reason);
            return writeln!(out, "{}", error_reply(&reason))
                .is_ok()
                .then_some(out);
        }
        *n += 1;
    }
    let release_user = || {
        if let Some(uid) = user {
            let mut held = service
                .subscribers_by_user
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(n) = held.get_mut(&uid) {
                *n = n.saturating_sub(1);
            }
        }
    };
    // The connection becomes the subscriber's stream: no more requests on it,
    // and it leaves the request slots for the subscribers' own.
    if service.subscriber_slots.fetch_add(1, Ordering::SeqCst) >= MAX_SUBSCRIBERS as u64 {
        service.subscriber_slots.fetch_sub(1, Ordering::SeqCst);
        release_user();
        let reason = format!(
            "{BUSY}too many subscribers ({MAX_SUBSCRIBERS}): close one, or subscribe to several topics on one connection"
        );
        service.refusals.refused(line, &reason);
        return writeln!(out, "{}", error_reply(&reason))
            .is_ok()
            .then_some(out);
    }
    service.clients.fetch_sub(1, Ordering::SeqCst);
    let names: Vec<&str> = topics.iter().map(|t| t.as_str()).collect();
    let ok = serde_json::json!({"ok": true, "subscribed": names, "version": STREAM_VERSION});
    if writeln!(out, "{ok}").is_err() {
        service.subscriber_slots.fetch_sub(1, Ordering::SeqCst);
        service.clients.fetch_add(1, Ordering::SeqCst);
        release_user();
        return None;
    }
    tracing::info!(topics = ?names, "subscriber connected");
    let first = if topics.contains(&Topic::Quality) {
        super::watch::standing(service)
    } else {
        Vec::new()
    };
    service.subscribers.serve(topics, first, out, service.stop);
    // Given back as a request slot: `serve_client`'s caller takes one back.
    service.subscriber_slots.fetch_sub(1, Ordering::SeqCst);
    release_user();
    service.clients.fetch_add(1, Ordering::SeqCst);
    None
}
