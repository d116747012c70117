//! Motion-JPEG AVI, written and read without re-encoding: the live recorder stores the
//! camera's own JPEG buffers, the file-backed camera and the replay of a recording read
//! them back byte for byte.
//!
//! Contract (RIFF AVI 1.0, one `vids`/`MJPG` stream): [`MjpegAviWriter`] writes a fixed
//! 212-byte header, then one `00dc` chunk per slot of the nominal frame grid. A slot with no
//! frame (a dropped frame) is a chunk of size 0, the AVI convention players show as a
//! repeat of the previous frame; readers here hand it out as "no frame". Every chunk is
//! written whole before the next starts, so a file cut anywhere (power loss, SIGKILL) holds
//! every complete chunk: [`read_chunks`] scans chunks and ignores the header's sizes, and
//! [`finalize`] (on stop, or at the next start for an interrupted file) truncates a torn last
//! chunk, appends the `idx1` index and patches the sizes and frame counts, after which any
//! player (FFmpeg, OpenCV) opens the file.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::CaptureError;

/// Bytes before the `movi` list's first chunk.
const HEADER_LEN: u64 = 224;
/// Offset of the `movi` fourcc (idx1 offsets count from here).
const MOVI_FOURCC_AT: u64 = 220;
/// AVIF_HASINDEX.
const AVIF_HASINDEX: u32 = 0x10;
/// AVIIF_KEYFRAME.
const AVIIF_KEYFRAME: u32 = 0x10;
/// Largest JPEG chunk accepted when reading (a 4K MJPEG frame is well below this).
const MAX_CHUNK: u32 = 64 << 20;

/// Stream parameters kept in the header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AviFormat {
    pub width: u32,
    pub height: u32,
    pub fps: f64,
}

/// What a scan of the chunks found.
#[derive(Debug, Clone, PartialEq)]
pub struct AviContents {
    pub format: AviFormat,
    /// Per slot: the file offset of the chunk's data and its size (0: no frame).
    pub chunks: Vec<(u64, u32)>,
    /// Whether the file ended cleanly (an index, or the last chunk complete).
    pub torn_tail: bool,
    /// Whether the file carries its index (finalised).
    pub indexed: bool,
}

/// Appends JPEG buffers to a new AVI file.
pub struct MjpegAviWriter {
    path: PathBuf,
    file: BufWriter<File>,
    format: AviFormat,
    /// (data offset, size) per slot.
    chunks: Vec<(u64, u32)>,
    pos: u64,
}

