//! `events.jsonl`: what happened during a session, one JSON object a line (docs/formats.md).
//!
//! Contract: every line is an object with `t_ms` (milliseconds from session start, a
//! non-negative integer) and `type`, one of `phase`, `utterance`, `story_shown`, `rating`,
//! `survey`, `note`, `recommendation`, with that type's fields and no others. Blank lines are skipped. The
//! first malformed line stops parsing with an error that names the file and the 1-based line
//! number. Events are returned sorted by time (stable: equal times keep file order).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::SessionError;
use crate::core::{Phase, TranscriptSource};
use crate::Nanos;

/// When a survey was answered in the longitudinal study.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimePoint {
    PreStudy,
    MidStudy,
    PostStudy,
}

impl TimePoint {
    pub fn as_str(self) -> &'static str {
        match self {
            TimePoint::PreStudy => "pre_study",
            TimePoint::MidStudy => "mid_study",
            TimePoint::PostStudy => "post_study",
        }
    }
}

/// The payload of one event line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventKind {
    /// The session entered `phase`; it lasts until the next phase event or the session end.
    Phase { phase: Phase },
    /// A transcript utterance (`start_ms`..`end_ms` on the session timeline). `source`,
    /// `model` and `confidence` are absent for the dialogue app's transcripts; the station's
    /// own recogniser writes `source: "asr"`, its model's id and the mean token
    /// log-probability.
    Utterance {
        speaker: String,
        start_ms: u64,
        end_ms: u64,
        text: String,
        #[serde(default, skip_serializing_if = "TranscriptSource::is_dialogue_app")]
        source: TranscriptSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confidence: Option<f32>,
    },
    /// The robot showed a retrieved story.
    StoryShown {
        story_id: String,
        title: String,
        text: String,
    },
    /// The participant's empathy toward a shown story, 1-5.
    Rating { story_id: String, value: u8 },
    /// One survey item answered in this session.
    Survey {
        instrument: String,
        item: String,
        value: f64,
        time_point: TimePoint,
    },
    /// A free note from study staff or the robot.
    Note { text: String },
    /// Stories the station recommended (`recommend` on the control socket), in rank order,
    /// with the policy and calibration behind them; written by the station only.
    Recommendation {
        policy: String,
        story_ids: Vec<String>,
        calibration: String,
    },
}

impl EventKind {
    /// The `type` name used in files and in the database.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventKind::Phase { .. } => "phase",
            EventKind::Utterance { .. } => "utterance",
            EventKind::StoryShown { .. } => "story_shown",
            EventKind::Rating { .. } => "rating",
            EventKind::Survey { .. } => "survey",
            EventKind::Note { .. } => "note",
            EventKind::Recommendation { .. } => "recommendation",
        }
    }
}

/// One event with its time and the file line it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub t_ns: Nanos,
    /// 1-based line in `events.jsonl`, kept so later checks can name it.
    pub line: usize,
    pub kind: EventKind,
}

/// Parses `events.jsonl` text. `path` is only used in error messages.
pub fn parse_events(text: &str, path: &Path) -> Result<Vec<Event>, SessionError> {
    parse_events_skipping(text, path, false).map(|(events, _)| events)
}

/// A line of `events.jsonl` left out (`replay --skip-bad-events`): its number and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SkippedLine {
    pub line: usize,
    pub reason: String,
}

/// [`parse_events`]; with `skip_bad`, a line that does not parse or check is left out and
/// returned with its reason instead of refusing the file (the cross-references of what is
/// kept are still checked).
pub fn parse_events_skipping(
    text: &str,
    path: &Path,
    skip_bad: bool,
) -> Result<(Vec<Event>, Vec<SkippedLine>), SessionError> {
    let mut events = Vec::new();
    let mut skipped = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        match parse_line(raw, line, path) {
            Ok(event) => events.push(event),
            Err(SessionError::Events { message, .. }) if skip_bad => {
                skipped.push(SkippedLine {
                    line,
                    reason: message,
                });
            }
            Err(e) => return Err(e),
        }
    }
    check_cross_references(&events, path)?;
    events.sort_by_key(|e| e.t_ns);
    Ok((events, skipped))
}

