//! Study sync, station side: publishes the outbox (`store::outbox`) to an MQTT broker.
//!
//! Contract: each outbox message (kinds `session`, `tombstone`, `purge`, `consent`) goes
//! out as one or more chunks (QoS 1) on `empathic/v1/{study}/{station}/{kind}`, each chunk
//! an `empathic-sync` envelope: sealed (version [`SEALED_ENVELOPE_VERSION`], the default:
//! signed by the station, the payload sealed to the study's key) or plain (version
//! [`ENVELOPE_VERSION`]). Topics, envelopes, receipts and refusals are specified in
//! docs/formats.md ("Study sync"). A message is marked `sent` when the broker has
//! acknowledged (PUBACK) every chunk of it on one connection, and `synced` only when a
//! collector's receipt names it (published after the collector's commit; with
//! `[sync] collectors` set, only when every collector named there has sent one): a broker
//! that loses its state can drop what it acknowledged, so PUBACK alone is not delivery. A
//! collector's signed refusal holds the message until the sync configuration changes (or
//! an hourly probe, or `sync --retry-refused`). Anything not yet synced is sent again (same
//! message id) on the next connection, or after [`crate::store::outbox::RESEND_AFTER_SECS`]
//! without a receipt, so a collector de-duplicates by `message_id`. Every connection is a
//! fresh client (clean session): the outbox, not the broker, holds what is still owed. One
//! message is in flight at a time. A retained `status` topic says `online` on connect and
//! `offline` by the last will. Connection failures back off exponentially with jitter
//! (0.5 s doubling to 30 s), never a busy loop.

pub mod central;
pub mod collect;
pub mod health;
pub mod keys;
mod refusals;
pub mod status;
mod wire;

pub use wire::{envelopes, sealed_envelopes, Sealing, PLAIN_WARNING};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rumqttc::{Client, Event, LastWill, MqttOptions, Packet, QoS};

use crate::store::outbox::{Outbox, Pending};
use crate::store::{Store, StoreError};
use refusals::{take_hello, take_refusal, Heard, SentEnvelopes};

/// Payload characters per chunk (well under brokers' default packet limits).
pub const CHUNK_CHARS: usize = 64 * 1024;
/// The envelope format version of plain sync.
pub const ENVELOPE_VERSION: u32 = 1;
/// The envelope format version of sealed sync: signed, the payload sealed to the study.
pub const SEALED_ENVELOPE_VERSION: u32 = 2;

/// Where and as whom to publish.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub host: String,
    pub port: u16,
    pub study: String,
    pub station: String,
    pub auth: BrokerAuth,
    /// The collectors (client ids, or share groups) that must each confirm a message before
    /// it is synced; empty: any one collector's receipt.
    pub collectors: Vec<String>,
    /// Sealed sync's keys; `None`: plain (`[sync] security = "plain"`).
    pub sealing: Option<Sealing>,
    /// Say `online` on connect and `offline` by the last will: the live service does (its
    /// status is the station's); a batch `empathic sync` does not (it is no service, and its
    /// end once raised an urgent "offline" alarm).
    pub announce_status: bool,
}

impl SyncOptions {
    /// `HOST:PORT`, as the broker state records it.
    fn broker(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// A digest of everything in this configuration a collector's acceptance can depend
    /// on (the broker, study, station, collectors, and under sealed sync the station's,
    /// study's and collectors' public keys): messages refused under one digest are held
    /// until it changes.
    pub fn config_digest(&self) -> String {
        let sealing = self.sealing.as_ref().map(|s| {
            (
                s.key.public().to_string(),
                s.study_key.clone(),
                s.collectors
                    .iter()
                    .map(|k| k.text().to_string())
                    .collect::<Vec<_>>(),
            )
        });
        let text = serde_json::json!([
            self.host,
            self.port,
            self.study,
            self.station,
            self.collectors,
            sealing
        ])
        .to_string();
        crate::digest::sha256_hex(text.as_bytes())
    }
}

/// A collector's receipt (on `empathic/v1/{study}/{station}/receipt`, JSON): the message it
/// committed, and who it is (its share group, else its client id; absent from collectors
/// older than schema v6's receipts).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Receipt {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collector: Option<String>,
    /// The sha256 of the message the collector committed; the station counts the receipt
    /// only when it is the one of what it sent (a buggy or replayed receipt is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Sealed sync: the collector's public key and its signature over
    /// [`keys::signed_receipt`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// A collector's refusal (on `empathic/v1/{study}/{station}/refusal`, JSON): the message it
/// refused (and its sha256 as announced), who refused, a code and a reason. `settled`: the
/// collector read the message and keeps it in quarantine (a receipt follows; the station
/// keeps the reason); otherwise the message is held at the station until its sync
/// configuration changes, but for an hourly probe. Under sealed sync it counts only
/// signed by a key of `sync.collector_keys` over [`keys::signed_refusal`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub message_id: String,
    pub sha256: String,
    /// The sha256 of the exact envelope bytes refused (the chunk as it reached the
    /// collector): a station takes a refusal only for bytes it published in this attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope_sha256: Option<String>,
    pub collector: String,
    pub code: String,
    pub reason: String,
    #[serde(default)]
    pub settled: bool,
    /// What the refusing collector reads ([`collector_reads`]): a `too_new` refusal is
    /// lifted when the collector's hello says it reads something else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// A collector's hello to one station, retained on
/// `empathic/v1/{study}/{station}/collector/{collector}` at each of its connections: who it
/// is and what it reads. A station releases what that collector refused as `too_new` while
/// it read something else (an upgrade); under sealed sync only a signed hello counts
/// ([`keys::signed_hello`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Hello {
    pub collector: String,
    pub reads: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

/// What this build's collector reads: the newest record versions it applies. A record
/// newer than these is refused `too_new`.
pub fn collector_reads() -> String {
    format!(
        "records v{}, consent v{}",
        crate::store::PAYLOAD_VERSION,
        crate::store::CONSENT_VERSION
    )
}

/// Most characters of a refusal's reason a station keeps and shows.
pub const MAX_REFUSAL_CHARS: usize = 512;

pub use crate::config::BrokerAddress;

/// How a client proves itself to the broker and checks the broker: TLS (rustls, the CA
/// file the broker's certificate must chain to, optionally a client certificate and key,
/// PEM), and a username with a password read from a file (never from the command line,
/// where other users see it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BrokerAuth {
    pub tls: bool,
    pub ca_file: Option<std::path::PathBuf>,
    pub client_cert: Option<std::path::PathBuf>,
    pub client_key: Option<std::path::PathBuf>,
    pub username: Option<String>,
    pub password_file: Option<std::path::PathBuf>,
}

