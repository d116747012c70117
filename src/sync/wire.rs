//! What goes on the wire from a station: the chunk envelopes of a message, plain (format
//! `empathic-sync` v1) or signed and sealed (v2), and the keys sealed sync needs
//! ([`Sealing`]). The publisher (`sync/publish.rs`) sends them; the collector's side of the same
//! formats is `central/envelope.rs`.

use super::{
    keys, Hello, Receipt, Refusal, SyncError, SyncOptions, CHUNK_CHARS, ENVELOPE_VERSION,
    SEALED_ENVELOPE_VERSION,
};
use crate::store::outbox::Pending;

/// What a station needs for sealed sync: its signing key, the study's public key that
/// payloads are sealed to, and the collectors whose signed receipts count.
#[derive(Clone)]
pub struct Sealing {
    pub key: std::sync::Arc<keys::SigningKey>,
    pub study_key: String,
    pub study: keys::StudyPublicKey,
    pub collectors: Vec<keys::VerifyingKey>,
}

impl std::fmt::Debug for Sealing {
    /// Public halves only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealing")
            .field("station_key", &self.key.public())
            .field("study_key", &self.study_key)
            .field("collectors", &self.collectors.len())
            .finish()
    }
}

impl Sealing {
    /// From `[sync]`: `None` for plain sync (logged as a warning: the broker reads it all);
    /// for sealed sync every key must be there and valid, else an error naming the setting.
    pub fn from_config(c: &crate::config::SyncConfig) -> Result<Option<Sealing>, SyncError> {
        if c.security == crate::config::SyncSecurity::Plain {
            tracing::warn!("{PLAIN_WARNING}");
            return Ok(None);
        }
        let key = keys::SigningKey::load(&c.signing_key).map_err(|e| {
            SyncError::Keys(format!(
                "sync.signing_key: {e} (make it with `empathic keys init station`, or set [sync] security = \"plain\" for a first try)"
            ))
        })?;
        if c.study_key.trim().is_empty() {
            return Err(SyncError::Keys(
                "sync.study_key is empty: sealed sync needs the study's public key (x25519:..., from study staff's `empathic keys init study`)".into(),
            ));
        }
        let study = keys::StudyPublicKey::parse(&c.study_key)
            .map_err(|e| SyncError::Keys(format!("sync.study_key: {e}")))?;
        if c.collector_keys.is_empty() {
            return Err(SyncError::Keys(
                "sync.collector_keys is empty: sealed sync counts only receipts signed by a collector named there (ed25519:..., from `empathic keys init collector`)".into(),
            ));
        }
        let collectors = c
            .collector_keys
            .iter()
            .map(|k| keys::VerifyingKey::parse(k))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SyncError::Keys(format!("sync.collector_keys: {e}")))?;
        Ok(Some(Sealing {
            key: std::sync::Arc::new(key),
            study_key: c.study_key.trim().to_string(),
            study,
            collectors,
        }))
    }

    /// Whether `r` is signed by one of the collectors this station trusts, for this study
    /// and station (`Err` says why not).
    pub fn check_receipt(&self, r: &Receipt, study: &str, station: &str) -> Result<(), String> {
        self.signed_by_a_collector(
            "receipts",
            r.signer.as_deref(),
            r.sig.as_deref(),
            |signer| {
                keys::signed_receipt(
                    study,
                    station,
                    &r.message_id,
                    r.sha256.as_deref().unwrap_or(""),
                    r.collector.as_deref().unwrap_or(""),
                    signer,
                )
            },
        )
    }

    /// Whether hello `h` is signed by one of the collectors this station trusts, for this
    /// study and station (`Err` says why not): a forged hello could only make the station
    /// send a held message again, but it is not believed either.
    pub fn check_hello(&self, h: &Hello, study: &str, station: &str) -> Result<(), String> {
        self.signed_by_a_collector("hellos", h.signer.as_deref(), h.sig.as_deref(), |signer| {
            keys::signed_hello(study, station, &h.collector, &h.reads, signer)
        })
    }

    /// Whether refusal `r` is signed by one of the collectors this station trusts, for this
    /// study and station (`Err` says why not): a forged refusal could hold messages back.
    pub fn check_refusal(&self, r: &Refusal, study: &str, station: &str) -> Result<(), String> {
        self.signed_by_a_collector(
            "refusals",
            r.signer.as_deref(),
            r.sig.as_deref(),
            |signer| keys::signed_refusal(study, station, r, signer),
        )
    }

    /// The one check behind the three: `signer` is a key of `sync.collector_keys` and `sig`
    /// verifies over the bytes `signed(signer)`; `what` names the kind in the reason.
    fn signed_by_a_collector(
        &self,
        what: &str,
        signer: Option<&str>,
        sig: Option<&str>,
        signed: impl FnOnce(&str) -> Vec<u8>,
    ) -> Result<(), String> {
        let (Some(signer), Some(sig)) = (signer, sig) else {
            return Err(format!(
                "unsigned (sealed sync believes only signed {what})"
            ));
        };
        let Some(key) = self.collectors.iter().find(|k| k.text() == signer) else {
            return Err(format!(
                "signed by {signer}, not a key of sync.collector_keys"
            ));
        };
        if key.verifies(&signed(signer), sig) {
            Ok(())
        } else {
            Err(format!("the signature by {signer} does not verify"))
        }
    }
}

