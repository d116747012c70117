//! On-station speech recognition, one thread each: Silero VAD over the demo session's 28 s
//! of audio, and the whole recogniser (VAD, segments, Moonshine tiny-en on each) over it.
//! The real-time factor is the time per iteration divided by 28 s.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use empathic::features::speech::vad::SileroVad;
use empathic::features::speech::{Recogniser, SpeechModels};

fn demo_audio() -> Vec<f32> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/demo/session/audio.wav");
    let mut r = hound::WavReader::open(path).expect("the demo audio");
    r.samples::<i16>()
        .map(|s| f32::from(s.expect("a sample")) / 32768.0)
        .collect()
}

fn bench(c: &mut Criterion) {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/models"));
    let models = SpeechModels::in_dir(dir);
    let audio = demo_audio();
    assert_eq!(audio.len(), 28 * 16_000, "the demo audio is 28 s at 16 kHz");
    let mut group = c.benchmark_group("speech");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    let mut vad = SileroVad::open("silero-vad-v6", &models.vad, None).expect("the VAD model");
    group.bench_function("vad_28s", |b| {
        b.iter(|| {
            vad.reset();
            black_box(vad.push(&audio).expect("vad"))
        })
    });
    let mut recogniser = Recogniser::open(&models, None).expect("the speech models");
    group.bench_function("transcribe_28s", |b| {
        b.iter(|| black_box(recogniser.transcribe(&audio, &|_| {}).expect("transcribe")))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
