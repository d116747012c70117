//! Long continuous speech made from the shared speech fixtures, for tests of what a study
//! session holds: minutes of a participant talking without a pause.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The LJ Speech clips (LJ001-0001 on) with their normalised transcripts, in order.
pub fn lj_clips(fixtures: &Path) -> Vec<(PathBuf, String)> {
    let dir = fixtures.join("speech/ljspeech");
    let meta = std::fs::read_to_string(dir.join("metadata.csv")).unwrap();
    meta.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() >= 3).then(|| (dir.join(format!("{}.wav", f[0])), f[2].to_string()))
        })
        .filter(|(p, _)| p.exists())
        .collect()
}

/// Continuous speech of at least `min_secs` (when the fixtures hold that much) into
/// `out` (16 kHz mono 16-bit WAV): the LJ Speech clips one after the other, every pause
/// longer than 50 ms taken out (ffmpeg's `silenceremove`), so the voice activity never
/// sees 300 ms of silence. Returns the WAV, its length in seconds and the words it holds.
pub fn continuous_speech(fixtures: &Path, out: &Path, min_secs: f64) -> (PathBuf, f64, String) {
    let clips = lj_clips(fixtures);
    assert!(
        !clips.is_empty(),
        "no LJ Speech clips under {}",
        fixtures.display()
    );
    // Clips are about 6 s each; take enough for min_secs after the pauses are removed.
    let mut list = String::new();
    let mut words = Vec::new();
    let mut planned = 0.0;
    for (path, text) in clips.iter().cycle() {
        if planned >= min_secs * 1.15 + 5.0 && !words.is_empty() {
            break;
        }
        list.push_str(&format!("file '{}'\n", path.display()));
        words.push(text.clone());
        planned += wav_secs(path);
        if words.len() > 400 {
            break;
        }
    }
    let list_path = out.with_extension("list");
    std::fs::write(&list_path, list).unwrap();
    let o = Command::new("ffmpeg")
        .args([
            "-loglevel",
            "error",
            "-y",
            "-f",
            "concat",
            "-safe",
            "0",
            "-i",
        ])
        .arg(&list_path)
        .args([
            "-af",
            "silenceremove=stop_periods=-1:stop_duration=0.05:stop_threshold=-45dB",
            "-ar",
            "16000",
            "-ac",
            "1",
            "-c:a",
            "pcm_s16le",
        ])
        .arg(out)
        .output()
        .expect("ffmpeg (installed by set-up)");
    assert!(
        o.status.success(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (out.to_path_buf(), wav_secs(out), words.join(" "))
}

/// The length of a WAV file in seconds.
pub fn wav_secs(path: &Path) -> f64 {
    let r = hound::WavReader::open(path).unwrap();
    let spec = r.spec();
    r.duration() as f64 / f64::from(spec.sample_rate)
}

/// A plain recording (video.avi and audio.wav, no events, no session.json) in `dir`: the
/// fixture session `still`'s video looped to the audio's length, with `audio` as its sound.
pub fn plain_recording(fixtures: &Path, dir: &Path, audio: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let secs = wav_secs(audio);
    let o = Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y", "-stream_loop", "-1", "-i"])
        .arg(fixtures.join("sessions/still/video.avi"))
        .args(["-t", &format!("{secs:.3}"), "-c", "copy"])
        .arg(dir.join("video.avi"))
        .output()
        .expect("ffmpeg (installed by set-up)");
    assert!(
        o.status.success(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::copy(audio, dir.join("audio.wav")).unwrap();
    dir.to_path_buf()
}

/// `seconds` of `wav` from `from` seconds on, into `out` (16-bit, same rate).
pub fn cut(wav: &Path, from: f64, seconds: f64, out: &Path) -> PathBuf {
    let mut r = hound::WavReader::open(wav).unwrap();
    let spec = r.spec();
    let rate = f64::from(spec.sample_rate);
    let samples: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
    let a = ((from * rate) as usize).min(samples.len());
    let b = (((from + seconds) * rate) as usize).min(samples.len());
    let mut w = hound::WavWriter::create(out, spec).unwrap();
    for &s in &samples[a..b] {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    out.to_path_buf()
}
