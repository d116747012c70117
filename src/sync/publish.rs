//! The station's publisher loop: connection rounds against the broker, one message in
//! flight at a time, with receipts, refusals and collectors' hellos taken as they arrive
//! and exponential backoff between failed connections (the contract is `sync/mod.rs`'s).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rumqttc::{Client, Event, LastWill, MqttOptions, Packet, QoS};

use super::refusals::{take_hello, take_refusal, Heard, SentEnvelopes};
use super::{
    describe, envelopes, sealed_envelopes, status, Receipt, Round, SyncError, SyncOptions,
    CHUNK_CHARS,
};
use crate::store::outbox::{Outbox, Pending};
use crate::store::{Store, StoreError};

/// The envelopes `m` goes out as under `opts`: sealed (the sealed payload kept in the
/// outbox from its first send, so resends carry the same bytes) or plain.
fn wire_envelopes(
    conn: &Outbox<'_>,
    m: &Pending,
    opts: &SyncOptions,
) -> Result<Vec<String>, Round> {
    let Some(s) = &opts.sealing else {
        return Ok(envelopes(m, opts));
    };
    let sealed = match conn.sealed(m.seq, &s.study_key)? {
        Some(sealed) => sealed,
        None => {
            let sealed = s
                .study
                .seal(m.payload.as_bytes())
                .map_err(|e| Round::Auth(SyncError::Keys(e.to_string())))?;
            conn.keep_sealed(m.seq, &s.study_key, &sealed)?;
            sealed
        }
    };
    Ok(sealed_envelopes(
        m,
        &sealed,
        opts,
        &s.key,
        &crate::digest::nonce_hex(),
    ))
}

fn topic(opts: &SyncOptions, kind: &str) -> String {
    format!("empathic/v1/{}/{}/{kind}", opts.study, opts.station)
}

/// What a run of the publisher did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SyncOutcome {
    /// Messages the broker acknowledged.
    pub published: u64,
    /// Messages a collector's receipt confirmed.
    pub confirmed: u64,
    pub connections: u64,
}

/// Publishes the outbox of the store at `db` until it is empty (`until_synced`) or `stop`
/// is set; gives up after `timeout` with the pending count and the last error.
pub fn publish(
    db: &Path,
    opts: &SyncOptions,
    until_synced: bool,
    timeout: Option<Duration>,
    stop: &AtomicBool,
) -> Result<SyncOutcome, SyncError> {
    let store = Store::open(db)?;
    let outbox = store.outbox();
    let conn = &outbox;
    let started = Instant::now();
    let mut outcome = SyncOutcome::default();
    let mut backoff = Duration::from_millis(500);
    let mut last_error = String::from("none");
    let mut jitter_state = u64::from(std::process::id()) | 1;
    let mut attempts = 0u64;
    let broker = opts.broker();
    let digest = opts.config_digest();
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            break Ok(outcome);
        }
        // Held messages settle a batch run, but only after one connection: a collector's
        // retained hello may release what it refused before it was upgraded.
        if until_synced && settled(conn, &digest)? && (outcome.connections > 0 || conn.held()? == 0)
        {
            break Ok(outcome);
        }
        if let Some(t) = timeout.filter(|t| started.elapsed() > *t) {
            let s = conn.status()?;
            // The time is up with nothing left to send: that is done, not a failure (issue
            // 56: `sync --timeout 5` with everything synced exited 1).
            if s.pending + s.sent == 0 {
                break Ok(outcome);
            }
            if let Some(r) = s.last_refusal.filter(|_| s.refused > 0) {
                last_error = format!(
                    "{}; {} message(s) refused by collector {}: {} [{}]",
                    last_error, s.refused, r.by, r.reason, r.code
                );
            }
            break Err(SyncError::Timeout {
                secs: t.as_secs_f64(),
                attempts,
                pending: s.pending + s.sent,
                last_error,
            });
        }
        match connection_round(
            conn,
            opts,
            until_synced,
            stop,
            timeout,
            started,
            &mut outcome,
        ) {
            Ok(()) => break Ok(outcome),
            Err(Round::Failed(e)) => {
                attempts += 1;
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "sync: broker connection failed");
                conn.set_broker_state("unreachable", &broker, Some(&e))?;
                last_error = e;
                // Exponential backoff with jitter (xorshift; no need for a crypto RNG).
                jitter_state ^= jitter_state << 13;
                jitter_state ^= jitter_state >> 7;
                jitter_state ^= jitter_state << 17;
                let jitter =
                    Duration::from_millis(jitter_state % (backoff.as_millis() as u64 / 2 + 1));
                sleep_unless_stopped(backoff + jitter, stop);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(Round::Store(e)) => break Err(e.into()),
            Err(Round::Auth(e)) => {
                conn.set_broker_state("unreachable", &broker, Some(&e.to_string()))?;
                break Err(e);
            }
            Err(Round::TimedOut) => continue,
        }
    };
    // A batch run that ends with messages held by a refusal says so: they will not go by
    // running it again.
    let result = match result {
        Ok(o) if until_synced => {
            let s = conn.status()?;
            match s
                .last_refusal
                .filter(|_| s.refused > 0 && s.pending + s.sent > 0)
            {
                Some(r) => Err(SyncError::Refused {
                    held: s.refused,
                    by: r.by,
                    code: r.code,
                    reason: r.reason,
                }),
                None => Ok(o),
            }
        }
        other => other,
    };
    if !matches!(result, Err(SyncError::Auth(_))) {
        let (state, error) = match &result {
            Ok(_) => ("disconnected", None),
            Err(e) => ("disconnected", Some(e.to_string())),
        };
        // Best effort: the outcome matters more than the note about it.
        if let Err(e) = conn.set_broker_state(state, &broker, error.as_deref()) {
            tracing::warn!(error = %e, "sync: could not record the broker state");
        }
    }
    result
}

