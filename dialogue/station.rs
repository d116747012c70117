//! The talking side of the reference app: requests to the station on the one connection the
//! session is bound to, each answered or refused with the station's reason.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The talking side: one connection kept open for the whole session, so the station binds
/// the session to this app and ends it if the app dies (docs/station.md, "A session's
/// lifecycle"). Each request names the session once it has started; a heartbeat goes out
/// when nothing else has for [`HEARTBEAT`] (the socket closes connections idle for 30 s).
pub(crate) struct Station {
    pub(crate) socket: PathBuf,
    pub(crate) conn: Mutex<Option<(UnixStream, BufReader<UnixStream>)>>,
    pub(crate) session_id: Mutex<Option<String>>,
    /// The session's token, from `start_session`'s answer.
    pub(crate) token: Mutex<Option<String>>,
    pub(crate) last_sent: Mutex<Instant>,
}

/// At most this long without a request before the app sends a heartbeat.
const HEARTBEAT: Duration = Duration::from_secs(10);

impl Station {
    pub(crate) fn new(socket: PathBuf) -> Self {
        Self {
            socket,
            conn: Mutex::new(None),
            session_id: Mutex::new(None),
            token: Mutex::new(None),
            last_sent: Mutex::new(Instant::now()),
        }
    }

    fn token(&self) -> Option<String> {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn session_id(&self) -> Option<String> {
        self.session_id
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sends `request` (naming the session once one runs, except `start_session` and
    /// `status`) on the app's connection and returns the answer, or why it was refused.
    pub(crate) fn ask(&self, mut request: Value) -> Result<Value, String> {
        let what = request["type"].as_str().unwrap_or("request").to_string();
        if !matches!(what.as_str(), "start_session" | "status" | "recommend") {
            if let Some(id) = self.session_id() {
                request["session_id"] = json!(id);
                // The session's token: after a reconnect the station takes requests for it
                // only with it (status shows every client the id, never the token).
                if let Some(t) = self.token() {
                    request["token"] = json!(t);
                }
            }
        }
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if conn.is_none() {
            let stream = UnixStream::connect(&self.socket)
                .map_err(|e| format!("{what}: cannot connect to {}: {e}", self.socket.display()))?;
            // A stop waits for the session to be stored: give it time.
            stream
                .set_read_timeout(Some(Duration::from_secs(150)))
                .map_err(|e| format!("{what}: {e}"))?;
            let reader = BufReader::new(stream.try_clone().map_err(|e| format!("{what}: {e}"))?);
            *conn = Some((stream, reader));
        }
        let result = (|| {
            let (stream, reader) = conn.as_mut().ok_or("not connected")?;
            writeln!(stream, "{request}").map_err(|e| format!("{what}: {e}"))?;
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) => Err(format!("{what}: the station closed the connection")),
                Ok(_) => Ok(line),
                Err(e) => Err(format!("{what}: no answer: {e}")),
            }
        })()
        .map_err(|e| went_away(&e, &self.socket));
        *self.last_sent.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let line = match result {
            Ok(l) => l,
            Err(e) => {
                // The next request reconnects (naming the session binds it again).
                *conn = None;
                return Err(e);
            }
        };
        let answer: Value =
            serde_json::from_str(&line).map_err(|e| format!("{what}: unreadable answer: {e}"))?;
        if answer["ok"] != true {
            return Err(format!("{what} refused: {}", answer["error"]));
        }
        Ok(answer)
    }

    pub(crate) fn start(&self, participant: &str) -> Result<Value, String> {
        let answer = self.ask(json!({"type": "start_session", "participant_id": participant}))?;
        *self.session_id.lock().unwrap_or_else(|p| p.into_inner()) =
            answer["session_id"].as_str().map(str::to_string);
        *self.token.lock().unwrap_or_else(|p| p.into_inner()) =
            answer["token"].as_str().map(str::to_string);
        Ok(answer)
    }

    /// Sends a heartbeat when nothing went out for [`HEARTBEAT`] (called from its thread).
    pub(crate) fn keep_alive(&self) {
        let idle = self
            .last_sent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed();
        if let (true, Some(id)) = (idle >= HEARTBEAT, self.session_id()) {
            if let Err(e) = self.ask(json!({"type": "heartbeat", "session_id": id})) {
                eprintln!("empathic-dialogue: heartbeat: {e}");
            }
        }
    }

    /// The session's clock now (milliseconds since its start), as the station counts it.
    pub(crate) fn now_ms(&self) -> Result<u64, String> {
        let status = self.ask(json!({"type": "status"}))?;
        status["session"]["t_ms"]
            .as_u64()
            .ok_or_else(|| "status: no session is running".to_string())
    }

    pub(crate) fn phase(&self, phase: &str) -> Result<(), String> {
        self.ask(json!({"type": "phase", "phase": phase})).map(drop)
    }

    /// The robot says `text`: printed, given the time it takes to say, then sent as the
    /// robot's utterance, stamped on the session clock from when it began to when it ended.
    pub(crate) fn say(&self, text: &str) -> Result<(), String> {
        let start = self.now_ms()?;
        println!("robot: {text}");
        let words = text.split_whitespace().count() as f64;
        std::thread::sleep(Duration::from_secs_f64((words / 2.5).max(0.5)));
        let end = self.now_ms()?.max(start + 1);
        self.ask(
            json!({"type": "utterance", "speaker": "robot", "start_ms": start,
                        "end_ms": end, "text": text}),
        )
        .map(drop)
    }

    /// Stops the session this app started (answered once the station may start another).
    pub(crate) fn stop(&self) -> Result<Value, String> {
        self.ask(json!({"type": "stop_session"}))
    }

    /// Stops the session before its end, saying why: the station stores it `incomplete`.
    pub(crate) fn stop_early(&self, why: &str) -> Result<Value, String> {
        self.ask(json!({"type": "stop_session", "cut_short": why}))
    }
}

/// A request's error in plain words when the station's service is gone (a broken pipe, a
/// reset or refused connection: it stopped, restarted or was upgraded), else as it was.
fn went_away(error: &str, socket: &std::path::Path) -> String {
    let gone = [
        "Broken pipe",
        "Connection reset",
        "Connection refused",
        "closed the connection",
    ];
    if gone.iter().any(|g| error.contains(g)) {
        format!(
            "the station went away ({error}): its service stopped or restarted (see `journalctl -u empathic`; socket {})",
            socket.display()
        )
    } else {
        error.to_string()
    }
}
