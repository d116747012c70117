//! Study sync under faults, against a real Mosquitto and a real PostgreSQL: three stations
//! with several sessions each sync at once while the broker is killed (SIGKILL) and
//! restarted mid-sync, a station's publisher is killed mid-message and restarted, and the
//! PostgreSQL collector is killed and restarted. The stations name both collectors
//! (`--collector`), so a message is synced only once each central database confirmed it.
//! Afterwards both central databases (SQLite and PostgreSQL) hold every station message
//! exactly once and every session's rows equal to its station's, and every outbox says
//! synced.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::broker::*;
use crate::common::central::*;
use crate::common::postgres::Postgres;
use crate::common::*;

fn sync_process(db: &Path, port: u16, station: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(sync_args(
            db,
            port,
            station,
            &[
                "--until-synced",
                "--timeout",
                "240",
                "--collector",
                "c-sqlite",
                "--collector",
                "c-postgres",
            ],
        ))
        .env("EMPATHIC_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn sigkill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// A station's session under a new id (and participant), copied from the demo.
fn session_as(dir: &Path, id: &str, participant: &str, station: &str) -> PathBuf {
    copy_session_as(
        &demo_session(),
        dir,
        &[
            ("session_id", id),
            ("participant_id", participant),
            ("station_id", station),
        ],
    )
}

fn outbox_ids(db: &Path) -> Vec<String> {
    crate::common::store::column(
        &crate::common::store::open_db(db),
        "SELECT message_id FROM outbox ORDER BY message_id",
    )
}

#[test]
fn three_stations_sync_exactly_once_through_broker_station_and_collector_crashes() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let state = tmp.path().join("broker");
    std::fs::create_dir_all(&state).unwrap();
    let mut broker = start_broker(&state, port);
    let pg = Postgres::start();
    let pg_url = pg.database("faults");
    let central = tmp.path().join("central.db");
    let lite_collector = start_collector_as(path_str(&central), port, "c-sqlite");
    let mut pg_collector = start_collector_as(&pg_url, port, "c-postgres");
    // Three stations, three sessions each; station 3 also syncs per-frame features, so
    // its records are large (many chunks each) and a kill lands mid-message.
    let fast = config_without_vision_models(tmp.path());
    let heavy = config_without_vision_models_and(
        tmp.path(),
        "frames.toml",
        "[sync]\nframe_features = true\n",
    );
    let mut stations = Vec::new();
    for k in 1..=3 {
        let db = tmp.path().join(format!("station-{k}.db"));
        let config = if k == 3 { &heavy } else { &fast };
        for n in 1..=3 {
            let s = session_as(
                &tmp.path().join(format!("s{k}-{n}")),
                &format!("st{k}-{n:04}"),
                &format!("P-{k}"),
                &format!("station-{k}"),
            );
            let o = replay_cli(&s, &db, Some(config));
            assert!(o.status.success(), "{}", stderr(&o));
        }
        stations.push(db);
    }
    let heavy_record: i64 = crate::common::store::count(
        &crate::common::store::open_db(&stations[2]),
        "SELECT max(length(payload)) FROM outbox",
    );
    assert!(heavy_record > 8 * 64 * 1024, "{heavy_record} characters");
    // Let both collectors subscribe before anything is published.
    std::thread::sleep(Duration::from_millis(1500));

    // All three publish at once; the broker is killed mid-sync and restarted on its state.
    let mut syncs: Vec<Child> = stations
        .iter()
        .enumerate()
        .map(|(k, db)| sync_process(db, port, &format!("station-{}", k + 1)))
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    sigkill(&mut broker.child);
    std::thread::sleep(Duration::from_millis(1000));
    broker = start_broker(&state, port);
    // Station 3's publisher is killed mid-message and started again.
    std::thread::sleep(Duration::from_millis(300));
    sigkill(&mut syncs[2]);
    syncs[2] = sync_process(&stations[2], port, "station-3");
    // The PostgreSQL collector is killed and restarted (its session kept by the broker).
    std::thread::sleep(Duration::from_millis(300));
    sigkill(&mut pg_collector);
    pg_collector = start_collector_as(&pg_url, port, "c-postgres");
    for (k, mut s) in syncs.into_iter().enumerate() {
        let status = s.wait().unwrap();
        assert!(status.success(), "station {} did not finish syncing", k + 1);
    }
    for db in &stations {
        let s = empathic(&["sync", "status", "--db", path_str(db), "--json"]);
        let s: serde_json::Value = serde_json::from_str(&stdout(&s)).unwrap();
        assert_eq!(
            (
                s["pending"].as_u64(),
                s["sent"].as_u64(),
                s["synced"].as_u64()
            ),
            (Some(0), Some(0), Some(3))
        );
        // Synced means both central databases confirmed it.
        assert_eq!(s["receipts"]["c-sqlite"].as_u64(), Some(3), "{s}");
        assert_eq!(s["receipts"]["c-postgres"].as_u64(), Some(3), "{s}");
    }
    // Both central databases: every message once, every session equal to its station's.
    let mut want: Vec<String> = stations.iter().flat_map(|db| outbox_ids(db)).collect();
    want.sort();
    let sessions: Vec<String> = (1..=3)
        .flat_map(|k| (1..=3).map(move |n| format!("st{k}-{n:04}")))
        .collect();
    let ids_in_pg = || -> Vec<String> {
        let mut c = ::postgres::Client::connect(&pg_url, ::postgres::NoTls).unwrap();
        let mut ids: Vec<String> = c
            .query("SELECT message_id FROM collect_records", &[])
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        ids.sort();
        ids
    };
    let ids_in_lite = || -> Vec<String> {
        let mut ids: Vec<String> = crate::common::store::column(
            &crate::common::store::open_db(&central),
            "SELECT message_id FROM collect_records",
        );
        ids.sort();
        ids
    };
    // Every station named both collectors, so each committed everything before the
    // stations called it synced: nothing to wait for.
    assert_eq!(ids_in_lite(), want, "SQLite: every message once");
    assert_eq!(ids_in_pg(), want, "PostgreSQL: every message once");
    let lite = crate::common::store::open_db(&central);
    let view = pg_view(&pg_url);
    for (k, db) in stations.iter().enumerate() {
        let station = crate::common::store::open_db(db);
        for n in 1..=3 {
            let id = format!("st{}-{n:04}", k + 1);
            let want = record_rows(&station, &id, false);
            same_rows(
                &record_rows(&lite, &id, false),
                &want,
                &format!("{id} SQLite"),
            );
            same_rows(
                &record_rows(view.connection_for_tests(), &id, false),
                &want,
                &format!("{id} PostgreSQL"),
            );
        }
    }
    assert_eq!(sessions_in(&lite), sessions);
    // Station 3's per-frame features arrived whole.
    let frames = |c: &rusqlite::Connection| {
        crate::common::store::count(
            c,
            "SELECT count(*) FROM frame_features WHERE session_id LIKE 'st3-%'",
        )
    };
    assert!(frames(&lite) > 0);
    assert_eq!(
        frames(&lite),
        frames(&crate::common::store::open_db(&stations[2]))
    );
    for mut c in [lite_collector, pg_collector] {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        c.wait().unwrap();
    }
    drop(broker);
    drop(pg);
}
