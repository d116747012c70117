//! Upgrades from every earlier schema and a mixed fleet (issue 46, item 3). A station
//! updated in the field opens a store some earlier build wrote, with an outbox holding
//! records that build encoded: every row must survive the migration, the migration must be
//! recorded once, and the pending records must reach the study exactly once. A collector
//! reads a station one record version older; a record newer than the collector knows is
//! refused with the reason and nothing of it applied.

use crate::common::broker::{
    free_port, publish_retained, retained, start_broker, start_collector_as, sync_args,
};
use crate::common::central::{sync_ok, wait_subscribed};
use crate::common::old_store::{self, store_at};
use crate::common::postgres::Postgres;
use crate::common::store::{column, open_db};
use crate::common::*;

/// The sha256 of every migration's SQL as it shipped. A shipped migration is never edited
/// (stations hold stores it made and will not run it again): add the next one instead,
/// and its digest here. The intermediate texts of versions 3, 4 and 11 in the history
/// (`git log -p src/store/schema.rs`) lived 14 to 23 minutes inside one session and never
/// landed; these are the texts every landed build carried.
const SHIPPED: &[(i64, &str)] = &[
    (
        1,
        "b70132e609771efe7cafacfc53e770bcd97e5bbcdd4bce13bb0a1538a6b23b06",
    ),
    (
        2,
        "8b28b58403e987c74027126acf9342b932293534aab91c831bd34e4a7e56a6ae",
    ),
    (
        3,
        "255691ded7adf55a6d4988dce24855f92760a867f6fd97e314520b4d439d82f6",
    ),
    (
        4,
        "37d68ea5447aba394b0d343932f5596b6d0ffd124ad428f5cb2229cb1dcd139c",
    ),
    (
        5,
        "7d19624129c512b0e69a275f8829780d2ef08b6f538b7b5e8fb2a0657b3edd87",
    ),
    (
        6,
        "e230f73e9cc6a0598a6393c60ba4af932c7382525137c011675910e65be47701",
    ),
    (
        7,
        "9f7edaa461868653d6036e6400fe18935dca55142c9aefb7de36b3e41eeabb50",
    ),
    (
        8,
        "0901cec4b0d958a7a24c6e7e1685ff937211a256dec4a921178c3665c88f0b45",
    ),
    (
        9,
        "adf805940ce83794def9ffb72e8e1fd3f26de0ad9f569e56a12bd10da6646519",
    ),
    (
        10,
        "5f127d1d2c0bc60b1d968d4701451a4e3b92dec110096dd01b2cf8ef8f373f9d",
    ),
    (
        11,
        "5f34bb80dc9d27f1a5864510f2edacb52c6c684ecfa2f9f0c6f6b31a450483f3",
    ),
    (
        12,
        "169535b9c947f490fee599857302abd18dfb4aa2d08a304a7b4290a5126ebd19",
    ),
    (
        13,
        "c171ed6052f794d4c2339b5ba31293854ed066a1e60f49a780ee2336176f40b9",
    ),
];

#[test]
fn migrations_are_never_edited() {
    let mut got = Vec::new();
    for &(v, _, sql) in empathic::store::schema::MIGRATIONS {
        got.push((v, empathic::digest::sha256_hex(sql.as_bytes())));
    }
    for (v, digest) in &got {
        match SHIPPED.iter().find(|s| s.0 == *v) {
            Some((_, pinned)) => assert_eq!(
                digest, pinned,
                "migration {v} differs from the one that shipped: never edit a shipped migration, add the next"
            ),
            None => panic!(
                "migration {v} has no pinned digest: once it ships, add ({v}, \"{digest}\") to SHIPPED"
            ),
        }
    }
}

/// Columns of each table in a store, to compare a table over the columns it had before.
fn table_columns(conn: &rusqlite::Connection) -> std::collections::BTreeMap<String, Vec<String>> {
    let tables: Vec<String> = column(
        conn,
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    );
    tables
        .into_iter()
        .map(|t| {
            let cols = conn
                .prepare("SELECT name FROM pragma_table_info(?1)")
                .unwrap()
                .query_map([&t], |r| r.get(0))
                .unwrap()
                .collect::<Result<Vec<String>, _>>()
                .unwrap();
            (t, cols)
        })
        .collect()
}

