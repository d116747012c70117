//! A received MQTT message's envelope: parsed and checked against its topic before any
//! rule looks at it.

use super::*;

/// A chunk envelope, checked.
pub(super) struct Envelope {
    pub(super) id: String,
    pub(super) kind: String,
    pub(super) study: String,
    pub(super) station: String,
    pub(super) subject: String,
    pub(super) sha: String,
    pub(super) data: String,
    pub(super) chunk: i64,
    pub(super) chunks: i64,
    /// The station's outbox sequence number (absent from older publishers: then arrival
    /// order stands in for it).
    pub(super) seq: Option<i64>,
    /// Sealed sync (format v2): the signer's public key and the signature over
    /// `keys::ChunkSigned`; `data` is then a piece of the payload sealed to the study.
    pub(super) signed: Option<(String, String)>,
    /// What the record keeps to be verified again (signed envelopes; a copied record's
    /// from its source).
    pub(super) proof: Option<Proof>,
}

/// What a central record keeps to be verified again (`collect_records.proof`, JSON): the
/// signer, the signature and the digest of the one chunk whose signature it is. The signed
/// bytes name the message's plaintext sha256, so the proof and the payload verify the
/// record with no sealed data kept.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Proof {
    pub(super) signer: String,
    pub(super) sig: String,
    pub(super) chunk: i64,
    pub(super) chunks: i64,
    pub(super) data_sha256: String,
    /// The send attempt's nonce the signature covers (stations before it signed none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) attempt: Option<String>,
}

impl Envelope {
    /// Whether `p` (this envelope's own proof, or one a central record kept) is a valid
    /// signature by `p.signer` over this message: the one check of a station's signature
    /// for the live gate and `collect copy` alike (`keys::ChunkSigned`).
    pub(super) fn proof_verifies(&self, p: &Proof) -> bool {
        let (Some(seq), Ok(chunk), Ok(chunks)) = (
            self.seq,
            usize::try_from(p.chunk),
            usize::try_from(p.chunks),
        ) else {
            return false;
        };
        let signed = keys::ChunkSigned {
            study: &self.study,
            station: &self.station,
            kind: &self.kind,
            subject: &self.subject,
            message_id: &self.id,
            seq,
            chunk,
            chunks,
            sha256: &self.sha,
            signer: &p.signer,
            data_sha256: &p.data_sha256,
            attempt: p.attempt.as_deref(),
        }
        .bytes();
        keys::VerifyingKey::parse(&p.signer).is_ok_and(|k| k.verifies(&signed, &p.sig))
    }

    pub(super) fn receipt_topic(&self) -> String {
        format!("empathic/v1/{}/{}/receipt", self.study, self.station)
    }

    /// What quarantine keeps of a chunk refused before its message was read: the envelope
    /// without its data (sealed or not, a participant's words have no business there), so
    /// a withdrawal finds it by the subject it names.
    pub(super) fn summary(&self) -> String {
        serde_json::json!({
            "message_id": self.id, "kind": self.kind, "study": self.study,
            "station": self.station, "subject": self.subject, "seq": self.seq,
            "chunk": self.chunk, "chunks": self.chunks, "sha256": self.sha,
            "signed": self.signed.is_some(), "data_bytes": self.data.len(),
        })
        .to_string()
    }

    /// The refusal this envelope's message gets for `refused`.
    pub(super) fn refusal(&self, refused: &Refused, settled: bool) -> Refusal {
        Refusal {
            topic: format!("empathic/v1/{}/{}/refusal", self.study, self.station),
            message_id: self.id.clone(),
            sha256: self.sha.clone(),
            code: refused.code,
            reason: refused.reason.clone(),
            settled,
        }
    }
}

pub(super) fn parse_envelope(topic: &str, payload: &[u8]) -> Result<Envelope, String> {
    if payload.len() > MAX_ENVELOPE_BYTES {
        return Err(format!(
            "{} bytes, over the {MAX_ENVELOPE_BYTES} limit",
            payload.len()
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("not JSON: {e}"))?;
    let text = |k: &str| v[k].as_str().map(str::to_string);
    let (Some(id), Some(kind), Some(study), Some(station), Some(subject), Some(sha), Some(data)) = (
        text("message_id"),
        text("kind"),
        text("study"),
        text("station"),
        text("subject"),
        text("sha256"),
        text("data"),
    ) else {
        return Err("an envelope field is missing or not text".into());
    };
    let version = v["v"].as_u64();
    let signed = if version == Some(u64::from(SEALED_ENVELOPE_VERSION)) {
        let (Some(signer), Some(sig)) = (text("signer"), text("sig")) else {
            return Err("a sealed envelope without `signer` and `sig`".into());
        };
        if !v["seq"].is_i64() {
            return Err("a sealed envelope without `seq`".into());
        }
        Some((signer, sig))
    } else if version == Some(u64::from(ENVELOPE_VERSION)) {
        None
    } else {
        return Err(format!(
            "envelope version {} (this build reads {ENVELOPE_VERSION} and {SEALED_ENVELOPE_VERSION})",
            v["v"]
        ));
    };
    let (Some(chunk), Some(chunks)) = (v["chunk"].as_u64(), v["chunks"].as_u64()) else {
        return Err("chunk numbers missing".into());
    };
    if chunks == 0 || chunk >= chunks || chunks > 100_000 {
        return Err(format!("chunk {chunk} of {chunks}"));
    }
    if !matches!(kind.as_str(), "session" | "tombstone" | "purge" | "consent") {
        return Err(format!(
            "kind `{kind}` is not session, tombstone, purge or consent"
        ));
    }
    // The one id rule, here too: a subject (a session or participant id) becomes folder
    // names in `export windows`, a station's name reaches pages and terminals.
    for (field, value) in [
        ("message_id", &id),
        ("study", &study),
        ("station", &station),
        ("subject", &subject),
    ] {
        crate::session::manifest::check_id(field, value)?;
    }
    if topic != format!("empathic/v1/{study}/{station}/{kind}") {
        return Err(format!(
            "topic {topic} does not match the envelope ({study}/{station}/{kind})"
        ));
    }
    let seq = match &v["seq"] {
        serde_json::Value::Null => None,
        s => Some(
            s.as_i64()
                .filter(|s| *s > 0)
                .ok_or_else(|| format!("seq {s} is not a positive integer"))?,
        ),
    };
    // A send attempt's nonce is short hex; anything else is not one this project wrote.
    let attempt = match &v["attempt"] {
        serde_json::Value::Null => None,
        serde_json::Value::String(a)
            if (1..=64).contains(&a.len()) && a.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Some(a.clone())
        }
        a => {
            return Err(format!(
                "attempt {a} is not a hex nonce of at most 64 digits"
            ))
        }
    };
    let proof = signed.as_ref().map(|(signer, sig)| Proof {
        signer: signer.clone(),
        sig: sig.clone(),
        chunk: chunk as i64,
        chunks: chunks as i64,
        data_sha256: crate::digest::sha256_hex(data.as_bytes()),
        attempt,
    });
    Ok(Envelope {
        id,
        kind,
        study,
        station,
        subject,
        sha,
        data,
        chunk: chunk as i64,
        chunks: chunks as i64,
        seq,
        signed,
        proof,
    })
}
