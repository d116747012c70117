//! What the log keeps of refused control requests: their kind and size, never their words,
//! and at most a burst per window ([`RefusalLog`]). The client's answer carries the full
//! reason; the journal never holds a participant's words.

use std::time::Duration;

/// What the log says of a request: its kind (a known request type, else `unknown`) and
/// its size, never its content (a participant's words, a 250 kB topic name).
pub(super) fn request_summary(line: &str) -> String {
    // A line of megabytes is not parsed again just to name its kind.
    if line.len() > 64 * 1024 {
        return format!("request, {} bytes", line.len());
    }
    let kind = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_string))
        .filter(|t| REQUEST_TYPES.contains(&t.as_str()))
        .unwrap_or_else(|| "unknown".into());
    format!("{kind} request, {} bytes", line.len())
}

/// The request types the control protocol has (what a log line may name).
const REQUEST_TYPES: [&str; 13] = [
    "status",
    "start_session",
    "stop_session",
    "heartbeat",
    "subscribe",
    "recommend",
    "phase",
    "utterance",
    "story_shown",
    "rating",
    "survey",
    "note",
    "recommendation",
];

/// A refusal's reason as the log may keep it: whatever it quotes (serde quotes the
/// offending text: a field's words, an unknown topic's name) replaced by its length, and
/// the whole cut to 300 characters. The client's answer carries the full reason.
pub(super) fn loggable_reason(reason: &str) -> String {
    let mut out = String::new();
    let mut quoted: Option<(char, usize)> = None;
    for c in reason.chars() {
        match quoted {
            Some((q, n)) if c == q => {
                out.push_str(&format!("{n} chars{q}"));
                quoted = None;
            }
            Some((q, n)) => quoted = Some((q, n + 1)),
            None => {
                out.push(c);
                if c == '`' || c == '"' {
                    quoted = Some((c, 0));
                }
            }
        }
    }
    if let Some((q, n)) = quoted {
        out.push_str(&format!("{n} chars{q}"));
    }
    crate::sync::health::printable(&out, 300)
}

/// Refusals logged at most [`RefusalLog::BURST`] per [`RefusalLog::WINDOW`]; the rest are
/// counted and told in one line when the window ends (a client looping on a bad request
/// once grew the log by 49 MB in half a second).
#[derive(Default)]
pub(super) struct RefusalLog {
    window: std::sync::Mutex<(Option<std::time::Instant>, u64, u64)>,
}

impl RefusalLog {
    pub(super) const BURST: u64 = 10;
    pub(super) const WINDOW: Duration = Duration::from_secs(10);

    /// Logs one refused request (see the type's contract).
    pub(super) fn refused(&self, line: &str, reason: &str) {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let (start, _, suppressed) = &mut *w;
        if start.is_none_or(|s| s.elapsed() >= Self::WINDOW) {
            if *suppressed > 0 {
                tracing::warn!(
                    suppressed = *suppressed,
                    "refused {suppressed} more request(s) in {} s, not logged one by one",
                    Self::WINDOW.as_secs()
                );
            }
            *w = (Some(std::time::Instant::now()), 0, 0);
        }
        let (_, logged, suppressed) = &mut *w;
        if *logged < Self::BURST {
            *logged += 1;
            tracing::warn!(request = %request_summary(line), "refused: {}", loggable_reason(reason));
        } else {
            *suppressed += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 43: a refused line's reason quoted the participant's words into the log.
    #[test]
    fn a_refusal_is_logged_without_what_it_quotes() {
        let line = r#"{"type":"utterance","speaker":"participant","text":"my mother died in May","start_ms":"x"}"#;
        let reason = crate::capture::control_protocol::parse_request(line).unwrap_err();
        let logged = loggable_reason(&reason);
        assert!(!logged.contains("mother"), "{logged}");
        let words = format!(
            r#"{{"type":"subscribe","topics":["{}"]}}"#,
            "w".repeat(250_000)
        );
        let reason = crate::capture::control_protocol::parse_request(&words).unwrap_err();
        let logged = loggable_reason(&reason);
        assert!(
            logged.chars().count() <= 300 && !logged.contains("www"),
            "{logged}"
        );
        assert_eq!(
            request_summary(&words),
            format!("request, {} bytes", words.len())
        );
        let kind = format!(r#"{{"type":"{}"}}"#, "my secret words");
        assert_eq!(request_summary(&kind), "unknown request, 26 bytes");
        assert_eq!(
            request_summary(r#"{"type":"rating","story_id":"s1","value":9}"#),
            "rating request, 43 bytes"
        );
    }
}
