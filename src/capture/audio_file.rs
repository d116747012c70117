//! A recorded `audio.wav` as an [`AudioSource`].
//!
//! Contract: any PCM WAV (8/16/24/32-bit integer or 32-bit float, 8 to 192 kHz, any channel
//! count) is mixed down to mono by averaging the channels, resampled to the pipeline rate
//! with rubato when the rates differ, and handed out in blocks of `block_samples` (the last
//! block may be shorter), stamped exactly from the sample count plus the session's audio
//! offset. A file whose header declares more sample bytes than it holds is rejected before
//! the first block, so is one sampled outside [`MIN_RATE_HZ`]..=[`MAX_RATE_HZ`]; NaN or
//! infinite float samples are rejected with their position. Read as a stream: memory does
//! not grow with the file.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::resample::StreamResampler;
use super::{samples_to_ns, AudioBlock, AudioInfo, AudioSource, CaptureError};

/// The lowest and highest sample rates taken (what `[audio] sample_rate_hz` allows too).
pub const MIN_RATE_HZ: u32 = 8_000;
pub const MAX_RATE_HZ: u32 = 192_000;

/// Input frames read from the file per step.
const READ_FRAMES: usize = 4096;

pub struct WavAudioSource {
    path: PathBuf,
    reader: hound::WavReader<BufReader<File>>,
    spec: hound::WavSpec,
    info: AudioInfo,
    resampler: Option<StreamResampler>,
    block_samples: usize,
    /// Output samples to discard before the first block (audio recorded before session time 0).
    skip_samples: u64,
    /// Output samples already handed out.
    emitted: u64,
    /// Offset of the first kept sample on the session timeline.
    offset_ns: u64,
    seq: u64,
    /// Raw input frames read so far (to name a position in errors).
    frames_read: u64,
    ready: Vec<f32>,
    input_done: bool,
}

impl WavAudioSource {
    /// Opens `path` as a session's microphone track. Unlike [`Self::open`] (which
    /// `extract audio` uses, where an empty file is an empty CSV), a session's WAV with a
    /// header and no samples is refused: no audio was captured, and a session without a
    /// microphone is a recording without `audio.wav` (see `session`), not an empty one.
    pub fn open_session_track(
        path: &Path,
        sample_rate_hz: u32,
        block_ms: u32,
        audio_offset_ms: i64,
    ) -> Result<Self, CaptureError> {
        let source = Self::open(path, sample_rate_hz, block_ms, audio_offset_ms)?;
        if source.reader.duration() == 0 {
            return Err(CaptureError::Open {
                what: "audio",
                path: path.to_path_buf(),
                message: "the file holds no samples".into(),
            });
        }
        Ok(source)
    }

