//! The keys of sealed sync: who signed a message, and who may read it.
//!
//! Contract:
//! - A station and a collector each hold an Ed25519 signing key (`ed25519-dalek`); the
//!   study holds an X25519 key pair whose public half every station seals payloads to
//!   (libsodium's sealed box, `crypto_box`: an ephemeral X25519 key, XSalsa20-Poly1305).
//!   No construction here is this crate's own: it signs and seals bytes with those crates
//!   and defines only what bytes are signed ([`ChunkSigned`], [`signed_receipt`],
//!   [`signed_refusal`]).
//! - A secret key lives in a file of one line, `empathic-key v1 KIND BASE64` (KIND
//!   `ed25519` or `x25519`, the 32 secret bytes), created with mode 0600 and never
//!   overwritten; a key file that group or others may read is refused, naming it (as ssh
//!   does), and so is one of the wrong kind.
//! - A public key is text, `ed25519:BASE64` or `x25519:BASE64`: it goes in configs, on
//!   command lines and in the collector's enrolment table.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, Verifier};

/// The first words of a key file.
const FILE_TAG: &str = "empathic-key v1";

/// A key file or a public key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read key file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write key file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("key file {path} already exists: a key is never overwritten (move it away first, or use it)")]
    Exists { path: PathBuf },
    #[error("key file {path} is readable by group or others (mode {mode:o}): `chmod 600` it")]
    Exposed { path: PathBuf, mode: u32 },
    #[error("key file {path}: {message}")]
    Format { path: PathBuf, message: String },
    #[error("public key `{text}`: {message}")]
    Public { text: String, message: String },
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

impl crate::exit::Classify for KeyError {
    fn exit_kind(&self) -> crate::exit::ExitKind {
        match self {
            KeyError::Random(_) | KeyError::Write { .. } => crate::exit::ExitKind::Runtime,
            _ => crate::exit::ExitKind::BadInput,
        }
    }
}

/// What a key is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// Signing (a station's or a collector's).
    Ed25519,
    /// Sealing to the study (its secret half opens what stations sealed).
    X25519,
}

impl KeyKind {
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::Ed25519 => "ed25519",
            KeyKind::X25519 => "x25519",
        }
    }
}

fn random32() -> Result<[u8; 32], KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(seed)
}

/// Makes a new secret key of `kind` in `path` (mode 0600, its folder 0700 when created
/// here); returns its public half as text. Refuses to overwrite.
pub fn generate(path: &Path, kind: KeyKind) -> Result<String, KeyError> {
    let write_err = |source| KeyError::Write {
        path: path.to_path_buf(),
        source,
    };
    if path.exists() {
        return Err(KeyError::Exists {
            path: path.to_path_buf(),
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(write_err)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(write_err)?;
        }
    }
    let secret = random32()?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => KeyError::Exists {
                path: path.to_path_buf(),
            },
            _ => write_err(e),
        })?;
    writeln!(f, "{FILE_TAG} {} {}", kind.name(), B64.encode(secret)).map_err(write_err)?;
    f.sync_all().map_err(write_err)?;
    Ok(public_text(kind, &secret))
}

fn public_text(kind: KeyKind, secret: &[u8; 32]) -> String {
    let public = match kind {
        KeyKind::Ed25519 => ed25519_dalek::SigningKey::from_bytes(secret)
            .verifying_key()
            .to_bytes(),
        KeyKind::X25519 => *crypto_box::SecretKey::from_bytes(*secret)
            .public_key()
            .as_bytes(),
    };
    format!("{}:{}", kind.name(), B64.encode(public))
}

/// Reads the secret of a key file, checking its permissions and kind.
fn read_secret(path: &Path, kind: KeyKind) -> Result<[u8; 32], KeyError> {
    let read_err = |source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Exposed {
            path: path.to_path_buf(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(read_err)?;
    let format = |message: String| KeyError::Format {
        path: path.to_path_buf(),
        message,
    };
    let rest = text
        .trim()
        .strip_prefix(FILE_TAG)
        .ok_or_else(|| format(format!("does not start with `{FILE_TAG}`")))?;
    let mut words = rest.split_whitespace();
    let (Some(found), Some(b64), None) = (words.next(), words.next(), words.next()) else {
        return Err(format("expected `KIND BASE64` after the tag".into()));
    };
    if found != kind.name() {
        return Err(format(format!(
            "holds an {found} key where an {} key is needed",
            kind.name()
        )));
    }
    let bytes = B64
        .decode(b64)
        .map_err(|e| format(format!("not base64: {e}")))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format(format!("{} bytes where a key has 32", b.len())))
}

/// The public half of the key in `path`, as text.
pub fn public_of_file(path: &Path) -> Result<String, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let kind = if text.contains(" x25519 ") {
        KeyKind::X25519
    } else {
        KeyKind::Ed25519
    };
    Ok(public_text(kind, &read_secret(path, kind)?))
}

