//! A station that knows why (issue 44, items 4 and 5), on a real Mosquitto, into a central
//! SQLite file and a real PostgreSQL: the collector answers what it refuses with a signed
//! refusal; the station says it (`sync` exits naming the reason, `sync status`), holds the
//! refused messages instead of resending them, and sends them again when its configuration
//! changes or when told to (`--retry-refused`); `collect quarantine list|drop` shows and
//! forgets refused messages per message, a quarantine problem clears once its message is
//! stored after all, and a revoked station that keeps sending is a problem.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::broker::{free_port, start_broker, start_sealed_collector, Collector};
use crate::common::central::{quarantined, wait_subscribed};
use crate::common::postgres::Postgres;
use crate::common::{
    config_without_vision_models_and, copy_session_as, demo_session, empathic, key_init as key,
    later_demo_session, path_str, replay_cli, stderr, stdout, terminate,
};

const STUDY: &str = "test-study";

fn collector(target: &str, port: u16, keys: &Path) -> Collector {
    start_sealed_collector(target, port, keys, "refusing-collector")
}

fn station_config(dir: &Path, name: &str, key: &Path, study_key: &str, collector: &str) -> PathBuf {
    config_without_vision_models_and(
        dir,
        name,
        &format!(
            "[sync]\nsecurity = \"sealed\"\nsigning_key = \"{}\"\nstudy_key = \"{study_key}\"\ncollector_keys = [\"{collector}\"]\n",
            key.display()
        ),
    )
}

fn sync(db: &Path, config: &Path, port: u16, extra: &[&str]) -> std::process::Output {
    let broker = format!("mqtt://127.0.0.1:{port}");
    let mut args = vec![
        "sync",
        "--db",
        path_str(db),
        "--config",
        path_str(config),
        "--broker",
        &broker,
        "--study",
        STUDY,
        "--station",
        "station-1",
        "--until-synced",
        "--timeout",
        "60",
    ];
    args.extend(extra);
    empathic(&args)
}

