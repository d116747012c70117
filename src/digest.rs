//! SHA-256 as lowercase hex: the one way the crate names bytes by their digest (model
//! files in the manifest, outbox payloads and message ids, signed sync messages).
//!
//! Contract: [`sha256_hex`] of bytes in memory and [`sha256_file`] of a file read in
//! 64 KiB pieces give the same 64 lowercase hex digits for the same bytes; [`nonce_hex`]
//! gives 32 hex digits that differ from call to call.

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The sha256 of the file at `path`, lowercase hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// A nonce: 16 random bytes from the OS's generator, lowercase hex (session tokens, sync
/// send attempts). When the generator cannot be read, the clock in nanoseconds stands in:
/// unique enough to tell one from the next, guessable only by a caller of this machine.
pub fn nonce_hex() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        bytes = t.to_le_bytes();
    }
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_and_its_bytes_have_one_digest() {
        // FIPS 180-2's "abc".
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_hex(b"abc"), abc);
        let dir = std::env::temp_dir().join(format!("empathic-digest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("abc");
        std::fs::write(&f, b"abc").unwrap();
        assert_eq!(sha256_file(&f).unwrap(), abc);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
