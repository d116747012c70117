//! The control protocol the robot's dialogue app speaks over the service's Unix socket.
//!
//! Contract: one JSON object per line each way. A request is an `events.jsonl` event
//! without `t_ms` (`phase`, `utterance`, `story_shown`, `rating`, `survey`, `note`: the
//! service stamps it on arrival; an utterance keeps its own `start_ms`/`end_ms` on the
//! session timeline and is placed at its start), or `start_session {participant_id,
//! session_id?, lease_s?}`, `stop_session`, `heartbeat {session_id}`, `status`. Events,
//! `stop_session` and `heartbeat` may name their session (`session_id`): one naming a
//! session that is not the running one is refused. Every request gets one answer:
//! `{"ok":true, ...}` or `{"ok":false,"error":"<reason>"}`. [`SessionRules`] is the
//! session's state as far as the protocol cares, and refuses what would make a session
//! inconsistent: a phase out of order, a story shown twice, a rating outside 1-5 or for a
//! story not shown, a second rating of a story, an utterance ending in the future. `subscribe {topics}` turns
//! the connection into a stream of JSON lines, one message each, every one with `topic`
//! (a [`Topic`]), `t_ms` (session time when sent) and `at_ms` (the session time it
//! describes). [`request`] is the client
//! side (`empathic ctl`, `status`, a purge asking whether a session runs), built in every
//! configuration, the collector's too.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::session::EventKind;

use crate::core::Phase;
use crate::Nanos;

/// A request, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    StartSession {
        participant_id: String,
        session_id: Option<String>,
        /// A one-shot client's lease (seconds): the session is kept while requests naming
        /// it come at most this far apart. `None`: bound to this connection.
        lease_s: Option<u64>,
    },
    StopSession {
        session_id: Option<String>,
        /// Why the app ends the session before its end (a signal, the participant left):
        /// stored `incomplete` with it. `None`: the session ended as planned.
        cut_short: Option<String>,
    },
    /// Keeps a session alive (a lease renewed; on a connection, a connection not idle).
    Heartbeat {
        session_id: String,
    },
    Status,
    /// Turns the connection into a stream of the topics' messages (no more requests).
    Subscribe {
        topics: Vec<Topic>,
    },
    /// `k` stories for the session's participant, never shown to them, by `policy`, for
    /// `text` (default: what they shared in this session's story share).
    Recommend {
        k: usize,
        text: Option<String>,
        policy: crate::core::Policy,
    },
    Event {
        kind: EventKind,
        /// The session the event is for; refused when that session is not the running one.
        session_id: Option<String>,
    },
}

impl Request {
    /// The session a request names (`session_id`), when it names one.
    pub fn names_session(&self) -> Option<&str> {
        match self {
            Request::StopSession { session_id, .. } | Request::Event { session_id, .. } => {
                session_id.as_deref()
            }
            Request::Heartbeat { session_id } => Some(session_id),
            _ => None,
        }
    }
}

/// What a subscriber can ask to hear (`subscribe`); every streamed message names one in
/// its `topic` field (the perception stream, specified with its version in docs/formats.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Topic {
    /// The participant started or stopped speaking (the learned voice activity).
    Voice,
    /// An utterance as stored (the dialogue app's or the station recogniser's).
    Utterance,
    /// Face found or lost, looking toward the camera or not, a summary every second.
    Face,
    /// Each window's predictions toward the stories in play.
    Prediction,
    /// Camera or microphone lost and back, frames dropped.
    Quality,
    /// Session start, phase changes, stop.
    Session,
}

