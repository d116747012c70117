//! Killing a replay: SIGKILL at any moment leaves a database that opens cleanly with the
//! session marked incomplete at the next start; SIGTERM stops gracefully and keeps what was
//! computed.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

fn start_realtime(db: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args([
            "replay",
            path_str(&demo_session()),
            "--db",
            path_str(db),
            "--speed",
            "realtime",
        ])
        .env("EMPATHIC_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until the writer has committed at least `n` windows (up to 20 s).
fn wait_for_windows(db: &std::path::Path, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(conn) = crate::common::store::try_open_db(db) {
            let got: i64 = conn
                .query_row("SELECT count(*) FROM windows", [], |r| r.get(0))
                .unwrap_or(0);
            if got >= n {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no {n} windows committed within 20 s");
}

#[test]
fn sigkill_mid_run_leaves_a_clean_database() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("k.db");
    let mut child = start_realtime(&db);
    // Window 0 needs 8 s of real time; kill while frames and windows are being written.
    wait_for_windows(&db, 1);
    child.kill().unwrap();
    child.wait().unwrap();

    let conn = crate::common::store::open_db(&db);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let fk: i64 = conn
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(fk, 0);
    let frames: i64 = conn
        .query_row("SELECT count(*) FROM frames", [], |r| r.get(0))
        .unwrap();
    assert!(frames >= 120, "committed frames kept: {frames}");
    drop(conn);

    // The next start notices the dead writer.
    let out = empathic(&["sessions", "list", "--db", path_str(&db), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &list[0];
    assert_eq!(s["status"], "incomplete");
    assert!(s["status_reason"]
        .as_str()
        .unwrap()
        .contains("ended without finishing"));
    assert_eq!(s["frames"].as_i64().unwrap(), frames);
    assert!(s["windows"].as_i64().unwrap() >= 1);
    // Issue 55 item 7: its duration is that of the frames it stored (it listed `0.0s`).
    let secs = s["duration_secs"].as_f64().unwrap();
    assert!(
        (secs - frames as f64 / 15.0).abs() < 0.2,
        "{secs} s for {frames} frames"
    );
    // Marked incomplete and announced for sync in one transaction: exactly one record,
    // saying incomplete.
    let conn = crate::common::store::open_db(&db);
    let announced: Vec<String> = conn
        .prepare("SELECT payload FROM outbox WHERE kind = 'session'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(announced.len(), 1);
    let record: serde_json::Value = serde_json::from_str(&announced[0]).unwrap();
    let session = &record["tables"]["sessions"];
    let status = session["columns"]
        .as_array()
        .unwrap()
        .iter()
        .position(|c| c == "status")
        .unwrap();
    assert_eq!(session["rows"][0][status], "incomplete");
}

#[test]
fn sigterm_stops_gracefully_and_flushes() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("t.db");
    let child = start_realtime(&db);
    wait_for_windows(&db, 1);
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    // Stopped before the end: not a success, but a clean, summarised stop.
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("incomplete"), "{}", stdout(&out));

    let conn = crate::common::store::open_db(&db);
    let (status, frames, windows): (String, i64, i64) = conn
        .query_row("SELECT status, frames, windows FROM sessions", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(status, "incomplete");
    // Everything computed was written: the counts on the session row match the rows.
    let stored_frames: i64 = conn
        .query_row("SELECT count(*) FROM frames", [], |r| r.get(0))
        .unwrap();
    let stored_windows: i64 = conn
        .query_row("SELECT count(*) FROM windows", [], |r| r.get(0))
        .unwrap();
    assert_eq!((frames, windows), (stored_frames, stored_windows));
    assert!(windows >= 1 && frames < 420, "{frames} {windows}");
}

/// Issue 55 item 13: an interrupted replay at full speed had read its audio far ahead of
/// its frames and stored that as the session: 104 s where 44 s of frames were stored, an
/// a/v mismatch of +59.7 s and a phase after the last frame. What is stored now is what
/// reached the store: the duration, the audio's figures and the phases end with the frames.
#[test]
fn an_interrupted_replay_stores_the_duration_of_what_it_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("t.db");
    // Without the participant's utterance events, so the station transcribes the audio
    // itself (and reads it ahead of the frames: a trial found words stored up to 434 s of
    // a session stored as 110 s).
    let session = copy_session(&demo_session(), &tmp.path().join("s"));
    let events = std::fs::read_to_string(session.join("events.jsonl")).unwrap();
    let kept: Vec<&str> = events
        .lines()
        .filter(|l| !(l.contains("\"utterance\"") && l.contains("\"participant\"")))
        .collect();
    std::fs::write(session.join("events.jsonl"), kept.join("\n") + "\n").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["replay", path_str(&session), "--db", path_str(&db)])
        .env("EMPATHIC_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_frames(&db, 30);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let conn = crate::common::store::open_db(&db);
    let (status, frames, duration_ns, quality): (String, i64, i64, String) = conn
        .query_row(
            "SELECT status, frames, duration_ns, quality_json FROM sessions",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(status, "incomplete");
    assert!(
        frames < 420,
        "the replay ended before the signal: {frames} frames"
    );
    let frames_secs = frames as f64 / 15.0;
    let duration = duration_ns as f64 / 1e9;
    assert!(
        (duration - frames_secs).abs() < 0.2,
        "stored {duration} s for {frames} frames ({frames_secs} s)"
    );
    let q: serde_json::Value = serde_json::from_str(&quality).unwrap();
    assert!(
        q["audio_duration_secs"].as_f64().unwrap() <= frames_secs + 0.1,
        "{quality}"
    );
    assert!(
        q["av_duration_mismatch_ms"].as_f64().unwrap().abs() < 200.0,
        "{quality}"
    );
    let phases: f64 = q["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["secs"].as_f64().unwrap())
        .sum();
    assert!(phases <= duration + 0.01, "{quality}");
    // The stored phases too: none starts or ends past the last stored frame (a trial found
    // a cool_down stored from 550 s to 205.8 s).
    let past: Vec<String> = crate::common::store::column(
        &conn,
        &format!(
            "SELECT phase || ' ' || start_ns || '..' || coalesce(end_ns, -1) FROM phases
             WHERE start_ns > {duration_ns} OR end_ns > {duration_ns} OR end_ns < start_ns"
        ),
    );
    assert!(past.is_empty(), "phases past {duration} s: {past:?}");
    let words_past: Vec<String> = crate::common::store::column(
        &conn,
        &format!("SELECT text FROM utterances WHERE source = 'asr' AND start_ns >= {duration_ns}"),
    );
    assert!(
        words_past.is_empty(),
        "words past {duration} s: {words_past:?}"
    );
    // The verdict never reads "good" for a session cut short (a trial found it did), and
    // `sessions show` marks the stories the recording showed after the stored part (it
    // listed one "shown at 17.0 s" of a session stored as 11.6 s, unmarked).
    let summary = stdout(&out);
    assert!(
        summary.contains("verdict   check") && summary.contains("the session is incomplete ("),
        "{summary}"
    );
    let id: String = conn
        .query_row("SELECT id FROM sessions", [], |r| r.get(0))
        .unwrap();
    let show = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["sessions", "show", &id, "--db", path_str(&db)])
        .output()
        .unwrap();
    let show = stdout(&show);
    assert!(
        show.contains("verdict      check: the session is incomplete ("),
        "{show}"
    );
    let stories: Vec<&str> = show.lines().filter(|l| l.starts_with("story ")).collect();
    assert!(!stories.is_empty(), "{show}");
    for line in stories {
        let shown: f64 = line
            .split(" shown at ")
            .nth(1)
            .and_then(|r| r.split(" s").next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert_eq!(
            shown > duration + 0.05,
            line.contains("(after the "),
            "{line} (stored {duration} s)"
        );
    }
}

/// A `--replace` replay stopped by a signal keeps the complete stored session, and its
/// summary says this run was not stored (a trial read "session stored incomplete" and
/// took the stored 8-minute session for cut short).
#[test]
fn an_interrupted_replace_says_the_stored_session_was_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("t.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let child = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args([
            "replay",
            path_str(&demo_session()),
            "--db",
            path_str(&db),
            "--config",
            path_str(&fast),
            "--replace",
            // Paced, so the signal lands mid-run (at full speed this config takes 1 s).
            "--speed",
            "realtime",
        ])
        .env("EMPATHIC_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The stored 420 and 30 of the staged run.
    wait_for_frames(&db, 420 + 30);
    assert!(Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        // The run finished before the signal landed: it replaced the session, nothing to say.
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("this run was not stored"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("this run was not stored"),
        "{}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("session stored incomplete"),
        "{}",
        stderr(&out)
    );
    let conn = crate::common::store::open_db(&db);
    let (status, frames): (String, i64) = conn
        .query_row("SELECT status, frames FROM sessions", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((status.as_str(), frames), ("complete", 420));
}

/// Waits (at most 60 s) until `db` holds at least `n` frame rows.
fn wait_for_frames(db: &std::path::Path, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let frames: i64 = crate::common::store::try_open_db(db)
            .ok()
            .and_then(|c| {
                c.query_row("SELECT count(*) FROM frames", [], |r| r.get(0))
                    .ok()
            })
            .unwrap_or(0);
        if frames >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {n} frames stored within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
