//! The listening side of the reference app: one connection subscribed to every topic the
//! robot acts on, read by its own thread into [`Perceived`], which wakes the robot
//! ([`Ears::wait_for`]) whenever a message arrives.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::Args;

/// What the subscription told the robot so far (filled by the listening thread).
#[derive(Default)]
pub(crate) struct Perceived {
    /// Messages per topic.
    pub(crate) counts: BTreeMap<String, u64>,
    /// The participant is speaking (by the last `voice` message).
    pub(crate) speaking: bool,
    /// When the last `voice` message came (this process's clock).
    pub(crate) voice_at: Option<Instant>,
    /// `voice`/`started` messages so far.
    pub(crate) starts: u64,
    /// The face is in view (by the last `found`/`lost`); unknown before the first.
    pub(crate) face: Option<bool>,
    /// Calibrated scores per story id, of the first predictor that is not synthetic (or
    /// the first one at all, when every predictor is synthetic).
    pub(crate) scores: BTreeMap<String, Vec<f64>>,
    pub(crate) predictor: Option<String>,
    /// The participant's utterances so far (from either transcript source).
    pub(crate) participant_utterances: u64,
    /// Messages the station dropped for this subscriber.
    pub(crate) dropped: u64,
    /// Per `voice` message, milliseconds: from the time it describes to sent (`t_ms -
    /// at_ms`), of which the rule's own wait (`decided_ms - at_ms`), the audio's way to
    /// the runtime (`handed_ms - decided_ms`: device, sound server, capture thread) and
    /// the runtime's own (`t_ms - handed_ms`).
    pub(crate) voice_latency: Vec<[u64; 4]>,
    /// Per `prediction` message: from the window's end to sent.
    pub(crate) prediction_latency: Vec<u64>,
    /// The session's `ended` message.
    pub(crate) ended: Option<Value>,
    /// The stream closed (the service went away).
    pub(crate) closed: bool,
}

impl Perceived {
    pub(crate) fn take(&mut self, m: &Value) {
        let topic = m["topic"].as_str().unwrap_or("?").to_string();
        *self.counts.entry(topic.clone()).or_default() += 1;
        let event = m["event"].as_str().unwrap_or("");
        match (topic.as_str(), event) {
            ("voice", e) => {
                let ms = |k: &str| m[k].as_u64();
                if let (Some(t), Some(at), Some(d), Some(h)) =
                    (ms("t_ms"), ms("at_ms"), ms("decided_ms"), ms("handed_ms"))
                {
                    let since = |later: u64, earlier: u64| later.saturating_sub(earlier);
                    self.voice_latency
                        .push([since(t, at), since(d, at), since(h, d), since(t, h)]);
                }
                self.speaking = e == "started";
                self.starts += u64::from(e == "started");
                self.voice_at = Some(Instant::now());
            }
            ("utterance", _) if m["speaker"] == "participant" => {
                self.participant_utterances += 1;
            }
            ("face", "found") => self.face = Some(true),
            ("face", "lost") => self.face = Some(false),
            ("prediction", _) => {
                if let (Some(t), Some(at)) = (m["t_ms"].as_u64(), m["at_ms"].as_u64()) {
                    self.prediction_latency.push(t.saturating_sub(at));
                }
                let list = m["predictions"].as_array().cloned().unwrap_or_default();
                if self.predictor.is_none() {
                    let real = list.iter().find(|p| p["synthetic"] == false);
                    self.predictor = real
                        .or(list.first())
                        .and_then(|p| p["predictor"].as_str())
                        .map(str::to_string);
                }
                for p in list {
                    // Only windows since the story was shown (`in_play: shown`): a story
                    // retrieved while the participant shared is predicted from windows
                    // before they read it, which say nothing of how it moved them.
                    if p["predictor"].as_str() != self.predictor.as_deref()
                        || p["in_play"] != "shown"
                    {
                        continue;
                    }
                    if let (Some(id), Some(score)) = (p["story_id"].as_str(), p["score"].as_f64()) {
                        self.scores.entry(id.to_string()).or_default().push(score);
                    }
                }
            }
            ("dropped", _) => self.dropped = m["total"].as_u64().unwrap_or(self.dropped),
            ("session", "ended") => self.ended = Some(m.clone()),
            _ => {}
        }
    }
}

/// The listening side: a thread reads the stream into [`Perceived`] and wakes the robot.
pub(crate) struct Ears {
    pub(crate) heard: Mutex<Perceived>,
    pub(crate) changed: Condvar,
}

impl Ears {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Perceived> {
        self.heard.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `done` holds or `limit` passes; true when it held.
    pub(crate) fn wait_for(&self, limit: Duration, done: impl Fn(&Perceived) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        let mut heard = self.lock();
        loop {
            if done(&heard) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || heard.closed {
                return false;
            }
            // Woken by every message; at most 50 ms apart so time-based conditions are seen.
            let step = (deadline - now).min(Duration::from_millis(50));
            heard = self
                .changed
                .wait_timeout(heard, step)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

pub(crate) fn subscribe(args: &Args) -> Result<Arc<Ears>, String> {
    let topics = [
        "session",
        "voice",
        "utterance",
        "face",
        "prediction",
        "quality",
    ];
    let mut stream = UnixStream::connect(&args.socket)
        .map_err(|e| format!("cannot connect to {}: {e}", args.socket.display()))?;
    writeln!(stream, "{}", json!({"type": "subscribe", "topics": topics}))
        .map_err(|e| format!("subscribe: {e}"))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("subscribe: {e}"))?;
    let answer: Value = serde_json::from_str(&line).map_err(|e| format!("subscribe: {e}"))?;
    if answer["ok"] != true {
        return Err(format!("subscribe refused: {}", answer["error"]));
    }
    let ears = Arc::new(Ears {
        heard: Mutex::new(Perceived::default()),
        changed: Condvar::new(),
    });
    let listening = ears.clone();
    std::thread::Builder::new()
        .name("subscription".into())
        .spawn(move || {
            for line in reader.lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(m) => listening.lock().take(&m),
                    Err(e) => eprintln!("an unreadable stream line ({e}) was skipped"),
                }
                listening.changed.notify_all();
            }
            listening.lock().closed = true;
            listening.changed.notify_all();
        })
        .map_err(|e| format!("cannot start the listening thread: {e}"))?;
    Ok(ears)
}
