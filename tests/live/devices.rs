//! The station's devices: a camera unplugged and back, no devices at start, a microphone
//! lost and back.

use crate::common::live::*;
use crate::common::store::count;
use crate::common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

#[test]
fn camera_unplugged_mid_session_leaves_the_same_gap_in_the_store_and_the_recording() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let camera = dir.path().join("camera.avi");
    std::fs::copy(demo_session().join("video.avi"), &camera).unwrap();
    let config = station_config(dir.path(), &camera);
    consent(&config, "P-LIVE");
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let (id, mut player) = start_warm_up(&station, &pulse);
    sleep_s(3.0);
    // Unplug: the file camera's file goes away; plug back 2 s later.
    let away = dir.path().join("camera.away");
    std::fs::rename(&camera, &away).unwrap();
    sleep_s(1.0);
    let status = station.ok(json!({"type": "status"}));
    assert_eq!(status["camera"]["present"], false, "{status}");
    sleep_s(1.0);
    std::fs::rename(&away, &camera).unwrap();
    sleep_s(4.0);
    let status = station.ok(json!({"type": "status"}));
    assert_eq!(status["camera"]["present"], true, "{status}");
    assert!(
        status["camera"]["reconnects"].as_u64().unwrap() >= 1,
        "{status}"
    );
    let stop = station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(station.wait_session_end(&id), "complete");
    let conn = crate::common::store::open_db(&station.db);
    let missing = count(
        &conn,
        &format!("SELECT count(*) FROM frames WHERE session_id = '{id}' AND decoded = 0"),
    );
    assert!(
        missing >= 15,
        "a 2 s unplug leaves at least a second of missing frames, got {missing}"
    );
    let folder = PathBuf::from(stop["recording"].as_str().unwrap());
    let m = manifest(&folder);
    assert!(
        m["recording"]["video_slots_empty"].as_u64().unwrap() >= 15,
        "{m}"
    );
    let db = replay_recording(dir.path(), &folder);
    assert_same_rows(&station.db, &db, &id);
}

#[test]
fn service_without_devices_stays_up_says_so_and_finds_them_when_they_appear() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let camera = dir.path().join("camera.avi");
    let config = station_config(dir.path(), &camera);
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    // systemd's side of Type=notify: a datagram socket the service reports to.
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let station = Station::start_with(
        dir.path(),
        &config,
        &runtime,
        vec![
            ("NOTIFY_SOCKET".into(), path_str(&notify_path).into()),
            ("WATCHDOG_USEC".into(), "2000000".into()),
        ],
    );
    let mut said = Vec::new();
    let mut buf = [0u8; 256];
    while !(said.iter().any(|m: &String| m.contains("READY=1"))
        && said.iter().any(|m| m.contains("WATCHDOG=1")))
    {
        let n = notify
            .recv(&mut buf)
            .expect("the service told systemd nothing");
        said.push(String::from_utf8_lossy(&buf[..n]).to_string());
    }
    // Keep reading, as systemd does (a full socket would block the service's pings).
    std::thread::Builder::new()
        .name("notify-reader".into())
        .spawn(move || while notify.recv(&mut buf).is_ok() {})
        .unwrap();
    sleep_s(1.0);
    let o = empathic(&["status", "--json", "--config", path_str(&config)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let status: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(status["camera"]["present"], false, "{status}");
    assert_eq!(status["microphone"]["present"], false, "{status}");
    assert!(
        status["camera"]["problem"]
            .as_str()
            .unwrap()
            .contains("camera.avi"),
        "{status}"
    );
    let o = empathic(&["status", "--config", path_str(&config)]);
    assert!(stdout(&o).contains("MISSING"), "{}", stdout(&o));
    let o = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["doctor", "--live", "--config", path_str(&config)])
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(
        !o.status.success() && text.contains("ready for live capture: no"),
        "{text}"
    );
    assert!(
        text.contains("MISSING camera") && text.contains("MISSING microphone"),
        "{text}"
    );

    // Both appear: the camera file and a sound server.
    std::fs::copy(demo_session().join("video.avi"), &camera).unwrap();
    let _pulse = Pulse::start(dir.path());
    station.wait_status("devices not picked up", 20, |s| {
        s["camera"]["present"] == true && s["microphone"]["present"] == true
    });
}

#[test]
fn microphone_lost_mid_session_is_retried_and_counted_as_a_discontinuity() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-LIVE");
    import_bank(&dir.path().join("station.db"));
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let (id, mut first_player) = start_warm_up(&station, &pulse);
    // Nothing shared yet (still the warm-up) and no `text`: recommend says what to do.
    let a = station.ask(json!({"type": "recommend", "k": 3}));
    assert!(a["error"].as_str().unwrap().contains("give `text`"), "{a}");
    sleep_s(3.0);
    // The microphone goes away (pulled out) and comes back.
    pulse.unplug();
    let _ = first_player.kill();
    let _ = first_player.wait();
    station.wait_status("microphone loss not noticed", 10, |s| {
        s["microphone"]["present"] == false
    });
    sleep_s(1.0);
    pulse.replug(dir.path());
    let mut player = pulse.play(&demo_session().join("audio.wav"));
    station.wait_status("microphone not picked up again", 20, |s| {
        s["microphone"]["present"] == true
    });
    sleep_s(3.0);
    station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(
        station.wait_session_end(&id),
        "complete",
        "{}",
        station.log_text()
    );
    let conn = crate::common::store::open_db(&station.db);
    let quality: String = conn
        .query_row(
            "SELECT quality_json FROM sessions WHERE id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    let q: Value = serde_json::from_str(&quality).unwrap();
    assert!(
        q["audio"]["discontinuities"].as_u64().unwrap() >= 1,
        "{q}\n{}",
        station.log_text()
    );
    let inserted = manifest(&station.recordings.join(&id))["recording"]["audio_samples_inserted"]
        .as_u64()
        .unwrap();
    assert!(
        inserted >= 16_000,
        "the gap is filled with counted silence in the recording: {inserted}"
    );
}
