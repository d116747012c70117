//! Moonshine's vocabulary (`tokenizer.bin`): ids to text.
//!
//! Contract: the file is 32,768 entries in id order, each a length (one byte, or two when
//! the first has its high bit set: `(b0 & 0x7f) | (b1 << 7)`) then that many bytes. Ids 0-2
//! are `<unk>`, `<s>`, `</s>`; ids 3-258 are the raw bytes 0-255; the rest are pieces with
//! U+2581 for a space. Decoding joins the pieces' bytes (skipping the three specials),
//! reads them as UTF-8 (invalid sequences replaced) and turns U+2581 into spaces.

use std::path::Path;

/// Beginning and end of a sequence.
pub const BOS: i64 = 1;
pub const EOS: i64 = 2;

pub struct Vocabulary {
    pieces: Vec<Vec<u8>>,
}

impl Vocabulary {
    pub fn load(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let mut pieces = Vec::with_capacity(32_768);
        let mut i = 0;
        while i < bytes.len() {
            let b0 = bytes[i];
            i += 1;
            let len = if b0 >= 0x80 {
                let b1 = *bytes
                    .get(i)
                    .ok_or_else(|| format!("entry {} cut short", pieces.len()))?;
                i += 1;
                usize::from(b0 & 0x7f) | (usize::from(b1) << 7)
            } else {
                usize::from(b0)
            };
            let piece = bytes
                .get(i..i + len)
                .ok_or_else(|| format!("entry {} cut short", pieces.len()))?;
            pieces.push(piece.to_vec());
            i += len;
        }
        if pieces.len() < 259 {
            return Err(format!("{} entries, expected 32768", pieces.len()));
        }
        Ok(Self { pieces })
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The text of `ids` (specials and unknown ids skipped).
    pub fn decode(&self, ids: &[i64]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if id <= EOS {
                continue;
            }
            if let Some(p) = usize::try_from(id).ok().and_then(|i| self.pieces.get(i)) {
                bytes.extend_from_slice(p);
            }
        }
        String::from_utf8_lossy(&bytes)
            .replace('\u{2581}', " ")
            .trim()
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_bytes_and_two_byte_lengths_decode() {
        let mut file = Vec::new();
        for p in [&b"<unk>"[..], b"<s>", b"</s>"] {
            file.push(p.len() as u8);
            file.extend_from_slice(p);
        }
        for b in 0..=255u8 {
            file.extend_from_slice(&[1, b]);
        }
        let hello = "\u{2581}hello".as_bytes();
        file.push(hello.len() as u8);
        file.extend_from_slice(hello);
        let long = vec![b'a'; 200];
        file.extend_from_slice(&[0x80 | (200 & 0x7f) as u8, (200 >> 7) as u8]);
        file.extend_from_slice(&long);
        let v = Vocabulary::parse(&file).unwrap();
        assert_eq!(v.len(), 261);
        // id 259 is "▁hello", 3 + b'!' the byte "!", specials skipped.
        assert_eq!(v.decode(&[BOS, 259, 3 + 33, EOS]), "hello!");
        assert_eq!(v.decode(&[260]).len(), 200);
        assert!(Vocabulary::parse(&file[..file.len() - 1]).is_err());
    }
}