fn count(conn: &rusqlite::Connection, sql: &str, p: &str) -> i64 {
    conn.query_row(sql, [p], |r| r.get(0)).unwrap()
}

/// Text of the first column of `sql`'s rows in a central database: a SQLite file, or a
/// `postgres://` URL read through the collector's own view of it (`Central::read_view`:
/// the session tables as of now; `collect_*` are the PostgreSQL tables themselves).
fn central_strings(target: &str, sql: &str) -> Vec<String> {
    if target.starts_with("postgres://") {
        let view = crate::common::central::pg_view(target);
        column(view.connection_for_tests(), sql)
    } else {
        column(&open_db(target), sql)
    }
}

/// `SELECT count(*) ...` in a central database (a `collect_*` table of PostgreSQL is
/// counted there; session tables through the view).
fn central_count(target: &str, sql: &str) -> i64 {
    if target.starts_with("postgres://") && sql.contains("collect_") {
        let mut c = ::postgres::Client::connect(target, ::postgres::NoTls).unwrap();
        c.query_one(sql, &[]).unwrap().get(0)
    } else if target.starts_with("postgres://") {
        let view = crate::common::central::pg_view(target);
        view.connection_for_tests()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    } else {
        open_db(target).query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

/// A store of every schema version the project has had (1 to today) is opened by this
/// build: every row of every table is still there (compared over the columns the table
/// had; version 3 renamed the predictions' `model`/`value` to `predictor`/`score`), each
/// migration recorded once (the old ones keeping their dates), and the outbox's pending
/// records (a version 1 payload from the build of schema 4, a version 2 one of the store's
/// own era, a consent record at 11) reach a collector exactly once while synced ones are
/// not sent again.
#[test]
fn a_store_of_every_earlier_schema_keeps_every_row_and_syncs_once_into_sqlite() {
    let tmp = tempfile::tempdir().unwrap();
    let central = tmp.path().join("central.db");
    every_schema_upgrades_and_syncs(path_str(&central), tmp.path());
}

#[test]
fn a_store_of_every_earlier_schema_keeps_every_row_and_syncs_once_into_postgresql() {
    let tmp = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    every_schema_upgrades_and_syncs(&pg.url(), tmp.path());
}

fn every_schema_upgrades_and_syncs(central: &str, dir: &std::path::Path) {
    let port = free_port();
    let _broker = start_broker(dir, port);
    let mut collector = start_collector_as(central, port, "test-collector");
    wait_subscribed(port, &[central], std::time::Duration::from_secs(20));
    let newest = empathic::store::schema::MIGRATIONS.last().unwrap().0;
    for v in 1..=newest {
        let station = format!("st-v{v}");
        let db = dir.join(format!("v{v}.db"));
        let seeded = store_at(&db, v, &station);
        let (before, cols_before) = {
            let conn = open_db(&db);
            let cols = table_columns(&conn);
            let keep =
                |t: &str, c: &str| !(t == "predictions" && v < 3 && (c == "model" || c == "value"));
            (old_store::rows(&conn, keep), cols)
        };

        // This build opens it (as the service does at start): the migration runs.
        let o = empathic(&["sessions", "list", "--db", path_str(&db)]);
        assert!(o.status.success(), "v{v}: {}", stderr(&o));
        let conn = open_db(&db);
        let migrations: Vec<(i64, i64)> = conn
            .prepare(
                "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY version",
            )
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            migrations,
            (1..=newest).map(|m| (m, 1)).collect::<Vec<_>>(),
            "v{v}"
        );
        let kept_dates = count(
            &conn,
            "SELECT count(*) FROM schema_migrations WHERE applied_at = ?1",
            "2026-01-01T00:00:00.000Z",
        );
        assert_eq!(
            kept_dates, v,
            "v{v}: the migrations applied before keep their record"
        );
        let after = old_store::rows(&conn, |t, c| {
            cols_before
                .get(t)
                .is_some_and(|cs| cs.iter().any(|x| x == c))
                && !(t == "predictions" && v < 3 && (c == "model" || c == "value"))
        });
        let lost: Vec<&String> = before.iter().filter(|r| !after.contains(r)).collect();
        assert!(
            lost.is_empty(),
            "v{v}: rows lost or changed by the migration: {lost:#?}"
        );
        if v < 3 {
            let scores: Vec<String> = column(
                &conn,
                "SELECT predictor || '=' || score FROM predictions ORDER BY session_id",
            );
            assert_eq!(
                scores.len(),
                seeded.sessions.len(),
                "v{v}: predictions kept"
            );
            assert!(
                scores.iter().all(|s| s == "text-zero-shot=3.5"),
                "v{v}: {scores:?}"
            );
        }
        drop(conn);
        if v < 4 {
            continue;
        }

        // The pending records reach the collector, once; synced ones are not sent again.
        sync_ok(&db, port, &station);
        let conn = open_db(&db);
        let states: Vec<String> = column(
            &conn,
            "SELECT message_id || ' ' || state FROM outbox ORDER BY seq",
        );
        assert!(
            states.iter().all(|s| s.ends_with(" synced")),
            "v{v}: {states:?}"
        );
        let resent: i64 = conn
            .query_row("SELECT count(*) FROM outbox WHERE attempts > 1", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            resent, 0,
            "v{v}: a message synced before the upgrade was sent again"
        );
        drop(conn);
        let ids = format!("SELECT id FROM sessions WHERE station_id = '{station}' ORDER BY id");
        crate::common::central::wait_until("the pending sessions centrally", || {
            central_strings(central, &ids).len() == seeded.pending_sessions.len()
        });
        let got = central_strings(central, &ids);
        let mut want = seeded.pending_sessions.clone();
        want.sort();
        assert_eq!(
            got, want,
            "v{v}: the central database holds each pending session once"
        );
        let ratings = central_count(
            central,
            &format!("SELECT count(*) FROM self_ratings WHERE session_id IN (SELECT id FROM sessions WHERE station_id = '{station}')"),
        );
        assert_eq!(
            ratings,
            want.len() as i64,
            "v{v}: every pending session's rating"
        );
        // A second sync sends nothing: the central database is unchanged.
        let records = format!("SELECT count(*) FROM collect_records WHERE station = '{station}'");
        let (received, quarantine) = (
            central_count(central, &records),
            central_count(central, "SELECT count(*) FROM collect_quarantine"),
        );
        assert_eq!(
            received,
            seeded.pending.len() as i64,
            "v{v}: one record per pending message"
        );
        sync_ok(&db, port, &station);
        assert_eq!(got, central_strings(central, &ids));
        assert_eq!(received, central_count(central, &records));
        assert_eq!(
            quarantine,
            central_count(central, "SELECT count(*) FROM collect_quarantine")
        );
    }
    let _ = collector.kill();
    let _ = collector.wait();
}

/// A mixed fleet, the other way: a station newer than its collector sends a record
/// version the collector does not know. The collector refuses it `too_new` with the reason
/// and applies nothing of it; the station holds it (not settled, not synced: an upgraded
/// collector must still get it), `sync` says so, `--retry-refused` sends it again and it
/// is judged again (not answered as a duplicate); the collector's hello saying it now
/// reads something newer sends it again unasked, a restart saying the same does not; the
/// station's other records are stored as usual.
#[test]
fn a_record_newer_than_a_sqlite_collector_is_refused_with_the_reason_and_nothing_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let central = tmp.path().join("central.db");
    newer_record_refused(path_str(&central), tmp.path());
}

