//! Fusion models under ONNX contract v1, run by the runtime: a reference model whose graph
//! computes what `text-zero-shot` computes in Rust (the masked mean of `text`) must give
//! the same predictions; a model declaring another layout, or a model without the
//! contract's metadata, is refused before anything runs, naming what differs.
//! The reference models are built by `tools/fusion/make_reference_models.py`.

use std::path::{Path, PathBuf};

use crate::common::*;

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
    let conn = crate::common::store::open_db(&db);
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

const SYNTHETIC: [&str; 4] = [
    "tfn-vat-synthetic",
    "ef-lstm-vat-synthetic",
    "lf-lstm-vat-synthetic",
    "amer-vat-synthetic",
];

#[test]
fn the_shipped_synthetic_models_run_on_the_demo_by_name_and_say_so() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let names: Vec<String> = std::iter::once("text-zero-shot")
        .chain(SYNTHETIC)
        .map(|n| format!("\"{n}\""))
        .collect();
    // Every modality on (the models read face, appearance, acoustic and text).
    let cfg = tmp.path().join("all.toml");
    std::fs::write(
        &cfg,
        format!(
            "[fusion]\npredictors = [{}]\nretrieve_k = 0\n",
            names.join(", ")
        ),
    )
    .unwrap();
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for id in SYNTHETIC {
        assert!(
            out.lines()
                .any(|l| l.contains(id) && l.contains("[synthetic: not an empathy model]")),
            "{id}: {out}"
        );
    }
    // A second run at --speed max (batched in blocks of consecutive windows) stores the
    // same predictions, bit for bit.
    let db2 = tmp.path().join("s2.db");
    let o = replay_cli(&demo_session(), &db2, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));
    let cosines = |db: &Path| -> Vec<(String, i64, String, f64)> {
        crate::common::store::open_db(db)
            .prepare(
                "SELECT predictor, window_index, story_id, raw_cosine FROM predictions
                 ORDER BY 1, 2, 3",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert_eq!(cosines(&db), cosines(&db2));
    let conn = crate::common::store::open_db(&db);
    let rows: Vec<(String, i64, i64, String)> = conn
        .prepare(
            "SELECT predictor, count(*), max(synthetic), min(modalities) FROM predictions
             GROUP BY predictor ORDER BY predictor",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 5, "{rows:?}");
    let zero_shot = rows.iter().find(|r| r.0 == "text-zero-shot").unwrap().1;
    for (id, n, synthetic, modalities) in &rows {
        // The same windows and stories for every predictor.
        assert_eq!(*n, zero_shot, "{id}");
        assert_eq!(*synthetic, i64::from(id != "text-zero-shot"), "{id}");
        if id != "text-zero-shot" {
            for m in ["face", "appearance", "acoustic_compare", "text"] {
                assert!(modalities.contains(m), "{id}: {modalities}");
            }
        }
    }
}

#[test]
fn a_synthetic_model_on_a_session_without_its_modalities_is_refused_naming_one() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("r.db");
    // Vision off: the session has no face and no appearance modality.
    let cfg = config_without_vision_models_and(
        tmp.path(),
        "novision.toml",
        "\n[fusion]\npredictors = [\"lf-lstm-vat-synthetic\"]\nretrieve_k = 0\n",
    );
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("lf-lstm-vat-synthetic")
            && (err.contains("`face`") || err.contains("face"))
            && err.contains("does not have it"),
        "{err}"
    );
    // An unknown name lists what is known.
    let cfg = config_without_vision_models_and(
        tmp.path(),
        "unknown.toml",
        "\n[fusion]\npredictors = [\"no-such-model\"]\n",
    );
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("no-such-model") && err.contains("amer-vat-synthetic"),
        "{err}"
    );
}