impl Topic {
    pub const ALL: [Topic; 6] = [
        Topic::Voice,
        Topic::Utterance,
        Topic::Face,
        Topic::Prediction,
        Topic::Quality,
        Topic::Session,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Topic::Voice => "voice",
            Topic::Utterance => "utterance",
            Topic::Face => "face",
            Topic::Prediction => "prediction",
            Topic::Quality => "quality",
            Topic::Session => "session",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Topic::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartFields {
    participant_id: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    lease_s: Option<u64>,
}

/// Parses one request line. The error is the reason sent back.
/// The session token a request line carries (`"token"`, from `start_session`'s answer): what
/// lets a client other than the one the session is bound to act on it.
pub fn token_of(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    v.get("token")?.as_str().map(str::to_string)
}

pub fn parse_request(line: &str) -> Result<Request, String> {
    let mut value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| format!("not valid JSON: {e}"))?;
    let serde_json::Value::Object(map) = &mut value else {
        return Err("expected a JSON object".into());
    };
    let kind = map
        .get("type")
        .and_then(|t| t.as_str())
        .ok_or("missing `type`")?
        .to_string();
    if map.contains_key("t_ms") {
        return Err("`t_ms` is set by the service on arrival; leave it out".into());
    }
    // The session's token is the caller's proof, not part of any request (`token_of`).
    map.remove("token");
    match kind.as_str() {
        "start_session" => {
            map.remove("type");
            let f: StartFields =
                serde_json::from_value(value).map_err(|e| format!("start_session: {e}"))?;
            crate::session::manifest::check_id("participant_id", &f.participant_id)?;
            if let Some(id) = &f.session_id {
                crate::session::manifest::check_id("session_id", id)?;
            }
            if f.lease_s == Some(0) {
                return Err("start_session: `lease_s` must be at least 1".into());
            }
            Ok(Request::StartSession {
                participant_id: f.participant_id,
                session_id: f.session_id,
                lease_s: f.lease_s,
            })
        }
        "recommend" => {
            #[derive(Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Fields {
                #[serde(default = "three")]
                k: usize,
                #[serde(default)]
                text: Option<String>,
                #[serde(default = "similarity")]
                policy: crate::core::Policy,
            }
            fn three() -> usize {
                3
            }
            fn similarity() -> crate::core::Policy {
                crate::core::Policy::Similarity
            }
            map.remove("type");
            let f: Fields = serde_json::from_value(value).map_err(|e| format!("recommend: {e}"))?;
            if !(1..=50).contains(&f.k) {
                return Err(format!("recommend: `k` must be 1-50, got {}", f.k));
            }
            Ok(Request::Recommend {
                k: f.k,
                text: f.text,
                policy: f.policy,
            })
        }
        "subscribe" => {
            let topics = map
                .get("topics")
                .and_then(|t| t.as_array())
                .ok_or("subscribe: `topics` must be a list of topic names")?;
            if map.len() > 2 {
                return Err("subscribe takes only `topics`".into());
            }
            let known = || {
                Topic::ALL
                    .iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut out = Vec::new();
            for t in topics {
                let name = t.as_str().unwrap_or_default();
                let topic = Topic::parse(name)
                    .ok_or_else(|| format!("subscribe: unknown topic {t} (known: {})", known()))?;
                if !out.contains(&topic) {
                    out.push(topic);
                }
            }
            if out.is_empty() {
                return Err(format!("subscribe: name at least one topic ({})", known()));
            }
            Ok(Request::Subscribe { topics: out })
        }
        "status" => {
            if map.len() > 1 {
                return Err("`status` takes no fields".into());
            }
            Ok(Request::Status)
        }
        _ => {
            // Requests about the running session may name it.
            let session_id = match map.remove("session_id") {
                None => None,
                Some(serde_json::Value::String(id)) => {
                    crate::session::manifest::check_id("session_id", &id)?;
                    Some(id)
                }
                Some(other) => return Err(format!("`session_id` must be a string, got {other}")),
            };
            match kind.as_str() {
                "stop_session" => {
                    let cut_short = match map.remove("cut_short") {
                        None => None,
                        Some(serde_json::Value::String(why)) if !why.trim().is_empty() => {
                            Some(why.chars().filter(|c| !c.is_control()).take(200).collect())
                        }
                        Some(other) => {
                            return Err(format!(
                                "`cut_short` must be a non-empty string (why the session ends early), got {other}"
                            ))
                        }
                    };
                    if map.len() > 1 {
                        return Err("`stop_session` takes only `session_id` and `cut_short`".into());
                    }
                    Ok(Request::StopSession {
                        session_id,
                        cut_short,
                    })
                }
                "heartbeat" => {
                    if map.len() > 1 {
                        return Err(format!("`{kind}` takes only `session_id`"));
                    }
                    let session_id =
                        session_id.ok_or("heartbeat: name the session (`session_id`)")?;
                    Ok(Request::Heartbeat { session_id })
                }
                _ => serde_json::from_value::<EventKind>(value)
                    .map(|kind| Request::Event { kind, session_id })
                    .map_err(|e| format!("{kind}: {e}")),
            }
        }
    }
}

/// What the protocol knows of the running session.
#[derive(Debug, Clone, Default)]
pub struct SessionRules {
    phase: Option<Phase>,
    shown: Vec<String>,
    rated: Vec<String>,
}

impl SessionRules {
    /// Checks an event arriving at `now_ns` (session time) and returns its stamp, or why it
    /// is refused. Accepted events update the state.
    pub fn accept(&mut self, kind: &EventKind, now_ns: Nanos) -> Result<Nanos, String> {
        let now_ms = now_ns / 1_000_000;
        match kind {
            EventKind::Phase { phase } => {
                if let Some(current) = self.phase {
                    if *phase <= current {
                        return Err(format!(
                            "phase out of order: `{}` after `{}` (phases go warm_up, story_share, story_receive, reflection, cool_down)",
                            phase.as_str(),
                            current.as_str()
                        ));
                    }
                }
                self.phase = Some(*phase);
                Ok(now_ms * 1_000_000)
            }
            EventKind::Utterance {
                start_ms,
                end_ms,
                text,
                source,
                ..
            } => {
                if *source == crate::core::TranscriptSource::Asr {
                    return Err("utterance `source` `asr` names the station's own recogniser; a dialogue app's utterances carry no `source`".into());
                }
                if start_ms > end_ms {
                    return Err(format!(
                        "utterance ends ({end_ms} ms) before it starts ({start_ms} ms)"
                    ));
                }
                if *end_ms > now_ms + 1_000 {
                    return Err(format!(
                        "utterance ends at {end_ms} ms, in the future (session time is {now_ms} ms)"
                    ));
                }
                if text.trim().is_empty() {
                    return Err("utterance has no text".into());
                }
                Ok(start_ms * 1_000_000)
            }
            EventKind::StoryShown { story_id, .. } => {
                // A second exposure of one story in one session is refused on arrival (a
                // retried request): stored, it broke the session's exposures at its end.
                if self.shown.contains(story_id) {
                    return Err(format!(
                        "story `{story_id}` was already shown in this session (the first `story_shown` is kept; a retry is not needed)"
                    ));
                }
                self.shown.push(story_id.clone());
                Ok(now_ms * 1_000_000)
            }
            EventKind::Rating { story_id, value } => {
                if !(1..=5).contains(value) {
                    return Err(format!("rating {value} is outside 1-5"));
                }
                if !self.shown.contains(story_id) {
                    return Err(format!(
                        "rating for story `{story_id}`, which was not shown in this session"
                    ));
                }
                if self.rated.contains(story_id) {
                    return Err(format!(
                        "story `{story_id}` is already rated in this session"
                    ));
                }
                self.rated.push(story_id.clone());
                Ok(now_ms * 1_000_000)
            }
            EventKind::Survey { value, .. } => {
                if !value.is_finite() {
                    return Err("survey value must be a finite number".into());
                }
                Ok(now_ms * 1_000_000)
            }
            EventKind::Note { .. } => Ok(now_ms * 1_000_000),
            EventKind::Recommendation { .. } => Err(
                "`recommendation` events are the station's own record of `recommend`; ask with {\"type\":\"recommend\"}".into(),
            ),
        }
    }

