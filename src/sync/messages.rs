//! The messages a collector sends back to a station (receipts, refusals, hellos), as both
//! sides read and write them; specified in docs/formats.md ("Study sync").

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
    /// [`super::keys::signed_receipt`].
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
/// signed by a key of `sync.collector_keys` over [`super::keys::signed_refusal`].
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
/// ([`super::keys::signed_hello`]).
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
