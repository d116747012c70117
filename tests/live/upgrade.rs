//! Updating a station (issue 46): a package upgrade replaces `/usr/bin/empathic` while the
//! service runs. The service must not be cut in the middle of a participant's session: it
//! notices the replaced binary only between sessions, ends with 75 and systemd
//! (`RestartForceExitStatus=75`) starts the new build.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::live::*;
use crate::common::*;

#[test]
fn a_replaced_binary_restarts_the_service_between_sessions_never_during_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // The service runs a copy, so the test can replace it as dpkg does (a new file renamed
    // over the old one); ONNX Runtime beside it, as on a station.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(env!("CARGO_BIN_EXE_empathic"), bin.join("empathic")).unwrap();
    std::os::unix::fs::symlink(
        root().join("third_party/onnxruntime/libonnxruntime.so.1"),
        bin.join("libonnxruntime.so.1"),
    )
    .unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-LIVE");
    let mut station = Station {
        envs: Vec::new(),
        child: None,
        binary: bin.join("empathic"),
        config: config.clone(),
        socket: dir.path().join("control.sock"),
        db: dir.path().join("station.db"),
        recordings: dir.path().join("recordings"),
        log: dir.path().join("service.log"),
    };
    station.spawn(&pulse.runtime_dir);
    let (id, mut player) = start_warm_up(&station, &pulse);
    sleep_s(2.0);

    // The upgrade, mid-session.
    std::fs::copy(
        env!("CARGO_BIN_EXE_empathic"),
        bin.join("empathic.dpkg-new"),
    )
    .unwrap();
    std::fs::rename(bin.join("empathic.dpkg-new"), bin.join("empathic")).unwrap();
    sleep_s(8.0);
    let child = station.child.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the service ended mid-session"
    );
    let status = station.ok(json!({"type": "status"}));
    assert_eq!(status["session"]["session_id"], id.as_str(), "{status}");

    // The session ends as usual; then the service ends for the new build.
    station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(station.wait_session_end(&id), "complete");
    let began = Instant::now();
    let code = station.wait_exit().code();
    assert_eq!(code, Some(75), "{}", station.log_text());
    assert!(began.elapsed() < Duration::from_secs(30));
    assert!(
        station.log_text().contains("the binary was replaced"),
        "{}",
        station.log_text()
    );
    // systemd starts the new build: it serves again, on the same store.
    station.spawn(&pulse.runtime_dir);
    let status = station.ok(json!({"type": "status"}));
    assert!(status["session"].is_null(), "{status}");
}