    /// Opens `path`. `audio_offset_ms` places the first sample on the session timeline
    /// (negative: the audio started before session time 0 and that part is skipped).
    pub fn open(
        path: &Path,
        sample_rate_hz: u32,
        block_ms: u32,
        audio_offset_ms: i64,
    ) -> Result<Self, CaptureError> {
        check_not_truncated(path)?;
        let reader = hound::WavReader::open(path).map_err(|e| CaptureError::Open {
            what: "audio",
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let spec = reader.spec();
        let supported = matches!(
            (spec.sample_format, spec.bits_per_sample),
            (hound::SampleFormat::Int, 8 | 16 | 24 | 32) | (hound::SampleFormat::Float, 32)
        );
        if !supported || spec.channels == 0 || spec.sample_rate == 0 {
            return Err(CaptureError::Unsupported {
                what: "audio",
                path: path.to_path_buf(),
                message: format!(
                    "{:?} {}-bit, {} channel(s) at {} Hz (expected 8/16/24/32-bit PCM or 32-bit float)",
                    spec.sample_format, spec.bits_per_sample, spec.channels, spec.sample_rate
                ),
            });
        }
        if !(MIN_RATE_HZ..=MAX_RATE_HZ).contains(&spec.sample_rate) {
            return Err(CaptureError::Unsupported {
                what: "audio",
                path: path.to_path_buf(),
                message: format!(
                    "sampled at {} Hz: the extractors need {MIN_RATE_HZ} to {MAX_RATE_HZ} Hz (the pitch and spectral descriptors look for the voice band, up to 4 kHz)",
                    spec.sample_rate
                ),
            });
        }
        let resampler = if spec.sample_rate == sample_rate_hz {
            None
        } else {
            Some(
                StreamResampler::new(spec.sample_rate, sample_rate_hz).map_err(|e| {
                    CaptureError::Unsupported {
                        what: "audio",
                        path: path.to_path_buf(),
                        message: e.to_string(),
                    }
                })?,
            )
        };
        let input_frames = u64::from(reader.duration());
        let output_samples = match &resampler {
            Some(r) => r.output_len_for(input_frames),
            None => input_frames,
        };
        let (skip_samples, offset_ns) = if audio_offset_ms >= 0 {
            (0, audio_offset_ms.unsigned_abs() * 1_000_000)
        } else {
            let skip = audio_offset_ms.unsigned_abs() * u64::from(sample_rate_hz) / 1000;
            (skip, 0)
        };
        if skip_samples > 0 && skip_samples >= output_samples {
            return Err(CaptureError::Unsupported {
                what: "audio",
                path: path.to_path_buf(),
                message: format!(
                    "audio_offset_ms = {audio_offset_ms} skips all {:.1} s of the audio",
                    output_samples as f64 / f64::from(sample_rate_hz)
                ),
            });
        }
        let block_samples = usize::try_from(u64::from(sample_rate_hz) * u64::from(block_ms) / 1000)
            .unwrap_or(1)
            .max(1);
        let info = AudioInfo {
            input_rate_hz: spec.sample_rate,
            input_channels: spec.channels,
            sample_rate_hz,
            expected_samples: Some(output_samples.saturating_sub(skip_samples)),
            origin: path.display().to_string(),
        };
        Ok(Self {
            path: path.to_path_buf(),
            reader,
            spec,
            info,
            resampler,
            block_samples,
            skip_samples,
            emitted: 0,
            offset_ns,
            seq: 0,
            frames_read: 0,
            ready: Vec::new(),
            input_done: false,
        })
    }

    /// Reads up to [`READ_FRAMES`] frames, mixes them to mono and resamples into `ready`.
    fn fill(&mut self) -> Result<(), CaptureError> {
        let channels = usize::from(self.spec.channels);
        let mut mono = Vec::with_capacity(READ_FRAMES);
        let mut frame_sum = 0.0f64;
        let mut in_frame = 0usize;
        let corrupt = |frames_read: u64, message: String, path: &Path| CaptureError::Corrupt {
            what: "audio",
            path: path.to_path_buf(),
            position: format!("sample frame {frames_read}"),
            message,
        };
        let scale = match self.spec.sample_format {
            hound::SampleFormat::Float => 1.0,
            hound::SampleFormat::Int => 1.0 / f64::from(1u32 << (self.spec.bits_per_sample - 1)),
        };
        let wanted = READ_FRAMES * channels;
        let mut taken = 0;
        // Averages `channels` consecutive samples into one mono frame.
        let mut push = |v: f64, frames_read: &mut u64| {
            frame_sum += v;
            taken += 1;
            in_frame += 1;
            if in_frame == channels {
                mono.push((frame_sum / channels as f64) as f32);
                frame_sum = 0.0;
                in_frame = 0;
                *frames_read += 1;
            }
        };
        match self.spec.sample_format {
            hound::SampleFormat::Float => {
                for s in self.reader.samples::<f32>().take(wanted) {
                    let s = s.map_err(|e| corrupt(self.frames_read, e.to_string(), &self.path))?;
                    if !s.is_finite() {
                        return Err(corrupt(
                            self.frames_read,
                            format!("sample is {s} (NaN and infinity are not audio)"),
                            &self.path,
                        ));
                    }
                    push(f64::from(s), &mut self.frames_read);
                }
            }
            hound::SampleFormat::Int => {
                for s in self.reader.samples::<i32>().take(wanted) {
                    let s = s.map_err(|e| corrupt(self.frames_read, e.to_string(), &self.path))?;
                    push(f64::from(s) * scale, &mut self.frames_read);
                }
            }
        }
        let at_end = taken < wanted;
        let before = self.ready.len();
        match &mut self.resampler {
            Some(r) => {
                r.push(&mono, &mut self.ready)
                    .map_err(|e| corrupt(self.frames_read, e.to_string(), &self.path))?;
                if at_end {
                    r.finish(&mut self.ready)
                        .map_err(|e| corrupt(self.frames_read, e.to_string(), &self.path))?;
                }
            }
            None => self.ready.extend_from_slice(&mono),
        }
        // Drop audio recorded before session time 0.
        if self.skip_samples > 0 {
            let new = self.ready.len() - before;
            let drop = usize::try_from(self.skip_samples)
                .unwrap_or(usize::MAX)
                .min(new);
            self.ready.drain(before..before + drop);
            self.skip_samples -= drop as u64;
        }
        self.input_done = at_end;
        Ok(())
    }
}

impl AudioSource for WavAudioSource {
    fn info(&self) -> &AudioInfo {
        &self.info
    }

    fn next_block(&mut self) -> Result<Option<AudioBlock>, CaptureError> {
        while self.ready.len() < self.block_samples && !self.input_done {
            self.fill()?;
        }
        if self.ready.is_empty() {
            return Ok(None);
        }
        let n = self.block_samples.min(self.ready.len());
        let samples: Vec<f32> = self.ready.drain(..n).collect();
        let block = AudioBlock {
            seq: self.seq,
            t_ns: self.offset_ns + samples_to_ns(self.emitted, self.info.sample_rate_hz),
            sample_rate_hz: self.info.sample_rate_hz,
            samples,
            handed_ns: None,
        };
        self.seq += 1;
        self.emitted += n as u64;
        Ok(Some(block))
    }
}

/// Walks the RIFF chunks to the `data` chunk and checks the file holds what it declares.
/// hound would only fail at the end of the stream; checking first means nothing is written
/// for a file that cannot be read to its end.
fn check_not_truncated(path: &Path) -> Result<(), CaptureError> {
    let open_err = |message: String| CaptureError::Open {
        what: "audio",
        path: path.to_path_buf(),
        message,
    };
    let mut file = File::open(path).map_err(|e| open_err(e.to_string()))?;
    let file_len = file.metadata().map_err(|e| open_err(e.to_string()))?.len();
    let mut header = [0u8; 12];
    if file.read_exact(&mut header).is_err()
        || &header[0..4] != b"RIFF"
        || &header[8..12] != b"WAVE"
    {
        return Err(open_err("not a RIFF/WAVE file".into()));
    }
    let mut pos = 12u64;
    loop {
        let mut chunk = [0u8; 8];
        if file.read_exact(&mut chunk).is_err() {
            return Err(open_err(
                "no `data` chunk (the file ends inside the header)".into(),
            ));
        }
        let size = u64::from(u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]));
        pos += 8;
        if &chunk[0..4] == b"data" {
            let present = file_len.saturating_sub(pos);
            if size > present {
                return Err(CaptureError::TruncatedAudio {
                    path: path.to_path_buf(),
                    declared_bytes: size,
                    present_bytes: present,
                });
            }
            return Ok(());
        }
        // Chunks are padded to an even size.
        pos += size + (size & 1);
        if pos > file_len {
            return Err(open_err(format!(
                "chunk `{}` runs past the end of the file",
                String::from_utf8_lossy(&chunk[0..4])
            )));
        }
        file.seek(SeekFrom::Start(pos))
            .map_err(|e| open_err(e.to_string()))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_wav(path: &Path, rate: u32, channels: u16, samples: &[i16]) {
        let spec = hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(path, spec).unwrap();
        for &s in samples {
            w.write_sample(s).unwrap();
        }
        w.finalize().unwrap();
    }

    fn read_all(src: &mut WavAudioSource) -> Vec<AudioBlock> {
        let mut blocks = Vec::new();
        while let Some(b) = src.next_block().unwrap() {
            blocks.push(b);
        }
        blocks
    }

    #[test]
    fn blocks_are_stamped_from_sample_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.wav");
        write_wav(&path, 16_000, 1, &vec![1000; 16_000 + 100]);
        let mut src = WavAudioSource::open(&path, 16_000, 20, 0).unwrap();
        let blocks = read_all(&mut src);
        assert_eq!(blocks.len(), 51);
        assert_eq!(blocks[1].t_ns, 20_000_000);
        assert_eq!(blocks[50].samples.len(), 100);
        assert!((blocks[0].samples[0] - 1000.0 / 32768.0).abs() < 1e-7);
        let total: usize = blocks.iter().map(|b| b.samples.len()).sum();
        assert_eq!(Some(total as u64), src.info().expected_samples);
    }

