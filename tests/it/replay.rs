//! End-to-end replay: the demo session, the shared real sessions, determinism, pacing.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::common::*;
use empathic::clock::{Clock, ManualClock, Speed};
use empathic::config::Config;
use empathic::runtime::replay::{replay, ReplayOptions};
use empathic::store::Store;

fn options(dir: &std::path::Path, db: &std::path::Path, speed: Speed) -> ReplayOptions {
    ReplayOptions {
        session_dir: dir.to_path_buf(),
        db_path: db.to_path_buf(),
        config: Config::default(),
        speed,
        replace: false,
        progress: std::sync::Arc::new(empathic::runtime::pipeline::NoProgress),
        emit: None,
        skip_bad_events: false,
    }
}

fn replay_max(dir: &std::path::Path, db: &std::path::Path) -> empathic::report::ReplaySummary {
    replay_with(options(dir, db, Speed::Max))
}

fn replay_with(opts: ReplayOptions) -> empathic::report::ReplaySummary {
    replay(
        &opts,
        Arc::new(ManualClock::new(0)),
        Arc::new(AtomicBool::new(false)),
    )
    .unwrap()
}

#[test]
fn demo_session_replays_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("demo.db");
    let summary = replay_max(&demo_session(), &db);
    assert_eq!(summary.status, "complete");
    assert_eq!(summary.frames, 420);
    // (420 - 120) / 15 + 1
    assert_eq!(summary.windows, 21);
    assert!((summary.duration_secs - 28.0).abs() < 1e-6);
    let q = &summary.quality;
    assert_eq!(q.video.frames_decoded, 420);
    assert_eq!(q.video.missing_frames + q.video.duplicated_frames, 0);
    assert_eq!(q.av_offset_ms, 0.0);
    assert!(q.av_duration_mismatch_ms.abs() < 1.0);
    // 3.3 s of the 28 s are pure silence between readings; speech has pauses too.
    assert!(
        q.silence_ratio > 0.10 && q.silence_ratio < 0.5,
        "{}",
        q.silence_ratio
    );
    assert_eq!(q.phases.len(), 5);
    // The frame stages report their presence: the demo face is on every frame, and the
    // blendshapes, the body (the whole upper body is in view) and the appearance encoder
    // follow it.
    let presence: Vec<(&str, u64, u64)> = q
        .modality_presence
        .iter()
        .map(|m| (m.modality.as_str(), m.present_frames, m.decoded_frames))
        .collect();
    assert_eq!(
        presence,
        vec![
            ("face", 420, 420),
            ("blendshapes", 420, 420),
            ("body", 420, 420),
            ("appearance", 420, 420)
        ]
    );

    let store = Store::open(&db).unwrap();
    let d = store.session_detail("demo-0001").unwrap();
    assert_eq!(d.summary.status, "complete");
    assert_eq!(d.summary.participant_id.as_deref(), Some("P-DEMO"));
    assert_eq!(d.phases.len(), 5);
    assert_eq!(d.phases[4].end_secs, Some(28.0));
    assert_eq!(d.stories.len(), 3);
    assert_eq!(
        d.stories.iter().map(|s| s.rating).collect::<Vec<_>>(),
        vec![Some(4), Some(3), Some(5)]
    );
    // The default predictor predicts empathy toward each of the three stories shown,
    // beside its self-rating, in the summary and in the store.
    let predicted: Vec<(&str, &str, Option<u8>)> = summary
        .predictions
        .iter()
        .map(|p| (p.predictor.as_str(), p.story_id.as_str(), p.rating))
        .collect();
    assert_eq!(
        predicted,
        vec![
            ("text-zero-shot", "demo-story-03", Some(4)),
            ("text-zero-shot", "demo-story-11", Some(3)),
            ("text-zero-shot", "demo-story-27", Some(5)),
        ]
    );
    assert!(summary
        .predictions
        .iter()
        .all(|p| (1.0..=5.0).contains(&p.score) && p.windows > 0 && !p.synthetic));
    assert_eq!(d.predictions, summary.predictions);
    assert_eq!(d.utterances, 7);
    let conn = store.connection_for_tests();
    let surveys: i64 = conn
        .query_row(
            "SELECT count(*) FROM survey_responses WHERE participant_id = 'P-DEMO'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(surveys, 1);
    // Every window carries a 120-frame presence mask for each modality.
    let masks: Vec<(String, Vec<u8>, i64)> = conn
        .prepare("SELECT modality, presence, present_frames FROM window_features WHERE session_id = 'demo-0001'")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // video_signal, face, blendshapes, body, appearance, text, audio_signal, acoustic,
    // speech_activity.
    assert_eq!(masks.len(), 21 * 9);
    for (modality, mask, present) in &masks {
        assert_eq!(mask.len(), 120, "{modality}");
        assert_eq!(mask.iter().map(|&b| i64::from(b)).sum::<i64>(), *present);
        // The demo face is found on every frame, and its blendshapes with it.
        if modality == "face" || modality == "blendshapes" {
            assert_eq!(*present, 120);
        }
    }
    // Windows are labelled with the phase at their midpoint: 0-8 s is warm-up, 10-18 s
    // story sharing (mid 14 s), 20-28 s reflection (mid 24 s, reflection from 23.7 s).
    let phases: Vec<Option<String>> = conn
        .prepare("SELECT phase FROM windows WHERE session_id = 'demo-0001' ORDER BY window_index")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(phases[0].as_deref(), Some("warm_up"));
    assert_eq!(phases[10].as_deref(), Some("story_share"));
    assert_eq!(phases[20].as_deref(), Some("reflection"));
    // Appearance: a 1280-d CNN embedding on every decoded frame.
    let (dims, present): (i64, i64) = conn
        .query_row(
            "SELECT m.dims, (SELECT count(*) FROM frame_features f WHERE f.session_id = m.session_id AND f.modality = 'appearance' AND f.present = 1)
             FROM modalities m WHERE m.session_id = 'demo-0001' AND m.name = 'appearance'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((dims, present), (1280, 420));
    // Text: the participant's first utterance starts at 0.5 s, so frames 0-7 have none;
    // every later frame is inside an utterance or within 3 s after one.
    let text_present: Vec<i64> = conn
        .prepare("SELECT present FROM frame_features WHERE session_id = 'demo-0001' AND modality = 'text' ORDER BY frame_index")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(text_present.len(), 420);
    assert!(text_present[..8].iter().all(|&p| p == 0));
    assert!(text_present[8..].iter().all(|&p| p == 1));
    // Speech windows have voice activity; levels are real numbers.
    let (va, level): (f64, f64) = conn
        .query_row(
            "SELECT max(voice_activity), max(level_dbfs) FROM windows WHERE session_id = 'demo-0001'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(va > 0.5 && level > -40.0 && level < 0.0, "{va} {level}");
}

/// Everything stored about a session's frames and windows, in a stable order.
fn derived_rows(db: &std::path::Path, id: &str) -> Vec<String> {
    let conn = crate::common::store::open_db(db);
    let mut out = Vec::new();
    for (table, order) in [
        ("frames", "frame_index"),
        ("frame_features", "modality, frame_index"),
        ("windows", "window_index"),
        ("window_features", "window_index, modality"),
    ] {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT * FROM {table} WHERE session_id = ?1 ORDER BY {order}"
            ))
            .unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([id], |r| {
                let mut s = String::from(table);
                for i in 0..n {
                    s.push_str(&format!("|{:?}", r.get::<_, rusqlite::types::Value>(i)?));
                }
                Ok(s)
            })
            .unwrap();
        out.extend(rows.map(Result::unwrap));
    }
    out
}

