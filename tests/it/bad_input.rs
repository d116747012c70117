//! Bad input: a clear error naming the file, exit code 2, and a session row that says
//! failed and why, with nothing half-written.

use std::path::Path;

use crate::common::*;

/// (status, reason, frames rows, windows rows) of a session in `db`.
fn stored(db: &Path, id: &str) -> (String, String, i64, i64) {
    let conn = crate::common::store::open_db(db);
    let (status, reason): (String, Option<String>) = conn
        .query_row(
            "SELECT status, status_reason FROM sessions WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let count = |t: &str| -> i64 {
        conn.query_row(
            &format!("SELECT count(*) FROM {t} WHERE session_id = ?1"),
            [id],
            |r| r.get(0),
        )
        .unwrap()
    };
    (
        status,
        reason.unwrap_or_default(),
        count("frames"),
        count("windows"),
    )
}

/// Replays `dir` into `db`, expecting exit code 2 and `needle` in the message.
fn expect_bad(dir: &Path, db: &Path, needle: &str) -> String {
    let out = empathic(&["replay", path_str(dir), "--db", path_str(db)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
    err
}

#[test]
fn missing_video_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    std::fs::remove_file(dir.join("video.avi")).unwrap();
    let db = tmp.path().join("x.db");
    expect_bad(&dir, &db, "video.avi");
    let (status, reason, ..) = stored(&db, "demo-0001");
    assert_eq!(status, "failed");
    assert!(reason.contains("video.avi"), "{reason}");
}

/// Issue 55 item 14: a video cut short (a crash, a full disk) kept nothing of the 210
/// frames that decoded. What decoded is stored, `incomplete` with the error, exit 2; the
/// stored duration, phases and a/v figures are those of the frames stored.
#[test]
fn a_truncated_video_keeps_every_frame_that_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    // Cut the file in the middle of its frames: the header still declares 420.
    let bytes = std::fs::read(dir.join("video.avi")).unwrap();
    std::fs::write(dir.join("video.avi"), &bytes[..bytes.len() / 2]).unwrap();
    let db = tmp.path().join("x.db");
    let err = expect_bad(&dir, &db, "video.avi");
    assert!(err.contains("corrupt video"), "{err}");
    let (status, reason, frames, windows) = stored(&db, "demo-0001");
    assert_eq!(status, "incomplete");
    assert!(
        reason.contains("decoding stopped") && reason.contains("everything before it is stored"),
        "{reason}"
    );
    assert!((150..420).contains(&frames), "{frames} frames of 420");
    assert!(windows > 0, "no window from {frames} frames");
    // What the video kept is said in the video's seconds, beside the session's span (a
    // trial read "(253 frames, 28.0 s)" of a video cut at 16.9 s).
    assert!(
        reason.contains(&format!("({frames} frames, "))
            && reason.contains(" s of video; the session spans "),
        "{reason}"
    );
    let conn = crate::common::store::open_db(&db);
    let (duration_ns, quality): (i64, String) = conn
        .query_row(
            "SELECT duration_ns, quality_json FROM sessions WHERE id = 'demo-0001'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let q: serde_json::Value = serde_json::from_str(&quality).unwrap();
    let stored_secs = frames as f64 / 15.0;
    assert!(
        (q["video_duration_secs"].as_f64().unwrap() - stored_secs).abs() < 0.1,
        "{quality}"
    );
    // The audio went on: the session lasted as long, and says its end had no frames.
    assert!(duration_ns as f64 / 1e9 > stored_secs);
    assert!(reason.contains("the video ended"), "{reason}");
    for p in q["phases"].as_array().unwrap() {
        assert!(p["secs"].as_f64().unwrap() >= 0.0, "{quality}");
    }
    // The events are kept: they were read whole before any media.
    let events: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE session_id = 'demo-0001'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(events, 20);
    // The verdict sees that half the session has no video (it once said `good`).
    let o = empathic(&["sessions", "show", "demo-0001", "--db", path_str(&db)]);
    let show = stdout(&o);
    assert!(
        show.contains("verdict      bad") && show.contains("audio-video coverage"),
        "{show}"
    );
    // Issue 55 item 12: the report draws every per-frame series at its frames' stored
    // times, not stretched over the session's (longer, audio) duration.
    let page = tmp.path().join("page.html");
    let o = report_cli("demo-0001", &db, &page);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    let last_frame_secs = (frames - 1) as f64 / 15.0;
    for series in ["pitch (Rx)", "face found", "voicing probability"] {
        let (first, last) = drawn_span(&html, series);
        assert!(
            first < 1.0 && (last - last_frame_secs).abs() < 0.07,
            "{series}: drawn {first}-{last} s, stored frames end at {last_frame_secs:.2} s of {:.1} s",
            duration_ns as f64 / 1e9
        );
    }
}

/// The session time span a report plot says series `label` was measured over (its
/// `<desc>`), as (first, last) seconds.
fn drawn_span(html: &str, label: &str) -> (f64, f64) {
    let key = format!("{label}: measured from ");
    let at = html
        .find(&key)
        .unwrap_or_else(|| panic!("no plot describes `{label}`"));
    let rest = &html[at + key.len()..];
    let mut numbers = rest
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<f64>().unwrap());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn garbage_video_is_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    std::fs::write(dir.join("video.avi"), vec![7u8; 50_000]).unwrap();
    let db = tmp.path().join("x.db");
    expect_bad(&dir, &db, "video.avi");
    assert_eq!(stored(&db, "demo-0001").0, "failed");
}

