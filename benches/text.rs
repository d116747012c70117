//! Sentence embedding throughput (all-MiniLM-L6-v2 int8 through ONNX Runtime, one thread)
//! and story search latency over 100 000 stories (384-d, in memory).

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use empathic::features::text::SentenceEncoder;
use empathic::models::manifest::Manifest;
use empathic::stories::StoryIndex;

fn bench(c: &mut Criterion) {
    let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/models"));
    let manifest = Manifest::load(dir).expect("models/MODELS.toml");
    let entry = manifest
        .get("all-MiniLM-L6-v2-int8", dir)
        .expect("int8 model");
    let mut encoder = SentenceEncoder::open(dir, entry, None).expect("ONNX Runtime and model");
    let mut group = c.benchmark_group("text");
    group.sample_size(20);
    let short = "I finally told my father I was proud of him";
    let long =
        "When my brother moved out I helped him carry a mattress up five floors. We laughed \
                the whole way and argued about where the couch should go. That night, driving home \
                alone, the house felt too quiet, and I understood our childhood was over.";
    group.throughput(Throughput::Elements(1));
    group.bench_function("embed_short_sentence", |b| {
        b.iter(|| black_box(encoder.embed(&[short]).expect("embed")))
    });
    group.bench_function("embed_story_50_words", |b| {
        b.iter(|| black_box(encoder.embed(&[long]).expect("embed")))
    });

    // 100k stories with pseudo-random unit vectors (a fixed LCG: the same every run).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    };
    let items: Vec<(String, String, Vec<f32>)> = (0..100_000)
        .map(|i| {
            (
                format!("s{i}"),
                String::new(),
                (0..384).map(|_| next()).collect(),
            )
        })
        .collect();
    let index = StoryIndex::from_vectors(items);
    let query = encoder.embed(&[short]).expect("embed").remove(0);
    group.bench_function("search_top3_of_100k", |b| {
        b.iter(|| black_box(index.top_k(&query, 3, &[])))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
