//! A station's retained `status` (`online`, or `offline` as its last will), and how a
//! collector decides whether to believe one.
//!
//! Contract: on `empathic/v1/{study}/{station}/status`, retained at QoS 1. Plain sync sends
//! the bare word. Sealed sync sends a [`SignedStatus`] (JSON, format `empathic-status`
//! version 1) signed by the station's key over [`signed_bytes`], stamped with its
//! connection (`clock::utc_now` just before connecting): the last will is signed at connect
//! time with the same stamp, so a collector orders a station's status words by connection
//! and a replayed `offline` of an earlier connection changes nothing. Under sealed sync no
//! unsigned word changes what staff see (the gate refuses it like an unsigned record).

use serde::{Deserialize, Serialize};

use super::wire::Sealing;

pub const STATUS_FORMAT: &str = "empathic-status";
pub const STATUS_VERSION: u32 = 1;
/// The largest status payload taken.
pub const MAX_STATUS_BYTES: usize = 1024;
/// The words a status may say.
pub const WORDS: [&str; 2] = ["online", "offline"];

/// A signed status word.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedStatus {
    pub format: String,
    pub v: u32,
    pub study: String,
    pub station: String,
    pub status: String,
    /// When the connection this word belongs to was made (RFC 3339 UTC, milliseconds).
    pub connection: String,
    pub signer: String,
    #[serde(default)]
    pub sig: String,
}

/// What a signature covers: a domain line, then the message's JSON with `sig` empty.
pub fn signed_bytes(s: &SignedStatus) -> Vec<u8> {
    let mut unsigned = s.clone();
    unsigned.sig = String::new();
    let mut out = b"empathic-status-v1\n".to_vec();
    out.extend(serde_json::to_vec(&unsigned).unwrap_or_default());
    out
}

/// The payload a station publishes for `word` on the connection stamped `connection`:
/// the bare word under plain sync, a [`SignedStatus`] under sealed sync.
pub fn payload(
    sealing: Option<&Sealing>,
    study: &str,
    station: &str,
    word: &str,
    connection: &str,
) -> Vec<u8> {
    let Some(s) = sealing else {
        return word.as_bytes().to_vec();
    };
    let mut status = SignedStatus {
        format: STATUS_FORMAT.into(),
        v: STATUS_VERSION,
        study: study.into(),
        station: station.into(),
        status: word.into(),
        connection: connection.into(),
        signer: s.key.public().to_string(),
        sig: String::new(),
    };
    status.sig = s.key.sign(&signed_bytes(&status));
    serde_json::to_vec(&status).unwrap_or_default()
}

/// A received status, checked for form (the signature is the gate's to check).
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub study: String,
    pub station: String,
    pub status: String,
    /// The signed message, when it was one.
    pub signed: Option<SignedStatus>,
}

/// Parses a status publish on `topic`: a bare word (plain) or a [`SignedStatus`] naming
/// the study and station of its topic, with a connection stamp of the station's form.
pub fn check(topic: &str, payload: &[u8]) -> Result<Received, String> {
    if payload.len() > MAX_STATUS_BYTES {
        return Err(format!(
            "status message of {} bytes (at most {MAX_STATUS_BYTES})",
            payload.len()
        ));
    }
    let parts: Vec<&str> = topic.split('/').collect();
    if parts.len() != 5 || parts[4] != "status" {
        return Err("a status message on a topic that is not a station's status".into());
    }
    let (study, station) = (parts[2].to_string(), parts[3].to_string());
    if WORDS.iter().any(|w| w.as_bytes() == payload) {
        return Ok(Received {
            study,
            station,
            status: String::from_utf8_lossy(payload).into_owned(),
            signed: None,
        });
    }
    let s: SignedStatus = serde_json::from_slice(payload).map_err(|_| {
        format!(
            "status message of {} bytes that is neither a word ({}) nor an {STATUS_FORMAT} object",
            payload.len(),
            WORDS.join(", ")
        )
    })?;
    if s.format != STATUS_FORMAT || s.v != STATUS_VERSION {
        return Err(format!(
            "status message of format {} version {} (this collector reads {STATUS_FORMAT} version {STATUS_VERSION})",
            super::health::printable(&s.format, 40),
            s.v
        ));
    }
    if s.study != study || s.station != station {
        return Err("a status message naming another study or station than its topic".into());
    }
    if !WORDS.contains(&s.status.as_str()) {
        return Err(format!(
            "status word {:?}: expected {}",
            super::health::printable(&s.status, 40),
            WORDS.join(" or ")
        ));
    }
    super::health::check_stamp("status `connection`", &s.connection)?;
    Ok(Received {
        study,
        station,
        status: s.status.clone(),
        signed: Some(s),
    })
}