#[test]
fn truncated_wav_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    let bytes = std::fs::read(dir.join("audio.wav")).unwrap();
    std::fs::write(dir.join("audio.wav"), &bytes[..bytes.len() * 2 / 3]).unwrap();
    let db = tmp.path().join("x.db");
    let err = expect_bad(&dir, &db, "audio.wav");
    assert!(err.contains("truncated"), "{err}");
    let (status, reason, frames, windows) = stored(&db, "demo-0001");
    assert_eq!(status, "failed");
    assert!(reason.contains("truncated"), "{reason}");
    assert_eq!((frames, windows), (0, 0));
}

#[test]
fn malformed_event_line_names_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    let text = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[6] = r#"{"t_ms": 100, "type": "rating", "story_id": "x""#;
    std::fs::write(dir.join("events.jsonl"), lines.join("\n")).unwrap();
    let db = tmp.path().join("x.db");
    let err = expect_bad(&dir, &db, "events.jsonl");
    assert!(err.contains("line 7"), "{err}");
    assert!(err.contains("--skip-bad-events"), "{err}");
    // session.json is fine: the failed row carries the session's own id, and (issue 55
    // item 14) its participant and source folder, as `sessions list` and `show` name them.
    let (status, reason, ..) = stored(&db, "demo-0001");
    assert_eq!(status, "failed");
    assert!(reason.contains("line 7"), "{reason}");
    let conn = crate::common::store::open_db(&db);
    let (participant, source): (Option<String>, Option<String>) = conn
        .query_row(
            "SELECT participant_id, source_path FROM sessions WHERE id = 'demo-0001'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(participant.as_deref(), Some("P-DEMO"));
    assert!(source.is_some_and(|s| s.ends_with("/s")));
    drop(conn);
    // Asked to, the replay leaves the bad line out, keeps the session, and says so.
    let o = replay_cli_with(&dir, &db, None, &["--skip-bad-events", "--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (status, reason, frames, _) = stored(&db, "demo-0001");
    assert_eq!(status, "complete");
    assert_eq!(frames, 420);
    assert!(
        reason.contains("line 7") && reason.contains("--skip-bad-events"),
        "{reason}"
    );
    let conn = crate::common::store::open_db(&db);
    let quality: String = conn
        .query_row(
            "SELECT quality_json FROM sessions WHERE id = 'demo-0001'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let q: serde_json::Value = serde_json::from_str(&quality).unwrap();
    assert_eq!(q["skipped_events"][0]["line"], 7, "{quality}");
    let events: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE session_id = 'demo-0001'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(events, 19);
}

#[test]
fn unknown_format_version_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_session(&demo_session(), &tmp.path().join("s"));
    std::fs::write(
        dir.join("session.json"),
        r#"{"format_version": 3, "session_id": "v3"}"#,
    )
    .unwrap();
    let db = tmp.path().join("x.db");
    let err = expect_bad(&dir, &db, "format version 3");
    assert!(err.contains("session.json"), "{err}");
    assert_eq!(stored(&db, "s").0, "failed");
}

#[test]
fn invalid_config_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("bad.toml");
    std::fs::write(&config, "[windows]\nlength_frames = 120\nhop_frames = 0\n").unwrap();
    let db = tmp.path().join("x.db");
    let out = replay_cli(&demo_session(), &db, Some(&config));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("windows.hop_frames") && err.contains("bad.toml"),
        "{err}"
    );
    assert!(!db.exists(), "nothing may be written for a bad config");
}

