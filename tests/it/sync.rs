//! Study sync against a real Mosquitto (Debian's `mosquitto`, installed by set-up) started
//! by the test on a free loopback port: every ended session's record reaches the broker as
//! the outbox holds it (message ids, sha256 of the reassembled chunks), tombstones follow a
//! `--replace`, a broker that is down at first is waited for with backoff, and an
//! unreachable one makes `sync --timeout` give up with the pending count.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::broker::*;
use crate::common::*;
use rumqttc::{Client, Event, MqttOptions, Packet, QoS};
use sha2::{Digest, Sha256};

fn subscriber(port: u16) -> Arc<Mutex<Vec<(String, String)>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let mut opts = MqttOptions::new(format!("test-sub-{port}"), "127.0.0.1", port);
    opts.set_max_packet_size(1 << 20, 1 << 20);
    let (client, mut connection) = Client::new(opts, 16);
    std::thread::Builder::new()
        .name("test-subscriber".into())
        .spawn(move || {
            for event in connection.iter() {
                match event {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        client.subscribe("empathic/#", QoS::AtLeastOnce).unwrap();
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => sink.lock().unwrap().push((
                        p.topic.clone(),
                        String::from_utf8_lossy(&p.payload).into_owned(),
                    )),
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        })
        .unwrap();
    // Wait until subscribed: the broker echoes nothing, so give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    got
}

/// Reassembled messages by id: (kind, subject, payload), checked against their sha256.
fn messages(got: &[(String, String)]) -> BTreeMap<String, (String, String, String)> {
    let mut chunks: BTreeMap<String, BTreeMap<u64, serde_json::Value>> = BTreeMap::new();
    for (topic, payload) in got {
        if topic.ends_with("/status") || topic.ends_with("/receipt") {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(v["v"], 1);
        assert!(topic.ends_with(v["kind"].as_str().unwrap()), "{topic}");
        chunks
            .entry(v["message_id"].as_str().unwrap().to_string())
            .or_default()
            .insert(v["chunk"].as_u64().unwrap(), v);
    }
    chunks
        .into_iter()
        .map(|(id, parts)| {
            let first = parts.values().next().unwrap().clone();
            assert_eq!(
                parts.len() as u64,
                first["chunks"].as_u64().unwrap(),
                "{id}"
            );
            let text: String = parts
                .values()
                .map(|p| p["data"].as_str().unwrap())
                .collect();
            let digest: String = Sha256::digest(text.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(digest, first["sha256"].as_str().unwrap(), "{id}: checksum");
            (
                id,
                (
                    first["kind"].as_str().unwrap().to_string(),
                    first["subject"].as_str().unwrap().to_string(),
                    text,
                ),
            )
        })
        .collect()
}

fn outbox(db: &Path) -> Vec<(String, String, String, String)> {
    crate::common::store::open_db(db)
        .prepare("SELECT message_id, kind, subject, state FROM outbox ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn sync_station(db: &Path, port: u16, station: &str, extra: &[&str]) -> std::process::Output {
    let args = sync_args(db, port, station, extra);
    empathic(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn sync(db: &Path, port: u16, extra: &[&str]) -> std::process::Output {
    sync_station(db, port, "station-1", extra)
}

fn wait_for(
    got: &Arc<Mutex<Vec<(String, String)>>>,
    n: usize,
) -> BTreeMap<String, (String, String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = messages(&got.lock().unwrap());
        if m.len() >= n || Instant::now() > deadline {
            return m;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn ended_sessions_and_tombstones_reach_the_broker_as_the_outbox_holds_them() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let got = subscriber(broker.port);
    // A collector answers with receipts; without one nothing is ever synced.
    let mut collector = start_collector(&tmp.path().join("central.db"), broker.port);
    let db = tmp.path().join("s.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db, Some(&fast)).status.success());
    let queued = outbox(&db);
    assert_eq!(queued.len(), 2, "one message per ended session: {queued:?}");
    let o = sync(&db, broker.port, &["--until-synced", "--timeout", "30"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let synced = outbox(&db);
    assert!(synced.iter().all(|m| m.3 == "synced"), "{synced:?}");
    // A run bounded by time with nothing left to send is done, not failed (issue 56).
    let o = sync(&db, broker.port, &["--timeout", "2"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let got_messages = wait_for(&got, 2);
    for (id, kind, subject, _) in &synced {
        let (k, s, payload) = got_messages
            .get(id)
            .unwrap_or_else(|| panic!("{id} not received"));
        assert_eq!((k, s), (kind, subject));
        let v: serde_json::Value = serde_json::from_str(payload).unwrap();
        assert_eq!(v["format"], "empathic-session");
        assert_eq!(v["version"], 2);
        assert_eq!(v["session_id"], subject.as_str());
        let rows = |t: &str| v["tables"][t]["rows"].as_array().map_or(0, Vec::len);
        assert_eq!(rows("sessions"), 1);
        assert_eq!(rows("self_ratings"), 3);
        assert!(rows("predictions") > 0);
        // Window features by default; no transcript, per-frame features or raw media.
        assert!(rows("window_features") > 0);
        assert!(v["tables"].get("utterances").is_none());
        assert!(v["tables"].get("frame_features").is_none());
        assert!(!payload.contains("mister john dashwood"));
    }
    let status = empathic(&["sync", "status", "--db", path_str(&db), "--json"]);
    let s: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(
        (s["pending"].as_u64(), s["synced"].as_u64()),
        (Some(0), Some(2))
    );
    // A batch `sync` is no service: it says neither `online` nor, by a last will,
    // `offline` (issue 44: its end raised an urgent "offline" alarm).
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !got.lock()
            .unwrap()
            .iter()
            .any(|(t, _)| t.ends_with("/status")),
        "a batch sync published a status"
    );
    assert_eq!(s["broker"]["state"], "disconnected");
    assert!(s["broker"]["error"].is_null(), "{s}");
    // Sessions stored before the outbox existed (a station upgraded mid-study) are
    // announced by --backfill, once.
    let copy = tmp.path().join("old.db");
    std::fs::copy(&db, &copy).unwrap();
    crate::common::store::open_db(&copy)
        .execute("DELETE FROM outbox", [])
        .unwrap();
    for _ in 0..2 {
        let o = sync(
            &copy,
            broker.port,
            &["--backfill", "--until-synced", "--timeout", "30"],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let backfilled = outbox(&copy);
    assert_eq!(backfilled.len(), 2, "{backfilled:?}");
    assert!(backfilled
        .iter()
        .all(|m| m.1 == "session" && m.3 == "synced"));

    // Replacing a session voids what was announced: a tombstone, then the new record.
    let o = replay_cli_with(&demo_session(), &db, Some(&fast), &["--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let queued = outbox(&db);
    let kinds: Vec<(&str, &str, &str)> = queued[2..]
        .iter()
        .map(|m| (m.1.as_str(), m.2.as_str(), m.3.as_str()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("tombstone", "demo-0001", "pending"),
            ("session", "demo-0001", "pending")
        ]
    );
    assert!(
        sync(&db, broker.port, &["--until-synced", "--timeout", "30"])
            .status
            .success()
    );
    // Two records, two backfilled from the copy, a tombstone and the new record.
    let got_messages = wait_for(&got, 6);
    assert_eq!(got_messages.len(), 6);
    assert!(got_messages.contains_key(&queued[3].0));
    let tomb = got_messages.get(&queued[2].0).unwrap();
    assert_eq!(tomb.0, "tombstone");
    assert!(tomb.2.contains("\"reason\":\"replaced\""), "{}", tomb.2);
    collector.kill().unwrap();
    collector.wait().unwrap();
}

#[test]
fn a_broker_down_at_first_is_waited_for_and_an_unreachable_one_is_given_up_on() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("s.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());

    // Nobody listens: the timeout gives up, names the pending count, exit 1; nothing lost.
    let dead = free_port();
    let started = Instant::now();
    let o = sync(&db, dead, &["--until-synced", "--timeout", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 message(s) not yet synced"),
        "{}",
        stderr(&o)
    );
    // Backoff, not a busy loop: a couple of attempts in two seconds, not thousands.
    let err = stderr(&o);
    let attempts: u64 = err
        .split(" failed connection attempt")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!((1..=6).contains(&attempts), "{attempts} attempts: {err}");
    // `sync status` keeps the publisher's last word about the broker.
    let status = empathic(&["sync", "status", "--db", path_str(&db), "--json"]);
    let s: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(s["broker"]["state"], "disconnected");
    assert_eq!(s["broker"]["broker"], format!("127.0.0.1:{dead}"));
    assert!(
        s["broker"]["error"].as_str().unwrap().contains("gave up"),
        "{s}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(outbox(&db)[0].3, "pending");

    // The broker comes up while sync waits: it connects and delivers. The collector's
    // persistent session is registered first (and saved by a clean broker stop), as for a
    // study's standing collector, so what the station sends on connecting is kept for it
    // whichever of the two reconnects first.
    let port = free_port();
    {
        let mut broker = start_broker(tmp.path(), port);
        let central = tmp.path().join("central.db");
        let mut collector = start_collector(&central, port);
        // Subscribed for sure once it has quarantined a probe.
        crate::common::central::wait_subscribed(
            port,
            &[path_str(&central)],
            Duration::from_secs(30),
        );
        collector.kill().unwrap();
        collector.wait().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &broker.child.id().to_string()])
            .status();
        broker.child.wait().unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(sync_args(
            &db,
            port,
            "station-1",
            &["--until-synced", "--timeout", "40"],
        ))
        .env("EMPATHIC_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let broker = start_broker(tmp.path(), port);
    let mut collector = start_collector(&tmp.path().join("central.db"), port);
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(outbox(&db)[0].3, "synced");
    collector.kill().unwrap();
    collector.wait().unwrap();
    drop(broker);
}

fn central_records(central: &Path) -> Vec<(String, String, String, i64)> {
    let conn = crate::common::store::open_db(central);
    conn.prepare(
        "SELECT message_id, station, kind, voided FROM collect_records ORDER BY message_id",
    )
    .and_then(|mut s| {
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<Result<Vec<_>, _>>()
    })
    .unwrap_or_default()
}

#[test]
fn the_collector_stores_every_stations_records_exactly_once_across_its_own_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let central = tmp.path().join("central.db");
    let fast = config_without_vision_models(tmp.path());
    // Two stations, two sessions each.
    let mut stations = Vec::new();
    for k in 1..=2 {
        let db = tmp.path().join(format!("station-{k}.db"));
        assert!(replay_cli(&demo_session(), &db, Some(&fast))
            .status
            .success());
        let later = later_demo_session(&tmp.path().join(format!("later-{k}")));
        assert!(replay_cli(&later, &db, Some(&fast)).status.success());
        stations.push(db);
    }
    let sync_as = |db: &Path, station: &str| {
        let o = sync_station(
            db,
            broker.port,
            station,
            &["--until-synced", "--timeout", "30"],
        );
        assert!(o.status.success(), "{}", stderr(&o));
    };
    // The collector registers its persistent session, then dies (SIGKILL) before the
    // stations sync: the broker keeps their messages for it.
    let mut collector = start_collector(&central, broker.port);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !central.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(700));
    collector.kill().unwrap();
    collector.wait().unwrap();
    // The broker takes station 1's records, but no collector confirms them: not synced.
    let o = sync(
        &stations[0],
        broker.port,
        &["--until-synced", "--timeout", "3"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("2 message(s) not yet synced"),
        "{}",
        stderr(&o)
    );
    assert!(outbox(&stations[0]).iter().all(|m| m.3 == "sent"));
    // Back up: it receives what was queued; station 1's next sync re-sends (duplicates,
    // answered with receipts) and is done.
    let mut collector = start_collector(&central, broker.port);
    sync_as(&stations[0], "station-1");
    sync_as(&stations[1], "station-2");
    // A replacement on station 1: its earlier record of demo-0001 is voided centrally.
    let o = replay_cli_with(&demo_session(), &stations[0], Some(&fast), &["--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    sync_as(&stations[0], "station-1");
    // And garbage on a station topic is quarantined, not fatal.
    let mut opts = MqttOptions::new("test-garbage", "127.0.0.1", broker.port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(opts, 4);
    client
        .publish(
            "empathic/v1/test-study/station-9/session",
            QoS::AtLeastOnce,
            false,
            "not json",
        )
        .unwrap();
    for _ in 0..20 {
        if let Ok(Ok(Event::Incoming(Packet::PubAck(_)))) =
            conn.recv_timeout(Duration::from_millis(200))
        {
            break;
        }
    }
    let expected: usize = stations.iter().map(|db| outbox(db).len()).sum();
    assert_eq!(
        expected,
        2 + 2 + 2,
        "two records each, a tombstone and a new record"
    );
    let quarantine = || -> i64 {
        crate::common::store::open_db(&central)
            .query_row("SELECT count(*) FROM collect_quarantine", [], |r| r.get(0))
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = central_records(&central);
    // Messages of different publishers arrive in no set order: wait for both.
    while (got.len() < expected || quarantine() < 1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        got = central_records(&central);
    }
    let _ = Command::new("kill")
        .args(["-TERM", &collector.id().to_string()])
        .status();
    collector.wait().unwrap();
    // Exactly once: every outbox message id of both stations, and nothing else.
    let mut want: Vec<String> = stations
        .iter()
        .flat_map(|db| outbox(db).into_iter().map(|m| m.0))
        .collect();
    want.sort();
    let ids: Vec<String> = got.iter().map(|r| r.0.clone()).collect();
    assert_eq!(ids, want);
    // The tombstone voided station 1's first record of demo-0001, and only it.
    let voided: Vec<&(String, String, String, i64)> = got.iter().filter(|r| r.3 == 1).collect();
    assert_eq!(voided.len(), 1, "{got:?}");
    assert_eq!(
        (voided[0].1.as_str(), voided[0].2.as_str()),
        ("station-1", "session")
    );
    assert_eq!(quarantine(), 1);
}

#[test]
fn a_withdrawal_purges_the_participant_on_the_station_and_at_the_collector() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let central = tmp.path().join("central.db");
    let fast = config_without_vision_models(tmp.path());
    let db = tmp.path().join("station.db");
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db, Some(&fast)).status.success());
    let mut collector = start_collector(&central, broker.port);
    std::thread::sleep(Duration::from_millis(700));
    let sync_now = || {
        let o = sync(&db, broker.port, &["--until-synced", "--timeout", "30"]);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    sync_now();
    let records = |kind: &str| -> i64 {
        crate::common::store::open_db(&central)
            .query_row(
                "SELECT count(*) FROM collect_records WHERE kind = ?1",
                [kind],
                |r| r.get(0),
            )
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while records("session") < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(records("session"), 2);

    // Unknown participant: exit 2, nothing touched.
    let o = empathic(&["participant", "purge", "P-NOBODY", "--db", path_str(&db)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = empathic(&["participant", "purge", "P-DEMO", "--db", path_str(&db)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("2 session(s) and 0 recording(s) removed"),
        "{}",
        stdout(&o)
    );
    let station = crate::common::store::open_db(&db);
    let count = |sql: &str| -> i64 { station.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM sessions"), 0);
    assert_eq!(count("SELECT count(*) FROM participants"), 0);
    assert_eq!(count("SELECT count(*) FROM survey_responses"), 0);
    assert_eq!(count("SELECT count(*) FROM frames"), 0);
    // Their records are gone from the outbox too; only the purge message and an audit line.
    assert_eq!(
        count("SELECT count(*) FROM outbox WHERE kind = 'session'"),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM outbox WHERE kind = 'purge' AND state = 'pending'"),
        1
    );
    assert_eq!(
        count("SELECT count(*) FROM purges WHERE participant_id = 'P-DEMO'"),
        1
    );
    drop(station);

    sync_now();
    let deadline = Instant::now() + Duration::from_secs(15);
    while records("session") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &collector.id().to_string()])
        .status();
    collector.wait().unwrap();
    assert_eq!(
        records("session"),
        0,
        "the participant's records are deleted centrally"
    );
    let audit: (String, i64) = crate::common::store::open_db(&central)
        .query_row(
            "SELECT participant_id, records FROM collect_purges",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(audit, ("P-DEMO".to_string(), 2));
}

#[test]
fn a_broker_that_loses_its_state_loses_nothing_and_duplicates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("broker");
    std::fs::create_dir_all(&state).unwrap();
    let port = free_port();
    let broker = start_broker(&state, port);
    let central = tmp.path().join("central.db");
    let mut collector = start_collector(&central, port);
    let fast = config_without_vision_models(tmp.path());
    let db = tmp.path().join("s.db");
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let sync_once = |timeout: &str| sync(&db, port, &["--until-synced", "--timeout", timeout]);
    assert!(sync_once("30").status.success());
    // SIGKILL the broker, delete its state, start it again on the same port: the collector's
    // subscription is gone until it reconnects and renews it.
    drop(broker);
    std::fs::remove_dir_all(&state).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db, Some(&fast)).status.success());
    let broker = start_broker(&state, port);
    // Published at once, the record may reach a broker nobody subscribes to yet: PUBACK, no
    // receipt, so not synced. A later run re-sends it; either way it ends up stored once.
    let first = sync_once("4");
    if !first.status.success() {
        assert!(
            stderr(&first).contains("not yet synced"),
            "{}",
            stderr(&first)
        );
        std::thread::sleep(Duration::from_secs(1));
        let second = sync_once("30");
        assert!(second.status.success(), "{}", stderr(&second));
    }
    assert!(outbox(&db).iter().all(|m| m.3 == "synced"));
    let _ = Command::new("kill")
        .args(["-TERM", &collector.id().to_string()])
        .status();
    collector.wait().unwrap();
    let mut want: Vec<String> = outbox(&db).into_iter().map(|m| m.0).collect();
    want.sort();
    let got: Vec<String> = central_records(&central).into_iter().map(|r| r.0).collect();
    assert_eq!(got, want);
    drop(broker);
}

#[test]
fn collectors_sharing_a_subscription_split_the_messages_and_store_each_once() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let central = tmp.path().join("central.db");
    let fast = config_without_vision_models(tmp.path());
    // Two collectors of one group (each its own client id), one central file.
    let collectors: Vec<Child> = (1..=2)
        .map(|k| {
            Command::new(env!("CARGO_BIN_EXE_empathic"))
                .args([
                    "collect",
                    "--security",
                    "plain",
                    "--central",
                    path_str(&central),
                ])
                .args(["--broker", &format!("mqtt://127.0.0.1:{}", broker.port)])
                .args(["--study", "test-study", "--share-group", "staff"])
                .args(["--client-id", &format!("collector-{k}")])
                .env("EMPATHIC_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    // Three stations, two sessions each.
    let mut expected = Vec::new();
    for k in 1..=3 {
        let db = tmp.path().join(format!("station-{k}.db"));
        assert!(replay_cli(&demo_session(), &db, Some(&fast))
            .status
            .success());
        let later = later_demo_session(&tmp.path().join(format!("later-{k}")));
        assert!(replay_cli(&later, &db, Some(&fast)).status.success());
        let o = sync_station(
            &db,
            broker.port,
            &format!("station-{k}"),
            &["--until-synced", "--timeout", "60"],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        expected.extend(outbox(&db).into_iter().map(|m| m.0));
    }
    for mut c in collectors {
        let _ = c.kill();
        let _ = c.wait();
    }
    let mut got: Vec<String> = central_records(&central).into_iter().map(|r| r.0).collect();
    got.sort();
    expected.sort();
    assert_eq!(
        got, expected,
        "every record once, whichever collector took it"
    );
}

#[test]
fn a_station_naming_two_collectors_is_synced_only_when_both_confirmed() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let (central_a, central_b) = (tmp.path().join("a.db"), tmp.path().join("b.db"));
    let mut collector_a = start_collector_as(path_str(&central_a), broker.port, "c-a");
    crate::common::central::wait_subscribed(
        broker.port,
        &[path_str(&central_a)],
        Duration::from_secs(60),
    );
    let fast = config_without_vision_models(tmp.path());
    let db = tmp.path().join("s.db");
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let both = ["--collector", "c-a", "--collector", "c-b"];
    // Only c-a answers: the broker took the record and c-a stored it, but c-b's database
    // has nothing, so the station keeps it owed.
    let o = sync(
        &db,
        broker.port,
        &[&["--until-synced", "--timeout", "5"][..], &both].concat(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not yet synced"), "{}", stderr(&o));
    assert!(
        outbox(&db).iter().all(|m| m.3 == "sent"),
        "{:?}",
        outbox(&db)
    );
    let status = empathic(&["sync", "status", "--db", path_str(&db), "--json"]);
    let status: serde_json::Value = serde_json::from_str(&stdout(&status)).unwrap();
    assert_eq!(status["receipts"]["c-a"].as_u64(), Some(1), "{status}");
    assert!(status["receipts"].get("c-b").is_none(), "{status}");
    // c-b comes up: the next sync resends, c-a answers its duplicate, c-b stores it.
    let mut collector_b = start_collector_as(path_str(&central_b), broker.port, "c-b");
    crate::common::central::wait_subscribed(
        broker.port,
        &[path_str(&central_b)],
        Duration::from_secs(60),
    );
    let o = sync(
        &db,
        broker.port,
        &[&["--until-synced", "--timeout", "60"][..], &both].concat(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(outbox(&db).iter().all(|m| m.3 == "synced"));
    for c in [&mut collector_a, &mut collector_b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let want: Vec<String> = outbox(&db).into_iter().map(|m| m.0).collect();
    for central in [&central_a, &central_b] {
        let got: Vec<String> = central_records(central).into_iter().map(|r| r.0).collect();
        assert_eq!(got, want, "{}", central.display());
    }
}
