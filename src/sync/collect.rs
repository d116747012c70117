//! Study sync, staff side: `empathic collect` receives the stations' messages into the
//! central database (`central/`), exactly once.
//!
//! Contract: subscribes to `empathic/v1/{study}/+/+` at QoS 1 with a persistent session
//! (stable client id, clean session off; optionally a shared subscription so a group of
//! collectors splits the messages) and manual acknowledgements: a chunk is acknowledged
//! only after the transaction that stored it committed, so a collector killed at any moment
//! loses nothing (the broker redelivers what was not acknowledged) and stores nothing twice.
//! Every whole message (new or a duplicate) is answered, after the commit, with a receipt on
//! `empathic/v1/{study}/{station}/receipt` (signed, naming the message's sha256 and NAME, the
//! share group if any, else the client id; docs/formats.md), which is what makes the
//! station call it synced.
//! A message refused (at the gate, or unopenable, or read and quarantined) is answered with
//! a signed refusal on `empathic/v1/{study}/{station}/refusal` (`sync::Refusal`; at most one
//! per message a minute). At each connection it greets every known station (enrolled, or
//! with a stored record) with a retained, signed hello on
//! `empathic/v1/{study}/{station}/collector/NAME` (`sync::Hello`: what it reads), so a
//! station holding a message an older version refused as `too_new` sends it again. What is stored, voided, purged or quarantined is
//! [`Central::store_publish`]'s; a station's retained `health` and `status` are kept by
//! [`Central::store_health`] and [`Central::store_status`] (no receipt: they are not in any
//! outbox; asked for again every `[collect] health_sweep_s`, so one a flood made the broker
//! drop is stored at the next sweep). The collector never stops on a bad message, and a database error leaves the
//! message unacknowledged (the broker delivers it again).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rumqttc::{Client, Event, MqttOptions, Packet, Publish, QoS};

pub use super::central::{Central, Gate, Stored, MAX_ENVELOPE_BYTES};
use super::keys::SigningKey;
use crate::exit::{Classify, ExitKind};
use crate::store::CentralError;
use crate::sync::SyncError;

/// The largest packet MQTT can carry (its remaining-length field's maximum).
const MQTT_MAX_PACKET_BYTES: usize = 268_435_455;

/// Where and as whom a collector subscribes.
#[derive(Debug, Clone)]
pub struct CollectOptions {
    pub host: String,
    pub port: u16,
    pub auth: super::BrokerAuth,
    pub study: String,
    /// Stable: the broker keeps the collector's session under it.
    pub client_id: String,
    /// A shared-subscription group: the group's collectors split the messages.
    pub share_group: Option<String>,
    /// Counts every message stored (records, health, status, quarantine), after its commit:
    /// the study page's keeper watches it (`report::study::fresh`).
    pub changes: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// How often the retained health and status are asked for again (`[collect]
    /// health_sweep_s`).
    pub health_sweep: Duration,
}

/// Why the collector stopped.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The central database could not be opened or used.
    #[error(transparent)]
    Central(#[from] CentralError),
    /// The broker's credentials or TLS set-up are unusable.
    #[error(transparent)]
    Sync(#[from] SyncError),
    /// The broker refused the subscription.
    #[error("cannot subscribe: {0}")]
    Subscribe(String),
}

impl Classify for CollectError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            CollectError::Central(e) => e.exit_kind(),
            CollectError::Sync(e) => e.exit_kind(),
            CollectError::Subscribe(_) => ExitKind::Runtime,
        }
    }
}