/// Nothing left to send and no receipt awaited under the configuration of digest `digest`
/// (a message a collector refused under it is held and awaits nothing).
fn settled(conn: &Outbox<'_>, digest: &str) -> Result<bool, StoreError> {
    Ok(conn.owed(digest)? == 0)
}

fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) {
    let end = Instant::now() + d;
    while Instant::now() < end && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
    }
}

/// A client whose CONNACK arrived, and this connection's signed `online` word (when it
/// announces status).
struct Connected {
    client: Client,
    connection: rumqttc::Connection,
    online: Option<Vec<u8>>,
}

fn poll(
    c: &mut rumqttc::Connection,
) -> Result<Result<Event, rumqttc::ConnectionError>, rumqttc::RecvTimeoutError> {
    c.recv_timeout(Duration::from_millis(200))
}

/// Connects as a fresh client (clean session) with this station's last will, and waits
/// for the broker's CONNACK; `None`: stopped while waiting.
fn connect(opts: &SyncOptions, stop: &AtomicBool) -> Result<Option<Connected>, Round> {
    let status = topic(opts, "status");
    // The connection's stamp orders its status words at the collector; the last will is
    // signed now, with it (`status`).
    let stamp = crate::clock::utc_now();
    let word =
        |w: &str| status::payload(opts.sealing.as_ref(), &opts.study, &opts.station, w, &stamp);
    let mut mqtt = MqttOptions::new(
        format!("empathic-{}-{}", opts.study, opts.station),
        opts.host.clone(),
        opts.port,
    );
    opts.auth.apply(&mut mqtt).map_err(Round::Auth)?;
    mqtt.set_clean_session(true)
        .set_keep_alive(Duration::from_secs(15))
        .set_max_packet_size(4 * CHUNK_CHARS + 4096, 4 * CHUNK_CHARS + 4096);
    if opts.announce_status {
        mqtt.set_last_will(LastWill::new(
            &status,
            word("offline"),
            QoS::AtLeastOnce,
            true,
        ));
    }
    let (client, mut connection) = Client::new(mqtt, 64);
    let connect_deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match poll(&mut connection) {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(Round::Failed(describe(&e))),
            Err(_) if Instant::now() > connect_deadline => {
                return Err(Round::Failed(
                    "no answer from the broker within 10 s".into(),
                ))
            }
            Err(_) => {}
        }
        if stop.load(Ordering::Relaxed) {
            return Ok(None);
        }
    }
    let online = opts.announce_status.then(|| word("online"));
    Ok(Some(Connected {
        client,
        connection,
        online,
    }))
}

/// The topics a station listens on while connected: collectors' receipts, refusals and
/// hellos (under the prefix `hellos`).
struct Listening {
    receipts: String,
    refusals: String,
    hellos: String,
}

impl Listening {
    const SUBSCRIPTIONS: usize = 3;
}

fn listen(client: &Client, opts: &SyncOptions) -> Result<Listening, Round> {
    let listening = Listening {
        receipts: topic(opts, "receipt"),
        refusals: topic(opts, "refusal"),
        hellos: format!("{}/", topic(opts, "collector")),
    };
    let hello_filter = format!("{}+", listening.hellos);
    let filters = [&listening.receipts, &listening.refusals, &hello_filter];
    debug_assert_eq!(filters.len(), Listening::SUBSCRIPTIONS);
    for t in filters {
        client
            .try_subscribe(t.clone(), QoS::AtLeastOnce)
            .map_err(|e| Round::Failed(e.to_string()))?;
    }
    Ok(listening)
}

/// Hands queued chunks (topic, envelope) to the client while its request queue takes
/// them, noting each one handed over.
fn hand_over(
    client: &Client,
    queue: &mut std::collections::VecDeque<(String, String)>,
    sent: &mut SentEnvelopes,
) {
    while let Some((t, payload)) = queue.front() {
        match client.try_publish(t.clone(), QoS::AtLeastOnce, false, payload.clone()) {
            Ok(()) => {
                sent.note(payload);
                queue.pop_front();
            }
            Err(_) => break,
        }
    }
}