#[test]
fn replaying_twice_gives_identical_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.db"), tmp.path().join("b.db"));
    replay_max(&demo_session(), &a);
    replay_max(&demo_session(), &b);
    let (ra, rb) = (derived_rows(&a, "demo-0001"), derived_rows(&b, "demo-0001"));
    // Frames and windows, each with its 9 modalities' vectors.
    assert_eq!(ra.len(), 420 + 420 * 9 + 21 + 21 * 9);
    assert_eq!(ra, rb);
}

#[test]
fn realtime_replay_follows_the_clock() {
    // A manual clock advances only when the pacer sleeps on it: the run ends with the clock
    // at the last stamp, and takes no real 28 s.
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("rt.db");
    let clock = Arc::new(ManualClock::new(1_000));
    let mut opts = options(&demo_session(), &db, Speed::Realtime);
    opts.config.models.appearance_encoder = String::new();
    let summary = replay(&opts, clock.clone(), Arc::new(AtomicBool::new(false))).unwrap();
    assert_eq!(summary.frames, 420);
    let advanced = clock.now_ns() - 1_000;
    // Last video frame at 27.933 s; last 20 ms audio block at 27.98 s.
    assert!(
        (27_900_000_000..=28_000_000_000).contains(&advanced),
        "{advanced}"
    );
    // Same rows as a max-speed replay: pacing changes timing, never content.
    let db_max = tmp.path().join("max.db");
    let mut opts = options(&demo_session(), &db_max, Speed::Max);
    opts.config.models.appearance_encoder = String::new();
    replay_with(opts);
    assert_eq!(
        derived_rows(&db, "demo-0001"),
        derived_rows(&db_max, "demo-0001")
    );
}

