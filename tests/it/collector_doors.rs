//! The collector's unsigned doors (issue 43, classes 5 and 6) on a real Mosquitto: under
//! sealed sync nothing a client without the station's key sends changes what staff see
//! (status words included), what strangers send is bounded and never becomes a station on
//! the page, and a flood from strangers that makes the broker drop messages does not lose
//! a genuine station's health (the collector asks for the retained messages again).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rumqttc::{Client, Event, MqttOptions, Packet, QoS};

use crate::common::broker::{free_port, run_broker};
use crate::common::central::{quarantined, wait_until};
use crate::common::{empathic, path_str, stderr, stdout};

const STUDY: &str = "test-study";

use crate::common::key_init as key;

fn status_of(central: &Path, station: &str) -> Option<(String, Option<String>)> {
    crate::common::store::try_open_db(central)
        .ok()?
        .query_row(
            "SELECT status, connection FROM collect_status WHERE station = ?1",
            [station],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok()
}

fn health_sent_at(central: &Path, station: &str) -> Option<String> {
    crate::common::store::try_open_db(central)
        .ok()?
        .query_row(
            "SELECT sent_at FROM collect_health WHERE station = ?1",
            [station],
            |r| r.get(0),
        )
        .ok()
}

/// Publishes `items` as a client the broker lets in (retained when asked), as fast as the broker
/// takes them.
fn publish_raw(port: u16, items: &[(String, Vec<u8>)], retain: bool) {
    let mut opts = MqttOptions::new("stranger", "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(opts, 64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut sent, mut acks) = (0, 0);
    while acks < items.len() {
        assert!(
            Instant::now() < deadline,
            "the broker did not take the flood"
        );
        while sent < items.len() {
            let (t, p) = &items[sent];
            if client
                .try_publish(t.clone(), QoS::AtLeastOnce, retain, p.clone())
                .is_err()
            {
                break;
            }
            sent += 1;
        }
        match conn.recv_timeout(Duration::from_millis(50)) {
            Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => acks += 1,
            Ok(Err(e)) => panic!("stranger: {e}"),
            _ => {}
        }
    }
}

use crate::common::terminate as stop;

#[test]
fn strangers_change_nothing_staff_see_and_a_flood_does_not_drown_genuine_health() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    // A small queue per client, as a busy broker has: a flood overflows the collector's.
    let conf = tmp.path().join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!("listener {port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 50\n"),
    )
    .unwrap();
    let _broker = run_broker(&conf, port);
    let keys = tmp.path();
    let study_public = key("study", &keys.join("study.key"));
    let collector_public = key("collector", &keys.join("collector.key"));
    let station_public = key("station", &keys.join("station.key"));
    let central = tmp.path().join("central.db");
    for station in ["st-a", "st-b"] {
        let other = key("station", &keys.join(format!("{station}-spare.key")));
        let public = if station == "st-a" {
            &station_public
        } else {
            &other
        };
        let o = empathic(&[
            "collect",
            "enrol",
            station,
            public,
            "--db",
            path_str(&central),
            "--study",
            STUDY,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let collect_toml = tmp.path().join("collect.toml");
    std::fs::write(&collect_toml, "[collect]\nhealth_sweep_s = 2\n").unwrap();
    let page = tmp.path().join("study.html");
    let collector = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["collect", "--db", path_str(&central)])
        .args(["--broker", &format!("mqtt://127.0.0.1:{port}")])
        .args(["--study", STUDY, "--client-id", "doors-collector"])
        .args(["--study-key", path_str(&keys.join("study.key"))])
        .args(["--signing-key", path_str(&keys.join("collector.key"))])
        .args(["--config", path_str(&collect_toml)])
        .args(["--study-page", path_str(&page)])
        .env("EMPATHIC_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // The station's signed `online` (the payload its sync connection publishes).
    let sync_config = empathic::config::SyncConfig {
        security: empathic::config::SyncSecurity::Sealed,
        signing_key: keys.join("station.key"),
        study_key: study_public.clone(),
        collector_keys: vec![collector_public.clone()],
        ..Default::default()
    };
    let sealing = empathic::sync::Sealing::from_config(&sync_config).unwrap();
    let online = empathic::sync::status::payload(
        sealing.as_ref(),
        STUDY,
        "st-a",
        "online",
        &empathic::clock::utc_now(),
    );
    publish_raw(
        port,
        &[(format!("empathic/v1/{STUDY}/st-a/status"), online)],
        true,
    );
    wait_until("the station's signed status", || {
        status_of(&central, "st-a").is_some_and(|(s, c)| s == "online" && c.is_some())
    });

    // A client with no key: `offline` on an enrolled station, `online` on one never heard
    // from, a made-up station. Refused, each with its reason; nothing staff see changes.
    let before = quarantined(path_str(&central));
    publish_raw(
        port,
        &[
            (
                format!("empathic/v1/{STUDY}/st-a/status"),
                b"offline".to_vec(),
            ),
            (
                format!("empathic/v1/{STUDY}/st-b/status"),
                b"online".to_vec(),
            ),
            (
                format!("empathic/v1/{STUDY}/made-up/status"),
                b"offline".to_vec(),
            ),
        ],
        true,
    );
    wait_until("the strangers' words refused", || {
        quarantined(path_str(&central)) >= before + 3
    });
    assert_eq!(status_of(&central, "st-a").unwrap().0, "online");
    assert_eq!(status_of(&central, "st-b"), None);
    assert_eq!(status_of(&central, "made-up"), None);

    // A flood on made-up station names, with one genuine signed health message in it.
    let junk: Vec<(String, Vec<u8>)> = (0..3000)
        .map(|i| {
            (
                format!("empathic/v1/{STUDY}/flood-{i}/health"),
                format!("{{\"junk\": {i}}}").into_bytes(),
            )
        })
        .collect();
    let opts = empathic::sync::SyncOptions {
        announce_status: false,
        host: "127.0.0.1".into(),
        port,
        study: STUDY.into(),
        station: "st-a".into(),
        auth: Default::default(),
        collectors: Vec::new(),
        sealing,
    };
    let sent_at = empathic::clock::utc_now();
    let genuine = empathic::sync::health::Health {
        format: empathic::sync::health::HEALTH_FORMAT.into(),
        v: empathic::sync::health::HEALTH_VERSION,
        study: STUDY.into(),
        station: "st-a".into(),
        sent_at: sent_at.clone(),
        software: "0.1.0".into(),
        camera: empathic::sync::health::DeviceHealth {
            present: true,
            problem: None,
        },
        microphone: empathic::sync::health::DeviceHealth {
            present: false,
            problem: Some("no sound card\nurgent: forged line".into()),
        },
        ..Default::default()
    };
    std::thread::scope(|s| {
        s.spawn(|| publish_raw(port, &junk[..1500], false));
        std::thread::sleep(Duration::from_millis(300));
        empathic::sync::health::publish(&opts, genuine.clone()).unwrap();
        s.spawn(|| publish_raw(port, &junk[1500..], false));
    });
    let flood_end = Instant::now();
    wait_until("the genuine health stored after the flood", || {
        health_sent_at(&central, "st-a").as_deref() == Some(sent_at.as_str())
    });
    eprintln!(
        "genuine health stored {:.1} s after the flood ended; {} of 3000 flood messages reached the collector",
        flood_end.elapsed().as_secs_f64(),
        quarantined(path_str(&central)) - before - 3
    );

    // Lost however it was (the broker dropped it; here: deleted), the retained message
    // comes again at the next sweep and is stored.
    crate::common::store::open_db(&central)
        .execute("DELETE FROM collect_health WHERE station = 'st-a'", [])
        .unwrap();
    wait_until("the genuine health stored again by the sweep", || {
        health_sent_at(&central, "st-a").as_deref() == Some(sent_at.as_str())
    });

    // The page and `collect stations` list the study's stations only; strangers are one
    // line, never a problem or an alert; the station's own text was cleaned to one line.
    let o = empathic(&[
        "study",
        "report",
        "--central",
        path_str(&central),
        "--study",
        STUDY,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let facts: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = facts["stations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["station"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"st-a") && names.contains(&"st-b"));
    assert!(facts["strangers"]["senders"].as_u64().unwrap() >= 1);
    let problems = facts["problems"].to_string();
    assert!(!problems.contains("offline"), "{problems}");
    assert!(problems.contains("never_heard"), "{problems}");
    assert!(!problems.contains("flood-"), "{problems}");
    assert!(
        problems.contains("no sound card urgent: forged line"),
        "{problems}"
    );
    let o = empathic(&[
        "collect",
        "stations",
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("flood-"), "{}", stdout(&o));
    assert!(stdout(&o).contains("not listed"), "{}", stdout(&o));
    stop(collector);
}