impl BrokerAuth {
    /// From `[sync]` and the address's scheme; empty paths and names mean none.
    pub fn from_config(c: &crate::config::SyncConfig, tls: bool) -> Self {
        let path = |p: &std::path::Path| (!p.as_os_str().is_empty()).then(|| p.to_path_buf());
        Self {
            tls,
            ca_file: path(&c.ca_file),
            client_cert: path(&c.client_cert),
            client_key: path(&c.client_key),
            username: (!c.username.is_empty()).then(|| c.username.clone()),
            password_file: path(&c.password_file),
        }
    }

    /// Sets credentials and TLS on `opts`, reading the files now (an unreadable one is an
    /// error naming it and the setting).
    pub fn apply(&self, opts: &mut MqttOptions) -> Result<(), SyncError> {
        let read = |p: &std::path::Path, setting: &str| {
            std::fs::read(p)
                .map_err(|e| SyncError::Auth(format!("cannot read {setting} {}: {e}", p.display())))
        };
        if let Some(user) = &self.username {
            let password = match &self.password_file {
                Some(p) => String::from_utf8_lossy(&read(p, "sync.password_file")?)
                    .trim_end_matches(['\n', '\r'])
                    .to_string(),
                None => String::new(),
            };
            opts.set_credentials(user.clone(), password);
        }
        if self.tls {
            let ca_path = self.ca_file.as_deref().ok_or_else(|| {
                SyncError::Auth("an mqtts:// broker needs the CA file its certificate chains to (sync.ca_file, --ca)".into())
            })?;
            let ca = read(ca_path, "sync.ca_file")?;
            let client_auth = match (&self.client_cert, &self.client_key) {
                (Some(c), Some(k)) => {
                    Some((read(c, "sync.client_cert")?, read(k, "sync.client_key")?))
                }
                (None, None) => None,
                _ => {
                    return Err(SyncError::Auth(
                        "a client certificate needs both sync.client_cert and sync.client_key"
                            .into(),
                    ))
                }
            };
            // rustls with ring (no C build); installing twice is harmless.
            let _ = rustls::crypto::ring::default_provider().install_default();
            opts.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Simple {
                    ca,
                    alpn: None,
                    client_auth,
                },
            ));
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("broker address `{0}`: expected mqtt://HOST:PORT or mqtts://HOST:PORT")]
    Address(String),
    #[error("{0}")]
    Auth(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Sealed sync's keys are missing or unusable (names the setting).
    #[error("{0}")]
    Keys(String),
    #[error("gave up after {secs:.0} s and {attempts} failed connection attempt(s) with {pending} message(s) not yet synced (no collector receipt); last error: {last_error}")]
    Timeout {
        secs: f64,
        attempts: u64,
        pending: u64,
        last_error: String,
    },
    /// Messages a collector refused, held until the configuration changes.
    #[error("{held} message(s) refused by collector {by}: {reason} [{code}]; they are held (not sent again, but for one probe an hour) until this station's [sync] configuration changes or the collector's side is put right; `empathic sync status` shows them")]
    Refused {
        held: u64,
        by: String,
        code: String,
        reason: String,
    },
}