impl MjpegAviWriter {
    /// Creates `path` (refusing to overwrite) and writes the header.
    pub fn create(path: &Path, format: AviFormat) -> Result<Self, CaptureError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io_err(path, "create", e))?;
        Self::new(file, path, format)
    }

    /// Writes the header into `file`, new and open for reading and writing (`path` names it
    /// in messages): how the recorder writes beneath its folder (`files::beneath`).
    pub fn new(file: File, path: &Path, format: AviFormat) -> Result<Self, CaptureError> {
        let mut file = BufWriter::new(file);
        file.write_all(&header(format, 0, 0, 0))
            .map_err(|e| io_err(path, "write the header of", e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            format,
            chunks: Vec::new(),
            pos: HEADER_LEN,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Slots written so far.
    pub fn slots(&self) -> u64 {
        self.chunks.len() as u64
    }

    /// Writes one slot: a JPEG buffer, or `None` for a slot with no frame.
    pub fn write_slot(&mut self, jpeg: Option<&[u8]>) -> Result<(), CaptureError> {
        let data = jpeg.unwrap_or(&[]);
        let size = u32::try_from(data.len()).map_err(|_| CaptureError::Device {
            device: self.path.display().to_string(),
            message: format!("a {} byte frame does not fit an AVI chunk", data.len()),
        })?;
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(b"00dc");
        head[4..].copy_from_slice(&size.to_le_bytes());
        let pad = data.len() % 2;
        let path = &self.path;
        self.file
            .write_all(&head)
            .and_then(|()| self.file.write_all(data))
            .and_then(|()| self.file.write_all(&[0u8; 1][..pad]))
            .map_err(|e| io_err(path, "write a frame to", e))?;
        self.chunks.push((self.pos + 8, size));
        self.pos += 8 + data.len() as u64 + pad as u64;
        Ok(())
    }

    /// Pushes buffered chunks to the operating system (and to the disk with `sync`).
    pub fn flush(&mut self, sync: bool) -> Result<(), CaptureError> {
        self.file
            .flush()
            .map_err(|e| io_err(&self.path, "write", e))?;
        if sync {
            self.file
                .get_ref()
                .sync_data()
                .map_err(|e| io_err(&self.path, "sync", e))?;
        }
        Ok(())
    }

    /// Writes the index and the final sizes; the file is then a complete AVI.
    pub fn finish(mut self) -> Result<AviContents, CaptureError> {
        self.flush(false)?;
        let contents = AviContents {
            format: self.format,
            chunks: std::mem::take(&mut self.chunks),
            torn_tail: false,
            indexed: false,
        };
        // The file it created, still open (never reopened by its path).
        let file = self
            .file
            .into_inner()
            .map_err(|e| io_err(&self.path, "write", e.into_error()))?;
        write_index(file, &self.path, &contents)?;
        Ok(AviContents {
            indexed: true,
            ..contents
        })
    }
}

/// Finalises a file a crash left without its index: drops a torn last chunk, writes the
/// index and sizes. Returns what it holds. A file already finalised is left as it is.
pub fn finalize(path: &Path) -> Result<AviContents, CaptureError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io_err(path, "open", e))?;
    finalize_file(file, path)
}

/// [`finalize`] on a file already open for reading and writing (`path` names it in
/// messages): how a recording is repaired beneath its folder (`files::beneath`).
pub fn finalize_file(file: File, path: &Path) -> Result<AviContents, CaptureError> {
    let reader = file.try_clone().map_err(|e| io_err(path, "open", e))?;
    let contents = read_chunks_from(reader, path)?;
    if contents.indexed {
        return Ok(contents);
    }
    write_index(file, path, &contents)?;
    Ok(AviContents {
        indexed: true,
        torn_tail: contents.torn_tail,
        ..contents
    })
}

fn write_index(mut file: File, path: &Path, contents: &AviContents) -> Result<(), CaptureError> {
    let end = contents.chunks.last().map_or(HEADER_LEN, |&(at, size)| {
        at + u64::from(size) + u64::from(size % 2)
    });
    file.set_len(end)
        .map_err(|e| io_err(path, "truncate the torn end of", e))?;
    let mut index = Vec::with_capacity(8 + 16 * contents.chunks.len());
    index.extend_from_slice(b"idx1");
    index.extend_from_slice(&u32_le(16 * contents.chunks.len() as u64));
    for &(at, size) in &contents.chunks {
        index.extend_from_slice(b"00dc");
        index.extend_from_slice(&AVIIF_KEYFRAME.to_le_bytes());
        index.extend_from_slice(&u32_le(at - 8 - MOVI_FOURCC_AT));
        index.extend_from_slice(&size.to_le_bytes());
    }
    let frames = contents.chunks.len() as u64;
    let largest = contents.chunks.iter().map(|c| c.1).max().unwrap_or(0);
    let movi_size = end - MOVI_FOURCC_AT;
    let riff_size = end + index.len() as u64 - 8;
    file.seek(SeekFrom::Start(end))
        .and_then(|_| file.write_all(&index))
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .map_err(|e| io_err(path, "write the index of", e))?;
    let mut h = header(contents.format, frames, largest, movi_size);
    h[4..8].copy_from_slice(&u32_le(riff_size));
    file.write_all(&h)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err(path, "write the header of", e))?;
    Ok(())
}

