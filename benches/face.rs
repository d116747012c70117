//! Facial stage throughput on one core (ONNX Runtime with one intra-op thread): the whole
//! stage in tracking mode over consecutive 640x480 frames of the demo session, and each
//! model on its own. Frames per second = 1 / time per element.
//!
//! The stage is timed twice: wall clock, and this thread's CPU time (ONNX Runtime with one
//! intra-op thread runs on the calling thread). The OpenFace figure is frames per
//! CPU-second, and CPU time leaves out the moments this shared machine gives the core to
//! someone else, which make wall-clock runs differ by 30 % here.

mod common;

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use empathic::features::face::crop::mat_of;
use empathic::features::face::models::{FaceDetector, FaceMeshModel, IrisModel};
use empathic::features::face::{FaceAnalyzer, Mode, DETECTOR_MODEL, IRIS_MODEL, MESH_MODEL};
use empathic::models::manifest::Manifest;

fn bench(c: &mut Criterion) {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/models"));
    let manifest = Manifest::load(dir).expect("models/MODELS.toml");
    let frames = common::demo_frames(150);
    let first = &frames[0].image;
    assert_eq!((first.width, first.height), (640, 480));
    let mut analyzer = FaceAnalyzer::open(dir, &manifest, None, Default::default(), Mode::Video)
        .expect("face models");
    let mut group = c.benchmark_group("face");
    group.sample_size(20);
    group.throughput(Throughput::Elements(1));
    let mut k = 0usize;
    group.bench_function("facial_stage_tracking_640x480", |b| {
        b.iter(|| {
            k = (k + 1) % frames.len();
            black_box(analyzer.analyze(&frames[k].image).expect("analyze"))
        })
    });
    group.bench_function("facial_stage_tracking_640x480_thread_cpu_time", |b| {
        b.iter_custom(|iters| {
            let start = thread_cpu_time();
            for _ in 0..iters {
                k = (k + 1) % frames.len();
                black_box(analyzer.analyze(&frames[k].image).expect("analyze"));
            }
            thread_cpu_time().saturating_sub(start)
        })
    });
    let mat = mat_of(first).expect("mat");
    let mut detector =
        FaceDetector::open(dir, manifest.get(DETECTOR_MODEL, dir).expect("entry"), None)
            .expect("detector");
    let dets = detector.detect(&mat, 640, 480).expect("detect");
    let roi = dets.first().expect("a face in the demo frame").face_roi();
    group.bench_function("detector_640x480", |b| {
        b.iter(|| black_box(detector.detect(&mat, 640, 480).expect("detect")))
    });
    let mut mesh = FaceMeshModel::open(dir, manifest.get(MESH_MODEL, dir).expect("entry"), None)
        .expect("mesh");
    let m = mesh.run(&mat, roi).expect("mesh");
    group.bench_function("mesh_crop_and_model", |b| {
        b.iter(|| black_box(mesh.run(&mat, roi).expect("mesh")))
    });
    let mut iris =
        IrisModel::open(dir, manifest.get(IRIS_MODEL, dir).expect("entry"), None).expect("iris");
    let p = |i: usize| (m.points[i][0], m.points[i][1]);
    let eyes = [(p(33), p(133)), (p(263), p(362))];
    group.bench_function("iris_both_eyes_batch2", |b| {
        b.iter(|| black_box(iris.run_pair(&mat, eyes).expect("iris")))
    });
    group.finish();
}

/// CPU time consumed by the calling thread so far.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

criterion_group!(benches, bench);
criterion_main!(benches);
