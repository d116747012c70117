//! A collector's refusals as the station takes them: checked (signed by a trusted
//! collector under sealed sync; naming a message of this outbox, as sent, and the exact
//! envelope bytes this connection round published) and kept on the message, which is then
//! held. The publisher's connection round (`publish.rs`) hands them here, and a collector's hello, which
//! lifts what it refused as `too_new` once it reads something else.

use super::{health, Refusal, Round, SyncOptions, MAX_REFUSAL_CHARS};
use crate::store::outbox::Outbox;

/// What a refusal is checked against: the message in flight, and the envelopes this
/// connection round published.
pub(super) struct Heard<'a> {
    pub(super) in_flight: Option<&'a str>,
    pub(super) sent: &'a SentEnvelopes,
}

/// The sha256 of each envelope (chunk) this connection round handed to the broker, the
/// latest [`SentEnvelopes::KEPT`] of them (a refusal follows its chunk within seconds).
#[derive(Default)]
pub(super) struct SentEnvelopes {
    order: std::collections::VecDeque<String>,
    set: std::collections::HashSet<String>,
}

impl SentEnvelopes {
    const KEPT: usize = 4096;

    pub(super) fn note(&mut self, payload: &str) {
        let d = crate::digest::sha256_hex(payload.as_bytes());
        if self.set.insert(d.clone()) {
            self.order.push_back(d);
            if self.order.len() > Self::KEPT {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }

    fn holds(&self, digest: &str) -> bool {
        self.set.contains(digest)
    }
}

/// A collector's refusal received: checked (signed by a collector this station trusts,
/// under sealed sync; naming a message of this outbox as it was sent) and kept on the
/// message, held under `digest` unless settled. Logged at `warn` when its collector or code
/// differs from the last one told (`told`), so a hundred refused messages make one line.
pub(super) fn take_refusal(
    conn: &Outbox<'_>,
    opts: &SyncOptions,
    payload: &[u8],
    heard: Heard<'_>,
    digest: &str,
    told: &mut Option<String>,
) -> Result<(), Round> {
    let Heard { in_flight, sent } = heard;
    let r = match serde_json::from_slice::<Refusal>(payload) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "sync: an unreadable refusal ignored");
            return Ok(());
        }
    };
    let signed = match &opts.sealing {
        Some(s) => s.check_refusal(&r, &opts.study, &opts.station),
        None => Ok(()),
    };
    // Bound to the bytes this station published in this attempt: a refusal of a copy
    // altered on the way (anyone on the broker can republish one) or of an earlier
    // attempt holds nothing.
    let bound = match (&r.envelope_sha256, &opts.sealing) {
        (Some(d), _) if sent.holds(d) => Ok(()),
        (Some(_), _) => Err("it names envelope bytes this station did not publish in this attempt (a copy altered on the way, or an earlier attempt)".to_string()),
        (None, Some(_)) => Err("it names no envelope bytes (a collector older than this station); the message is sent again".to_string()),
        (None, None) => Ok(()),
    };
    let matches = match signed.and(bound) {
        Ok(()) => conn.receipt_matches(&r.message_id, Some(&r.sha256), in_flight)?,
        Err(why) => Err(why),
    };
    if let Err(why) = matches {
        tracing::warn!(
            message = %health::printable(&r.message_id, 80),
            "sync: a refusal ignored: {why}"
        );
        return Ok(());
    }
    let note = crate::store::outbox::RefusalNote {
        by: health::printable(&r.collector, 80),
        code: health::printable(&r.code, 40),
        reason: health::printable(&r.reason, MAX_REFUSAL_CHARS),
        at: conn.now()?,
        reads: r.reads.as_deref().map(|x| health::printable(x, 80)),
    };
    conn.mark_refused(&r.message_id, &note, (!r.settled).then_some(digest))?;
    // One line per collector and kind of refusal: reasons name their message.
    let said = format!("{} {}", note.by, note.code);
    if told.as_deref() != Some(said.as_str()) {
        if r.settled {
            tracing::warn!(message = %r.message_id, collector = %note.by, code = %note.code, "sync: the collector keeps this message in quarantine: {}", note.reason);
        } else {
            tracing::warn!(message = %r.message_id, collector = %note.by, code = %note.code, "sync: the collector refused this message: {}; it and others refused so are held (not sent again, but for one probe an hour) until this station's [sync] configuration changes or the collector's side is put right", note.reason);
        }
        *told = Some(said);
    } else {
        tracing::debug!(message = %r.message_id, code = %note.code, "sync: refused again");
    }
    Ok(())
}

/// A collector's hello received: checked (signed by a trusted collector under sealed sync)
/// and what that collector refused as `too_new` while it read something else is released,
/// to be sent now. A hello is retained, so it comes at every connection: what it read
/// when it refused is kept on the message, and one it still reads the same holds on.
pub(super) fn take_hello(
    conn: &Outbox<'_>,
    opts: &SyncOptions,
    payload: &[u8],
) -> Result<(), Round> {
    let h = match serde_json::from_slice::<super::Hello>(payload) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "sync: an unreadable collector hello ignored");
            return Ok(());
        }
    };
    if let Some(s) = &opts.sealing {
        if let Err(why) = s.check_hello(&h, &opts.study, &opts.station) {
            tracing::warn!(collector = %health::printable(&h.collector, 80), "sync: a collector hello ignored: {why}");
            return Ok(());
        }
    }
    let (by, reads) = (
        health::printable(&h.collector, 80),
        health::printable(&h.reads, 80),
    );
    let n = conn.release_too_new(&by, &reads)?;
    if n > 0 {
        tracing::info!(collector = %by, reads = %reads, "sync: {n} message(s) this collector refused as too new are sent again: it now reads {reads}");
    }
    Ok(())
}