/// One connection: publish until done (`Ok`), or fail (`Round::Failed`).
fn connection_round(
    conn: &Outbox<'_>,
    opts: &SyncOptions,
    until_synced: bool,
    stop: &AtomicBool,
    timeout: Option<Duration>,
    started: Instant,
    outcome: &mut SyncOutcome,
) -> Result<(), Round> {
    let Some(Connected {
        client,
        mut connection,
        online,
    }) = connect(opts, stop)?
    else {
        return Ok(());
    };
    outcome.connections += 1;
    let connected_at = conn.now()?;
    conn.set_broker_state("connected", &opts.broker(), None)?;
    tracing::info!(host = %opts.host, port = opts.port, "sync: connected to the broker");
    let listening = listen(&client, opts)?;
    // A collector's retained hello (which may release held messages) follows the SUBACK
    // of its subscription; `--until-synced` ends only after every SUBACK and a quiet poll
    // after them, so a hello already on the broker is heard before "nothing to send".
    let (mut subacks, mut hellos_heard) = (0usize, false);
    let digest = opts.config_digest();
    let mut told: Option<String> = None;
    let mut expected: u64 = 0;
    let mut acked: u64 = 0;
    if let Some(online) = online {
        client
            .try_publish(topic(opts, "status"), QoS::AtLeastOnce, true, online)
            .map_err(|e| Round::Failed(e.to_string()))?;
        expected += 1;
    }
    // The message in flight: its outbox row, and the acks that complete it.
    let mut current: Option<(Pending, u64)> = None;
    let mut queue: std::collections::VecDeque<(String, String)> = Default::default();
    let mut sent = SentEnvelopes::default();
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        if timeout.is_some_and(|t| started.elapsed() > t) {
            return Err(Round::TimedOut);
        }
        if current.is_none() && queue.is_empty() {
            match conn.pending(1, &connected_at, &digest)?.pop() {
                Some(m) => {
                    let chunks = wire_envelopes(conn, &m, opts)?;
                    let t = topic(opts, &m.kind);
                    expected += chunks.len() as u64;
                    let done_at = expected;
                    queue.extend(chunks.into_iter().map(|c| (t.clone(), c)));
                    current = Some((m, done_at));
                }
                None if until_synced
                    && hellos_heard
                    && acked >= expected
                    && settled(conn, &digest)? =>
                {
                    return Ok(())
                }
                None => {}
            }
        }
        hand_over(&client, &mut queue, &mut sent);
        match poll(&mut connection) {
            Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => {
                acked += 1;
                if let Some((m, done_at)) = &current {
                    if acked >= *done_at && queue.is_empty() {
                        conn.mark_sent(m.seq)?;
                        outcome.published += 1;
                        tracing::debug!(message = %m.message_id, kind = %m.kind, subject = %m.subject, "sync: the broker has it");
                        current = None;
                    }
                }
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.topic == listening.receipts => {
                let in_flight = current.as_ref().map(|(m, _)| m.message_id.as_str());
                take_receipt(conn, opts, &p.payload, in_flight, outcome)?;
            }
            Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => subacks += 1,
            Ok(Ok(Event::Incoming(Packet::Publish(p))))
                if p.topic.starts_with(&listening.hellos) =>
            {
                take_hello(conn, opts, &p.payload)?;
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.topic == listening.refusals => {
                let in_flight = current.as_ref().map(|(m, _)| m.message_id.as_str());
                let heard = Heard {
                    in_flight,
                    sent: &sent,
                };
                take_refusal(conn, opts, &p.payload, heard, &digest, &mut told)?;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                if let Some((m, _)) = &current {
                    conn.note_attempt(m.seq, Some(&e.to_string()))?;
                }
                return Err(Round::Failed(e.to_string()));
            }
            Err(_) => {
                hellos_heard |= subacks >= Listening::SUBSCRIPTIONS;
                // Nothing pending and nothing to wait for: idle until something is queued.
                if current.is_none() && queue.is_empty() && !until_synced {
                    sleep_unless_stopped(Duration::from_millis(500), stop);
                }
            }
        }
    }
}

/// A collector committed a message: only now (once every collector required has) is it
/// synced. A receipt unsigned under sealed sync, or for bytes other than those sent, is
/// ignored with a warning.
fn take_receipt(
    conn: &Outbox<'_>,
    opts: &SyncOptions,
    payload: &[u8],
    in_flight: Option<&str>,
    outcome: &mut SyncOutcome,
) -> Result<(), Round> {
    let r = match serde_json::from_slice::<Receipt>(payload) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "sync: an unreadable receipt");
            return Ok(());
        }
    };
    let by = r.collector.as_deref();
    let signed = match &opts.sealing {
        Some(s) => s.check_receipt(&r, &opts.study, &opts.station),
        None => Ok(()),
    };
    let matches = match signed {
        Ok(()) => conn.receipt_matches(&r.message_id, r.sha256.as_deref(), in_flight)?,
        Err(why) => Err(why),
    };
    match matches {
        Ok(()) => {
            if conn.mark_synced(&r.message_id, by, &opts.collectors)? {
                outcome.confirmed += 1;
            }
        }
        Err(why) => {
            tracing::warn!(message = %r.message_id, collector = ?by, "sync: a receipt ignored: {why}")
        }
    }
    Ok(())
}
