//! Fusion models under ONNX contract v1, run by the runtime: a reference model whose graph
//! computes what `text-zero-shot` computes in Rust (the masked mean of `text`) must give
//! the same predictions; a model declaring another layout, or a model without the
//! contract's metadata, is refused before anything runs, naming what differs.
//! The reference models are built by `tools/fusion/make_reference_models.py`.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use rusqlite::Connection;

fn config(dir: &Path, name: &str, predictors: &[&Path]) -> PathBuf {
    let list: Vec<String> = predictors
        .iter()
        .map(|p| format!("\"{}\"", p.display()))
        .collect();
    config_without_vision_models_and(
        dir,
        name,
        &format!(
            "\n[fusion]\npredictors = [{}]\nretrieve_k = 0\n",
            list.join(", ")
        ),
    )
}

fn model(name: &str) -> PathBuf {
    root().join("tests/data/fusion").join(name)
}

#[test]
fn the_reference_model_matches_the_rust_predictor_window_by_window() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("p.db");
    let both = config(
        tmp.path(),
        "both.toml",
        &[Path::new("text-zero-shot"), &model("text-mean-v1.onnx")],
    );
    let o = replay_cli(&demo_session(), &db, Some(&both));
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = Connection::open(&db).unwrap();
    let pairs: Vec<(f64, f64)> = conn
        .prepare(
            "SELECT a.raw_cosine, b.raw_cosine FROM predictions a JOIN predictions b
             ON a.session_id = b.session_id AND a.window_index = b.window_index
                AND a.story_id = b.story_id
             WHERE a.predictor = 'text-zero-shot' AND b.predictor = 'text-mean-v1'",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(pairs.len(), 9, "every window-story pair predicted by both");
    let max_diff = pairs.iter().map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(max_diff < 1e-5, "max |cosine difference| {max_diff}");
}

#[test]
fn a_model_of_another_layout_or_without_the_contract_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("p.db");
    let bad = config(tmp.path(), "bad.toml", &[&model("text-mean-bad-dims.onnx")]);
    let o = replay_cli(&demo_session(), &db, Some(&bad));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("`text`") && err.contains("385") && err.contains("384"),
        "{err}"
    );
    // An image model has no fusion metadata.
    let plain = root().join("models/efficientnet-lite0.onnx");
    let none = config(tmp.path(), "none.toml", &[&plain]);
    let o = replay_cli(&demo_session(), &db, Some(&none));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("empathic.contract"), "{}", stderr(&o));
    // A path that is not there is a config error naming the field.
    let missing = config(tmp.path(), "missing.toml", &[&tmp.path().join("nope.onnx")]);
    let o = replay_cli(&demo_session(), &db, Some(&missing));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("fusion.predictors"), "{}", stderr(&o));
}