/// Raw parity windows of a shipped model (the inputs `models verify` checks).
fn parity_windows(
    model: &empathic::fusion::onnx_model::OnnxPredictor,
) -> Vec<empathic::fusion::onnx_model::RawWindow> {
    use ndarray_npy::ReadNpyExt;
    let dir = root().join("models/reference/fusion");
    let mut windows = vec![
        empathic::fusion::onnx_model::RawWindow {
            modalities: Vec::new()
        };
        2
    ];
    for (name, _) in model.inputs() {
        let v = ndarray::Array3::<f32>::read_npy(
            std::fs::File::open(dir.join(format!("window.{name}.npy"))).unwrap(),
        )
        .unwrap();
        let m = ndarray::Array2::<f32>::read_npy(
            std::fs::File::open(dir.join(format!("window.{name}_mask.npy"))).unwrap(),
        )
        .unwrap();
        for (i, w) in windows.iter_mut().enumerate() {
            w.modalities.push((
                v.index_axis(ndarray::Axis(0), i).iter().copied().collect(),
                m.row(i).to_vec(),
            ));
        }
    }
    windows
}

#[test]
fn shipped_models_match_pytorch_and_batches_match_single_windows() {
    use ndarray_npy::ReadNpyExt;
    let dir = root().join("models");
    for id in SYNTHETIC {
        let mut model = empathic::fusion::onnx_model::OnnxPredictor::open(
            &dir.join(format!("fusion/{id}.onnx")),
            None,
        )
        .unwrap();
        let windows = parity_windows(&model);
        let expected = ndarray::Array2::<f32>::read_npy(
            std::fs::File::open(dir.join(format!("reference/fusion/{id}.z.npy"))).unwrap(),
        )
        .unwrap();
        let batched = model.infer(&windows).unwrap();
        // Rust (ONNX Runtime) against PyTorch at export, window by window.
        for (got, want) in batched.iter().zip(expected.rows()) {
            let diff = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(diff < 1e-4, "{id}: max abs diff {diff}");
        }
        // In a batch of 16 (the runtime's block at --speed max) a window gets what it gets
        // alone up to the last bits (ONNX Runtime's kernels differ with the batch), and the
        // same batch always gives the same bits (the runtime batches by window order, so
        // two runs at one speed store identical predictions).
        let sixteen: Vec<_> = (0..16).map(|i| windows[i % 2].clone()).collect();
        let big = model.infer(&sixteen).unwrap();
        assert_eq!(
            big,
            model.infer(&sixteen).unwrap(),
            "{id}: same batch, same bits"
        );
        for (i, z) in big.iter().enumerate() {
            let alone = model.infer(&windows[i % 2..i % 2 + 1]).unwrap();
            let diff = z
                .iter()
                .zip(&alone[0])
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(diff < 1e-6, "{id}: window {i} of the batch: {diff}");
        }
    }
}

/// A session's id and its (mean cosine, rating) per rated story.
type Session = (String, Vec<(f64, f64)>);

#[test]
fn per_participant_calibration_lowers_the_error_on_the_synthetic_held_out_participants() {
    use empathic::fusion::calibration::participant_map;
    use empathic::fusion::Predictor;
    // Session-level mean cosines of the shipped LF-LSTM on the synthetic set's validation and
    // test participants (tools/fusion/train_demo.sh), whose planted scale use differs.
    let csv =
        std::fs::read_to_string(root().join("tests/data/fusion/synthetic-heldout-lf-lstm.csv"))
            .unwrap();
    let model = empathic::fusion::onnx_model::OnnxPredictor::open(
        &root().join("models/fusion/lf-lstm-vat-synthetic.onnx"),
        None,
    )
    .unwrap();
    let population = model.population_map();
    // participant -> sessions in order -> (cosine, rating) per story
    let mut by: std::collections::BTreeMap<String, Vec<Session>> = Default::default();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let sessions = by.entry(f[0].to_string()).or_default();
        if sessions.last().is_none_or(|s| s.0 != f[1]) {
            sessions.push((f[1].to_string(), Vec::new()));
        }
        let pair = (f[3].parse().unwrap(), f[4].parse().unwrap());
        sessions.last_mut().unwrap().1.push(pair);
    }
    assert!(by.len() >= 8, "{} participants", by.len());
    let (mut pop_se, mut cal_se, mut n) = (0.0, 0.0, 0.0);
    for sessions in by.values() {
        for k in 1..sessions.len() {
            // Only earlier sessions' ratings: no peeking at the session predicted.
            let earlier: Vec<(f64, f64)> = sessions[..k].iter().flat_map(|s| s.1.clone()).collect();
            let map = participant_map(population, &earlier).unwrap();
            for (cos, rating) in &sessions[k].1 {
                pop_se += (population.score(*cos) - rating).powi(2);
                cal_se += (map.score(*cos) - rating).powi(2);
                n += 1.0;
            }
        }
    }
    let (pop, cal) = (pop_se / n, cal_se / n);
    println!("synthetic held-out: MSE population {pop:.3}, per participant {cal:.3} ({n} ratings)");
    assert!(cal < pop, "population {pop}, calibrated {cal}");
}