/// Receives until `stop`, letting in what `gate` admits and signing receipts with
/// `signing` (sealed sync; `None`: unsigned receipts, which sealed stations ignore);
/// reconnects with backoff.
pub fn collect(
    central: &str,
    c: &CollectOptions,
    gate: &Gate,
    signing: Option<&SigningKey>,
    stop: &AtomicBool,
) -> Result<u64, CollectError> {
    let CollectOptions {
        host,
        port,
        auth,
        study,
        client_id,
        share_group,
        changes,
        health_sweep,
    } = c;
    let (host, port) = (host.as_str(), *port);
    // Who the receipts say confirmed: a group of collectors splitting the load into one
    // database answers as one.
    let name = share_group.as_deref().unwrap_or(client_id.as_str());
    let mut central = Central::open(central)?;
    let mut opts = MqttOptions::new(client_id.as_str(), host, port);
    auth.apply(&mut opts)?;
    opts.set_clean_session(false)
        .set_manual_acks(true)
        .set_keep_alive(Duration::from_secs(15))
        // The protocol's largest packet: a message over the collector's own limit is
        // received, quarantined and acknowledged. A smaller client limit would make the
        // client drop the connection on it, and the broker deliver it again on every
        // reconnect: collection would stop for one message.
        .set_max_packet_size(MQTT_MAX_PACKET_BYTES, 4096);
    let (client, mut connection) = Client::new(opts, 64);
    // A shared subscription splits the study's messages among the collectors of a group
    // (each message goes to one of them); they may share one central file.
    let filter = match share_group {
        Some(g) => format!("$share/{g}/empathic/v1/{study}/+/+"),
        None => format!("empathic/v1/{study}/+/+"),
    };
    // Not shared: a shared subscription gets no retained messages, and every collector
    // keeps every station's health. Subscribing again makes the broker send the retained
    // messages again (MQTT 3.1.1, 3.8.4): what a flood made the broker drop comes back.
    let retained = [
        format!("empathic/v1/{study}/+/health"),
        format!("empathic/v1/{study}/+/status"),
    ];
    let mut swept: Option<std::time::Instant> = None;
    let mut refusals = RefusalsTold::default();
    let mut records = 0u64;
    let mut backoff = Duration::from_millis(500);
    // Acks and receipts wait here while the client's request queue is full (under load the
    // event loop is busy with incoming messages); they go out in order, never dropped.
    let mut outgoing: VecDeque<Outgoing> = VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        while let Some(o) = outgoing.front() {
            let sent = match o {
                Outgoing::Ack(p) => client.try_ack(p).is_ok(),
                Outgoing::Hello(station) => client
                    .try_publish(
                        format!("empathic/v1/{study}/{station}/collector/{name}"),
                        QoS::AtLeastOnce,
                        true,
                        serde_json::to_string(&hello(study, station, name, signing))
                            .unwrap_or_default(),
                    )
                    .is_ok(),
                Outgoing::Receipt {
                    topic,
                    message_id,
                    sha256,
                } => client
                    .try_publish(
                        topic.clone(),
                        QoS::AtLeastOnce,
                        false,
                        // Strings only: serialising cannot fail.
                        serde_json::to_string(&receipt(topic, message_id, sha256, name, signing))
                            .unwrap_or_default(),
                    )
                    .is_ok(),
                Outgoing::Refusal(r, envelope) => client
                    .try_publish(
                        r.topic.clone(),
                        QoS::AtLeastOnce,
                        false,
                        serde_json::to_string(&refusal(r, envelope, name, signing))
                            .unwrap_or_default(),
                    )
                    .is_ok(),
            };
            if !sent {
                break;
            }
            outgoing.pop_front();
        }
        if swept.is_some_and(|t| t.elapsed() >= *health_sweep) {
            for f in &retained {
                // A full request queue (a flood being read) tries again next turn.
                if client.try_subscribe(f.clone(), QoS::AtLeastOnce).is_err() {
                    break;
                }
            }
            swept = Some(std::time::Instant::now());
        }
        match connection.recv_timeout(Duration::from_millis(200)) {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                backoff = Duration::from_millis(500);
                // Renewed on every connection: a broker that lost its state forgets it.
                client
                    .try_subscribe(filter.clone(), QoS::AtLeastOnce)
                    .map_err(|e| CollectError::Subscribe(e.to_string()))?;
                swept = Some(std::time::Instant::now());
                tracing::info!(host, port, %filter, "collect: connected");
                // Each known station hears what this collector reads: a station holding a
                // message this collector's earlier version refused as too new sends it
                // again when that changed.
                match central.known_stations(study) {
                    Ok(stations) => outgoing.extend(stations.into_iter().map(Outgoing::Hello)),
                    Err(e) => {
                        tracing::warn!(error = %e, "collect: cannot list the study's stations to greet")
                    }
                }
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) => {
                if p.topic.ends_with("/receipt") || p.topic.ends_with("/refusal") {
                    outgoing.push_back(Outgoing::Ack(p));
                    continue;
                }
                let Some(stored) = store_until_stored(&mut central, &p, gate, stop) else {
                    break;
                };
                if let Some(r) = stored.refusal() {
                    // A `too_new` refusal answers a whole message read again (a resend the
                    // station was asked to make): one per resend, as a stranger must send
                    // every chunk again to get another.
                    if r.code == "too_new" || refusals.due(&r.message_id) {
                        let envelope = crate::digest::sha256_hex(&p.payload);
                        outgoing.push_back(Outgoing::Refusal(r.clone(), envelope));
                    }
                }
                if let Some((topic, message_id, sha256)) = stored.receipt() {
                    // After the commit: the station may now call it synced.
                    outgoing.push_back(Outgoing::Receipt {
                        topic: topic.to_string(),
                        message_id: message_id.to_string(),
                        sha256: sha256.to_string(),
                    });
                }
                if matches!(stored, Stored::Record { .. }) {
                    records += 1;
                }
                if let Some(c) = changes {
                    c.fetch_add(1, Ordering::Relaxed);
                }
                outgoing.push_back(Outgoing::Ack(p));
            }
            Ok(Ok(_)) | Err(_) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "collect: broker connection failed");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
    Ok(records)
}

