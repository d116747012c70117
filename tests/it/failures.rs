//! A stage that fails mid-session costs only its own modality (issue 42): fail points
//! compiled into the test build (`--features failpoints`, `make test`) make one stage fail
//! once its data reach a chosen moment of a replay; the session is still stored complete
//! with every frame, the stage's modality present only before the failure, and the
//! failure stored with the session (its quality report and its reason) and shown by
//! `sessions show` and the report.
#![cfg(feature = "failpoints")]

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{
    config_without_vision_models_and, demo_session, empathic, fixtures_or_skip, path_str, stderr,
    stdout,
};

/// `empathic replay` with the stage `stage` made to fail from `at_ms` of session time.
fn replay_failing(
    session: &Path,
    db: &Path,
    config: Option<&Path>,
    stage: &str,
    at_ms: u64,
) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_empathic"));
    c.args(["replay", path_str(session), "--db", path_str(db)]);
    if let Some(config) = config {
        c.args(["--config", path_str(config)]);
    }
    c.env("EMPATHIC_LOG", "error")
        .env("FAILPOINTS", format!("stage-{stage}=return({at_ms})"))
        .output()
        .unwrap()
}

fn number(db: &Path, sql: &str) -> i64 {
    crate::common::store::open_db(db)
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn text(db: &Path, sql: &str) -> String {
    crate::common::store::open_db(db)
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn import_bank(db: &Path) {
    let bank = crate::common::root().join("demo/stories/stories.jsonl");
    let o = empathic(&["stories", "import", path_str(&bank), "--db", path_str(db)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Checks what every failed stage leaves: complete, every frame, the failure stored with
/// its stage, moment and error in the quality report and the reason, shown by `sessions
/// show`.
fn assert_failure_stored(db: &Path, id: &str, stage: &str, at_ms: u64, frames: i64) {
    assert_eq!(
        text(
            db,
            &format!("SELECT status FROM sessions WHERE id = '{id}'")
        ),
        "complete"
    );
    assert_eq!(
        number(
            db,
            &format!("SELECT frames FROM sessions WHERE id = '{id}'")
        ),
        frames,
        "every frame is stored"
    );
    let quality: serde_json::Value = serde_json::from_str(&text(
        db,
        &format!("SELECT quality_json FROM sessions WHERE id = '{id}'"),
    ))
    .unwrap();
    let failures = quality["stage_failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{quality}");
    assert_eq!(failures[0]["stage"], stage);
    let at = failures[0]["at_ms"].as_u64().unwrap();
    // The first data at or after the moment: a frame or a block (within a second), or, for
    // the text encoder, the next event (the demo's come every few seconds).
    let within = if stage == "text" { 6_000 } else { 2_000 };
    assert!(at >= at_ms && at < at_ms + within, "failed at {at} ms");
    assert!(failures[0]["error"].as_str().unwrap().contains("injected"));
    let reason = text(
        db,
        &format!("SELECT status_reason FROM sessions WHERE id = '{id}'"),
    );
    assert!(
        reason.contains(&format!("stage {stage} failed at"))
            && reason.contains("went on without it"),
        "{reason}"
    );
    let o = empathic(&["sessions", "show", id, "--db", path_str(db)]);
    assert!(
        stdout(&o).contains(&format!("stage {stage} failed at")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_frame_stage_or_fusion_failing_mid_replay_costs_only_its_own_data() {
    let tmp = tempfile::tempdir().unwrap();
    // The demo: 420 frames; face, appearance and fusion on, with the story bank.
    for (stage, at_ms) in [
        ("face", 10_000u64),
        ("appearance", 5_000),
        ("fusion-windows", 15_000),
        ("text", 12_000),
    ] {
        let db = tmp.path().join(format!("{stage}.db"));
        import_bank(&db);
        let o = replay_failing(&demo_session(), &db, None, stage, at_ms);
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
        assert!(
            stdout(&o).contains(&format!("stage {stage} failed at")) || stderr(&o).contains(stage),
            "the summary says so: {}",
            stdout(&o)
        );
        assert_failure_stored(&db, "demo-0001", stage, at_ms, 420);
        let at_ns = at_ms as i64 * 1_000_000;
        match stage {
            "face" | "appearance" => {
                let before = number(&db, &format!(
                    "SELECT count(*) FROM frame_features f JOIN frames USING (session_id, frame_index) \
                     WHERE f.modality = '{stage}' AND f.present = 1 AND t_ns < {at_ns}"));
                let after = number(&db, &format!(
                    "SELECT count(*) FROM frame_features f JOIN frames USING (session_id, frame_index) \
                     WHERE f.modality = '{stage}' AND f.present = 1 AND t_ns >= {at_ns}"));
                assert!(
                    before as u64 >= at_ms / 1000 * 14,
                    "{stage}: {before} frames before"
                );
                assert_eq!(after, 0, "{stage}: present after its failure");
                // Stages that do not rest on it carry on (the appearance encoder and the
                // blendshapes read the face's crop and landmarks, so they stop with it).
                let others: &[&str] = if stage == "face" {
                    &["video_signal", "acoustic_compare"]
                } else {
                    &["face", "blendshapes", "acoustic_compare"]
                };
                for other in others {
                    let n = number(&db, &format!(
                        "SELECT count(*) FROM frame_features WHERE modality = '{other}' AND present = 1"));
                    assert!(n >= 400, "{other}: {n}");
                }
            }
            "fusion-windows" => {
                let late = number(&db, &format!(
                    "SELECT count(*) FROM predictions p JOIN windows w ON w.session_id = p.session_id \
                     AND w.window_index = p.window_index WHERE w.end_ns > {}", at_ns + 1_000_000_000));
                let early = number(&db, "SELECT count(*) FROM predictions");
                assert!(
                    early > 0 && late == 0,
                    "{early} predictions, {late} after the failure"
                );
                assert_eq!(
                    number(&db, "SELECT count(*) FROM windows"),
                    21,
                    "every window stored"
                );
            }
            _ => {
                // Text: the utterances are all stored (they are events); the text modality
                // stops where the encoder failed.
                assert_eq!(number(&db, "SELECT count(*) FROM utterances"), 7);
            }
        }
    }
}

#[test]
fn the_recogniser_or_an_audio_stage_failing_mid_replay_costs_only_its_own_data() {
    let Some(fixtures) = fixtures_or_skip("a failing recogniser") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let session = fixtures.join("sessions/still");
    let config = config_without_vision_models_and(tmp.path(), "c.toml", "");
    for (stage, at_ms) in [
        ("speech-recognition", 15_000u64),
        ("speech_activity", 8_000),
    ] {
        let db = tmp.path().join(format!("{stage}.db"));
        import_bank(&db);
        let o = replay_failing(&session, &db, Some(&config), stage, at_ms);
        assert!(o.status.success(), "{stage}: {}", stderr(&o));
        assert_failure_stored(&db, "still", stage, at_ms, 600);
        if stage == "speech-recognition" {
            let heard = number(&db, "SELECT count(*) FROM utterances WHERE source = 'asr'");
            let late = number(
                &db,
                &format!(
                    "SELECT count(*) FROM utterances WHERE source = 'asr' AND start_ns >= {}",
                    at_ms * 1_000_000
                ),
            );
            assert!(
                heard >= 2 && late == 0,
                "{heard} utterances, {late} after the failure"
            );
        } else {
            let after = number(&db, &format!(
                "SELECT count(*) FROM frame_features f JOIN frames USING (session_id, frame_index) \
                 WHERE f.modality = 'speech_activity' AND f.present = 1 AND t_ns >= {}", (at_ms + 100) * 1_000_000));
            assert_eq!(after, 0);
            let acoustic = number(&db, "SELECT count(*) FROM frame_features WHERE modality = 'acoustic_compare' AND present = 1");
            assert!(acoustic >= 590, "{acoustic}");
        }
    }
}
