//! Stored rows are byte-identical to those of the build before the runtime was reshaped
//! (issue "One pipeline for every source"): a digest per table of what replaying the demo
//! session and every shared session stores, compared with `tests/data/golden/*.txt`.
//!
//! The digests were taken with the build before the change (`EMPATHIC_BLESS=1` writes them),
//! and blessed again for on-station speech (issue 32): the utterance and session rows gained
//! columns (`source`, `model`, `confidence`; `text_source`), the shared sessions (which have
//! no events) gained the recogniser's utterances and so a text modality, and every session
//! the `speech_activity` modality (the learned voice activity); every other digest stayed
//! as it was. The recogniser's rows (`:asr`) are model outputs. Blessed again for issue 47:
//! every session gained the `body` modality (frame and window rows, `modalities`, the
//! session's quality totals), and the shared sessions' recognised words changed with the
//! segment rules and the no-speech check (`:asr` rows and the text modality built from
//! them); every other digest stayed as it was.
//! ONNX Runtime's kernels differ between CPU classes (AVX2 only, AVX-512, VNNI), so the
//! rows computed by learned models are compared exactly only on a CPU class digests were
//! taken on: `{name}.txt` (its `cpu` line names the class), or `{name}.{class}.txt` taken
//! on another class with the same build (`EMPATHIC_BLESS=class` writes it; `=1` writes
//! `{name}.txt` and removes the class files, which a change of rows makes stale). The body
//! shows why: on `grid` its stored values' mean is 47.66 on AVX2 and 48.29 on AVX-512
//! (1.3 %, measured in CI and here), more than the tolerance below, with
//! the agreement with MediaPipe unchanged (tests/it/body.rs). On a class with no digests they are compared by their present-frame counts (within
//! 1 %) and the mean of every stored value (relative 1e-2), and every other table stays
//! exact. Which modalities a model computes is not listed here: it is read off the
//! pipeline's own stages (`ModalitySpec::computed`), so a new model modality cannot be
//! forgotten. The tables holding figures derived from model outputs (the session's quality
//! totals, the predictions) are named in [`MODEL_TABLES`].

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::store::{digest, table_lines, table_lines_where, SESSION_TABLES};
use crate::common::*;
use rusqlite::Connection;

/// Modalities computed by learned models, read off the stages the default config builds
/// (every model the pipeline can run is on by default).
fn model_modalities() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let config = empathic::config::Config::default();
        let stages = empathic::runtime::stages::Stages::load(&config, 15.0, None)
            .unwrap_or_else(|e| panic!("cannot set up the default stages: {e}"));
        stages
            .layout
            .iter()
            .filter(|(_, m)| m.spec.computed == empathic::core::Computed::ByModel)
            .map(|(_, m)| m.spec.name.to_string())
            .collect()
    })
}
/// Tables whose rows hold model outputs or figures derived from them.
const MODEL_TABLES: &[&str] = &["sessions", "predictions"];

