//! The reference dialogue app (`empathic-dialogue`) against the live station.

use crate::common::live::*;
use crate::common::store::count;
use crate::common::*;
use serde_json::Value;
use std::process::Command;

#[test]
fn the_reference_dialogue_app_runs_a_whole_session_acting_on_what_the_station_perceives() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    // Predictions come a transcript wait after their window: 3 s here, so the robot has
    // them by the reflection.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("transcript_wait_ms = 15000", "transcript_wait_ms = 3000"),
    )
    .unwrap();
    consent(&config, "P-ROBOT");
    import_bank(&dir.path().join("station.db"));
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let mut player = pulse.play(&answers_wav(dir.path()));
    let summary_path = dir.path().join("dialogue.json");
    let out = Command::new(env!("CARGO_BIN_EXE_empathic-dialogue"))
        .args([
            "--socket",
            path_str(&station.socket),
            "--participant",
            "P-ROBOT",
            "--ratings",
            "4,2,5",
            "--policy",
            "explore",
            "--answer-s",
            "6",
            "--end-of-turn-ms",
            "600",
            "--max-turn-s",
            "10",
            "--read-s",
            "3",
            "--face-s",
            "10",
            "--prediction-wait-s",
            "15",
            "--summary",
            path_str(&summary_path),
        ])
        .output()
        .unwrap();
    let _ = player.kill();
    let _ = player.wait();
    let said = stdout(&out);
    assert!(
        out.status.success(),
        "the dialogue app failed: {}\n{said}\n{}",
        stderr(&out),
        station.log_text()
    );
    eprintln!("{said}");
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    eprintln!("{summary:#}");
    // scripts/live_latency.sh collects the summaries of its runs.
    if let Ok(keep) = std::env::var("EMPATHIC_DIALOGUE_SUMMARY") {
        std::fs::copy(&summary_path, keep).unwrap();
    }
    let voice = &summary["latency_ms"]["voice"];
    assert!(
        voice["n"].as_u64() > Some(0) && voice["runtime"]["p50"].is_u64(),
        "{summary}"
    );
    let id = summary["session_id"].as_str().unwrap().to_string();
    assert_eq!(summary["ended"]["status"], "complete", "{summary}");
    assert_eq!(summary["face_at_start"], true, "{summary}");
    // It heard the station: voice, face and predictions.
    let messages = &summary["messages"];
    for topic in ["voice", "face", "prediction", "session", "utterance"] {
        assert!(messages[topic].as_u64() > Some(0), "no {topic}: {summary}");
    }
    assert_eq!(summary["dropped"], 0, "{summary}");
    // ... and acted on it: at least one turn ended when the participant fell silent (not
    // at the robot's limit), and the reflection is about the story predicted highest.
    let turns = summary["turns"].as_array().unwrap();
    assert!(turns.len() >= 3, "{summary}");
    assert_eq!(summary["recommended_from"], "story_share", "{summary}");
    // Predicted empathy is taken against the latest window once one was predicted.
    let basis = &summary["recommend_predicted_from"]["basis"];
    if summary["predictions_before_recommend"].as_u64() > Some(0) {
        assert_eq!(basis, "latest_window", "{summary}");
    } else {
        assert_eq!(basis, "words", "{summary}");
    }
    assert!(
        turns.iter().any(|t| t["ended_by_silence"] == true),
        "{summary}"
    );
    assert_eq!(
        summary["reflection"]["basis"]["by"], "prediction",
        "{summary}"
    );
    let recommended: Vec<String> = summary["recommended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(recommended.len(), 3, "{summary}");
    assert!(recommended.contains(
        &summary["reflection"]["story_id"]
            .as_str()
            .unwrap()
            .to_string()
    ));
    assert!(
        said.lines().filter(|l| l.starts_with("robot: ")).count() >= 5,
        "{said}"
    );

    // The store holds the session the app drove: five phases, the recommended stories
    // shown and rated, the robot's turns, the recommendation.
    assert_eq!(station.wait_session_end(&id), "complete");
    let conn = crate::common::store::open_db(&station.db);
    let shown: Vec<String> = conn
        .prepare("SELECT story_id FROM story_exposures WHERE session_id = ?1 ORDER BY position")
        .unwrap()
        .query_map([&id], |r| r.get(0))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(shown, recommended);
    let ratings: Vec<(String, i64)> = conn
        .prepare("SELECT r.story_id, r.value FROM self_ratings r JOIN story_exposures e USING (session_id, story_id) WHERE r.session_id = ?1 ORDER BY e.position")
        .unwrap()
        .query_map([&id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let values: Vec<i64> = ratings.iter().map(|r| r.1).collect();
    assert_eq!(values, vec![4, 2, 5]);
    assert_eq!(count(&conn, "SELECT count(DISTINCT phase) FROM phases"), 5);
    assert!(
        count(
            &conn,
            "SELECT count(*) FROM utterances WHERE speaker = 'robot' AND source = 'dialogue_app'"
        ) >= 5
    );
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM events WHERE type = 'recommendation'"
        ),
        1
    );
    assert!(count(&conn, "SELECT count(*) FROM predictions") > 0);
}

#[test]
fn the_reference_dialogue_app_refuses_bad_arguments_and_an_absent_station() {
    let dir = tempfile::tempdir().unwrap();
    let app = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_empathic-dialogue"))
            .args(args)
            .output()
            .unwrap()
    };
    let o = app(&["--help"]);
    assert!(o.status.success() && stdout(&o).contains("usage: empathic-dialogue --socket"));
    for line in [
        "default: 800",
        "default: asked on stdin",
        "default: similarity",
    ] {
        assert!(stdout(&o).contains(line), "{line}: {}", stdout(&o));
    }
    let o = app(&["--participant", "P01"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--socket and --participant are required"));
    let o = app(&["--socket", "x", "--participant", "P01", "--ratings", "4,9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a list of 1-5"), "{}", stderr(&o));
    let socket = dir.path().join("nobody.sock");
    let o = app(&["--socket", path_str(&socket), "--participant", "P01"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot connect to") && stderr(&o).contains("nobody.sock"),
        "{}",
        stderr(&o)
    );
}
