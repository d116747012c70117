//! Fusion cost per window: every story in play of one 120-frame window predicted by the
//! default predictor (`text-zero-shot`: masked mean of the 384-d text modality, cosine with
//! each story), with the paper's full layout (face 391, appearance 1280, ComParE 65, text
//! 384 values a frame) so building the window input is measured too. Budget (issue 13): all
//! stories of a window under 20 ms on one core.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use empathic::features::ModalitySpec;
use empathic::fusion::onnx_model::OnnxPredictor;
use empathic::fusion::zero_shot::TextZeroShot;
use empathic::fusion::{Configured, FusionStage};
use empathic::session::Phase;
use empathic::windows::{FrameRecord, ModalityLayout, StoryInPlay, Stream, Window};

fn layout() -> ModalityLayout {
    let mut l = ModalityLayout::new();
    for (name, stream, d) in [
        ("face", Stream::Video, 391),
        ("appearance", Stream::Video, 1280),
        ("text", Stream::Text, 384),
        ("acoustic_compare", Stream::Audio, 65),
    ] {
        let columns = (0..d).map(|i| format!("c{i}")).collect();
        l.add(stream, ModalitySpec::new(name, columns, "bench", 1))
            .expect("distinct names");
    }
    l
}

fn window(layout: &ModalityLayout, stories: usize) -> Window {
    let frames = (0..120u64)
        .map(|i| {
            Arc::new(FrameRecord {
                index: i,
                t_ns: i * 66_666_667,
                decoded: true,
                features: layout
                    .iter()
                    .map(|(_, m)| {
                        // The participant speaks on 3 frames of 4.
                        (m.spec.name != "text" || i % 4 != 0).then(|| {
                            (0..m.spec.dims())
                                .map(|k| ((k as u64 * 31 + i) % 97) as f32 * 1e-2)
                                .collect()
                        })
                    })
                    .collect(),
            })
        })
        .collect();
    Window {
        index: 0,
        start_frame: 0,
        end_frame: 120,
        start_ns: 0,
        end_ns: 8_000_000_000,
        phase: Some(Phase::Reflection),
        frames,
        stories: (0..stories)
            .map(|s| {
                Arc::new(StoryInPlay {
                    story_id: format!("s{s}"),
                    title: String::new(),
                    shown_ns: 0,
                    embedding: (0..384).map(|k| ((k * 7 + s) % 13) as f32).collect(),
                    retrieved: false,
                })
            })
            .collect(),
    }
}

fn bench(c: &mut Criterion) {
    let layout = layout();
    let mut group = c.benchmark_group("fusion");
    for stories in [3, 10] {
        let w = window(&layout, stories);
        let mut stage = FusionStage::new(
            layout.clone(),
            vec![Configured {
                predictor: Box::new(TextZeroShot),
                phases: vec![Phase::Reflection],
            }],
        )
        .expect("layout has text");
        group.bench_with_input(
            BenchmarkId::new("text_zero_shot_window", stories),
            &w,
            |b, w| b.iter(|| black_box(stage.predict(w))),
        );
        // The same computation as an ONNX fusion model (contract v1) through ONNX Runtime:
        // the per-window cost of the model path (tensor set-up, one run) on one thread.
        let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/fusion/text-mean-v1.onnx");
        let onnx = OnnxPredictor::open(&model, None).expect("ONNX Runtime and the model");
        let mut stage = FusionStage::new(
            layout.clone(),
            vec![Configured {
                predictor: Box::new(onnx),
                phases: vec![Phase::Reflection],
            }],
        )
        .expect("layout has text");
        group.bench_with_input(
            BenchmarkId::new("onnx_reference_window", stories),
            &w,
            |b, w| b.iter(|| black_box(stage.predict(w))),
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
