//! The central database in tests: a session's rows as a record carries them, compared
//! with what a station holds; a PostgreSQL central database read through its snapshot.

use std::path::Path;
use std::time::{Duration, Instant};

use empathic::store::outbox::{Include, RECORD_TABLES};

use super::{empathic, stderr};

/// The rows a session record carries, table by table, as canonical lines.
pub fn record_rows(conn: &rusqlite::Connection, id: &str, transcripts: bool) -> Vec<String> {
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
                    .map(|i| r.get_ref(i).map(super::store::cell))
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
pub fn same_rows(got: &[String], want: &[String], what: &str) {
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

pub fn pg_view(url: &str) -> empathic::store::Store {
    empathic::sync::central::Central::open(url)
        .and_then(empathic::sync::central::Central::read_view)
        .unwrap()
}

/// Waits until `done` holds (20 s at most).
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn sessions_in(conn: &rusqlite::Connection) -> Vec<String> {
    super::store::column(conn, "SELECT id FROM sessions ORDER BY id")
}

pub fn sync_ok(db: &Path, port: u16, station: &str) {
    let args = super::broker::sync_args(db, port, station, &["--until-synced", "--timeout", "30"]);
    let o = empathic(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Messages in quarantine in a central database (a file or a `postgres://` URL); 0 while
/// it cannot be read yet.
pub fn quarantined(target: &str) -> i64 {
    if target.starts_with("postgres://") {
        ::postgres::Client::connect(target, ::postgres::NoTls)
            .and_then(|mut c| c.query_one("SELECT count(*) FROM collect_quarantine", &[]))
            .map(|r| r.get(0))
            .unwrap_or(0)
    } else {
        crate::common::store::try_open_db(target)
            .and_then(|c| c.query_row("SELECT count(*) FROM collect_quarantine", [], |r| r.get(0)))
            .unwrap_or(0)
    }
}

/// Publishes a probe on a station topic of `test-study` until every collector writing to
/// `targets` has quarantined it: proof that each one subscribed (a fixed sleep is outrun
/// on a loaded machine). Fails after `within`.
pub fn wait_subscribed(port: u16, targets: &[&str], within: Duration) {
    use rumqttc::{Client, MqttOptions, QoS};
    let mut opts = MqttOptions::new("test-probe", "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(5));
    let (client, mut conn) = Client::new(opts, 4);
    let deadline = Instant::now() + within;
    while !targets.iter().all(|t| quarantined(t) > 0) {
        assert!(
            Instant::now() < deadline,
            "the collectors did not subscribe"
        );
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
    }
}
