//! What a study promises a participant, held under races and faults (issue 29, "Trust"):
//! one process owns a session at a time, and kept work is never destroyed by a rerun that
//! does not complete. Each test reproduces a probe's example before checking the class.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rusqlite::Connection;

fn replay_realtime(session: &Path, db: &Path, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["replay", path_str(session), "--db", path_str(db)])
        .args(["--speed", "realtime"])
        .args(extra)
        .env("EMPATHIC_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn count(db: &Path, sql: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap_or(0)
}

/// Waits until `sql` counts at least `n` (up to 30 s).
fn wait_count(db: &Path, sql: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if db.exists() && count(db, sql) >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("`{sql}` did not reach {n} within 30 s");
}

fn session_row(db: &Path, id: &str) -> (String, i64, i64) {
    Connection::open(db)
        .unwrap()
        .query_row(
            "SELECT status, frames, (SELECT count(*) FROM frames WHERE session_id = ?1)
             FROM sessions WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

#[test]
fn a_second_writer_of_a_running_session_is_refused_and_the_first_completes_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("two.db");
    let fast = config_without_vision_models(tmp.path());
    let fast = ["--config", path_str(&fast)];
    let first = replay_realtime(&demo_session(), &db, &fast);
    wait_count(&db, "SELECT count(*) FROM frames", 30);
    // The probe's example: the same session id a second later, plain and with --replace.
    for extra in [&[][..], &["--replace"][..]] {
        let demo = demo_session();
        let mut args = vec!["replay", path_str(&demo), "--db", path_str(&db)];
        args.extend(fast);
        args.extend(extra);
        let o = empathic(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("is being written by process"),
            "{}",
            stderr(&o)
        );
    }
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (status, frames, rows) = session_row(&db, "demo-0001");
    assert_eq!(status, "complete");
    assert_eq!(frames, 420);
    assert_eq!(
        rows, frames,
        "stored complete with fewer frame rows than it counts"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM sessions"),
        1,
        "a refused run left a row"
    );
}

#[test]
fn an_incomplete_session_is_kept_until_a_rerun_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("kept.db");
    let fast = config_without_vision_models(tmp.path());
    let fast = ["--config", path_str(&fast)];
    let mut run = replay_realtime(&demo_session(), &db, &fast);
    wait_count(&db, "SELECT count(*) FROM windows", 1);
    run.kill().unwrap();
    run.wait().unwrap();
    // Opening marks it incomplete; what was committed is the kept work.
    assert!(empathic(&["sessions", "list", "--db", path_str(&db)])
        .status
        .success());
    let kept = session_row(&db, "demo-0001");
    assert_eq!(kept.0, "incomplete");
    assert!(kept.2 >= 120 && kept.1 == kept.2, "{kept:?}");

    // Reruns that fail, before the run starts (a bad session.json) and during it (a video
    // cut short), leave the incomplete session exactly as it was.
    let bad_manifest = copy_session(&demo_session(), &tmp.path().join("bad-manifest"));
    std::fs::write(
        bad_manifest.join("session.json"),
        "{\"format_version\": 1, \"session_id\": \"demo-0001\", \"nominal_fps\": -3}",
    )
    .unwrap();
    let cut = copy_session(&demo_session(), &tmp.path().join("cut"));
    let bytes = std::fs::read(cut.join("video.avi")).unwrap();
    std::fs::write(cut.join("video.avi"), &bytes[..bytes.len() / 2]).unwrap();
    for broken in [&bad_manifest, &cut] {
        for extra in [&[][..], &["--replace"][..]] {
            let mut args = vec!["replay", path_str(broken), "--db", path_str(&db)];
            args.extend(fast);
            args.extend(extra);
            let o = empathic(&args);
            assert!(!o.status.success(), "a broken rerun succeeded");
            assert_eq!(
                session_row(&db, "demo-0001"),
                kept,
                "a failed rerun ({}) changed the kept session: {}",
                broken.display(),
                stderr(&o)
            );
        }
    }
    // A rerun that completes replaces it, once.
    let demo = demo_session();
    let mut args = vec!["replay", path_str(&demo), "--db", path_str(&db)];
    args.extend(fast);
    let o = empathic(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let (status, frames, rows) = session_row(&db, "demo-0001");
    assert_eq!((status.as_str(), frames, rows), ("complete", 420, 420));
    assert_eq!(count(&db, "SELECT count(*) FROM sessions"), 1);
}
