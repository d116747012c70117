//! ComParE-2016 LLD extraction throughput on real speech (the demo session's LibriVox audio,
//! 16 kHz). Throughput is in samples per second: divide by 16 000 for times real time.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use empathic::core::LldSet;
use empathic::features::acoustic::LldExtractor;

fn speech() -> Vec<f32> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/demo/session/audio.wav");
    let mut r = hound::WavReader::open(path).expect("demo audio");
    r.samples::<i16>()
        .take(10 * 16_000)
        .map(|s| f32::from(s.expect("sample")) / 32768.0)
        .collect()
}

fn bench(c: &mut Criterion) {
    let signal = speech();
    let mut group = c.benchmark_group("acoustic_compare");
    group.sample_size(10);
    group.throughput(Throughput::Elements(signal.len() as u64));
    group.bench_function("10s_speech_16k_blocks_20ms", |b| {
        b.iter(|| {
            let mut stage = LldExtractor::new(LldSet::Compare, 16_000);
            let mut n = 0;
            for (k, block) in signal.chunks(320).enumerate() {
                n += stage.push_samples(k as u64 * 20_000_000, block).len();
            }
            n += stage.finish_rows().len();
            black_box(n)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