/// What plain sync says wherever it is in force.
pub const PLAIN_WARNING: &str = "sync security is PLAIN: whoever runs the broker reads every record, and any client it lets in can forge records and receipts; set [sync] security = \"sealed\" (docs/sync.md, \"Sealed sync\")";

/// `text` cut into chunks of at most [`CHUNK_CHARS`] bytes on character boundaries (one
/// empty chunk for empty text).
fn chunks_of(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(CHUNK_CHARS);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        parts.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    if parts.is_empty() {
        parts.push("");
    }
    parts
}

/// The envelope fields every version has, for chunk `i` of `n` carrying `data`.
fn envelope(
    m: &Pending,
    opts: &SyncOptions,
    version: u32,
    i: usize,
    n: usize,
    data: &str,
) -> serde_json::Value {
    serde_json::json!({
        "v": version,
        "message_id": m.message_id,
        "seq": m.seq,
        "kind": m.kind,
        "study": opts.study,
        "station": opts.station,
        "subject": m.subject,
        "chunk": i,
        "chunks": n,
        "sha256": m.sha256,
        "data": data,
    })
}

/// The plain chunk envelopes of a message (format v1), in order.
pub fn envelopes(m: &Pending, opts: &SyncOptions) -> Vec<String> {
    let parts = chunks_of(&m.payload);
    let n = parts.len();
    parts
        .iter()
        .enumerate()
        .map(|(i, data)| envelope(m, opts, ENVELOPE_VERSION, i, n, data).to_string())
        .collect()
}

/// The sealed chunk envelopes of a message (format v2), in order: `sealed` (the payload
/// sealed to the study, base64) cut into chunks, each envelope signed by the station over
/// every field but the signature ([`keys::ChunkSigned`]). `sha256` stays the plaintext's,
/// which the collector checks after opening and names in its receipt. `attempt` is this
/// send's nonce ([`crate::digest::nonce_hex`]): signed, it makes this attempt's bytes its own, so a
/// refusal of an earlier attempt names bytes this one never published.
pub fn sealed_envelopes(
    m: &Pending,
    sealed: &str,
    opts: &SyncOptions,
    key: &keys::SigningKey,
    attempt: &str,
) -> Vec<String> {
    let parts = chunks_of(sealed);
    let n = parts.len();
    parts
        .iter()
        .enumerate()
        .map(|(i, data)| {
            let signed = keys::ChunkSigned {
                study: &opts.study,
                station: &opts.station,
                kind: &m.kind,
                subject: &m.subject,
                message_id: &m.message_id,
                seq: m.seq,
                chunk: i,
                chunks: n,
                sha256: &m.sha256,
                signer: key.public(),
                data_sha256: &crate::digest::sha256_hex(data.as_bytes()),
                attempt: Some(attempt),
            };
            let mut e = envelope(m, opts, SEALED_ENVELOPE_VERSION, i, n, data);
            e["signer"] = key.public().into();
            e["attempt"] = attempt.into();
            e["sig"] = key.sign(&signed.bytes()).into();
            e.to_string()
        })
        .collect()
}