#[test]
fn a_record_newer_than_a_postgresql_collector_is_refused_with_the_reason_and_nothing_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    newer_record_refused(&pg.url(), tmp.path());
}

fn newer_record_refused(central: &str, dir: &std::path::Path) {
    let port = free_port();
    let _broker = start_broker(dir, port);
    let mut collector = start_collector_as(central, port, "test-collector");
    wait_subscribed(port, &[central], std::time::Duration::from_secs(20));
    let newest = empathic::store::schema::MIGRATIONS.last().unwrap().0;
    let db = dir.join("station.db");
    let seeded = store_at(&db, newest, "st-new");
    // The newest pending session record, as a future build would write it: version 3.
    let future = seeded.pending_sessions.last().unwrap().clone();
    {
        let conn = open_db(&db);
        let payload: String = conn
            .query_row(
                "SELECT payload FROM outbox WHERE subject = ?1 AND kind = 'session'",
                [&future],
                |r| r.get(0),
            )
            .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&payload).unwrap();
        v["version"] = 3.into();
        let text = v.to_string();
        conn.execute(
            "UPDATE outbox SET payload = ?1, sha256 = ?2 WHERE subject = ?3 AND kind = 'session'",
            rusqlite::params![text, empathic::digest::sha256_hex(text.as_bytes()), future],
        )
        .unwrap();
    }
    let args = sync_args(&db, port, "st-new", &["--until-synced", "--timeout", "30"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = empathic(&args);
    assert_eq!(o.status.code(), Some(1), "held, said: {}", stderr(&o));
    assert!(stderr(&o).contains("too_new"), "{}", stderr(&o));
    let held = |db: &std::path::Path| -> (String, Option<String>, String, String) {
        open_db(db)
            .query_row(
                "SELECT state, refused_code, coalesce(refused_reason, ''), coalesce(refused_at, '') FROM outbox WHERE subject = ?1 AND kind = 'session'",
                [&future],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap()
    };
    let (state, code, reason, first_at) = held(&db);
    assert!(
        state != "synced"
            && code.as_deref() == Some("too_new")
            && reason.contains("version 3")
            && reason.contains("reads up to version 2")
            && reason.contains("upgrade"),
        "the station holds it and keeps why: {state} {code:?} {reason}"
    );
    // Asked to, the station sends it again; the collector judges it again.
    let mut retry = args.clone();
    retry.push("--retry-refused");
    let o = empathic(&retry);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (state, code, _, again) = held(&db);
    assert!(
        state != "synced" && code.as_deref() == Some("too_new") && again > first_at,
        "sent again and refused again: {state} {code:?} {first_at} -> {again}: {}",
        stderr(&o)
    );
    // The collector upgraded: its hello (retained on the station's topic) says it reads
    // something newer, and the station sends the held record again unasked. (This build's
    // collector plays the old one's part and refuses it again.)
    let hello_topic = "empathic/v1/test-study/st-new/collector/test-collector";
    publish_retained(
        port,
        hello_topic,
        br#"{"collector":"test-collector","reads":"records v3, consent v1"}"#,
    );
    let o = empathic_logging("info", &args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("1 message(s) this collector refused as too new are sent again: it now reads records v3"),
        "{}",
        stderr(&o)
    );
    let (state, code, _, third) = held(&db);
    assert!(
        state != "synced" && code.as_deref() == Some("too_new") && third > again,
        "sent again on the hello and refused again: {again} -> {third}"
    );
    // A restart of the same collector is no upgrade: its own hello replaces that one, and
    // reads what it read when it refused; the record stays held.
    let _ = collector.kill();
    let _ = collector.wait();
    let mut collector = start_collector_as(central, port, "test-collector");
    let reads = empathic::sync::collector_reads();
    let own = retained(port, hello_topic, std::time::Duration::from_secs(20), |p| {
        serde_json::from_slice::<serde_json::Value>(p)
            .is_ok_and(|h| h["reads"] == reads.as_str() && h["collector"] == "test-collector")
    });
    assert!(
        own.is_some(),
        "the collector greets the station with what it reads ({reads})"
    );
    let o = empathic(&args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (_, code, _, fourth) = held(&db);
    assert!(
        code.as_deref() == Some("too_new") && fourth == third,
        "held on, not sent again: {third} -> {fourth}"
    );
    let applied = central_count(
        central,
        &format!("SELECT count(*) FROM sessions WHERE id = '{future}'"),
    );
    assert_eq!(applied, 0, "nothing of a refused record is applied");
    for table in [
        "phases",
        "story_exposures",
        "self_ratings",
        "windows",
        "predictions",
    ] {
        let n = central_count(
            central,
            &format!("SELECT count(*) FROM {table} WHERE session_id = '{future}'"),
        );
        assert_eq!(n, 0, "{table} of the refused record");
    }
    let others: Vec<String> = seeded
        .pending_sessions
        .iter()
        .filter(|s| **s != future)
        .cloned()
        .collect();
    let got = central_strings(
        central,
        "SELECT id FROM sessions WHERE station_id = 'st-new' ORDER BY id",
    );
    assert_eq!(
        got, others,
        "the station's other pending records are stored"
    );
    let _ = collector.kill();
    let _ = collector.wait();
}
