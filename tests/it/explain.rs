//! Attributions (issue 57): every stored prediction of the demo is explained by its cues
//! with the sum property, for the default predictor and every shipped model; `explain`, the
//! stream (`replay --emit`) and the store give the same numbers for the same window; a
//! planted model that reads one column of one modality gets its attribution there.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The demo's bank in a new database, so that retrieval and the bank-relative map run.
fn db_with_bank(dir: &Path) -> PathBuf {
    let db = dir.join("e.db");
    let o = empathic(&[
        "stories",
        "import",
        path_str(&root().join("demo/stories/stories.jsonl")),
        "--db",
        path_str(&db),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    db
}

fn config(dir: &Path, predictors: &[String], extra: &str) -> PathBuf {
    let p = dir.join("explain.toml");
    let list: Vec<String> = predictors.iter().map(|p| format!("\"{p}\"")).collect();
    std::fs::write(
        &p,
        format!(
            "[body]\nenabled = false\n\n[fusion]\npredictors = [{}]\n{extra}",
            list.join(", ")
        ),
    )
    .unwrap();
    p
}

fn session_id(db: &Path) -> String {
    let o = empathic(&["sessions", "list", "--db", path_str(db), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    v[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn every_prediction_of_the_demo_sums_to_its_score_and_every_view_shows_the_same_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let db = db_with_bank(tmp.path());
    let predictors: Vec<String> = [
        "text-zero-shot",
        "tfn-vat-synthetic",
        "ef-lstm-vat-synthetic",
        "lf-lstm-vat-synthetic",
        "amer-vat-synthetic",
    ]
    .map(String::from)
    .to_vec();
    let cfg = config(tmp.path(), &predictors, "");
    let stream = tmp.path().join("stream.jsonl");
    let o = replay_cli_with(
        &demo_session(),
        &db,
        Some(&cfg),
        &["--emit", path_str(&stream)],
    );
    assert!(o.status.success(), "{}", stderr(&o));

    // The store: one attribution per prediction, each summing to its score.
    let conn = crate::common::store::open_db(&db);
    let predictions: i64 = conn
        .query_row("SELECT count(*) FROM predictions", [], |r| r.get(0))
        .unwrap();
    let rows: Vec<(i64, String, String, f64, f64, String, String)> = conn
        .prepare(
            "SELECT a.window_index, a.predictor, a.story_id, p.score, a.baseline, a.method, a.cues
             FROM attributions a JOIN predictions p USING (session_id, window_index, predictor, story_id)",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(predictions > 20, "{predictions} predictions");
    assert_eq!(
        rows.len() as i64,
        predictions,
        "every prediction attributed"
    );
    let mut stored = std::collections::BTreeMap::new();
    for (w, predictor, story, score, baseline, method, cues) in &rows {
        let cues: Vec<serde_json::Value> = serde_json::from_str(cues).unwrap();
        let sum: f64 = cues.iter().map(|c| c["value"].as_f64().unwrap()).sum();
        assert!(
            (baseline + sum - score).abs() < 1e-3,
            "window {w} {predictor} {story}: {baseline} + {sum} != {score}"
        );
        assert!(
            method == "exact" || method.starts_with("sampled:"),
            "{method}"
        );
        if predictor == "text-zero-shot" {
            assert_eq!(method, "exact", "the zero-shot predictor is cheap: exact");
            assert!(cues
                .iter()
                .all(|c| c["modality"] == "text" && c["cue"] == "words"));
        } else {
            // A shipped model carries baselines: cue groups, not whole modalities, for all
            // but the appearance embedding.
            assert!(
                cues.iter().any(|c| c["cue"] == "smile (AU06, AU12)"),
                "{cues:?}"
            );
            assert!(cues.iter().any(|c| c["cue"] == "loudness"), "{cues:?}");
        }
        stored.insert((*w, predictor.clone(), story.clone()), (*score, cues));
    }

    // `explain --json`: each session-level prediction is its baseline plus its cues, and
    // each window on its course is the stored window.
    let id = session_id(&db);
    let o = empathic(&["explain", &id, "--db", path_str(&db), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let whys: Vec<serde_json::Value> = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(whys.len() >= 8, "{} explanations", whys.len());
    for w in &whys {
        let cues: f64 = w["cues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["value"].as_f64().unwrap())
            .sum();
        let (score, baseline) = (
            w["score"].as_f64().unwrap(),
            w["baseline"].as_f64().unwrap(),
        );
        assert!((baseline + cues - score).abs() < 1e-3, "{w}");
        let modalities: f64 = w["modalities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["value"].as_f64().unwrap())
            .sum();
        assert!((modalities - cues).abs() < 1e-9);
        for point in w["course"].as_array().unwrap() {
            let key = (
                point["window_index"].as_i64().unwrap(),
                w["predictor"].as_str().unwrap().to_string(),
                w["story_id"].as_str().unwrap().to_string(),
            );
            let (score, cues) = &stored[&key];
            assert!((point["score"].as_f64().unwrap() - score).abs() < 1e-12);
            let top = &point["top"][0];
            let largest = cues
                .iter()
                .map(|c| c["value"].as_f64().unwrap().abs())
                .fold(0.0, f64::max);
            assert!((top["value"].as_f64().unwrap().abs() - largest).abs() < 1e-12);
        }
    }
    // The text form names the utterances that moved the zero-shot prediction.
    let o = empathic(&[
        "explain",
        &id,
        "--db",
        path_str(&db),
        "--predictor",
        "text-zero-shot",
    ]);
    let text = stdout(&o);
    assert!(text.contains("utterances that raised it most"), "{text}");
    assert!(text.contains("not what the participant felt"), "{text}");

    // The report: each panel's window table gives the same largest cue, to 4 decimals.
    let page = tmp.path().join("report.html");
    let o = empathic(&[
        "report",
        &id,
        "--db",
        path_str(&db),
        "--out",
        path_str(&page),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("Why these predictions") && html.contains("not what the participant felt")
    );
    let mut checked = 0;
    for w in &whys {
        let title = w["story_id"].as_str().unwrap();
        let stories = std::fs::read_to_string(root().join("demo/stories/stories.jsonl")).unwrap();
        let title = stories
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|s| s["id"] == title)
            .map(|s| s["title"].as_str().unwrap().to_string())
            .unwrap();
        let head = format!(
            "<b>{}</b> toward &ldquo;{}&rdquo; ({}",
            w["predictor"].as_str().unwrap(),
            title,
            if w["retrieved"] == true {
                "retrieved"
            } else {
                "after it was shown"
            }
        );
        let at = html
            .find(&head)
            .unwrap_or_else(|| panic!("no panel {head}"));
        let table = &html[at..];
        let table = &table[table.find("class=\"why-windows\"").unwrap()..];
        let table = &table[..table.find("</table>").unwrap()];
        for point in w["course"].as_array().unwrap() {
            let top = &point["top"][0];
            let row = format!("<tr><td>{}</td>", point["window_index"].as_i64().unwrap());
            let line = table[table.find(&row).unwrap()..].lines().next().unwrap();
            assert!(
                line.contains(&format!("{:+.4}", top["value"].as_f64().unwrap())),
                "{line} vs {top}"
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} windows checked on the page");

    // The stream: each prediction message carries the window's top cues, the same numbers.
    let mut seen = 0;
    for line in std::fs::read_to_string(&stream).unwrap().lines() {
        let m: serde_json::Value = serde_json::from_str(line).unwrap();
        if m["topic"] != "prediction" {
            continue;
        }
        let w = m["window_index"].as_i64().unwrap_or_else(|| panic!("{m}"));
        for p in m["predictions"].as_array().unwrap() {
            let key = (
                w,
                p["predictor"].as_str().unwrap().to_string(),
                p["story_id"].as_str().unwrap().to_string(),
            );
            let (_, cues) = &stored[&key];
            let why = &p["why"];
            let top = why["top"].as_array().unwrap();
            assert!(!top.is_empty() && top.len() <= 3, "{why}");
            for t in top {
                let same = cues.iter().any(|c| {
                    c["modality"] == t["modality"]
                        && c["cue"] == t["cue"]
                        && (c["value"].as_f64().unwrap() - t["value"].as_f64().unwrap()).abs()
                            < 1e-12
                });
                assert!(same, "stream cue {t} not stored for window {w}");
            }
            seen += 1;
        }
    }
    assert_eq!(
        seen as i64, predictions,
        "a stream message for every prediction"
    );
}

const SHIPPED: [&str; 4] = [
    "tfn-vat-synthetic",
    "ef-lstm-vat-synthetic",
    "lf-lstm-vat-synthetic",
    "amer-vat-synthetic",
];

/// Whether a cue is one the planted ratings depend on (tools/fusion/synth.py): loudness, or
/// smiling (AU12 among the face's action units, mouthSmile among the blendshapes).
fn planted(modality: &str, cue: &str) -> bool {
    cue == "loudness" || (modality == "face" && cue.starts_with("smile")) || cue == "smile"
}

/// Per (window, story): each non-text cue's modality, name and value.
type CueValues = std::collections::BTreeMap<(i64, String), Vec<(String, String, f64)>>;

/// Each stored non-text cue of `session` by `predictor`, per (window, story): its value.
fn cue_values(conn: &rusqlite::Connection, session: &str, predictor: &str) -> CueValues {
    let mut stmt = conn
        .prepare(
            "SELECT window_index, story_id, cues FROM attributions
             WHERE session_id = ?1 AND predictor = ?2",
        )
        .unwrap();
    let rows = stmt
        .query_map([session, predictor], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .unwrap()
        .map(Result::unwrap);
    rows.map(|(w, story, cues)| {
        let cues: Vec<serde_json::Value> = serde_json::from_str(&cues).unwrap();
        let cues = cues
            .iter()
            .filter(|c| c["modality"] != "text")
            .map(|c| {
                (
                    c["modality"].as_str().unwrap().to_string(),
                    c["cue"].as_str().unwrap().to_string(),
                    c["value"].as_f64().unwrap(),
                )
            })
            .collect();
        ((w, story), cues)
    })
    .collect()
}

/// The mean of `f` over every (window, story), per cue, largest first.
fn ranked(
    values: &CueValues,
    f: impl Fn(&(i64, String), &str, &str, f64) -> f64,
) -> Vec<((String, String), f64)> {
    let mut sums: std::collections::BTreeMap<(String, String), f64> = Default::default();
    for (key, cues) in values {
        for (m, c, v) in cues {
            *sums.entry((m.clone(), c.clone())).or_default() += f(key, m, c, *v);
        }
    }
    let n = values.len().max(1) as f64;
    let mut out: Vec<_> = sums.into_iter().map(|(k, v)| (k, v / n)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// The shipped synthetic models were trained on ratings planted on loudness and smiling
/// (tools/fusion/synth.py); their attributions must say so. On the demo, loudness and
/// smiling together carry more than any other cue outside the words, and loudness is among
/// each model's two largest. On the demo with the first half's
/// audio at 0.3 of its amplitude (the participant speaking louder in the second half), the
/// cue whose attributions change most is loudness.
#[test]
fn the_shipped_models_lean_on_the_planted_loudness_and_smile_and_a_louder_half_moves_loudness() {
    let tmp = tempfile::tempdir().unwrap();
    let db = db_with_bank(tmp.path());
    let predictors: Vec<String> = SHIPPED.map(String::from).to_vec();
    let cfg = config(tmp.path(), &predictors, "");
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));

    // The assembled session: the demo, its first 14 s at 0.3 of the amplitude, as another
    // participant's first session (a participant's later session is scored through the map
    // calibrated on their earlier ratings, which would scale every cue).
    let quieter = copy_session_as(
        &demo_session(),
        &tmp.path().join("quieter"),
        &[
            ("session_id", "quieter-0001"),
            ("participant_id", "P-QUIETER"),
        ],
    );
    let wav = quieter.join("audio.wav");
    let mut reader = hound::WavReader::open(&wav).unwrap();
    let spec = reader.spec();
    let samples: Vec<i16> = reader.samples::<i16>().map(Result::unwrap).collect();
    let half = samples.len() / 2;
    let mut writer = hound::WavWriter::create(&wav, spec).unwrap();
    for (i, s) in samples.iter().enumerate() {
        let s = if i < half {
            (f64::from(*s) * 0.3).round() as i16
        } else {
            *s
        };
        writer.write_sample(s).unwrap();
    }
    writer.finalize().unwrap();
    let o = replay_cli(&quieter, &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));

    let conn = crate::common::store::open_db(&db);
    for predictor in SHIPPED {
        let demo = cue_values(&conn, "demo-0001", predictor);
        assert!(demo.len() >= 20, "{predictor}: {} attributions", demo.len());
        let sizes = ranked(&demo, |_, _, _, v| v.abs());
        let on_planted: f64 = sizes
            .iter()
            .filter(|((m, c), _)| planted(m, c))
            .map(|(_, v)| v)
            .sum();
        let ((modality, cue), other) = sizes.iter().find(|((m, c), _)| !planted(m, c)).unwrap();
        assert!(
            on_planted > *other,
            "{predictor} on the demo: loudness and smiling {on_planted:.3}, {modality}: {cue} \
             {other:.3}: {sizes:?}"
        );
        // Loudness first or second: on this machine it is each model's first, but EF-LSTM's
        // appearance follows within 4 % (docs/prediction.md), closer than the features of
        // learned models agree across CPU classes.
        let rank = sizes.iter().position(|((_, c), _)| c == "loudness");
        assert!(
            rank.is_some_and(|r| r < 2),
            "{predictor} on the demo: loudness ranks {rank:?}: {sizes:?}"
        );

        let changed = cue_values(&conn, "quieter-0001", predictor);
        assert_eq!(
            changed.len(),
            demo.len(),
            "{predictor}: the same predictions"
        );
        let change = |key: &(i64, String), m: &str, c: &str, v: f64| -> f64 {
            let before = demo[key]
                .iter()
                .find(|(bm, bc, _)| bm == m && bc == c)
                .map_or(0.0, |x| x.2);
            (v - before).abs()
        };
        let moved = ranked(&changed, change);
        let ((modality, cue), by) = &moved[0];
        assert!(
            cue == "loudness",
            "{predictor}: quieter speech moved {modality}: {cue} most ({by:.3}): {moved:?}"
        );
    }
}

#[test]
fn a_planted_model_that_reads_only_the_loudness_gets_its_attribution_there() {
    let tmp = tempfile::tempdir().unwrap();
    let db = db_with_bank(tmp.path());
    let model = root().join("tests/data/fusion/loudness-planted-v1.onnx");
    let cfg = config(tmp.path(), &[model.display().to_string()], "");
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = crate::common::store::open_db(&db);
    let all: Vec<String> = conn
        .prepare("SELECT cues FROM attributions")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(all.len() > 10, "{} attributions", all.len());
    let mut moved = 0.0;
    for cues in &all {
        let cues: Vec<serde_json::Value> = serde_json::from_str(cues).unwrap();
        let size = |f: &dyn Fn(&serde_json::Value) -> bool| -> f64 {
            cues.iter()
                .filter(|c| f(c))
                .map(|c| c["value"].as_f64().unwrap().abs())
                .sum()
        };
        let total = size(&|_| true);
        let acoustic = size(&|c| c["modality"] == "acoustic_compare");
        let loudness = size(&|c| c["cue"] == "loudness");
        assert!(acoustic >= 0.95 * total, "{acoustic} of {total}: {cues:?}");
        assert!(loudness >= 0.95 * total, "{loudness} of {total}: {cues:?}");
        moved += total;
    }
    assert!(
        moved / all.len() as f64 > 0.1,
        "the planted signal moved the scores"
    );
}

#[test]
fn explain_says_why_there_is_nothing_to_explain() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("off.db");
    let cfg =
        config_without_vision_models_and(tmp.path(), "off.toml", "\n[fusion]\nexplain = false\n");
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));
    let id = session_id(&db);
    let o = empathic(&["explain", &id, "--db", path_str(&db)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("carry no attributions"),
        "{}",
        stderr(&o)
    );
    let o = empathic(&["explain", "no-such-session", "--db", path_str(&db)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no session `no-such-session`"),
        "{}",
        stderr(&o)
    );
}

/// The toolkit's own implementation (`tools/fusion/explain.py`, written from the definition
/// in Python with onnxruntime) computed the exact attribution of one demo window of the
/// shipped TFN model from `export windows`' arrays; its output is committed per CPU class
/// (`tests/data/fusion/tfn-attribution-reference.{class}.json`), and the station's must
/// agree within 1e-5. The window's features come from learned models whose ONNX Runtime
/// kernels differ between CPU classes (the earlier model predicted this window 3.4890 on AVX2 and
/// 3.4900 on AVX-512), so the exact comparison needs a reference taken on this class; on a
/// class with none, the station is compared with each reference within 1e-2 and the test
/// says how to add this class's.
#[test]
fn the_station_and_the_toolkit_compute_the_same_exact_attribution() {
    let dir = root().join("tests/data/fusion");
    let stem = "tfn-attribution-reference";
    let (file, tolerance) = match cpu_class_file(&dir, stem, "json") {
        Some(f) => (f, 1e-5),
        None => {
            eprintln!(
                "no toolkit reference taken on CPU class {}: comparing within 1e-2; add one with \
                 tools/fusion/explain.py (docs/prediction.md) as {stem}.<class>.json",
                cpu_class()
            );
            let any = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(stem))
                })
                .unwrap();
            (any, 1e-2)
        }
    };
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let db = db_with_bank(tmp.path());
    let cfg = config(
        tmp.path(),
        &["tfn-vat-synthetic".to_string()],
        "phases = [\"reflection\"]\nexplain_max_coalitions = 4096\n",
    );
    let o = replay_cli(&demo_session(), &db, Some(&cfg));
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = crate::common::store::open_db(&db);
    let (baseline, method, cues, score): (f64, String, String, f64) = conn
        .query_row(
            "SELECT a.baseline, a.method, a.cues, p.score FROM attributions a
             JOIN predictions p USING (session_id, window_index, predictor, story_id)
             WHERE a.window_index = ?1 AND a.story_id = ?2",
            rusqlite::params![
                reference["window_index"].as_i64().unwrap(),
                reference["story_id"].as_str().unwrap()
            ],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(method, "exact");
    let near = |got: f64, key: &str, want: &serde_json::Value| {
        let w = want[key].as_f64().unwrap();
        assert!(
            (got - w).abs() < tolerance,
            "{key} {}: station {got} vs toolkit {w} ({})",
            want["cue"],
            file.display()
        );
    };
    near(baseline, "baseline", &reference);
    near(score, "prediction", &reference);
    let cues: Vec<serde_json::Value> = serde_json::from_str(&cues).unwrap();
    let want = reference["cues"].as_array().unwrap();
    assert_eq!(cues.len(), want.len(), "{cues:?}");
    for (got, want) in cues.iter().zip(want) {
        assert_eq!(got["modality"], want["modality"]);
        assert_eq!(got["cue"], want["cue"]);
        near(got["value"].as_f64().unwrap(), "value", want);
    }
}