    pub fn phase(&self) -> Option<Phase> {
        self.phase
    }
}

/// Sends one request to a running service and returns its answer line.
pub fn request(socket: &Path, request: &serde_json::Value) -> Result<serde_json::Value, String> {
    exchange(socket, request).map(|(answer, _)| answer)
}

/// [`request`], keeping the connection: the answer and the reader positioned after it,
/// with no read timeout (a `subscribe` answer turns the connection into a stream).
pub fn request_stream(
    socket: &Path,
    request: &serde_json::Value,
) -> Result<(serde_json::Value, BufReader<UnixStream>), String> {
    let (answer, reader) = exchange(socket, request)?;
    let _ = reader.get_ref().set_read_timeout(None);
    Ok((answer, reader))
}

/// What to do about a socket that refused this user, from its group and mode (a trial's
/// hint named `empathic-ctl` for a socket of group root, mode 600, where no group helps).
fn refused_hint(socket: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(socket) {
        Ok(m) if m.mode() & 0o060 == 0o060 => format!(
            "this user may not use the socket: add it to the socket's group (gid {}; `empathic-ctl` on a packaged station, docs/station.md, \"The control group\") and log in again",
            m.gid()
        ),
        Ok(m) => format!(
            "the socket's mode {:o} lets no group in: set `[live] socket_group` and `socket_mode = \"660\"` on the station (docs/station.md, \"The control group\"), or run as the service's user",
            m.mode() & 0o777
        ),
        Err(_) => "this user may not reach the socket's folder".to_string(),
    }
}

/// Connects, sends `request` as one line and reads the answer line.
fn exchange(
    socket: &Path,
    request: &serde_json::Value,
) -> Result<(serde_json::Value, BufReader<UnixStream>), String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        // The likely cause, by what the system said: a user outside the socket's group is
        // refused while the service runs (a trial's app was told to check the service).
        let hint = match e.kind() {
            std::io::ErrorKind::PermissionDenied => refused_hint(socket),
            _ => "is `empathic run` running?".to_string(),
        };
        format!(
            "cannot reach the empathic service at {}: {e} ({hint})",
            socket.display()
        )
    })?;
    // `stop_session` answers once the session is stored (the service waits up to 120 s).
    let _ = stream.set_read_timeout(Some(Duration::from_secs(150)));
    writeln!(stream, "{request}")
        .map_err(|e| format!("cannot send to {}: {e}", socket.display()))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("no answer from {}: {e}", socket.display()))?;
    if line.is_empty() {
        return Err(format!(
            "no answer from {}: the service closed the connection",
            socket.display()
        ));
    }
    let answer = serde_json::from_str(&line)
        .map_err(|e| format!("bad answer from {}: {e}", socket.display()))?;
    Ok((answer, reader))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse_request(r#"{"type":"start_session","participant_id":"P01"}"#).unwrap(),
            Request::StartSession {
                participant_id: "P01".into(),
                session_id: None,
                lease_s: None,
            }
        );
        assert_eq!(
            parse_request(r#"{"type":"stop_session"}"#).unwrap(),
            Request::StopSession {
                session_id: None,
                cut_short: None
            }
        );
        assert_eq!(
            parse_request(r#"{"type":"stop_session","session_id":"s-1"}"#).unwrap(),
            Request::StopSession {
                session_id: Some("s-1".into()),
                cut_short: None
            }
        );
        assert_eq!(
            parse_request(r#"{"type":"stop_session","cut_short":"the app got SIGTERM"}"#).unwrap(),
            Request::StopSession {
                session_id: None,
                cut_short: Some("the app got SIGTERM".into())
            }
        );
        assert!(parse_request(r#"{"type":"stop_session","cut_short":""}"#)
            .unwrap_err()
            .contains("cut_short"));
        assert!(matches!(
            parse_request(r#"{"type":"phase","phase":"warm_up"}"#).unwrap(),
            Request::Event {
                kind: EventKind::Phase {
                    phase: Phase::WarmUp
                },
                session_id: None
            }
        ));
        let r = parse_request(r#"{"type":"rating","story_id":"s","value":4,"session_id":"a"}"#);
        assert_eq!(r.unwrap().names_session(), Some("a"));
        let e = parse_request(r#"{"type":"heartbeat"}"#).unwrap_err();
        assert!(e.contains("session_id"), "{e}");
        let e = parse_request(r#"{"type":"stop_session","session_id":7}"#).unwrap_err();
        assert!(e.contains("session_id"), "{e}");
        for line in [
            r#"{"type":"start_session","participant_id":"P","session_id":".."}"#,
            r#"{"type":"start_session","participant_id":"."}"#,
            r#"{"type":"stop_session","session_id":".."}"#,
        ] {
            let e = parse_request(line).unwrap_err();
            assert!(e.contains("only dots"), "{line}: {e}");
        }
        let e = parse_request(r#"{"type":"start_session","participant_id":"P","lease_s":0}"#)
            .unwrap_err();
        assert!(e.contains("lease_s"), "{e}");
        let e = parse_request(r#"{"type":"phase","phase":"warm_up","t_ms":5}"#).unwrap_err();
        assert!(e.contains("t_ms"), "{e}");
        let e = parse_request(r#"{"type":"rating","story_id":"s","value":"x"}"#).unwrap_err();
        assert!(e.starts_with("rating:"), "{e}");
        let e = parse_request(r#"{"type":"dance"}"#).unwrap_err();
        assert!(e.contains("dance"), "{e}");
        assert!(parse_request("nope").unwrap_err().contains("JSON"));
    }

    #[test]
    fn rules_refuse_what_would_make_a_session_inconsistent() {
        let mut r = SessionRules::default();
        let ms = 1_000_000;
        assert!(r
            .accept(
                &EventKind::Phase {
                    phase: Phase::StoryShare
                },
                5 * ms
            )
            .is_ok());
        let e = r
            .accept(
                &EventKind::Phase {
                    phase: Phase::WarmUp,
                },
                6 * ms,
            )
            .unwrap_err();
        assert!(e.contains("out of order"), "{e}");
        let rating = |v| EventKind::Rating {
            story_id: "s1".into(),
            value: v,
        };
        assert!(r
            .accept(&rating(4), 7 * ms)
            .unwrap_err()
            .contains("not shown"));
        r.accept(
            &EventKind::StoryShown {
                story_id: "s1".into(),
                title: "t".into(),
                text: "x".into(),
            },
            8 * ms,
        )
        .unwrap();
        let again = r
            .accept(
                &EventKind::StoryShown {
                    story_id: "s1".into(),
                    title: "t".into(),
                    text: "x".into(),
                },
                8 * ms,
            )
            .unwrap_err();
        assert!(again.contains("already shown"), "{again}");
        assert!(r.accept(&rating(6), 9 * ms).unwrap_err().contains("1-5"));
        assert_eq!(r.accept(&rating(4), 9 * ms).unwrap(), 9 * ms);
        assert!(r
            .accept(&rating(3), 10 * ms)
            .unwrap_err()
            .contains("already rated"));
        let u = EventKind::Utterance {
            speaker: "participant".into(),
            start_ms: 2,
            end_ms: 90_000,
            text: "hi".into(),
            source: Default::default(),
            model: None,
            confidence: None,
        };
        assert!(r.accept(&u, 10 * ms).unwrap_err().contains("future"));
    }
}