/// Rewrites the `metadata_props` entries of an ONNX model (ModelProto field 14, each a
/// StringStringEntryProto of `key` = 1 and `value` = 2) whose key is in `set`, leaving every
/// other field's bytes as they were. Protobuf lets a test do this without an ONNX library:
/// the top level is a sequence of tagged fields.
fn with_metadata(model: &[u8], set: &[(&str, &str)]) -> Vec<u8> {
    fn varint(bytes: &[u8], at: &mut usize) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = bytes[*at];
            *at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
        }
        value
    }
    fn put_varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
        put_varint(out, field << 3 | 2);
        put_varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }
    let mut out = Vec::new();
    let mut at = 0;
    while at < model.len() {
        let start = at;
        let tag = varint(model, &mut at);
        match tag & 7 {
            0 => {
                varint(model, &mut at);
            }
            1 => at += 8,
            5 => at += 4,
            2 => {
                let len = varint(model, &mut at) as usize;
                let body = &model[at..at + len];
                at += len;
                if tag >> 3 == 14 {
                    // key = field 1, first in every entry the exporters write.
                    let mut k = 0;
                    assert_eq!(varint(body, &mut k), 1 << 3 | 2);
                    let key_len = varint(body, &mut k) as usize;
                    let key = std::str::from_utf8(&body[k..k + key_len]).unwrap();
                    if let Some((_, value)) = set.iter().find(|(name, _)| *name == key) {
                        let mut entry = Vec::new();
                        put_bytes(&mut entry, 1, key.as_bytes());
                        put_bytes(&mut entry, 2, value.as_bytes());
                        put_bytes(&mut out, 14, &entry);
                        continue;
                    }
                }
            }
            other => panic!("wire type {other} in a ModelProto"),
        }
        out.extend_from_slice(&model[start..at]);
    }
    out
}

#[test]
fn evaluate_reads_whom_a_model_named_by_path_was_fitted_on_from_the_model_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("p.db");
    // The reference model, its provenance saying it was fitted on the demo's participant
    // (as `tools/fusion/train.py` writes it), under an id no manifest knows.
    let original = std::fs::read(model("text-mean-v1.onnx")).unwrap();
    let fitted = tmp.path().join("fitted.onnx");
    let training = r#"{"split": {"train_participants": ["P-DEMO", "P-OTHER"], "validation_participants": []}}"#;
    std::fs::write(
        &fitted,
        with_metadata(
            &original,
            &[
                ("empathic.id", "text-mean-fitted"),
                ("empathic.training", training),
            ],
        ),
    )
    .unwrap();
    let unknown = tmp.path().join("unknown.onnx");
    std::fs::write(
        &unknown,
        with_metadata(&original, &[("empathic.id", "text-mean-unknown")]),
    )
    .unwrap();
    let cfg = config(tmp.path(), "fitted.toml", &[&fitted, &unknown]);
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));
    let o = empathic(&[
        "evaluate",
        "--db",
        path_str(&db),
        "--config",
        path_str(&cfg),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let warnings_of = |predictor: &str| -> String {
        v.as_array()
            .unwrap()
            .iter()
            .find(|e| e["predictor"] == predictor && e["phase"].is_null())
            .unwrap_or_else(|| panic!("no row for {predictor}: {v}"))["warnings"]
            .to_string()
    };
    let fitted_warnings = warnings_of("text-mean-fitted");
    assert!(
        fitted_warnings.contains("evaluated on 1 participant(s) the model was fitted on (P-DEMO)"),
        "{fitted_warnings}"
    );
    // A model whose provenance names no split: said, not assumed held out.
    let unknown_warnings = warnings_of("text-mean-unknown");
    assert!(
        unknown_warnings.contains("does not record whom it was fitted on"),
        "{unknown_warnings}"
    );
    assert!(
        !unknown_warnings.contains("fitted on (P-DEMO)"),
        "{unknown_warnings}"
    );
}
