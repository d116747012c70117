//! Appearance embedding throughput through ONNX Runtime on one thread: EfficientNet-Lite0
//! fp32 (model only, and the whole stage on a 640x480 frame), the same weights on 160x160,
//! and, when built, ResNet50 with random weights (the paper's compute).

mod common;

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use empathic::features::appearance::{test_pattern, AppearanceEncoder};
use empathic::features::{FrameContext, FrameStage};
use empathic::models::manifest::Manifest;

fn bench(c: &mut Criterion) {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/models"));
    let manifest = Manifest::load(dir).expect("models/MODELS.toml");
    let entry = manifest.get("efficientnet-lite0", dir).expect("model");
    let mut encoder = AppearanceEncoder::open(dir, entry, None).expect("ONNX Runtime and model");
    let frame = common::demo_frames(1).remove(0);
    let mut group = c.benchmark_group("appearance");
    group.sample_size(20);
    group.throughput(Throughput::Elements(1));
    let pattern = test_pattern(encoder.input_size());
    group.bench_function("efficientnet_lite0_fp32_model", |b| {
        b.iter(|| black_box(encoder.run(&pattern).expect("run")))
    });
    group.bench_function("efficientnet_lite0_fp32_stage_640x480", |b| {
        b.iter(|| {
            black_box(
                encoder
                    .process(&frame, &mut FrameContext::default())
                    .expect("stage"),
            )
        })
    });
    // The same weights on a 160x160 input (issue 18's cheaper encoder).
    let small = manifest
        .get("efficientnet-lite0-160", dir)
        .expect("manifest entry");
    let mut small = AppearanceEncoder::open(dir, small, None)
        .expect("efficientnet-lite0-160")
        .with_input(empathic::features::appearance::AppearanceInput::Frame);
    let small_pattern = test_pattern(small.input_size());
    group.bench_function("efficientnet_lite0_160_fp32_model", |b| {
        b.iter(|| black_box(small.run(&small_pattern).expect("run")))
    });
    // ResNet50 with random weights (the paper's compute), when its tool has built it.
    let resnet = manifest
        .get("resnet50-random", dir)
        .expect("manifest entry");
    if resnet.path(dir).exists() {
        let mut resnet = AppearanceEncoder::open(dir, resnet, None).expect("resnet50");
        group.bench_function("resnet50_random_fp32_model", |b| {
            let pattern = test_pattern(resnet.input_size());
            b.iter(|| black_box(resnet.run(&pattern).expect("run")))
        });
    } else {
        eprintln!("skipped resnet50: models/resnet50-random.onnx not built (tools/models/export_resnet50.py --random)");
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