/// The 32 bytes of a public key written `KIND:BASE64`.
fn public_bytes(text: &str, kind: KeyKind) -> Result<[u8; 32], KeyError> {
    let bad = |message: String| KeyError::Public {
        text: text.to_string(),
        message,
    };
    let b64 = text
        .trim()
        .strip_prefix(kind.name())
        .and_then(|rest| rest.strip_prefix(':'))
        .ok_or_else(|| bad(format!("expected `{}:BASE64`", kind.name())))?;
    B64.decode(b64)
        .map_err(|_| bad("not base64".into()))?
        .try_into()
        .map_err(|_| bad("not 32 bytes".into()))
}

/// A signing key (a station's or a collector's) and its public half as text.
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    public: String,
}

impl SigningKey {
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let secret = read_secret(path, KeyKind::Ed25519)?;
        Ok(Self {
            key: ed25519_dalek::SigningKey::from_bytes(&secret),
            public: public_text(KeyKind::Ed25519, &secret),
        })
    }

    /// `ed25519:BASE64`.
    pub fn public(&self) -> &str {
        &self.public
    }

    /// The signature of `message`, base64.
    pub fn sign(&self, message: &[u8]) -> String {
        B64.encode(self.key.sign(message).to_bytes())
    }
}

/// A public signing key, parsed from `ed25519:BASE64`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyingKey {
    key: ed25519_dalek::VerifyingKey,
    text: String,
}

impl VerifyingKey {
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        let bytes = public_bytes(text, KeyKind::Ed25519)?;
        let key =
            ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| KeyError::Public {
                text: text.to_string(),
                message: "not a valid Ed25519 point".into(),
            })?;
        Ok(Self {
            key,
            text: format!("ed25519:{}", B64.encode(bytes)),
        })
    }

    /// The canonical text form.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether `signature` (base64) is this key's over `message` (strict verification:
    /// no malleable or small-order forms).
    pub fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Ok(bytes) = B64.decode(signature) else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(bytes.as_slice()) else {
            return false;
        };
        let sig = ed25519_dalek::Signature::from_bytes(&bytes);
        self.key.verify_strict(message, &sig).is_ok() && self.key.verify(message, &sig).is_ok()
    }
}

/// The study's public sealing key, parsed from `x25519:BASE64`.
#[derive(Debug, Clone)]
pub struct StudyPublicKey(crypto_box::PublicKey);

impl StudyPublicKey {
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        Ok(Self(crypto_box::PublicKey::from_bytes(public_bytes(
            text,
            KeyKind::X25519,
        )?)))
    }

    /// `plaintext` sealed to the study (libsodium's sealed box), base64: only the study's
    /// secret key opens it; 48 bytes longer than the plaintext before base64.
    pub fn seal(&self, plaintext: &[u8]) -> Result<String, KeyError> {
        let sealed = self
            .0
            .seal(&mut crypto_box::aead::OsRng, plaintext)
            .map_err(|e| KeyError::Random(format!("sealing failed: {e}")))?;
        Ok(B64.encode(sealed))
    }
}

/// The study's secret key: opens sealed payloads.
pub struct StudySecretKey(crypto_box::SecretKey);

impl StudySecretKey {
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        Ok(Self(crypto_box::SecretKey::from_bytes(read_secret(
            path,
            KeyKind::X25519,
        )?)))
    }

    /// Opens a sealed payload (base64); `Err` names why (not base64, or not sealed to
    /// this study's key, or altered).
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, String> {
        let bytes = B64
            .decode(sealed)
            .map_err(|e| format!("sealed payload is not base64: {e}"))?;
        self.0
            .unseal(&bytes)
            .map_err(|_| "sealed payload does not open with the study's key (sealed to another key, or altered)".to_string())
    }
}

/// What a station signs for one chunk of a message: the whole envelope (format
/// `empathic-sync` v2) but the signature, with this chunk's data as its sha256. The signed
/// bytes are a JSON array, so no field can run into the next.
///
/// `attempt` is the send attempt's nonce (a fresh one each time the message is
/// published): signed (`empathic-sync-chunk-v3`), it makes the bytes of every attempt
/// differ, so a refusal naming one attempt's bytes cannot be replayed against a later one.
/// Without it (stations before the nonce) the bytes are `empathic-sync-chunk-v2`.
#[derive(Debug, Clone, Copy)]
pub struct ChunkSigned<'a> {
    pub study: &'a str,
    pub station: &'a str,
    pub kind: &'a str,
    pub subject: &'a str,
    pub message_id: &'a str,
    pub seq: i64,
    pub chunk: usize,
    pub chunks: usize,
    /// The whole message's plaintext sha256.
    pub sha256: &'a str,
    pub signer: &'a str,
    /// The sha256 of this chunk's data: what a central database keeps of one chunk (its
    /// `proof`) is enough to verify a record again without its sealed data.
    pub data_sha256: &'a str,
    pub attempt: Option<&'a str>,
}