#[test]
fn missing_session_folder_and_bad_speed_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("x.db");
    let out = empathic(&["replay", "/nonexistent/session", "--db", path_str(&db)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no session folder at /nonexistent/session"));
    // A mistyped folder leaves no database behind.
    assert!(
        !db.exists(),
        "a database was created for a folder that is not there"
    );
    let out = empathic(&["replay", path_str(&demo_session()), "--speed", "warp"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("warp"));
}

#[test]
fn replaying_a_stored_session_needs_replace() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("x.db");
    let demo = demo_session();
    let fast = config_without_vision_models(tmp.path());
    let fast = path_str(&fast);
    let first = empathic(&[
        "replay",
        path_str(&demo),
        "--db",
        path_str(&db),
        "--config",
        fast,
    ]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).contains("windows   21"),
        "{}",
        stdout(&first)
    );
    let again = empathic(&[
        "replay",
        path_str(&demo),
        "--db",
        path_str(&db),
        "--config",
        fast,
    ]);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("--replace"), "{}", stderr(&again));
    // The stored session is untouched by the refused run.
    assert_eq!(stored(&db, "demo-0001").0, "complete");
    let replaced = replay_cli_with(&demo, &db, None, &["--replace"]);
    assert!(replaced.status.success(), "{}", stderr(&replaced));
    let (status, _, frames, windows) = stored(&db, "demo-0001");
    assert_eq!((status.as_str(), frames, windows), ("complete", 420, 21));

    let show = empathic(&["sessions", "show", "nope", "--db", path_str(&db)]);
    assert_eq!(show.status.code(), Some(2));
    assert!(stderr(&show).contains("nope"));
    let show = empathic(&[
        "sessions",
        "show",
        "demo-0001",
        "--db",
        path_str(&db),
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(v["id"], "demo-0001");
    assert_eq!(v["stories"].as_array().unwrap().len(), 3);
}

#[test]
fn missing_sentence_model_fails_the_session_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tmp.path().join("models");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(
        root().join("models/MODELS.toml"),
        models.join("MODELS.toml"),
    )
    .unwrap();
    let config = tmp.path().join("c.toml");
    std::fs::write(
        &config,
        format!("[models]\ndir = \"{}\"\n", models.display()),
    )
    .unwrap();
    let db = tmp.path().join("x.db");
    let out = replay_cli(&demo_session(), &db, Some(&config));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("all-MiniLM-L6-v2"), "{err}");
    let (status, reason, ..) = stored(&db, "demo-0001");
    assert_eq!(status, "failed");
    assert!(reason.contains("missing"), "{reason}");
}

/// `collect --study-page` into a folder that is not there, and a collector config whose
/// `[collect]` or `[study]` bounds are wrong: refused at once, naming what and where,
/// before anything connects or is created.
#[test]
fn the_collectors_study_page_and_alert_settings_are_checked_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let central = dir.path().join("central.db");
    let o = empathic(&[
        "collect",
        "--security",
        "plain",
        "--db",
        path_str(&central),
        "--study-page",
        "/nonexistent-folder/study.html",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--study-page: refusing to write /nonexistent-folder/study.html: no folder /nonexistent-folder"),
        "{}",
        stderr(&o)
    );
    assert!(!central.exists());
    for (text, field) in [
        (
            "[collect]\nalert_interval_min = 0\n",
            "collect.alert_interval_min",
        ),
        (
            "[study]\nbad_sessions_in_a_row = 0\n",
            "study.bad_sessions_in_a_row",
        ),
        ("[collect]\non_problems = \"x\"\n", "on_problems"),
    ] {
        let config = dir.path().join("collect.toml");
        std::fs::write(&config, text).unwrap();
        let o = empathic(&[
            "collect",
            "--security",
            "plain",
            "--db",
            path_str(&central),
            "--config",
            path_str(&config),
        ]);
        assert_eq!(o.status.code(), Some(2), "{text}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(field) && stderr(&o).contains("collect.toml"),
            "{text}: {}",
            stderr(&o)
        );
        assert!(!central.exists());
    }
}

/// Issue 44: `participant consent P` without `--given` recorded "consent withdrawn", exit 0.
/// Consent is said explicitly: neither flag, or both, is refused and nothing is written.
#[test]
fn consent_must_be_said_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("station.db");
    for args in [
        vec!["participant", "consent", "P01"],
        vec!["participant", "consent", "P01", "--given", "--withdrawn"],
        vec![
            "participant",
            "consent",
            "P01",
            "--withdrawn",
            "--raw-media",
        ],
    ] {
        let mut args = args.clone();
        args.extend(["--db", path_str(&db)]);
        let o = empathic(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!db.exists(), "{args:?} wrote the store");
    }
    let o = empathic(&[
        "participant",
        "consent",
        "P01",
        "--withdrawn",
        "--db",
        path_str(&db),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("consent withdrawn"), "{}", stdout(&o));
}

/// Issue 44: `run` started with an unparsable broker URL and its sync thread died. The
/// config refuses it (every command, `run` first), exit 2, naming the setting and the file.
#[test]
fn the_service_refuses_a_broker_address_it_cannot_parse() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("station.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\ndb_path = \"{}\"\n[live]\nsocket = \"{}\"\n[sync]\nbroker = \"mqtt//broker.example:1883\"\n",
            dir.path().join("s.db").display(),
            dir.path().join("c.sock").display()
        ),
    )
    .unwrap();
    let o = empathic(&["run", "--config", path_str(&config)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("`sync.broker` broker address `mqtt//broker.example:1883`")
            && stderr(&o).contains(path_str(&config)),
        "{}",
        stderr(&o)
    );
    assert!(!dir.path().join("c.sock").exists());
    // `doctor` says the same before anyone starts the service.
    let o = empathic(&["doctor", "--config", path_str(&config)]);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert!(
        said.lines().any(|l| l.starts_with("MISSING config")
            && l.contains("`sync.broker` broker address `mqtt//broker.example:1883`")),
        "{said}"
    );
    assert_eq!(o.status.code(), Some(1), "{said}");
}