/// The receipt for `message_id` on `topic` (`empathic/v1/{study}/{station}/receipt`),
/// signed over `keys::signed_receipt` when the collector has a signing key.
fn receipt(
    topic: &str,
    message_id: &str,
    sha256: &str,
    collector: &str,
    signing: Option<&SigningKey>,
) -> super::Receipt {
    let mut r = super::Receipt {
        message_id: message_id.to_string(),
        collector: Some(collector.to_string()),
        sha256: Some(sha256.to_string()),
        signer: None,
        sig: None,
    };
    if let Some(key) = signing {
        let mut parts = topic.split('/').skip(2);
        let (study, station) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let signed = super::keys::signed_receipt(
            study,
            station,
            message_id,
            sha256,
            collector,
            key.public(),
        );
        r.sig = Some(key.sign(&signed));
        r.signer = Some(key.public().to_string());
    }
    r
}

/// This collector's hello to `station` of `study` ([`super::Hello`]), signed over
/// `keys::signed_hello` when the collector has a signing key.
fn hello(
    study: &str,
    station: &str,
    collector: &str,
    signing: Option<&SigningKey>,
) -> super::Hello {
    let reads = super::collector_reads();
    let (signer, sig) = match signing {
        Some(key) => (
            Some(key.public().to_string()),
            Some(key.sign(&super::keys::signed_hello(
                study,
                station,
                collector,
                &reads,
                key.public(),
            ))),
        ),
        None => (None, None),
    };
    super::Hello {
        collector: collector.to_string(),
        reads,
        signer,
        sig,
    }
}

/// The refusal for `r`, signed over `keys::signed_refusal` when the collector has a
/// signing key.
fn refusal(
    r: &super::central::Refusal,
    envelope_sha256: &str,
    collector: &str,
    signing: Option<&SigningKey>,
) -> super::Refusal {
    let mut out = super::Refusal {
        message_id: r.message_id.clone(),
        sha256: r.sha256.clone(),
        envelope_sha256: Some(envelope_sha256.to_string()),
        collector: collector.to_string(),
        code: r.code.to_string(),
        reason: r.reason.clone(),
        settled: r.settled,
        reads: Some(super::collector_reads()),
        signer: None,
        sig: None,
    };
    if let Some(key) = signing {
        let mut parts = r.topic.split('/').skip(2);
        let (study, station) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        out.sig = Some(key.sign(&super::keys::signed_refusal(
            study,
            station,
            &out,
            key.public(),
        )));
        out.signer = Some(key.public().to_string());
    }
    out
}

/// Which messages were told of their refusal lately: one refusal per message a minute at
/// most (a message refused at the gate is refused chunk by chunk, and a stranger's flood
/// must not turn into as many answers), the memory bounded. `too_new` is judged on the
/// whole message, so it is answered once per whole message received instead.
#[derive(Default)]
struct RefusalsTold(std::collections::HashMap<String, std::time::Instant>);

impl RefusalsTold {
    const AGAIN_AFTER: Duration = Duration::from_secs(60);
    const KEPT: usize = 10_000;

    /// Whether message `id` is to be told now (and remembers that it was).
    fn due(&mut self, id: &str) -> bool {
        let now = std::time::Instant::now();
        if self.0.get(id).is_some_and(|t| now - *t < Self::AGAIN_AFTER) {
            return false;
        }
        if self.0.len() >= Self::KEPT {
            self.0.retain(|_, t| now - *t < Self::AGAIN_AFTER);
            if self.0.len() >= Self::KEPT {
                // A flood of distinct ids within a minute: told no more until it passes.
                return false;
            }
        }
        self.0.insert(id.to_string(), now);
        true
    }
}

/// What the collector owes the broker after a commit.
enum Outgoing {
    /// This collector's hello to a station (retained).
    Hello(String),
    /// A refusal, and the sha256 of the envelope bytes it answers.
    Refusal(super::central::Refusal, String),
    Ack(Publish),
    Receipt {
        topic: String,
        message_id: String,
        sha256: String,
    },
}

/// Stores `p`, retrying with backoff while the database fails (a PostgreSQL restart, a
/// locked file): the message is acknowledged only once stored, and the broker holds back
/// what follows meanwhile. `None` when stopped first.
fn store_until_stored(
    central: &mut Central,
    p: &Publish,
    gate: &Gate,
    stop: &AtomicBool,
) -> Option<Stored> {
    let mut wait = Duration::from_millis(250);
    loop {
        // A station's health and status are kept beside its records (`central::health`).
        let result = if p.topic.ends_with("/health") {
            central.store_health(&p.topic, &p.payload, gate)
        } else if p.topic.ends_with("/status") {
            central.store_status(&p.topic, &p.payload, gate)
        } else {
            central.store_publish_with(&p.topic, &p.payload, gate)
        };
        match result {
            Ok(stored) => return Some(stored),
            Err(e) => {
                tracing::error!(error = %e, retry_in_ms = wait.as_millis() as u64, "collect: could not store a message");
                let until = std::time::Instant::now() + wait;
                while std::time::Instant::now() < until {
                    if stop.load(Ordering::Relaxed) {
                        return None;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                wait = (wait * 2).min(Duration::from_secs(10));
            }
        }
    }
}
