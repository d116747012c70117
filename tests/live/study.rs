//! The live service and the study: ended sessions published, collectors keeping the study
//! page fresh.

use crate::common::live::*;
use crate::common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_service_publishes_each_ended_session_to_the_study() {
    use crate::common::broker::{free_port, start_broker};
    use empathic::sync::keys::{generate, KeyKind};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broker = start_broker(dir.path(), port);
    // Sealed, as a station is by default: its key enrolled, the study's and the
    // collector's public keys in its config.
    let keys = dir.path().join("keys");
    let study = generate(&keys.join("study.key"), KeyKind::X25519).unwrap();
    let collector_key = generate(&keys.join("collector.key"), KeyKind::Ed25519).unwrap();
    let station_key = generate(&keys.join("station.key"), KeyKind::Ed25519).unwrap();
    let central = dir.path().join("central.db");
    let mut central_db = empathic::sync::central::Central::open(central.to_str().unwrap()).unwrap();
    central_db
        .enrol("test-study", "st-live", Some(&station_key), false)
        .unwrap();
    drop(central_db);
    let mut collector = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["collect", "--db", central.to_str().unwrap()])
        .args([
            "--broker",
            &format!("mqtt://127.0.0.1:{port}"),
            "--study",
            "test-study",
        ])
        .args(["--study-key", keys.join("study.key").to_str().unwrap()])
        .args([
            "--signing-key",
            keys.join("collector.key").to_str().unwrap(),
        ])
        .env("EMPATHIC_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[sync]\nbroker = \"mqtt://127.0.0.1:{port}\"\nstudy = \"test-study\"\nsigning_key = \"{}\"\nstudy_key = \"{study}\"\ncollector_keys = [\"{collector_key}\"]\n",
        keys.join("station.key").display()
    ));
    std::fs::write(&config, text).unwrap();
    consent(&config, "P-LIVE");
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let (id, mut player) = start_warm_up(&station, &pulse);
    sleep_s(3.0);
    station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(station.wait_session_end(&id), "complete");
    // The service's publisher sends it (after P-LIVE's consent message, issue 44); the
    // collector's receipts mark both synced.
    station.wait_status("not synced", 60, |s| {
        s["sync"]["synced"].as_u64() == Some(2) && s["sync"]["pending"].as_u64() == Some(0)
    });
    // The station's health reached the study too: sent again when the session ended,
    // signed, with no participant data in it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let stations = loop {
        let o = empathic(&[
            "collect",
            "stations",
            "--db",
            path_str(&central),
            "--study",
            "test-study",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let h = &v["health"][0]["health"];
        if h["last_session_status"] == "complete" || Instant::now() > deadline {
            break v;
        }
        sleep_s(0.5);
    };
    let a = &stations["health"][0];
    assert_eq!(a["station"], "st-live", "{stations}");
    assert_eq!(a["status"], "online", "{stations}");
    let h = &a["health"];
    assert_eq!(h["last_session_status"], "complete", "{stations}");
    assert!(h["sessions_today"].as_u64() >= Some(1), "{stations}");
    assert_eq!(h["camera"]["present"], true, "{stations}");
    assert!(
        h["sig"].is_string(),
        "sealed: signed by the station: {stations}"
    );
    assert!(!h.to_string().contains("P-LIVE"), "{stations}");
    let o = empathic(&[
        "collect",
        "stations",
        "--db",
        path_str(&central),
        "--study",
        "test-study",
    ]);
    assert!(
        stdout(&o).contains("st-live          online since"),
        "{}",
        stdout(&o)
    );
    let _ = collector.kill();
    let _ = collector.wait();
    let c = crate::common::store::open_db(&central);
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM collect_records WHERE kind = 'session' AND subject = ?1 AND sealed = 1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1, "the session reached the study's central store once");
}

