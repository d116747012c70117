//! What the bystander screen did to a frame, carried with it and kept in the recording.
//!
//! Contract: a [`Screening`] says how many faces the screen found in a frame, how many of
//! them were bystanders, how many regions it masked (bystanders, and for a few frames where
//! one was just seen) and whether the participant was found. A live recording made under
//! `[privacy] bystanders = "mask"` carries it in every frame's JPEG as a comment segment
//! (`COM`, marker `FF FE`, right after `SOI`) reading
//! `empathic-screen v1 faces=F bystanders=B masked=M participant=0|1[ box=X0,Y0,X1,Y1]`
//! (the box: the participant's face, when found; readers skip keys they do not know, so
//! a v1 reader reads a frame written with more keys): decoders skip
//! comments, so the image is unchanged, and a replay reads the screening back instead of
//! screening the already-masked frame again (which would find no bystander). Nothing about
//! a bystander but these counts is ever kept.

/// Frames a bystander's last region stays masked after the detector last found it (the
/// screen's hold; here, beside the counts it explains, for builds without the sensing
/// stack that read them).
pub const HOLD_FRAMES: u32 = 8;

/// The comment's prefix and version.
const MARK: &str = "empathic-screen v1";

/// One frame's screening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Screening {
    /// Faces the detector found (the participant and any bystanders).
    pub faces: u16,
    /// Faces that were not the participant's.
    pub bystanders: u16,
    /// Regions filled (bystanders now, and ones seen in the last few frames).
    pub masked: u16,
    /// The participant's face was found.
    pub participant: bool,
    /// Where: the detector's box around the participant's face (x0, y0, x1, y1 in
    /// pixels), so a stage without a face of its own (the body in `extract body`) can
    /// tell the participant's person from a bystander's. Only the participant's place is
    /// kept, never a bystander's.
    pub participant_box: Option<[i16; 4]>,
}

impl Screening {
    fn comment(&self) -> String {
        let mut text = format!(
            "{MARK} faces={} bystanders={} masked={} participant={}",
            self.faces,
            self.bystanders,
            self.masked,
            u8::from(self.participant)
        );
        if let Some([x0, y0, x1, y1]) = self.participant_box {
            text.push_str(&format!(" box={x0},{y0},{x1},{y1}"));
        }
        text
    }

    fn parse(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(MARK)?;
        let mut s = Screening::default();
        for field in rest.split_whitespace() {
            let (key, value) = field.split_once('=')?;
            match key {
                "faces" => s.faces = value.parse().ok()?,
                "bystanders" => s.bystanders = value.parse().ok()?,
                "masked" => s.masked = value.parse().ok()?,
                "participant" => s.participant = value == "1",
                "box" => {
                    let v: Vec<i16> = value
                        .split(',')
                        .map(str::parse)
                        .collect::<Result<_, _>>()
                        .ok()?;
                    s.participant_box = Some(<[i16; 4]>::try_from(v).ok()?);
                }
                _ => {}
            }
        }
        Some(s)
    }
}

/// `jpeg` with `screening`'s comment segment inserted after its start-of-image marker (a
/// buffer that is not a JPEG image is returned unchanged).
pub fn mark(jpeg: &[u8], screening: &Screening) -> Vec<u8> {
    if jpeg.len() < 2 || jpeg[0] != 0xFF || jpeg[1] != 0xD8 {
        return jpeg.to_vec();
    }
    let text = screening.comment();
    // The length field counts itself (2 bytes) and the text.
    let len = (text.len() + 2) as u16;
    let mut out = Vec::with_capacity(jpeg.len() + text.len() + 4);
    out.extend_from_slice(&jpeg[..2]);
    out.extend_from_slice(&[0xFF, 0xFE]);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// The screening a frame was recorded with: the first segment after start-of-image, when
/// it is this module's comment; `None` for frames recorded without screening.
pub fn read_mark(jpeg: &[u8]) -> Option<Screening> {
    if jpeg.len() < 6 || jpeg[..4] != [0xFF, 0xD8, 0xFF, 0xFE] {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([jpeg[4], jpeg[5]]));
    let text = jpeg.get(6..4 + len)?;
    Screening::parse(std::str::from_utf8(text).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_screening_survives_its_jpeg_comment_and_leaves_the_image_bytes_alone() {
        let jpeg = [0xFF, 0xD8, 0xFF, 0xDB, 0x00, 0x02, 0xFF, 0xD9];
        let s = Screening {
            faces: 2,
            bystanders: 1,
            masked: 1,
            participant: true,
            participant_box: Some([10, -2, 300, 411]),
        };
        let marked = mark(&jpeg, &s);
        assert_eq!(read_mark(&marked), Some(s));
        let without = Screening {
            participant_box: None,
            ..s
        };
        assert_eq!(read_mark(&mark(&jpeg, &without)), Some(without));
        assert_eq!(&marked[marked.len() - 6..], &jpeg[2..]);
        assert_eq!(read_mark(&jpeg), None);
        assert_eq!(mark(b"not a jpeg", &s), b"not a jpeg");
    }
}