#[test]
fn stop_flag_closes_the_session_incomplete_with_what_was_computed() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("stop.db");
    let summary = replay(
        &options(&demo_session(), &db, Speed::Max),
        Arc::new(ManualClock::new(0)),
        Arc::new(AtomicBool::new(true)),
    )
    .unwrap();
    assert_eq!(summary.status, "incomplete");
    assert!(summary.status_reason.unwrap().contains("signal"));
    let store = Store::open(&db).unwrap();
    assert_eq!(store.list_sessions().unwrap()[0].status, "incomplete");
}

#[test]
fn shared_real_sessions_replay() {
    let Some(fixtures) = fixtures_or_skip("shared_real_sessions_replay") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("shared.db");
    for (name, frames, windows) in [("grid", 495, 26), ("still", 600, 33), ("selfie", 256, 10)] {
        let mut opts = options(&fixtures.join("sessions").join(name), &db, Speed::Max);
        opts.config.models.appearance_encoder = String::new();
        let summary = replay_with(opts);
        assert_eq!(summary.status, "complete", "{name}");
        assert_eq!(summary.frames, frames, "{name}");
        assert_eq!(summary.windows, windows, "{name}");
        assert_eq!(summary.quality.video.frames_decoded, frames, "{name}");
        assert!(
            summary.quality.av_duration_mismatch_ms.abs() < 70.0,
            "{name}: {}",
            summary.quality.av_duration_mismatch_ms
        );
    }
    let out = empathic(&["sessions", "list", "--db", path_str(&db), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let grid = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "grid")
        .unwrap();
    assert_eq!(grid["status"], "complete");
    assert_eq!(grid["frames"], 495);
    assert_eq!(grid["windows"], 26);
    assert!((grid["duration_secs"].as_f64().unwrap() - 33.0).abs() < 1e-6);
    assert!(grid["quality"]["silence_ratio"].is_number());
    assert!(grid["quality"]["audio_clipping_ratio"].is_number());
    assert!(grid["quality"]["av_offset_ms"].is_number());
}

/// `replay --emit` of the demo: its events carry the participant's words, so the station's
/// recogniser stays off (`[asr] source = auto`) and `voice` comes from the energy rule,
/// each change after the time it describes and turns alternating.
#[test]
fn emitted_voice_without_the_recogniser_follows_the_energy_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let config = config_without_vision_models(tmp.path());
    let emitted = tmp.path().join("stream.jsonl");
    let o = replay_cli_with(
        &demo_session(),
        &tmp.path().join("r.db"),
        Some(&config),
        &["--emit", path_str(&emitted)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let voice: Vec<serde_json::Value> = std::fs::read_to_string(&emitted)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|m| m["topic"] == "voice")
        .collect();
    assert!(voice.len() >= 4, "{voice:?}");
    for (k, v) in voice.iter().enumerate() {
        let expected = if k % 2 == 0 { "started" } else { "stopped" };
        assert_eq!(v["event"], expected, "{voice:?}");
        assert_eq!(v["source"], "energy");
        let (at, decided) = (
            v["at_ms"].as_u64().unwrap(),
            v["decided_ms"].as_u64().unwrap(),
        );
        // A start needs 30 ms of voiced rows; a stop `[asr] min_silence_ms` of quiet,
        // except at the end of the recording.
        let min_silence = u64::from(empathic::config::Config::default().asr.min_silence_ms);
        let least = match (k % 2, k + 1 == voice.len()) {
            (0, _) => 30,
            (_, false) => min_silence,
            (_, true) => 0,
        };
        assert!(decided >= at + least, "{v}");
        assert!(
            v.get("handed_ms").is_none(),
            "a replay hands nothing live: {v}"
        );
    }
}
