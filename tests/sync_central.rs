//! The central database, SQLite and PostgreSQL side by side, against a real Mosquitto and a
//! real PostgreSQL (a throwaway cluster the test starts): two stations sync, two collectors
//! (one per database) take every message, and each central database then holds every
//! session's rows exactly as its station does, reads with `sessions`, `evaluate`, `report`
//! and `export windows`, follows a `--replace` and removes a withdrawn participant.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::broker::*;
use common::postgres::Postgres;
use common::*;
use empathic::store::sql::outbox::{Include, RECORD_TABLES};
use rumqttc::{Client, MqttOptions, QoS};

/// The rows a session record carries, table by table, as canonical lines.
fn record_rows(conn: &rusqlite::Connection, id: &str, transcripts: bool) -> Vec<String> {
    let mut out = Vec::new();
    for t in RECORD_TABLES {
        let include = match t.include {
            Include::Always | Include::WindowFeatures => true,
            Include::Transcripts => transcripts,
            Include::FrameFeatures => false,
        };
        if !include {
            continue;
        }
        // A story's row is shared by every station that showed it; the central database
        // keeps the latest one's, so its station-local creation time is not compared.
        let columns = if t.name == "stories" {
            t.columns.replace(", created_at", "")
        } else {
            t.columns.to_string()
        };
        let mut st = conn
            .prepare(&format!(
                "SELECT {columns} FROM {} WHERE {}",
                t.name, t.rows
            ))
            .unwrap();
        let n = st.column_count();
        let rows: Vec<String> = st
            .query_map([id], |r| {
                (0..n)
                    .map(|i| r.get_ref(i).map(common::store::cell))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|c| format!("{} {}", t.name, c.join(" ")))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        out.extend(rows);
    }
    out
}

/// Asserts `got == want`, naming only the lines that differ (records are long).
fn same_rows(got: &[String], want: &[String], what: &str) {
    let short = |l: &String| l.chars().take(300).collect::<String>();
    let missing: Vec<String> = want
        .iter()
        .filter(|l| !got.contains(l))
        .take(3)
        .map(short)
        .collect();
    let extra: Vec<String> = got
        .iter()
        .filter(|l| !want.contains(l))
        .take(3)
        .map(short)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && got.len() == want.len(),
        "{what}: {} rows, want {}; missing {missing:#?}; unexpected {extra:#?}",
        got.len(),
        want.len()
    );
}

fn pg_view(url: &str) -> empathic::store::Store {
    empathic::sync::central::Central::open(url)
        .and_then(empathic::sync::central::Central::read_view)
        .unwrap()
}

fn stop(mut c: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    c.wait().unwrap();
}

/// Waits until `done` holds (20 s at most).
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sessions_in(conn: &rusqlite::Connection) -> Vec<String> {
    common::store::column(conn, "SELECT id FROM sessions ORDER BY id")
}