/// Scans a Motion-JPEG AVI's chunks (written here or by another muxer with one video
/// stream). Stops at the index, at the end of the `movi` list, or at a torn chunk.
pub fn read_chunks(path: &Path) -> Result<AviContents, CaptureError> {
    let file = File::open(path).map_err(|e| io_err(path, "open", e))?;
    read_chunks_from(file, path)
}

fn read_chunks_from(mut file: File, path: &Path) -> Result<AviContents, CaptureError> {
    // From the start, whoever had the file before.
    file.seek(SeekFrom::Start(0))
        .map_err(|e| io_err(path, "read", e))?;
    let len = file.metadata().map_err(|e| io_err(path, "open", e))?.len();
    let mut r = BufReader::new(file);
    let corrupt = |position: u64, message: &str| CaptureError::Corrupt {
        what: "video",
        path: path.to_path_buf(),
        position: format!("byte {position}"),
        message: message.into(),
    };
    let mut four = [0u8; 4];
    let mut read4 = |r: &mut BufReader<File>, at: u64| -> Result<[u8; 4], CaptureError> {
        r.read_exact(&mut four)
            .map_err(|_| corrupt(at, "the file ends inside its header"))?;
        Ok(four)
    };
    if &read4(&mut r, 0)? != b"RIFF" {
        return Err(corrupt(0, "not a RIFF file"));
    }
    read4(&mut r, 4)?;
    if &read4(&mut r, 8)? != b"AVI " {
        return Err(corrupt(8, "not an AVI file"));
    }
    let mut pos = 12u64;
    let mut format = None;
    // Walk the top-level lists to `movi`; parse avih/strh on the way.
    let movi_end = loop {
        let id = read4(&mut r, pos)?;
        let size = u64::from(u32::from_le_bytes(read4(&mut r, pos + 4)?));
        if &id == b"LIST" {
            let kind = read4(&mut r, pos + 8)?;
            if &kind == b"movi" {
                // A writer that died leaves the size as written at creation (0).
                break if size >= 4 { pos + 8 + size } else { len };
            }
            if &kind == b"hdrl" {
                let mut body = vec![0u8; usize::try_from(size - 4).unwrap_or(0)];
                r.read_exact(&mut body)
                    .map_err(|_| corrupt(pos, "the file ends inside its header"))?;
                format = Some(parse_hdrl(&body).ok_or_else(|| {
                    corrupt(
                        pos,
                        "the header has no Motion-JPEG video stream (avih/strh/strf)",
                    )
                })?);
            } else {
                r.seek_relative(i64::try_from(size - 4 + size % 2).unwrap_or(i64::MAX))
                    .map_err(|e| io_err(path, "read", e))?;
            }
        } else {
            r.seek_relative(i64::try_from(size + size % 2).unwrap_or(i64::MAX))
                .map_err(|e| io_err(path, "read", e))?;
        }
        pos += 8 + size + size % 2;
        if pos >= len {
            return Err(corrupt(pos, "no `movi` list: the file holds no frames"));
        }
    };
    let format = format.ok_or_else(|| corrupt(12, "no `hdrl` header list"))?;
    let mut chunks = Vec::new();
    pos += 12;
    let mut torn_tail = false;
    let mut indexed = false;
    let mut head = [0u8; 8];
    loop {
        if pos >= movi_end {
            // The list ended: the index follows in a finalised file.
            let mut id = [0u8; 4];
            indexed = r.read_exact(&mut id).is_ok() && &id == b"idx1";
            break;
        }
        if pos + 8 > len {
            torn_tail = pos < len;
            break;
        }
        if r.read_exact(&mut head).is_err() {
            torn_tail = true;
            break;
        }
        let size = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if &head[..4] == b"idx1" {
            indexed = true;
            break;
        }
        if size > MAX_CHUNK {
            return Err(corrupt(pos, &format!("a chunk declares {size} bytes")));
        }
        let next = pos + 8 + u64::from(size) + u64::from(size % 2);
        if next > len {
            torn_tail = true;
            break;
        }
        if &head[2..4] == b"dc" || &head[2..4] == b"db" {
            chunks.push((pos + 8, size));
        }
        r.seek_relative(i64::from(size) + i64::from(size % 2))
            .map_err(|e| io_err(path, "read", e))?;
        pos = next;
    }
    Ok(AviContents {
        format,
        chunks,
        torn_tail,
        indexed,
    })
}

