//! Issue 58 live: a session with a second person in view (the file camera plays two real
//! faces side by side, the bystander entering after 2 s). The recording keeps the
//! participant and masks the bystander on the disk; `status` counts it; the recording
//! replays to the same rows.

use std::path::PathBuf;

use serde_json::json;

use crate::common::live::*;
use crate::common::*;
use empathic::capture::camera::MjpegFileSource;
use empathic::capture::VideoSource;

#[test]
fn a_bystander_in_view_is_masked_on_the_disk_counted_live_and_replays_the_same() {
    let Some(fixtures) = fixtures_or_skip("bystanders live") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let material = two_faces(&fixtures, &dir.path().join("two"), 20);
    // No sound server: video only, so the rows compared are the camera's.
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &material.join("video.avi"));
    consent(&config, "P-LIVE");
    let station = Station::start(dir.path(), &config, &runtime);
    let id = start_session_p_live(&station);
    station.ok(json!({"type": "phase", "phase": "warm_up"}));
    sleep_s(6.0);
    let status = station.ok(json!({"type": "status"}));
    let by = &status["session"]["bystanders"];
    assert!(
        by["frames_with_bystanders"].as_u64().unwrap() > 0
            && by["frames_masked"].as_u64().unwrap() > 0,
        "{status}"
    );
    // What a station engineer types: the counts, in words.
    let o = empathic(&["status", "--config", path_str(&config)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("privacy   someone other than the participant in view on"),
        "{}",
        stdout(&o)
    );
    let stop = station.ok(json!({"type": "stop_session"}));
    assert_eq!(
        station.wait_session_end(&id),
        "complete",
        "{}",
        station.log_text()
    );
    let folder = PathBuf::from(stop["recording"].as_str().unwrap());

    // On the disk: every frame carries its screening; the masked ones show the
    // participant's face only (a fresh screen finds one face, on the left).
    let m = manifest(&folder);
    let mut source = MjpegFileSource::open(
        &folder.join("video.avi"),
        m["nominal_fps"].as_f64().unwrap_or(15.0),
        0,
    )
    .unwrap();
    let dir_models = root().join("models");
    let mut checker = empathic::features::face::bystanders::BystanderScreen::open(
        &dir_models,
        &empathic::models::manifest::Manifest::load(&dir_models).unwrap(),
        None,
    )
    .unwrap();
    let (mut frames, mut masked) = (0, 0);
    while let Some(mut f) = source.next_frame().unwrap() {
        frames += 1;
        let s = f.screening.expect("a recorded frame without its screening");
        if s.masked > 0 {
            masked += 1;
            let seen = checker.screen(&mut f.image).unwrap();
            assert_eq!((seen.faces, seen.bystanders), (1, 0), "frame {frames}");
        }
    }
    assert!(
        frames > 60 && masked > 30,
        "{frames} frames, {masked} masked"
    );

    // The quality report counts them, and the recording replays to the same rows.
    let conn = crate::common::store::open_db(&station.db);
    let quality: String = conn
        .query_row("SELECT quality_json FROM sessions", [], |r| r.get(0))
        .unwrap();
    let q: serde_json::Value = serde_json::from_str(&quality).unwrap();
    assert_eq!(
        q["bystanders"]["frames_masked"].as_u64(),
        Some(masked),
        "{quality}"
    );
    let db = replay_recording(dir.path(), &folder);
    assert_same_rows(&station.db, &db, &id);
    let replayed: String = crate::common::store::open_db(&db)
        .query_row("SELECT quality_json FROM sessions", [], |r| r.get(0))
        .unwrap();
    let r: serde_json::Value = serde_json::from_str(&replayed).unwrap();
    assert_eq!(r["bystanders"], q["bystanders"]);
}