/// Issue 34's "done when": two live stations, one with its camera missing and one offline
/// after a session, and two collectors (SQLite and PostgreSQL) through one real Mosquitto
/// keeping the study page fresh (`--study-page`): each page lists both problems first and
/// renders in headless Chromium; `[collect] on_problem` told each problem once.
#[test]
fn collectors_keep_the_study_page_fresh_with_a_missing_camera_and_an_offline_station_first() {
    use crate::common::broker::{free_port, start_broker};
    use crate::common::chromium::open_in_chromium;
    use empathic::sync::keys::{generate, KeyKind};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _broker = start_broker(dir.path(), port);
    let pg = crate::common::postgres::Postgres::start();
    let keys = dir.path().join("keys");
    let study = generate(&keys.join("study.key"), KeyKind::X25519).unwrap();
    let collector_key = generate(&keys.join("collector.key"), KeyKind::Ed25519).unwrap();
    let station_keys: Vec<String> = ["st-cam", "st-off"]
        .iter()
        .map(|s| generate(&keys.join(format!("{s}.key")), KeyKind::Ed25519).unwrap())
        .collect();
    let targets = [
        dir.path().join("central.db").display().to_string(),
        pg.database("study"),
    ];
    for target in &targets {
        let mut c = empathic::sync::central::Central::open(target).unwrap();
        for (s, key) in ["st-cam", "st-off"].iter().zip(&station_keys) {
            c.enrol("test-study", s, Some(key), false).unwrap();
        }
    }
    // The collectors' config: the study's plan and the alert command.
    let mut collectors = Vec::new();
    let mut pages = Vec::new();
    let mut alerts = Vec::new();
    for (k, target) in targets.iter().enumerate() {
        let alert_log = dir.path().join(format!("alerts-{k}.txt"));
        let config = dir.path().join(format!("collect-{k}.toml"));
        std::fs::write(
            &config,
            format!(
                "[study]\nsessions_per_participant = 10\ndays = 30\n\n[collect]\non_problem = \"cat >> '{}'\"\nalert_interval_min = 1\n",
                alert_log.display()
            ),
        )
        .unwrap();
        let page = dir.path().join(format!("study-{k}.html"));
        collectors.push(
            Command::new(env!("CARGO_BIN_EXE_empathic"))
                .args([
                    "collect",
                    "--central",
                    target,
                    "--config",
                    path_str(&config),
                ])
                .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
                .args(["--study", "test-study", "--client-id", &format!("c-{k}")])
                .args(["--study-key", keys.join("study.key").to_str().unwrap()])
                .args([
                    "--signing-key",
                    keys.join("collector.key").to_str().unwrap(),
                ])
                .args(["--study-page", path_str(&page)])
                .env("EMPATHIC_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.path().join(format!("collect-{k}.log"))).unwrap())
                .spawn()
                .unwrap(),
        );
        pages.push(page);
        alerts.push(alert_log);
    }
    let pulse = Pulse::start(dir.path());
    let station_at = |name: &str, camera: &Path| {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let config = station_config(&sub, camera);
        let mut text = std::fs::read_to_string(&config)
            .unwrap()
            .replace("id = \"st-live\"", &format!("id = \"{name}\""));
        text.push_str(&format!(
            "\n[sync]\nbroker = \"mqtt://127.0.0.1:{port}\"\nstudy = \"test-study\"\nsigning_key = \"{}\"\nstudy_key = \"{study}\"\ncollector_keys = [\"{collector_key}\"]\n",
            keys.join(format!("{name}.key")).display()
        ));
        std::fs::write(&config, text).unwrap();
        (sub, config)
    };
    // One station whose camera is not there.
    let (cam_dir, cam_config) = station_at("st-cam", &dir.path().join("no-camera.avi"));
    let _cam = Station::start(&cam_dir, &cam_config, &pulse.runtime_dir);
    // One that runs a session, syncs it, and is stopped.
    let (off_dir, off_config) = station_at("st-off", &demo_session().join("video.avi"));
    consent(&off_config, "P-LIVE");
    let mut off = Station::start(&off_dir, &off_config, &pulse.runtime_dir);
    let (id, mut player) = start_warm_up(&off, &pulse);
    sleep_s(3.0);
    off.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(off.wait_session_end(&id), "complete");
    // P-LIVE's consent message and the session's record.
    off.wait_status("not synced", 90, |s| {
        s["sync"]["synced"].as_u64() == Some(2) && s["sync"]["pending"].as_u64() == Some(0)
    });
    off.signal("-TERM");
    assert!(off.wait_exit().success(), "{}", off.log_text());

    // The pages come round by themselves (at most once a minute after new messages).
    let problems_of = |page: &Path| -> String {
        let html = std::fs::read_to_string(page).unwrap_or_default();
        html.split("<h2 id=\"stations\">")
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    for page in &pages {
        while !(problems_of(page).contains("camera missing")
            && problems_of(page).contains("offline since")
            && std::fs::read_to_string(page)
                .unwrap_or_default()
                .contains("P-LIVE"))
        {
            assert!(
                Instant::now() < deadline,
                "{} did not come to show both problems: {}\n{}",
                page.display(),
                problems_of(page),
                std::fs::read_to_string(dir.path().join("collect-0.log")).unwrap_or_default()
            );
            sleep_s(1.0);
        }
    }
    for (page, alert_log) in pages.iter().zip(&alerts) {
        let html = std::fs::read_to_string(page).unwrap();
        assert!(!html.contains("<script") && !html.contains("http://"));
        let (dom, spread) = open_in_chromium(page);
        assert!(spread > 5.0, "{} renders blank", page.display());
        let list = dom
            .split("<ol>")
            .nth(1)
            .and_then(|l| l.split("</ol>").next())
            .unwrap_or_else(|| panic!("no problem list: {dom}"));
        let first_two: Vec<&str> = list.split("<li").skip(1).take(2).collect();
        assert!(
            first_two
                .iter()
                .any(|l| l.contains("st-cam") && l.contains("camera missing"))
                && first_two
                    .iter()
                    .any(|l| l.contains("st-off") && l.contains("offline since")),
            "both problems first: {list}"
        );
        assert!(dom.find("Open problems") < dom.find(">Stations<"));
        for section in [
            ">Participants<",
            ">Data quality over time<",
            // The bystanders' lane of each station's panel (issue 58).
            ">bystanders</text>",
            ">Empathy ratings and predictions<",
        ] {
            assert!(dom.contains(section), "{section} missing");
        }
        // Staff were told of each, once (the page may have been made several times).
        let told = std::fs::read_to_string(alert_log).unwrap_or_default();
        for what in [
            "st-cam (urgent): camera missing",
            "st-off (urgent): offline since",
        ] {
            assert_eq!(
                told.lines().filter(|l| l.starts_with(what)).count(),
                1,
                "{what} told once: {told}"
            );
        }
        assert!(
            !told.contains(&id),
            "a session id has no business in an alert: {told}"
        );
    }
    for mut c in collectors {
        let _ = c.kill();
        let _ = c.wait();
    }
}