impl ChunkSigned<'_> {
    /// The bytes signed.
    pub fn bytes(&self) -> Vec<u8> {
        let mut fields = serde_json::json!([
            "empathic-sync-chunk-v2",
            self.study,
            self.station,
            self.kind,
            self.subject,
            self.message_id,
            self.seq,
            self.chunk,
            self.chunks,
            self.sha256,
            self.signer,
            self.data_sha256
        ]);
        if let (Some(a), Some(list)) = (self.attempt, fields.as_array_mut()) {
            list[0] = "empathic-sync-chunk-v3".into();
            list.push(a.into());
        }
        fields.to_string().into_bytes()
    }
}

/// What a collector signs for a receipt.
pub fn signed_receipt(
    study: &str,
    station: &str,
    message_id: &str,
    sha256: &str,
    collector: &str,
    signer: &str,
) -> Vec<u8> {
    serde_json::json!([
        "empathic-sync-receipt-v2",
        study,
        station,
        message_id,
        sha256,
        collector,
        signer
    ])
    .to_string()
    .into_bytes()
}

/// What a collector signs for a refusal `r` of a message of `study` and `station`: the
/// message it refused (and that message's sha256 as announced), the exact envelope bytes
/// refused, who refused, the reason's code and text, whether it was final, and what the
/// collector reads. Version 3 carries `reads`, version 2 names the envelope bytes without
/// it, version 1 (the oldest collectors) neither.
pub fn signed_refusal(study: &str, station: &str, r: &super::Refusal, signer: &str) -> Vec<u8> {
    let mut fields = vec![
        serde_json::Value::from("empathic-sync-refusal-v1"),
        study.into(),
        station.into(),
        r.message_id.as_str().into(),
        r.sha256.as_str().into(),
    ];
    if let Some(envelope) = &r.envelope_sha256 {
        fields[0] = "empathic-sync-refusal-v2".into();
        fields.push(envelope.as_str().into());
    }
    fields.extend([
        r.collector.as_str().into(),
        r.code.as_str().into(),
        r.reason.as_str().into(),
        r.settled.into(),
        signer.into(),
    ]);
    if let (Some(reads), Some(_)) = (&r.reads, &r.envelope_sha256) {
        fields[0] = "empathic-sync-refusal-v3".into();
        fields.push(reads.as_str().into());
    }
    serde_json::Value::Array(fields).to_string().into_bytes()
}

/// What a collector signs for its hello to one station (`sync::Hello`): who it is and what
/// it reads.
pub fn signed_hello(
    study: &str,
    station: &str,
    collector: &str,
    reads: &str,
    signer: &str,
) -> Vec<u8> {
    serde_json::json!([
        "empathic-sync-hello-v1",
        study,
        station,
        collector,
        reads,
        signer
    ])
    .to_string()
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sign_seal_and_refuse_what_they_should() {
        let dir = tempfile::tempdir().unwrap();
        let station = dir.path().join("keys/station.key");
        let public = generate(&station, KeyKind::Ed25519).unwrap();
        assert!(public.starts_with("ed25519:"));
        assert_eq!(
            std::fs::metadata(&station).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(matches!(
            generate(&station, KeyKind::Ed25519),
            Err(KeyError::Exists { .. })
        ));
        let key = SigningKey::load(&station).unwrap();
        assert_eq!(key.public(), public);
        assert_eq!(public_of_file(&station).unwrap(), public);
        let sig = key.sign(b"hello");
        let v = VerifyingKey::parse(&public).unwrap();
        assert!(v.verifies(b"hello", &sig));
        assert!(!v.verifies(b"hellO", &sig));
        assert!(!v.verifies(b"hello", "AAAA"));

        let study = dir.path().join("study.key");
        let study_public = generate(&study, KeyKind::X25519).unwrap();
        let sealed = StudyPublicKey::parse(&study_public)
            .unwrap()
            .seal(b"the participant's words")
            .unwrap();
        assert!(!sealed.contains("words"));
        let secret = StudySecretKey::load(&study).unwrap();
        assert_eq!(secret.open(&sealed).unwrap(), b"the participant's words");
        let other = dir.path().join("other.key");
        generate(&other, KeyKind::X25519).unwrap();
        assert!(StudySecretKey::load(&other).unwrap().open(&sealed).is_err());

        // Wrong kind, exposed file, bad public text.
        assert!(matches!(
            SigningKey::load(&study),
            Err(KeyError::Format { .. })
        ));
        std::fs::set_permissions(&station, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            SigningKey::load(&station),
            Err(KeyError::Exposed { .. })
        ));
        assert!(VerifyingKey::parse(&study_public).is_err());
        assert!(StudyPublicKey::parse(&public).is_err());
    }
}