fn sync_ok(db: &Path, port: u16, station: &str) {
    let o = empathic(&[
        "sync",
        "--db",
        path_str(db),
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--study",
        "test-study",
        "--station",
        station,
        "--until-synced",
        "--timeout",
        "30",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn sqlite_and_postgresql_central_databases_hold_what_the_stations_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let pg = Postgres::start();
    let pg_url = pg.database("study");
    let central = tmp.path().join("central.db");
    let mut collectors = vec![
        start_collector_as(path_str(&central), broker.port, "c-sqlite"),
        start_collector_as(&pg_url, broker.port, "c-postgres"),
    ];
    // A probe proves both collectors subscribed: each quarantines it.
    let mut opts = MqttOptions::new("test-probe", "127.0.0.1", broker.port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(opts, 4);
    let quarantined = |target: &str| -> i64 {
        if target.starts_with("postgres://") {
            ::postgres::Client::connect(target, ::postgres::NoTls)
                .and_then(|mut c| c.query_one("SELECT count(*) FROM collect_quarantine", &[]))
                .map(|r| r.get(0))
                .unwrap_or(0)
        } else {
            rusqlite::Connection::open(target)
                .and_then(|c| {
                    c.query_row("SELECT count(*) FROM collect_quarantine", [], |r| r.get(0))
                })
                .unwrap_or(0)
        }
    };
    wait_until("both collectors to subscribe", || {
        client
            .publish(
                "empathic/v1/test-study/probe/session",
                QoS::AtLeastOnce,
                false,
                "probe",
            )
            .unwrap();
        for _ in 0..5 {
            let _ = conn.recv_timeout(Duration::from_millis(100));
        }
        quarantined(path_str(&central)) > 0 && quarantined(&pg_url) > 0
    });
    drop(client);

    // Station 1: the demo and a later session (default content: window features, no
    // transcript). Station 2: another participant, transcripts synced.
    let fast = config_without_vision_models(tmp.path());
    let with_words =
        config_without_vision_models_and(tmp.path(), "words.toml", "[sync]\ntranscripts = true\n");
    let db1 = tmp.path().join("station-1.db");
    let db2 = tmp.path().join("station-2.db");
    assert!(replay_cli(&demo_session(), &db1, Some(&fast))
        .status
        .success());
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db1, Some(&fast)).status.success());
    let other = copy_session(&demo_session(), &tmp.path().join("other"));
    let manifest = other.join("session.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    v["session_id"] = "other-0001".into();
    v["participant_id"] = "P-OTHER".into();
    v["station_id"] = "station-2".into();
    std::fs::write(&manifest, v.to_string()).unwrap();
    assert!(replay_cli(&other, &db2, Some(&with_words)).status.success());
    sync_ok(&db1, broker.port, "station-1");
    sync_ok(&db2, broker.port, "station-2");
    for db in [&db1, &db2] {
        let s = empathic(&["sync", "status", "--db", path_str(db), "--json"]);
        let s: serde_json::Value = serde_json::from_str(&stdout(&s)).unwrap();
        assert_eq!(
            (s["pending"].as_u64(), s["sent"].as_u64()),
            (Some(0), Some(0))
        );
    }
    let all = ["demo-0001", "demo-0002", "other-0001"];
    wait_until("three sessions in both central databases", || {
        let lite = empathic::store::Store::open(&central).unwrap();
        sessions_in(lite.connection()) == all && sessions_in(pg_view(&pg_url).connection()) == all
    });

    // Every carried row, equal to the station's, in both.
    let check = |db: &Path, id: &str, transcripts: bool| {
        let station = rusqlite::Connection::open(db).unwrap();
        let want = record_rows(&station, id, transcripts);
        assert!(want.iter().any(|l| l.starts_with("window_features ")));
        assert_eq!(
            want.iter().any(|l| l.starts_with("utterances ")),
            transcripts
        );
        let lite = rusqlite::Connection::open(&central).unwrap();
        same_rows(
            &record_rows(&lite, id, transcripts),
            &want,
            &format!("{id} in SQLite"),
        );
        let pg_store = pg_view(&pg_url);
        same_rows(
            &record_rows(pg_store.connection(), id, transcripts),
            &want,
            &format!("{id} in PostgreSQL"),
        );
    };
    check(&db1, "demo-0001", false);
    check(&db1, "demo-0002", false);
    check(&db2, "other-0001", true);

    // The reading commands work on both, and agree.
    for target in [path_str(&central), pg_url.as_str()] {
        let o = empathic(&["sessions", "list", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let listed: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 3, "{target}");
        let page = tmp.path().join("report.html");
        let o = empathic(&[
            "report",
            "demo-0001",
            "--db",
            target,
            "--out",
            path_str(&page),
        ]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        assert!(std::fs::read_to_string(&page)
            .unwrap()
            .contains("demo-0001"));
    }
    let evaluate = |target: &str| {
        let o = empathic(&["evaluate", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(evaluate(path_str(&central)), evaluate(&pg_url));
    let show = |target: &str| {
        let o = empathic(&["sessions", "show", "demo-0001", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let mut v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        // Where the station read the recording stays on the station, and so do the raw
        // event log, the transcript and the per-frame features this study does not sync
        // (what `show` counts of them).
        v["source_path"] = serde_json::Value::Null;
        v["events"] = serde_json::Value::Null;
        v["utterances"] = serde_json::Value::Null;
        for m in v["modalities"].as_array_mut().unwrap() {
            m["present_frames"] = serde_json::Value::Null;
        }
        v
    };
    assert_eq!(show(path_str(&db1)), show(path_str(&central)));
    assert_eq!(show(path_str(&db1)), show(&pg_url));
    // Export from the central file: window means equal to the station's export.
    for (db, out) in [(&db1, "from-station"), (&central, "from-central")] {
        let o = empathic(&[
            "export",
            "windows",
            "--db",
            path_str(db),
            "--out",
            path_str(&tmp.path().join(out)),
            "--session",
            "demo-0001",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    for name in [
        "acoustic_compare_window_mean.npy",
        "acoustic_compare_window_present.npy",
    ] {
        let read = |dir: &str| std::fs::read(tmp.path().join(dir).join("demo-0001").join(name));
        assert_eq!(
            read("from-station").unwrap(),
            read("from-central").unwrap(),
            "{name}"
        );
    }

    // A replacement on station 1 and a withdrawal on station 2 reach both.
    let o = empathic(&[
        "replay",
        path_str(&demo_session()),
        "--db",
        path_str(&db1),
        "--config",
        path_str(&fast),
        "--replace",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = empathic(&["participant", "purge", "P-OTHER", "--db", path_str(&db2)]);
    assert!(o.status.success(), "{}", stderr(&o));
    sync_ok(&db1, broker.port, "station-1");
    sync_ok(&db2, broker.port, "station-2");
    let two = ["demo-0001", "demo-0002"];
    wait_until("the purge in both central databases", || {
        let lite = empathic::store::Store::open(&central).unwrap();
        sessions_in(lite.connection()) == two && sessions_in(pg_view(&pg_url).connection()) == two
    });
    check(&db1, "demo-0001", false);
    let lite = rusqlite::Connection::open(&central).unwrap();
    for sql in [
        "SELECT count(*) FROM utterances",
        "SELECT count(*) FROM participants WHERE id = 'P-OTHER'",
        "SELECT count(*) FROM collect_records WHERE participant = 'P-OTHER' AND kind = 'session'",
    ] {
        assert_eq!(common::store::count(&lite, sql), 0, "{sql}");
    }
    assert_eq!(
        common::store::count(
            &lite,
            "SELECT count(*) FROM collect_purges WHERE participant_id = 'P-OTHER'"
        ),
        1
    );
    let mut pgc = ::postgres::Client::connect(&pg_url, ::postgres::NoTls).unwrap();
    let left: i64 = pgc
        .query_one(
            "SELECT count(*) FROM collect_records WHERE participant = 'P-OTHER' AND kind = 'session'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    let purges: i64 = pgc
        .query_one("SELECT count(*) FROM collect_purges", &[])
        .unwrap()
        .get(0);
    assert_eq!(purges, 1);
    // Each central database holds each station message once.
    let station_ids = |db: &Path| -> Vec<String> {
        common::store::column(
            &rusqlite::Connection::open(db).unwrap(),
            "SELECT message_id FROM outbox",
        )
    };
    let mut want: Vec<String> = station_ids(&db1);
    want.extend(station_ids(&db2));
    want.sort();
    let mut lite_ids: Vec<String> =
        common::store::column(&lite, "SELECT message_id FROM collect_records");
    lite_ids.sort();
    assert_eq!(lite_ids, want);
    let mut pg_ids: Vec<String> = pgc
        .query("SELECT message_id FROM collect_records", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    pg_ids.sort();
    assert_eq!(pg_ids, want);
    for c in collectors.drain(..) {
        stop(c);
    }
    drop(broker);
    drop(pg);
}
