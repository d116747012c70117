//! On-station speech recognition (issue 32, in part): `empathic transcribe` on the demo
//! session's real speech, at other rates and channels, on silence and noise, and without
//! its models.

use std::path::Path;

use crate::common::{copy_session, demo_session, empathic, path_str, stderr, stdout};

/// The demo's audio as 16-bit PCM at `rate` (each sample held `rate / 16000` times) with
/// `channels` copies.
fn demo_audio_as(out: &Path, rate: u32, channels: u16) {
    let mut r = hound::WavReader::open(demo_session().join("audio.wav")).unwrap();
    let samples: Vec<i16> = r.samples::<i16>().map(Result::unwrap).collect();
    let spec = hound::WavSpec {
        channels,
        sample_rate: rate,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(out, spec).unwrap();
    for s in samples {
        for _ in 0..rate / 16_000 {
            for _ in 0..channels {
                w.write_sample(s).unwrap();
            }
        }
    }
    w.finalize().unwrap();
}

fn wer_of(stderr: &str) -> f64 {
    let at = stderr
        .find("word error rate ")
        .expect("a word error rate line");
    stderr[at + 16..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn the_demo_speech_is_recognised_within_ten_percent_word_error() {
    let o = empathic(&["transcribe", path_str(&demo_session()), "--score"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let wer = wer_of(&stderr(&o));
    assert!(wer <= 10.0, "WER {wer} %: {}", stdout(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 4, "{}", stdout(&o));
    let mut last_end = 0;
    for u in &lines {
        let (s, e) = (
            u["start_ms"].as_u64().unwrap(),
            u["end_ms"].as_u64().unwrap(),
        );
        assert!(s >= last_end && e > s && e <= 28_000, "{u}");
        last_end = e;
        assert_eq!(u["model"], "moonshine-tiny-en");
        assert!(u["confidence"].as_f64().unwrap() <= 0.0);
    }
    assert!(
        lines.iter().all(|u| u["speaker"] == "participant"),
        "{}",
        stdout(&o)
    );
    // The first utterance is the participant's first words (0.5-7.6 s in events.jsonl).
    assert!(
        lines[0]["start_ms"].as_u64().unwrap() < 1_000,
        "{}",
        lines[0]
    );
    let srt = empathic(&["transcribe", path_str(&demo_session()), "--format", "srt"]);
    assert!(stdout(&srt).starts_with("1\n00:00:00,"), "{}", stdout(&srt));
}

#[test]
fn other_rates_channels_silence_noise_and_missing_models() {
    let tmp = tempfile::tempdir().unwrap();
    // 48 kHz stereo: resampled and mixed down, the same words.
    let wav = tmp.path().join("48k.wav");
    demo_audio_as(&wav, 48_000, 2);
    let o = empathic(&["transcribe", path_str(&wav), "--format", "txt"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).to_lowercase().contains("dashwood"),
        "{}",
        stdout(&o)
    );
    // Ten seconds of digital silence and of loud noise: no failure; silence says nothing.
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let silence = tmp.path().join("silence.wav");
    let mut w = hound::WavWriter::create(&silence, spec).unwrap();
    (0..160_000).for_each(|_| w.write_sample(0i16).unwrap());
    w.finalize().unwrap();
    let o = empathic(&["transcribe", path_str(&silence)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");
    let noise = tmp.path().join("noise.wav");
    let mut w = hound::WavWriter::create(&noise, spec).unwrap();
    let mut x: u32 = 1;
    for _ in 0..160_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        w.write_sample((x >> 16) as i16 / 2).unwrap();
    }
    w.finalize().unwrap();
    let o = empathic(&["transcribe", path_str(&noise)]);
    assert!(o.status.success(), "{}", stderr(&o));
    // --score needs a session's reference; a missing model is named.
    let o = empathic(&["transcribe", path_str(&noise), "--score"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let config = tmp.path().join("no-models.toml");
    std::fs::write(
        &config,
        format!("[models]\ndir = \"{}\"\n", tmp.path().display()),
    )
    .unwrap();
    let o = empathic(&[
        "transcribe",
        path_str(&silence),
        "--config",
        path_str(&config),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("silero-vad-v6"), "{}", stderr(&o));
}

/// Speech under the robot's own utterance (the session's events say the robot spoke then)
/// is the robot's: marked so, and left out of the participant's score.
#[test]
fn speech_under_the_robots_utterance_is_the_robots() {
    let tmp = tempfile::tempdir().unwrap();
    let session = copy_session(&demo_session(), &tmp.path().join("s"));
    let events = session.join("events.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    let relabelled = text.replace(
        r#""speaker": "participant", "start_ms": 8100"#,
        r#""speaker": "robot", "start_ms": 8100"#,
    );
    assert_ne!(text, relabelled);
    std::fs::write(&events, relabelled).unwrap();
    let o = empathic(&["transcribe", path_str(&session), "--score"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let robot: Vec<&serde_json::Value> = lines.iter().filter(|u| u["speaker"] == "robot").collect();
    assert_eq!(robot.len(), 1, "{}", stdout(&o));
    assert!(
        robot[0]["text"].as_str().unwrap().contains("young man"),
        "{}",
        robot[0]
    );
    assert!(wer_of(&stderr(&o)) <= 10.0, "{}", stderr(&o));
}