    #[test]
    fn stereo_is_averaged_and_other_rates_resampled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.wav");
        let frames = 44_100;
        let mut interleaved = Vec::new();
        for _ in 0..frames {
            interleaved.extend_from_slice(&[3000i16, 1000]);
        }
        write_wav(&path, 44_100, 2, &interleaved);
        let mut src = WavAudioSource::open(&path, 16_000, 20, 0).unwrap();
        let blocks = read_all(&mut src);
        let all: Vec<f32> = blocks.iter().flat_map(|b| b.samples.clone()).collect();
        assert_eq!(all.len(), 16_000);
        let mid = all[8000];
        assert!((mid - 2000.0 / 32768.0).abs() < 1e-3, "{mid}");
    }

    #[test]
    fn positive_offset_shifts_stamps_and_negative_skips_samples() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.wav");
        let samples: Vec<i16> = (0..1600).map(|i| i as i16).collect();
        write_wav(&path, 16_000, 1, &samples);
        let mut later = WavAudioSource::open(&path, 16_000, 20, 40).unwrap();
        assert_eq!(later.next_block().unwrap().unwrap().t_ns, 40_000_000);
        let mut earlier = WavAudioSource::open(&path, 16_000, 20, -10).unwrap();
        let first = earlier.next_block().unwrap().unwrap();
        assert_eq!(first.t_ns, 0);
        assert!((first.samples[0] - 160.0 / 32768.0).abs() < 1e-7);
    }

    #[test]
    fn truncated_file_is_rejected_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.wav");
        write_wav(&path, 16_000, 1, &vec![0; 16_000]);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let err = WavAudioSource::open(&path, 16_000, 20, 0).err().unwrap();
        let msg = err.to_string();
        assert!(msg.contains("truncated"), "{msg}");
        assert!(msg.contains("t.wav"), "{msg}");
    }

    #[test]
    fn garbage_and_nan_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.wav");
        std::fs::write(&path, b"this is not a wav file at all").unwrap();
        assert!(WavAudioSource::open(&path, 16_000, 20, 0).is_err());

        let fpath = dir.path().join("f.wav");
        let spec = hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::create(&fpath, spec).unwrap();
        for i in 0..1000 {
            w.write_sample(if i == 500 { f32::NAN } else { 0.1 })
                .unwrap();
        }
        w.finalize().unwrap();
        let mut src = WavAudioSource::open(&fpath, 16_000, 20, 0).unwrap();
        let msg = loop {
            match src.next_block() {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("NaN accepted"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(msg.contains("NaN") && msg.contains("f.wav"), "{msg}");
    }
}
