//! Window assembly cost per frame: pushing frame records through the assembler and turning
//! each completed window into its stored row (presence masks and means).
//!
//! Two layouts: this build's signal modalities (3 + 3 values a frame) and the paper's full
//! feature set (OpenFace 709 + appearance 2048 + ComParE 65 + text 384 values a frame).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use empathic::core::ModalitySpec;
use empathic::core::QualitySources;
use empathic::core::{FrameRecord, ModalityLayout, Stream};
use empathic::store::rows::WindowRow;
use empathic::windows::WindowAssembler;

fn layout(dims: &[(&'static str, Stream, usize)]) -> ModalityLayout {
    let mut layout = ModalityLayout::new();
    for &(name, stream, d) in dims {
        let columns = (0..d).map(|i| format!("c{i}")).collect();
        layout
            .add(
                stream,
                ModalitySpec::by_algorithm(name, columns, "bench", 1),
            )
            .expect("distinct names");
    }
    layout
}

fn frames(layout: &ModalityLayout, n: u64) -> Vec<Arc<FrameRecord>> {
    (0..n)
        .map(|i| {
            Arc::new(FrameRecord {
                index: i,
                t_ns: i * 66_666_667,
                decoded: true,
                features: layout
                    .iter()
                    .map(|(id, m)| {
                        // Every 7th frame lacks the first modality (no face, say).
                        (id.index() != 0 || i % 7 != 0).then(|| {
                            (0..m.spec.dims())
                                .map(|k| (k as f32 + i as f32) * 1e-3)
                                .collect()
                        })
                    })
                    .collect(),
            })
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let layouts = [
        (
            "signal",
            layout(&[
                ("video_signal", Stream::Video, 3),
                ("audio_signal", Stream::Audio, 3),
            ]),
        ),
        (
            "paper",
            layout(&[
                ("face", Stream::Video, 709),
                ("appearance", Stream::Video, 2048),
                ("acoustic", Stream::Audio, 65),
                ("text", Stream::Audio, 384),
            ]),
        ),
    ];
    let mut group = c.benchmark_group("window_assembler");
    const N: u64 = 600; // 40 s at 15 fps: 33 windows of 120 frames, hop 15
    group.throughput(Throughput::Elements(N));
    for (name, layout) in &layouts {
        let input = frames(layout, N);
        let quality = QualitySources::new(layout);
        group.bench_with_input(BenchmarkId::new("assemble", name), &input, |b, input| {
            b.iter(|| {
                let mut asm = WindowAssembler::new(120, 15, 1e9 / 15.0);
                let mut n = 0;
                for f in input {
                    if let Some(w) = asm.push(f.clone()) {
                        n += w.frames.len();
                    }
                }
                black_box(n)
            })
        });
        group.bench_with_input(
            BenchmarkId::new("assemble_and_rows", name),
            &input,
            |b, input| {
                b.iter(|| {
                    let mut asm = WindowAssembler::new(120, 15, 1e9 / 15.0);
                    let mut rows = 0;
                    for f in input {
                        if let Some(w) = asm.push(f.clone()) {
                            black_box(WindowRow::from_window(&w, layout, &quality));
                            rows += 1;
                        }
                    }
                    black_box(rows)
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
