//! The video signal stage (brightness, contrast, sharpness) on the demo's first 640x480
//! frame, one thread: it runs on every frame and needs no model, so it should cost a
//! small fraction of the facial stage.

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use empathic::features::signal::VideoSignalStage;
use empathic::features::{FrameContext, FrameStage};

fn bench(c: &mut Criterion) {
    let frame = common::demo_frames(1).remove(0);
    let mut stage = VideoSignalStage::new();
    let mut group = c.benchmark_group("video_signal");
    group.throughput(Throughput::Elements(1));
    group.bench_function("stage_640x480", |b| {
        b.iter(|| {
            black_box(
                stage
                    .process(&frame, &mut FrameContext::default())
                    .expect("stage"),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