fn status_json(db: &Path, config: &Path) -> serde_json::Value {
    let o = empathic(&[
        "sync",
        "status",
        "--db",
        path_str(db),
        "--config",
        path_str(config),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

fn central(args: &[&str], target: &str) -> std::process::Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--central", target, "--study", STUDY]);
    empathic(&all)
}

fn quarantine_list(target: &str) -> Vec<serde_json::Value> {
    let o = central(&["collect", "quarantine", "list", "--json"], target);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["quarantined"].as_array().unwrap().clone()
}

fn problems_of(target: &str, station: &str) -> Vec<String> {
    let o = central(&["study", "report", "--json"], target);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["station"] == station)
        .map(|p| p["kind"].as_str().unwrap().to_string())
        .collect()
}

/// Quarantine rows naming `id` as the message they refused.
fn refused_rows(target: &str, id: &str) -> i64 {
    let q = "SELECT count(*) FROM collect_quarantine WHERE refused_id = $1";
    if target.starts_with("postgres") {
        let mut c = ::postgres::Client::connect(target, ::postgres::NoTls).unwrap();
        c.query_one(q, &[&id]).unwrap().get(0)
    } else {
        crate::common::store::open_db(target)
            .query_row(&q.replace("$1", "?1"), [id], |r| r.get(0))
            .unwrap()
    }
}

fn refusals_are_told_held_listed_and_cleared(target: &str, dir: &Path) {
    let broker = start_broker(dir, free_port());
    let port = broker.port;
    let keys = dir.join("keys");
    let study_public = key("study", &keys.join("study.key"));
    let collector_public = key("collector", &keys.join("collector.key"));
    let s1_public = key("station", &keys.join("s1.key"));
    let wrong_study = key("study", &keys.join("wrong-study.key"));
    // The central database holds the study (another station enrolled), not station-1.
    let o = central(
        &["collect", "enrol", "station-9", &collector_public],
        target,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let c = collector(target, port, &keys);
    wait_subscribed(port, &[target], Duration::from_secs(20));
    let probe = quarantine_list(target);
    assert_eq!(probe.len(), 1, "the subscription probe: {probe:?}");
    let probe_id = probe[0]["id"].as_str().unwrap().to_string();
    assert!(probe_id.starts_with("row:"), "{probe_id}");

    let cfg = station_config(
        dir,
        "s1.toml",
        &keys.join("s1.key"),
        &study_public,
        &collector_public,
    );
    let db = dir.join("station-1.db");
    assert!(replay_cli(&demo_session(), &db, Some(&cfg))
        .status
        .success());

    // Not enrolled: `sync` ends at once with the collector's reason, not a timeout.
    let started = Instant::now();
    let o = sync(&db, &cfg, port, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refused by collector refusing-collector")
            && err.contains("not_enrolled")
            && err.contains("collect enrol station-1"),
        "{err}"
    );
    assert!(!err.contains("gave up after"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(45), "{err}");
    let s = status_json(&db, &cfg);
    assert_eq!(s["refused"], 1, "{s}");
    assert_eq!(s["last_refusal"]["code"], "not_enrolled", "{s}");
    let text = empathic(&[
        "sync",
        "status",
        "--db",
        path_str(&db),
        "--config",
        path_str(&cfg),
    ]);
    assert!(
        stdout(&text).contains("REFUSED   1 message(s) held"),
        "{}",
        stdout(&text)
    );

    // Listed once per message (its chunks are one entry), with the reason. (A station
    // nobody enrolled is a stranger to the page: one line, no problem.)
    let list = quarantine_list(target);
    assert_eq!(list.len(), 2, "{list:?}");
    let refused = list.iter().find(|q| q["id"] != probe_id.as_str()).unwrap();
    assert_eq!(refused["read_whole"], false);
    assert!(refused["reason"].as_str().unwrap().contains("enrolled"));
    let message_id = refused["id"].as_str().unwrap().to_string();

    // Held: a second run under the same configuration sends nothing.
    let rows = quarantined(target);
    let o = sync(&db, &cfg, port, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("not_enrolled"), "{}", stderr(&o));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(quarantined(target), rows, "a held message was sent again");

    // Staff enrol it; the engineer sends again at once: stored, and the quarantine entry
    // clears by itself.
    let o = central(&["collect", "enrol", "station-1", &s1_public], target);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sync(&db, &cfg, port, &["--retry-refused"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = status_json(&db, &cfg);
    assert_eq!(
        (s["synced"].as_u64(), s["refused"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );
    assert!(s["last_refusal"].is_null(), "{s}");
    let list = quarantine_list(target);
    assert!(
        list.iter().all(|q| q["id"] != message_id.as_str()),
        "{list:?}"
    );

    // Sealed to the wrong study key: refused as unopenable, held, a problem of the
    // (enrolled) station; the configuration put right sends it again without any flag, and
    // the problem clears.
    assert!(
        replay_cli(&later_demo_session(&dir.join("later")), &db, Some(&cfg))
            .status
            .success()
    );
    let wrong = station_config(
        dir,
        "s1-wrong.toml",
        &keys.join("s1.key"),
        &wrong_study,
        &collector_public,
    );
    let o = sync(&db, &wrong, port, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot_open"), "{}", stderr(&o));
    assert!(problems_of(target, "station-1").contains(&"quarantined".to_string()));
    // The held message keeps its sealed bytes for the old key; the new configuration
    // seals anew and is judged again.
    let o = sync(&db, &cfg, port, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(status_json(&db, &cfg)["synced"], 2);
    assert!(!problems_of(target, "station-1").contains(&"quarantined".to_string()));

    // Dropping: the probe's row goes; an unknown id is refused.
    let o = central(&["collect", "quarantine", "drop", &probe_id], target);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = central(
        &["collect", "quarantine", "drop", "no-such-message"],
        target,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(quarantine_list(target)
        .iter()
        .all(|q| q["id"] != probe_id.as_str()));

    // Revoked, and still sending: refused (held at the station) and a problem on the page.
    let o = central(&["collect", "revoke", "station-1"], target);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!problems_of(target, "station-1").contains(&"revoked_sending".to_string()));
    std::thread::sleep(Duration::from_millis(1100));
    let third = copy_session_as(
        &demo_session(),
        &dir.join("third"),
        &[
            ("session_id", "demo-0003"),
            ("start_time", "2026-11-08T18:30:00Z"),
        ],
    );
    assert!(replay_cli(&third, &db, Some(&cfg)).status.success());
    let o = sync(&db, &cfg, port, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("revoked"), "{}", stderr(&o));
    assert!(problems_of(target, "station-1").contains(&"revoked_sending".to_string()));
    // A withdrawal takes the quarantined chunks of the participant's refused messages too
    // (the first one was stored after all: its refused chunks were closed, not gone; a
    // purge that left them would let them open again once the record is deleted). A
    // message the database never held (the revoked one) stays listed as a refusal: it is
    // kept without its data, and nothing centrally says whose it was.
    assert!(refused_rows(target, &message_id) > 0);
    let o = empathic(&["participant", "purge", "P-DEMO", "--db", target]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(refused_rows(target, &message_id), 0);
    assert!(quarantine_list(target)
        .iter()
        .all(|q| q["id"] != message_id.as_str()));
    terminate(c);
}

#[test]
fn refusals_reach_the_station_and_clear_with_a_central_sqlite_file() {
    let tmp = tempfile::tempdir().unwrap();
    let central = tmp.path().join("central.db");
    refusals_are_told_held_listed_and_cleared(path_str(&central), tmp.path());
}

#[test]
fn refusals_reach_the_station_and_clear_with_postgresql() {
    let tmp = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    refusals_are_told_held_listed_and_cleared(&pg.url(), tmp.path());
}