/// Reads one chunk's bytes.
pub fn read_chunk(
    file: &mut File,
    path: &Path,
    (at, size): (u64, u32),
) -> Result<Vec<u8>, CaptureError> {
    let mut data = vec![0u8; size as usize];
    file.seek(SeekFrom::Start(at))
        .and_then(|_| file.read_exact(&mut data))
        .map_err(|e| io_err(path, "read a frame of", e))?;
    Ok(data)
}

fn parse_hdrl(body: &[u8]) -> Option<AviFormat> {
    let find = |hay: &[u8], id: &[u8; 4]| -> Option<usize> {
        hay.windows(4).position(|w| w == id).map(|p| p + 8)
    };
    let le = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    let avih = find(body, b"avih")?;
    let width = le(body, avih + 32)?;
    let height = le(body, avih + 36)?;
    let strh = find(body, b"strh")?;
    if body.get(strh..strh + 4)? != b"vids" {
        return None;
    }
    let scale = le(body, strh + 20)?;
    let rate = le(body, strh + 24)?;
    let fps = if scale > 0 {
        f64::from(rate) / f64::from(scale)
    } else {
        let us = le(body, avih)?;
        if us == 0 {
            return None;
        }
        1e6 / f64::from(us)
    };
    Some(AviFormat { width, height, fps })
}

fn header(f: AviFormat, frames: u64, largest: u32, movi_size: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN as usize);
    let rate = (f.fps * 1000.0).round().max(1.0) as u32;
    let frames32 = u32_le(frames);
    let us_per_frame = u32_le((1e6 / f.fps.max(1e-3)).round() as u64);
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&[0; 4]); // patched by finish
    h.extend_from_slice(b"AVI ");
    h.extend_from_slice(b"LIST");
    h.extend_from_slice(&u32_le(4 + 64 + 12 + 64 + 48));
    h.extend_from_slice(b"hdrl");
    h.extend_from_slice(b"avih");
    h.extend_from_slice(&56u32.to_le_bytes());
    h.extend_from_slice(&us_per_frame);
    h.extend_from_slice(&u32_le(u64::from(largest) * f.fps.ceil() as u64)); // max bytes/s
    h.extend_from_slice(&0u32.to_le_bytes()); // padding granularity
    h.extend_from_slice(&AVIF_HASINDEX.to_le_bytes());
    h.extend_from_slice(&frames32);
    h.extend_from_slice(&0u32.to_le_bytes()); // initial frames
    h.extend_from_slice(&1u32.to_le_bytes()); // streams
    h.extend_from_slice(&largest.to_le_bytes()); // suggested buffer
    h.extend_from_slice(&f.width.to_le_bytes());
    h.extend_from_slice(&f.height.to_le_bytes());
    h.extend_from_slice(&[0; 16]);
    h.extend_from_slice(b"LIST");
    h.extend_from_slice(&u32_le(4 + 64 + 48));
    h.extend_from_slice(b"strl");
    h.extend_from_slice(b"strh");
    h.extend_from_slice(&56u32.to_le_bytes());
    h.extend_from_slice(b"vids");
    h.extend_from_slice(b"MJPG");
    h.extend_from_slice(&0u32.to_le_bytes()); // flags
    h.extend_from_slice(&0u32.to_le_bytes()); // priority, language
    h.extend_from_slice(&0u32.to_le_bytes()); // initial frames
    h.extend_from_slice(&1000u32.to_le_bytes()); // scale
    h.extend_from_slice(&rate.to_le_bytes()); // rate: fps = rate / scale
    h.extend_from_slice(&0u32.to_le_bytes()); // start
    h.extend_from_slice(&frames32); // length
    h.extend_from_slice(&largest.to_le_bytes());
    h.extend_from_slice(&u32::MAX.to_le_bytes()); // quality: default
    h.extend_from_slice(&0u32.to_le_bytes()); // sample size: variable
    let w16 = u16::try_from(f.width).unwrap_or(u16::MAX);
    let h16 = u16::try_from(f.height).unwrap_or(u16::MAX);
    h.extend_from_slice(&[0; 4]);
    h.extend_from_slice(&w16.to_le_bytes());
    h.extend_from_slice(&h16.to_le_bytes());
    h.extend_from_slice(b"strf");
    h.extend_from_slice(&40u32.to_le_bytes());
    h.extend_from_slice(&40u32.to_le_bytes());
    h.extend_from_slice(&f.width.to_le_bytes());
    h.extend_from_slice(&f.height.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&24u16.to_le_bytes());
    h.extend_from_slice(b"MJPG");
    h.extend_from_slice(&u32_le(u64::from(f.width) * u64::from(f.height) * 3));
    h.extend_from_slice(&[0; 16]);
    h.extend_from_slice(b"LIST");
    h.extend_from_slice(&u32_le(movi_size));
    h.extend_from_slice(b"movi");
    debug_assert_eq!(h.len() as u64, HEADER_LEN);
    h
}