/// One line of `events.jsonl`.
fn parse_line(raw: &str, line: usize, path: &Path) -> Result<Event, SessionError> {
    {
        let err = |message: String| SessionError::Events {
            path: path.to_path_buf(),
            line,
            message,
        };
        let value: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| err(format!("not valid JSON: {e}")))?;
        let serde_json::Value::Object(mut map) = value else {
            return Err(err("expected a JSON object".into()));
        };
        let t_ms = match map.remove("t_ms") {
            Some(v) => v.as_u64().ok_or_else(|| {
                err(format!(
                    "`t_ms` must be a whole number of milliseconds >= 0, got {v}"
                ))
            })?,
            None => return Err(err("missing `t_ms`".into())),
        };
        if t_ms > super::MAX_SESSION_MS {
            return Err(err(format!(
                "`t_ms` {t_ms} is past any session's length (at most {} ms, 24 h)",
                super::MAX_SESSION_MS
            )));
        }
        let kind: EventKind = serde_json::from_value(serde_json::Value::Object(map))
            .map_err(|e| err(e.to_string()))?;
        check_kind(&kind).map_err(err)?;
        Ok(Event {
            t_ns: t_ms.saturating_mul(1_000_000),
            line,
            kind,
        })
    }
}

/// Reads and parses `events.jsonl` from a file.
pub fn read_events(path: &Path) -> Result<Vec<Event>, SessionError> {
    read_events_skipping(path, false).map(|(events, _)| events)
}

/// [`read_events`], leaving bad lines out with `skip_bad` ([`parse_events_skipping`]).
pub fn read_events_skipping(
    path: &Path,
    skip_bad: bool,
) -> Result<(Vec<Event>, Vec<SkippedLine>), SessionError> {
    let bytes = super::read_bounded(path, "events.jsonl", super::MAX_EVENTS_BYTES)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes[..valid].iter().filter(|b| **b == b'\n').count();
        let column = valid
            - bytes[..valid]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
        SessionError::Events {
            path: path.to_path_buf(),
            line,
            message: format!("not valid UTF-8 at byte {} of the line", column + 1),
        }
    })?;
    parse_events_skipping(&text, path, skip_bad)
}

fn check_kind(kind: &EventKind) -> Result<(), String> {
    match kind {
        EventKind::Utterance {
            speaker,
            start_ms,
            end_ms,
            confidence,
            ..
        } => {
            if confidence.is_some_and(|c| !c.is_finite()) {
                return Err("utterance `confidence` must be a finite number".into());
            }
            if speaker.trim().is_empty() {
                return Err("utterance `speaker` must not be empty".into());
            }
            if *end_ms > super::MAX_SESSION_MS {
                return Err(format!(
                    "utterance `end_ms` {end_ms} is past any session's length (at most {} ms, 24 h)",
                    super::MAX_SESSION_MS
                ));
            }
            if end_ms < start_ms {
                return Err(format!(
                    "utterance ends before it starts ({end_ms} < {start_ms})"
                ));
            }
        }
        EventKind::StoryShown { story_id, .. } | EventKind::Rating { story_id, .. }
            if story_id.trim().is_empty() =>
        {
            return Err("`story_id` must not be empty".into());
        }
        EventKind::Rating { value, .. } if !(1..=5).contains(value) => {
            return Err(format!("rating `value` must be 1-5, got {value}"));
        }
        EventKind::Survey { value, .. } if !value.is_finite() => {
            return Err("survey `value` must be a finite number".into());
        }
        _ => {}
    }
    Ok(())
}

