//! Fusion cost per window: every story in play of one 120-frame window predicted by the
//! default predictor (`text-zero-shot`: masked mean of the 384-d text modality, cosine with
//! each story), with the paper's full layout (face 391, appearance 1280, ComParE 65, text
//! 384 values a frame) so building the window input is measured too. Budget (issue 13): all
//! stories of a window under 20 ms on one core.
//!
//! `fusion_models`: each shipped fusion model (`models/fusion/*.onnx`, the four families
//! v+a+t) on one thread, at batch 1 and 16 (the batch the runtime uses at `--speed max`);
//! the figure is per call, so per window at batch 16 is a sixteenth of it. The cosine with
//! each story in play after `z` costs what `text_zero_shot_window` shows (microseconds).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use empathic::core::ModalitySpec;
use empathic::core::Phase;
use empathic::core::{FrameRecord, ModalityLayout, StoryInPlay, Stream, Window};
use empathic::fusion::onnx_model::{OnnxPredictor, RawWindow};
use empathic::fusion::zero_shot::TextZeroShot;
use empathic::fusion::{Configured, FusionStage};

fn layout() -> ModalityLayout {
    let mut l = ModalityLayout::new();
    for (name, stream, d) in [
        ("face", Stream::Video, 391),
        ("appearance", Stream::Video, 1280),
        ("text", Stream::Text, 384),
        ("acoustic_compare", Stream::Audio, 65),
    ] {
        let columns = (0..d).map(|i| format!("c{i}")).collect();
        l.add(
            stream,
            ModalitySpec::by_algorithm(name, columns, "bench", 1),
        )
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

fn raw_window(model: &OnnxPredictor, seed: usize) -> RawWindow {
    let t = model.window_frames();
    RawWindow {
        modalities: model
            .inputs()
            .iter()
            .map(|(_, d)| {
                let values = (0..t * d)
                    .map(|k| ((k * 31 + seed) % 97) as f32 * 1e-2)
                    .collect();
                (values, vec![1.0; t])
            })
            .collect(),
    }
}

fn bench_models(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models/fusion");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut group = c.benchmark_group("fusion_models");
    for path in files {
        let mut model = OnnxPredictor::open(&path, None).expect("ONNX Runtime and the model");
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        for batch in [1usize, 16] {
            let windows: Vec<RawWindow> = (0..batch).map(|i| raw_window(&model, i)).collect();
            group.bench_with_input(BenchmarkId::new(&name, batch), &windows, |b, w| {
                b.iter(|| black_box(model.infer(w).expect("runs")))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, bench_models);
criterion_main!(benches);
