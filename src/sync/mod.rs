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
//!
//! Rooms: `publish` (the loop), `broker` (address, TLS and credentials), `messages` (what
//! collectors send back), `wire` (envelopes), `refusals` (refusals and hellos taken),
//! `keys`, `status`, `health`; the collector's side is `collect` and `central/`.

mod broker;
pub mod central;
pub mod collect;
pub mod health;
pub mod keys;
mod messages;
mod publish;
mod refusals;
pub mod status;
mod wire;

pub use broker::{describe, parse_broker, BrokerAuth};
pub use messages::{collector_reads, Hello, Receipt, Refusal, MAX_REFUSAL_CHARS};
pub use publish::{publish, SyncOutcome};
pub use wire::{envelopes, sealed_envelopes, Sealing, PLAIN_WARNING};

use crate::store::StoreError;

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
pub use crate::config::BrokerAddress;

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

/// How one connection round ended, when not done.
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