/// Ratings must refer to a story shown in the session, once each.
fn check_cross_references(events: &[Event], path: &Path) -> Result<(), SessionError> {
    let err = |line: usize, message: String| SessionError::Events {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut shown: Vec<(&str, usize)> = Vec::new();
    let mut rated: Vec<(&str, usize)> = Vec::new();
    // Phases in time order go forward, as the live control socket requires (one rule for
    // both sources: a replay must not store what a live session could not).
    let mut by_time: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Phase { .. }))
        .collect();
    by_time.sort_by_key(|e| (e.t_ns, e.line));
    for pair in by_time.windows(2) {
        if let (EventKind::Phase { phase: a }, EventKind::Phase { phase: b }) =
            (&pair[0].kind, &pair[1].kind)
        {
            if b <= a {
                return Err(err(
                    pair[1].line,
                    format!(
                        "phase out of order: `{}` after `{}` (line {}); phases go warm_up, story_share, story_receive, reflection, cool_down",
                        b.as_str(),
                        a.as_str(),
                        pair[0].line
                    ),
                ));
            }
        }
    }
    for e in events {
        match &e.kind {
            EventKind::StoryShown { story_id, .. } => {
                if let Some((_, first)) = shown.iter().find(|(id, _)| id == story_id) {
                    return Err(err(
                        e.line,
                        format!("story `{story_id}` already shown on line {first}"),
                    ));
                }
                shown.push((story_id, e.line));
            }
            EventKind::Rating { story_id, .. } => {
                if let Some((_, first)) = rated.iter().find(|(id, _)| id == story_id) {
                    return Err(err(
                        e.line,
                        format!("story `{story_id}` already rated on line {first}"),
                    ));
                }
                rated.push((story_id, e.line));
            }
            _ => {}
        }
    }
    for (story_id, line) in rated {
        if !shown.iter().any(|(id, _)| *id == story_id) {
            return Err(err(
                line,
                format!("rating for story `{story_id}`, which no `story_shown` event shows"),
            ));
        }
    }
    // A story is rated after it is shown.
    let time_of = |line: usize| events.iter().find(|e| e.line == line).map(|e| e.t_ns);
    for e in events {
        if let EventKind::Rating { story_id, .. } = &e.kind {
            if let Some((_, shown_line)) = shown.iter().find(|(id, _)| id == story_id) {
                if let Some(shown_ns) = time_of(*shown_line).filter(|t| *t > e.t_ns) {
                    return Err(err(
                        e.line,
                        format!(
                            "rating for story `{story_id}` at {} ms, before the story was shown at {} ms (line {shown_line})",
                            e.t_ns / 1_000_000,
                            shown_ns / 1_000_000
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Checks what the events need from `session.json`: survey responses are stored per
/// participant, so a session with a survey needs a `participant_id`.
pub fn check_against_manifest(
    events: &[Event],
    participant_id: Option<&str>,
    path: &Path,
) -> Result<(), SessionError> {
    if participant_id.is_some() {
        return Ok(());
    }
    match events
        .iter()
        .find(|e| matches!(e.kind, EventKind::Survey { .. }))
    {
        Some(e) => Err(SessionError::Events {
            path: path.to_path_buf(),
            line: e.line,
            message: "a survey response needs a participant_id in session.json".into(),
        }),
        None => Ok(()),
    }
}

/// A phase with its time range; `end_ns` is the next phase's start or the session end.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSpan {
    pub phase: Phase,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
}

/// The phase spans of a session of `duration_ns`, from its (time-sorted) events.
pub fn phase_spans(events: &[Event], duration_ns: Nanos) -> Vec<PhaseSpan> {
    let starts: Vec<(Phase, Nanos)> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Phase { phase } => Some((phase, e.t_ns)),
            _ => None,
        })
        .collect();
    // A phase that starts after the session's end (an interrupted replay reads every event
    // first) did not happen in it; one that runs past the end ends there.
    starts
        .iter()
        .enumerate()
        .filter(|&(_, &(_, start_ns))| start_ns < duration_ns)
        .map(|(i, &(phase, start_ns))| {
            let end_ns = starts
                .get(i + 1)
                .map_or(duration_ns.max(start_ns), |&(_, next)| {
                    next.min(duration_ns.max(start_ns))
                });
            PhaseSpan {
                phase,
                start_ns,
                end_ns,
            }
        })
        .collect()
}

/// The phase in force at `t_ns`, if any.
pub fn phase_at(spans: &[PhaseSpan], t_ns: Nanos) -> Option<Phase> {
    spans
        .iter()
        .rev()
        .find(|s| s.start_ns <= t_ns)
        .map(|s| s.phase)
}

/// The path of the events file in a session folder.
pub fn events_path(dir: &Path) -> PathBuf {
    dir.join("events.jsonl")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Event>, SessionError> {
        parse_events(text, Path::new("events.jsonl"))
    }

    #[test]
    fn every_type_parses_and_sorts_by_time() {
        let text = r#"
{"t_ms": 5000, "type": "story_shown", "story_id": "s1", "title": "T", "text": "x"}
{"t_ms": 0, "type": "phase", "phase": "warm_up"}
{"t_ms": 100, "type": "utterance", "speaker": "participant", "start_ms": 100, "end_ms": 900, "text": "hi"}
{"t_ms": 6000, "type": "rating", "story_id": "s1", "value": 4}
{"t_ms": 7000, "type": "survey", "instrument": "big_five", "item": "E1", "value": 3.5, "time_point": "pre_study"}
{"t_ms": 8000, "type": "note", "text": "dog barked"}
"#;
        let events = parse(text).unwrap();
        assert_eq!(events.len(), 6);
        assert_eq!(
            events[0].kind,
            EventKind::Phase {
                phase: Phase::WarmUp
            }
        );
        assert_eq!(events[0].line, 3);
        assert!(events.windows(2).all(|w| w[0].t_ns <= w[1].t_ns));
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let text = "{\"t_ms\": 0, \"type\": \"phase\", \"phase\": \"warm_up\"}\n{\"t_ms\": 5, \"type\": \"phase\", \"phase\": \"nap\"}\n";
        let msg = parse(text).unwrap_err().to_string();
        assert!(msg.contains("events.jsonl"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn broken_json_unknown_field_and_bad_rating_are_rejected() {
        for (text, needle) in [
            ("{\"t_ms\": 0, \"type\": \"note\"", "not valid JSON"),
            ("{\"t_ms\": 0, \"type\": \"note\", \"text\": \"a\", \"x\": 1}", "unknown field"),
            ("{\"t_ms\": -4, \"type\": \"note\", \"text\": \"a\"}", "t_ms"),
            ("{\"type\": \"note\", \"text\": \"a\"}", "missing `t_ms`"),
            ("[1,2]", "JSON object"),
            (
                "{\"t_ms\": 0, \"type\": \"story_shown\", \"story_id\": \"s\", \"title\": \"t\", \"text\": \"x\"}\n{\"t_ms\": 1, \"type\": \"rating\", \"story_id\": \"s\", \"value\": 6}",
                "1-5",
            ),
            ("{\"t_ms\": 1, \"type\": \"rating\", \"story_id\": \"zz\", \"value\": 3}", "no `story_shown`"),
            (
                "{\"t_ms\": 0, \"type\": \"utterance\", \"speaker\": \"p\", \"start_ms\": 9, \"end_ms\": 2, \"text\": \"x\"}",
                "ends before",
            ),
        ] {
            let msg = parse(text).unwrap_err().to_string();
            assert!(msg.contains(needle), "{text}: {msg}");
            assert!(msg.contains("line"), "{msg}");
        }
    }

    #[test]
    fn phase_spans_end_at_next_phase_or_session_end() {
        let text = "{\"t_ms\": 0, \"type\": \"phase\", \"phase\": \"warm_up\"}\n{\"t_ms\": 2000, \"type\": \"phase\", \"phase\": \"story_share\"}\n";
        let events = parse(text).unwrap();
        let spans = phase_spans(&events, 5_000_000_000);
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].end_ns, 2_000_000_000);
        assert_eq!(spans[1].end_ns, 5_000_000_000);
        assert_eq!(phase_at(&spans, 1_999_999_999), Some(Phase::WarmUp));
        assert_eq!(phase_at(&spans, 2_000_000_000), Some(Phase::StoryShare));
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            // Untrusted input: any line must give events or an error naming a line, never a panic.
            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
                if let Err(e) = parse(&text) {
                    prop_assert!(e.to_string().contains("line"));
                }
            }

            #[test]
            fn arbitrary_json_objects_never_panic(
                t in proptest::option::of(any::<i64>()),
                ty in "[a-z_]{0,12}",
                v in any::<i32>(),
            ) {
                let mut obj = serde_json::Map::new();
                if let Some(t) = t { obj.insert("t_ms".into(), t.into()); }
                obj.insert("type".into(), ty.into());
                obj.insert("value".into(), v.into());
                let _ = parse(&serde_json::Value::Object(obj).to_string());
            }
        }
    }
}