/// `key value` lines describing what a replay stored for session `id`.
fn describe(db: &Path, id: &str) -> BTreeMap<String, String> {
    let conn = crate::common::store::open_db(db);
    let mut out = BTreeMap::new();
    for (table, key) in SESSION_TABLES {
        if matches!(*table, "frame_features" | "window_features") {
            let modalities: Vec<String> = crate::common::store::column(
                &conn,
                &format!("SELECT DISTINCT modality FROM {table} WHERE session_id = '{id}'"),
            );
            for m in modalities {
                let lines = table_lines_where(
                    &conn,
                    table,
                    &format!("session_id = '{id}' AND modality = ?1"),
                    &m,
                );
                out.insert(format!("{table}:{m}"), digest(&lines));
                if model_modalities().contains(&m) {
                    out.insert(format!("stats:{table}:{m}"), stats(&conn, table, id, &m));
                }
            }
        } else if matches!(*table, "events" | "utterances") {
            // The station recogniser's utterances are model outputs (`:asr`, compared by
            // count and mean length on another CPU); the dialogue app's stay exact.
            let (heard, told): (Vec<String>, Vec<String>) = table_lines(&conn, table, key, id)
                .into_iter()
                .partition(|l| {
                    l.contains(r#"source="asr""#) || l.contains(r#"\"source\":\"asr\""#)
                });
            out.insert(table.to_string(), digest(&told));
            out.insert(format!("{table}:asr"), digest(&heard));
            out.insert(
                format!("stats:{table}:asr"),
                format!(
                    "present={} mean={:.9e}",
                    heard.len(),
                    heard.iter().map(|l| l.len() as f64).sum::<f64>() / heard.len().max(1) as f64
                ),
            );
        } else {
            out.insert(
                table.to_string(),
                digest(&table_lines(&conn, table, key, id)),
            );
            if *table == "sessions" {
                // What a session counts does not depend on model outputs: exact everywhere.
                let counts: String = conn
                    .query_row(
                        "SELECT format('status=%s frames=%d windows=%d duration_ns=%d', status, frames, windows, duration_ns) FROM sessions WHERE id = ?1",
                        [id],
                        |r| r.get(0),
                    )
                    .unwrap();
                out.insert("sessions_counts".into(), counts);
            }
            if *table == "predictions" {
                // Cosines of model outputs: compared by count and mean on another CPU.
                let (n, mean): (i64, Option<f64>) = conn
                    .query_row(
                        &format!("SELECT count(*), avg(raw_cosine) FROM predictions WHERE session_id = '{id}'"),
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .unwrap();
                out.insert(
                    "stats:predictions".into(),
                    format!("present={n} mean={:.9e}", mean.unwrap_or(0.0)),
                );
            }
        }
    }
    out
}

/// Present rows and the mean of every stored value of one modality.
fn stats(conn: &Connection, table: &str, id: &str, modality: &str) -> String {
    let column = if table == "frame_features" {
        "vec"
    } else {
        "mean"
    };
    let blobs: Vec<Option<Vec<u8>>> = crate::common::store::column(
        conn,
        &format!(
            "SELECT {column} FROM {table} WHERE session_id = '{id}' AND modality = '{modality}'"
        ),
    );
    let (mut n, mut sum, mut present) = (0u64, 0f64, 0u64);
    for b in blobs.into_iter().flatten() {
        present += 1;
        for c in b.chunks_exact(4) {
            sum += f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            n += 1;
        }
    }
    format!("present={present} mean={:.9e}", sum / n.max(1) as f64)
}

fn parse_stats(s: &str) -> (f64, f64) {
    let mut present = 0.0;
    let mut mean = 0.0;
    for part in s.split_whitespace() {
        if let Some(v) = part.strip_prefix("present=") {
            present = v.parse().unwrap();
        }
        if let Some(v) = part.strip_prefix("mean=") {
            mean = v.parse().unwrap();
        }
    }
    (present, mean)
}

fn check(name: &str, session: &Path, id: &str, config: Option<&Path>) {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("golden.db");
    let out = replay_cli(session, &db, config);
    assert!(out.status.success(), "{name}: {}", stderr(&out));
    let got = describe(&db, id);
    let dir = root().join("tests/data/golden");
    let primary = dir.join(format!("{name}.txt"));
    let cpu = cpu_class();
    let bless = std::env::var("EMPATHIC_BLESS").unwrap_or_default();
    if bless == "1" || bless == "class" {
        let mut text = format!("cpu {cpu}\n");
        for (k, v) in &got {
            text.push_str(&format!("{k} {v}\n"));
        }
        if bless == "class" {
            let file = dir.join(format!("{name}.{}.txt", cpu.replace(',', "-")));
            std::fs::write(file, text).unwrap();
            return;
        }
        // New rows: the other classes' exact digests are stale.
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&format!("{name}.")) && n.matches('.').count() == 2 {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        std::fs::write(&primary, text).unwrap();
        return;
    }
    let file = cpu_class_file(&dir, name, "txt").unwrap_or(primary);
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut want = BTreeMap::new();
    let mut blessed_cpu = String::new();
    for line in text.lines() {
        let (k, v) = line.split_once(' ').unwrap();
        if k == "cpu" {
            blessed_cpu = v.to_string();
        } else {
            want.insert(k.to_string(), v.to_string());
        }
    }
    let same_cpu = blessed_cpu == cpu;
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>(),
        "{name}: the stored tables and modalities changed"
    );
    for (k, w) in &want {
        let g = &got[k];
        let model_dependent = k.starts_with("stats:")
            || k.ends_with(":asr")
            || MODEL_TABLES.contains(&k.as_str())
            || k.split_once(':')
                .is_some_and(|(_, m)| model_modalities().iter().any(|n| n == m));
        if same_cpu || !model_dependent {
            assert_eq!(w, g, "{name}: {k} differs from the golden digest");
        } else if k.starts_with("stats:") {
            let (wp, wm) = parse_stats(w);
            let (gp, gm) = parse_stats(g);
            assert!(
                (wp - gp).abs() <= 0.01 * wp.max(1.0)
                    && (wm - gm).abs() <= 1e-2 * wm.abs().max(1e-3),
                "{name}: {k}: {g} vs golden {w} (CPU {cpu}, golden taken on {blessed_cpu})"
            );
        }
    }
}

#[test]
fn every_model_modality_is_compared_within_tolerance_across_cpus() {
    // The list is derived from the stages; this pins that the derivation sees them all.
    let names = model_modalities();
    for m in [
        "face",
        "blendshapes",
        "appearance",
        "text",
        "speech_activity",
    ] {
        assert!(names.iter().any(|n| n == m), "{m} missing from {names:?}");
    }
    for m in ["video_signal", "audio_signal", "acoustic_compare"] {
        assert!(
            !names.iter().any(|n| n == m),
            "{m} is computed without a model"
        );
    }
}

#[test]
fn demo_session_stores_the_golden_rows() {
    check("demo", &demo_session(), "demo-0001", None);
}

#[test]
fn shared_sessions_store_the_golden_rows() {
    let Some(fixtures) = fixtures_or_skip("shared_sessions_store_the_golden_rows") else {
        return;
    };
    for name in ["grid", "still"] {
        check(name, &fixtures.join("sessions").join(name), name, None);
    }
    // `selfie` has bystanders (three people in view): under the default screen its faces
    // but one are masked and its rows change (tests/it/bystanders.rs tests that). Its
    // digests are per CPU class and could be re-taken here on one class only (AVX2), so it
    // is held to the rows it stored before the screen, under `bystanders = "keep"`, until
    // they are blessed on each class.
    let tmp = tempfile::tempdir().unwrap();
    let keep = keep_bystanders_config(tmp.path());
    let selfie = fixtures.join("sessions/selfie");
    check("selfie", &selfie, "selfie", Some(&keep));
}