fn u32_le(v: u64) -> [u8; 4] {
    u32::try_from(v).unwrap_or(u32::MAX).to_le_bytes()
}

fn io_err(path: &Path, doing: &str, e: std::io::Error) -> CaptureError {
    CaptureError::Device {
        device: path.display().to_string(),
        message: format!("cannot {doing} the video file: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: AviFormat = AviFormat {
        width: 64,
        height: 48,
        fps: 15.0,
    };

    #[test]
    fn written_chunks_read_back_with_gaps_and_odd_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.avi");
        let mut w = MjpegAviWriter::create(&path, F).unwrap();
        w.write_slot(Some(b"abc")).unwrap();
        w.write_slot(None).unwrap();
        w.write_slot(Some(b"defg")).unwrap();
        let done = w.finish().unwrap();
        let read = read_chunks(&path).unwrap();
        assert!(read.indexed && !read.torn_tail);
        assert_eq!(read.chunks, done.chunks);
        assert_eq!(read.format, F);
        let mut f = File::open(&path).unwrap();
        assert_eq!(read_chunk(&mut f, &path, read.chunks[0]).unwrap(), b"abc");
        assert_eq!(read.chunks[1].1, 0);
        assert_eq!(read_chunk(&mut f, &path, read.chunks[2]).unwrap(), b"defg");
    }

    #[test]
    fn a_file_cut_mid_chunk_keeps_every_whole_chunk_and_finalises() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.avi");
        let mut w = MjpegAviWriter::create(&path, F).unwrap();
        for i in 0..5u8 {
            w.write_slot(Some(&[i; 101])).unwrap();
        }
        w.flush(true).unwrap();
        drop(w); // no finish: as after SIGKILL
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 50).unwrap(); // the last chunk torn
        drop(f);
        let before = read_chunks(&path).unwrap();
        assert!(before.torn_tail && !before.indexed);
        assert_eq!(before.chunks.len(), 4);
        let after = finalize(&path).unwrap();
        assert_eq!(after.chunks.len(), 4);
        let again = read_chunks(&path).unwrap();
        assert!(again.indexed && !again.torn_tail);
        assert_eq!(again.chunks, before.chunks);
    }

    #[test]
    fn garbage_is_refused_with_the_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.avi");
        std::fs::write(&path, b"RIFX0000AVI ").unwrap();
        let e = read_chunks(&path).unwrap_err().to_string();
        assert!(e.contains("not a RIFF file") && e.contains("v.avi"), "{e}");
    }
}
