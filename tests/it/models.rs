//! Model toolchain: `models verify` on the shipped models and on broken copies, and
//! `embed` against sentence-transformers' reference embeddings.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;
use empathic::core::cosine;
use empathic::digest::sha256_file;

/// A copy of models/ in `tmp` and a config pointing at it.
fn models_copy(tmp: &Path) -> (PathBuf, PathBuf) {
    let dir = copy_session(&root().join("models"), &tmp.join("models"));
    copy_session(&root().join("models/reference"), &dir.join("reference"));
    let config = tmp.join("c.toml");
    std::fs::write(&config, format!("[models]\ndir = \"{}\"\n", dir.display())).unwrap();
    (dir, config)
}

fn verify(config: &Path) -> std::process::Output {
    empathic(&["models", "verify", "--config", path_str(config)])
}

#[test]
fn shipped_models_verify() {
    let o = empathic(&["models", "verify"]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("ok      all-MiniLM-L6-v2-int8"), "{out}");
    assert!(out.contains("ok      all-MiniLM-L6-v2 "), "{out}");
    assert!(out.contains("0 failed"), "{out}");
}

/// ONNX Runtime's PyPI library queues usage telemetry under `~/.cache/Microsoft` unless
/// told not to; the binary tells it not to, so a run (here, loading every model) leaves
/// no such queue in the home directory.
#[test]
fn onnx_runtime_telemetry_stays_off() {
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["models", "verify"])
        .env("EMPATHIC_LOG", "error")
        .env("HOME", home.path())
        .env("XDG_CACHE_HOME", home.path().join(".cache"))
        .env_remove(empathic::models::onnx::TELEMETRY_OFF)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let queue = home.path().join(".cache/Microsoft");
    assert!(
        !queue.exists(),
        "ONNX Runtime wrote its telemetry queue: {}",
        queue.display()
    );
}

#[test]
fn broken_model_files_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, config) = models_copy(tmp.path());
    let model = dir.join("all-MiniLM-L6-v2.int8.onnx");

    // Wrong bytes: the checksum catches it.
    let mut bytes = std::fs::read(&model).unwrap();
    bytes[1000] ^= 0xff;
    std::fs::write(&model, &bytes).unwrap();
    let o = verify(&config);
    assert_eq!(o.status.code(), Some(2));
    let out = stdout(&o);
    assert!(
        out.contains("sha256") && out.contains("all-MiniLM-L6-v2.int8.onnx"),
        "{out}"
    );

    // Not ONNX at all, with a matching checksum: loading fails, named.
    std::fs::write(&model, b"not an onnx model").unwrap();
    let manifest = dir.join("MODELS.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let sha = sha256_file(&model).unwrap();
    let patched = text.replacen(
        "f6391403bb96b14c8c45856e8726c35bd734675de1f221e40596f577c40ecb0c",
        &sha,
        1,
    );
    std::fs::write(&manifest, &patched).unwrap();
    let out = stdout(&verify(&config));
    assert!(
        out.contains("does not load") && out.contains("int8.onnx"),
        "{out}"
    );

    // Missing file.
    std::fs::remove_file(&model).unwrap();
    let out = stdout(&verify(&config));
    assert!(
        out.contains("missing") && out.contains("int8.onnx"),
        "{out}"
    );
}

#[test]
fn wrong_shapes_in_the_manifest_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, config) = models_copy(tmp.path());
    let manifest = dir.join("MODELS.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen("shape = [\"batch\", 384]", "shape = [\"batch\", 512]", 1),
    )
    .unwrap();
    let o = verify(&config);
    assert_eq!(o.status.code(), Some(2));
    let out = stdout(&o);
    assert!(
        out.contains("dimension 1 is 384, the manifest says 512"),
        "{out}"
    );
    // A manifest that does not parse names the file.
    std::fs::write(&manifest, "format_version = 1\n[[model]]\nname = 3\n").unwrap();
    let o = verify(&config);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("MODELS.toml"), "{}", stderr(&o));
}

fn reference() -> (Vec<String>, Vec<Vec<f32>>) {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("models/reference/all-MiniLM-L6-v2.json")).unwrap(),
    )
    .unwrap();
    (
        serde_json::from_value(v["texts"].clone()).unwrap(),
        serde_json::from_value(v["embeddings"].clone()).unwrap(),
    )
}

fn embed_cli(text: &str, extra: &[&str]) -> Vec<f32> {
    let mut args = vec!["embed", text];
    args.extend_from_slice(extra);
    let o = empathic(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn embed_prints_384_values_close_to_sentence_transformers() {
    let (texts, expected) = reference();
    // The sentence, the empty text and the longest one (truncated at 256 tokens).
    for i in [0usize, 1, 7] {
        let v = embed_cli(&texts[i], &[]);
        assert_eq!(v.len(), 384);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        let c = cosine(&v, &expected[i]).unwrap();
        // The default (fp32) encoder; `default_encoder_matches_sentence_transformers` holds
        // it to 0.999 on every text.
        assert!(c >= 0.999, "text {i}: cosine {c}");
    }
    let o = empathic(&["embed", "x", "--model", "no-such-model"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no-such-model"));
}

#[test]
fn default_encoder_matches_sentence_transformers() {
    // The fp32 graph with its weights fetched at set-up: every reference text, including the
    // one-word and the empty one, at cosine >= 0.999 (the int8 model reaches 0.973).
    let (texts, expected) = reference();
    for (t, e) in texts.iter().zip(&expected) {
        let v = embed_cli(t, &["--model", "all-MiniLM-L6-v2"]);
        let c = cosine(&v, e).unwrap();
        assert!(c >= 0.999, "{t:?}: cosine {c}");
    }
}

#[test]
fn missing_external_weights_name_the_set_up_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, config) = models_copy(tmp.path());
    std::fs::remove_file(dir.join("all-MiniLM-L6-v2.safetensors")).unwrap();
    let o = verify(&config);
    assert_eq!(o.status.code(), Some(2));
    let out = stdout(&o);
    assert!(
        out.contains("all-MiniLM-L6-v2.safetensors")
            && out.contains("missing")
            && out.contains("scripts/setup.sh"),
        "{out}"
    );
}