impl crate::exit::Classify for SyncError {
    fn exit_kind(&self) -> crate::exit::ExitKind {
        use crate::exit::ExitKind;
        match self {
            SyncError::Address(_) | SyncError::Auth(_) => ExitKind::BadInput,
            SyncError::Store(e) => e.exit_kind(),
            SyncError::Keys(_) | SyncError::Timeout { .. } | SyncError::Refused { .. } => {
                ExitKind::Runtime
            }
        }
    }
}

/// Parses `mqtt://HOST:PORT` or `mqtts://HOST:PORT`.
pub fn parse_broker(url: &str) -> Result<BrokerAddress, SyncError> {
    crate::config::broker_address(url).map_err(|_| SyncError::Address(url.into()))
}

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

/// A connection error with what to check: credentials, or the CA.
pub fn describe(e: &rumqttc::ConnectionError) -> String {
    use rumqttc::{ConnectReturnCode, ConnectionError};
    match e {
        ConnectionError::ConnectionRefused(
            code @ (ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized),
        ) => format!(
            "the broker refused the credentials ({code:?}): check sync.username and sync.password_file"
        ),
        ConnectionError::Tls(t) => format!(
            "TLS with the broker failed: {t} (is sync.ca_file the CA that signed the broker's certificate, and the host the one it names?)"
        ),
        other => other.to_string(),
    }
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

enum Round {
    Failed(String),
    /// Credentials or TLS files unusable: retrying cannot help.
    Auth(SyncError),
    Store(StoreError),
    TimedOut,
}

impl From<StoreError> for Round {
    fn from(e: StoreError) -> Self {
        Round::Store(e)
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
    let status = topic(opts, "status");
    // The connection's stamp orders its status words at the collector; the last will is
    // signed now, with it (`status`).
    let connection = crate::clock::utc_now();
    let word = |w: &str| {
        status::payload(
            opts.sealing.as_ref(),
            &opts.study,
            &opts.station,
            w,
            &connection,
        )
    };
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
    let poll = |c: &mut rumqttc::Connection| c.recv_timeout(Duration::from_millis(200));
    // Wait for the broker's CONNACK.
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
            return Ok(());
        }
    }
    outcome.connections += 1;
    let connected_at = conn.now()?;
    conn.set_broker_state("connected", &opts.broker(), None)?;
    tracing::info!(host = %opts.host, port = opts.port, "sync: connected to the broker");
    let receipts = topic(opts, "receipt");
    let refusals = topic(opts, "refusal");
    let hellos = format!("{}/", topic(opts, "collector"));
    let hello_filter = format!("{hellos}+");
    let subscriptions = [&receipts, &refusals, &hello_filter];
    for t in subscriptions {
        client
            .try_subscribe(t.clone(), QoS::AtLeastOnce)
            .map_err(|e| Round::Failed(e.to_string()))?;
    }
    // A collector's retained hello (which may release held messages) follows the SUBACK
    // of its subscription; `--until-synced` ends only after every SUBACK and a quiet poll
    // after them, so a hello already on the broker is heard before "nothing to send".
    let (mut subacks, mut hellos_heard) = (0usize, false);
    let digest = opts.config_digest();
    let mut told: Option<String> = None;
    let mut expected: u64 = 0;
    let mut acked: u64 = 0;
    if opts.announce_status {
        client
            .try_publish(&status, QoS::AtLeastOnce, true, word("online"))
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
        // Hand chunks to the client while its request queue takes them.
        while let Some((t, payload)) = queue.front() {
            match client.try_publish(t.clone(), QoS::AtLeastOnce, false, payload.clone()) {
                Ok(()) => {
                    sent.note(payload);
                    queue.pop_front();
                }
                Err(_) => break,
            }
        }
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
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.topic == receipts => {
                // A collector committed the message: only now (once every collector
                // required has) is it synced.
                match serde_json::from_slice::<Receipt>(&p.payload) {
                    Ok(r) => {
                        let by = r.collector.as_deref();
                        let in_flight = current.as_ref().map(|(m, _)| m.message_id.as_str());
                        let signed = match &opts.sealing {
                            Some(s) => s.check_receipt(&r, &opts.study, &opts.station),
                            None => Ok(()),
                        };
                        let matches = match signed {
                            Ok(()) => {
                                conn.receipt_matches(&r.message_id, r.sha256.as_deref(), in_flight)?
                            }
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
                    }
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, error = %e, "sync: an unreadable receipt")
                    }
                }
            }
            Ok(Ok(Event::Incoming(Packet::SubAck(_)))) => subacks += 1,
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.topic.starts_with(&hellos) => {
                take_hello(conn, opts, &p.payload)?;
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.topic == refusals => {
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
                hellos_heard |= subacks >= subscriptions.len();
                // Nothing pending and nothing to wait for: idle until something is queued.
                if current.is_none() && queue.is_empty() && !until_synced {
                    sleep_unless_stopped(Duration::from_millis(500), stop);
                }
            }
        }
    }
}
