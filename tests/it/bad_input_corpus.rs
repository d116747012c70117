//! The bad-input corpus: small broken inputs made here (media, events, `session.json`,
//! configs), each replayed against a database that already holds a complete session.
//! Every case states its exit code, a fragment of its message and what it stores for its
//! own session; after every case the complete session must be unchanged, row for row
//! (digests of every table), and the database must pass SQLite's integrity and
//! foreign-key checks.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::store::{count, session_digests};
use crate::common::*;

/// The session every case's database holds complete before the case runs.
const BASE: &str = "demo-0001";

/// What a case does to its copy of the demo session, and how it is replayed.
struct Case {
    name: &'static str,
    /// Changes the copied session folder (its `session.json` already says `case`).
    mutate: fn(&Path),
    /// Config file text ([models] and [face] lines to skip the vision models are added).
    config: &'static str,
    /// Replays the folder with `--replace` and the base session's id.
    replace_base: bool,
    exit: i32,
    message: &'static str,
    /// Status stored for the case's session id afterwards (None: no row).
    stored: Option<&'static str>,
}

fn write_manifest(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("session.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn append_event(dir: &Path, line: &str) {
    let path = dir.join("events.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(line);
    text.push('\n');
    std::fs::write(&path, text).unwrap();
}

fn set(field: &'static str, value: serde_json::Value) -> impl FnOnce(&mut serde_json::Value) {
    move |v| v[field] = value
}

fn cases() -> Vec<Case> {
    let case = |name, mutate, exit, message, stored| Case {
        name,
        mutate,
        config: "",
        replace_base: false,
        exit,
        message,
        stored,
    };
    vec![
        case(
            "events.jsonl that is a FIFO (reading it would block for ever)",
            |d| {
                std::fs::remove_file(d.join("events.jsonl")).unwrap();
                assert!(std::process::Command::new("mkfifo")
                    .arg(d.join("events.jsonl"))
                    .status()
                    .unwrap()
                    .success());
            },
            2,
            "events.jsonl must be a regular file",
            Some("failed"),
        ),
        case(
            "a session.json of two MiB",
            |d| {
                let mut text = std::fs::read_to_string(d.join("session.json")).unwrap();
                text.push_str(&" ".repeat(2 << 20));
                std::fs::write(d.join("session.json"), text).unwrap();
            },
            2,
            "session.json must be a regular file of at most 1048576 bytes",
            Some("failed"),
        ),
        case(
            "a phase going back (live refuses it)",
            |d| {
                append_event(
                    d,
                    r#"{"t_ms": 27000, "type": "phase", "phase": "story_share"}"#,
                )
            },
            2,
            "phase out of order",
            Some("failed"),
        ),
        case(
            "a t_ms near 2^64",
            |d| {
                append_event(
                    d,
                    r#"{"t_ms": 18446744073709551000, "type": "note", "text": "x"}"#,
                )
            },
            2,
            "past any session's length",
            Some("failed"),
        ),
        case(
            "an utterance ending 9e18 ms in",
            |d| {
                append_event(
                    d,
                    r#"{"t_ms": 100, "type": "utterance", "speaker": "participant", "start_ms": 100, "end_ms": 9000000000000000000, "text": "x"}"#,
                )
            },
            2,
            "past any session's length",
            Some("failed"),
        ),
        case(
            "a well-formed WAV with no samples",
            |d| {
                let w = hound::WavWriter::create(
                    d.join("audio.wav"),
                    hound::WavSpec {
                        channels: 1,
                        sample_rate: 16_000,
                        bits_per_sample: 16,
                        sample_format: hound::SampleFormat::Int,
                    },
                )
                .unwrap();
                w.finalize().unwrap();
            },
            2,
            "holds no samples",
            Some("failed"),
        ),
        Case {
            replace_base: true,
            ..case(
                "replace with an empty video",
                |d| std::fs::write(d.join("video.avi"), b"").unwrap(),
                2,
                "video.avi",
                None,
            )
        },
        Case {
            replace_base: true,
            ..case(
                "replace with a rating before its story",
                |d| {
                    append_event(
                        d,
                        r#"{"t_ms": 10, "type": "story_shown", "story_id": "late", "title": "t", "text": "x"}"#,
                    );
                    append_event(
                        d,
                        r#"{"t_ms": 5, "type": "rating", "story_id": "late", "value": 3}"#,
                    );
                },
                2,
                "before the story was shown",
                None,
            )
        },
        case(
            "a rating before its story was shown",
            |d| {
                append_event(
                    d,
                    r#"{"t_ms": 9000, "type": "story_shown", "story_id": "late", "title": "t", "text": "x"}"#,
                );
                append_event(
                    d,
                    r#"{"t_ms": 8000, "type": "rating", "story_id": "late", "value": 3}"#,
                );
            },
            2,
            "line 22",
            Some("failed"),
        ),
        case(
            "a survey without a participant",
            |d| {
                write_manifest(d, |v| {
                    v.as_object_mut().unwrap().remove("participant_id");
                })
            },
            2,
            "participant_id",
            Some("failed"),
        ),
        Case {
            config: "[windows]\nlength_frames = 4000000000\n",
            ..case(
                "a window of four billion frames",
                |_| {},
                2,
                "windows.length_frames",
                None,
            )
        },
        Case {
            config: "[runtime]\nvideo_queue_frames = 100000000\n",
            ..case(
                "a video queue of a hundred million frames",
                |_| {},
                2,
                "runtime.video_queue_frames",
                None,
            )
        },
        Case {
            config: "[models]\nonnxruntime_library = \"/nonexistent/libonnxruntime.so.1\"\n",
            ..case(
                "a missing ONNX Runtime library",
                |_| {},
                2,
                "models.onnxruntime_library",
                None,
            )
        },
        case(
            "a focal length of 1e-300",
            |d| {
                write_manifest(
                    d,
                    set(
                        "camera",
                        serde_json::json!({"fx": 1e-300, "fy": 1e-300, "cx": 320.0, "cy": 240.0}),
                    ),
                )
            },
            2,
            "fx must be",
            Some("failed"),
        ),
        case(
            "a principal point at 1e308",
            |d| {
                write_manifest(
                    d,
                    set(
                        "camera",
                        serde_json::json!({"fx": 500.0, "fy": 500.0, "cx": 1e308, "cy": 240.0}),
                    ),
                )
            },
            2,
            "cx must be",
            Some("failed"),
        ),
        case(
            "a principal point outside the image",
            |d| {
                write_manifest(
                    d,
                    set(
                        "camera",
                        serde_json::json!({"fx": 500.0, "fy": 500.0, "cx": 5000.0, "cy": 240.0}),
                    ),
                )
            },
            2,
            "outside the 640x480 image",
            Some("failed"),
        ),
        case(
            "the smallest audio offset",
            |d| write_manifest(d, set("audio_offset_ms", serde_json::json!(i64::MIN))),
            2,
            "audio_offset_ms",
            Some("failed"),
        ),
        case(
            "the largest audio offset",
            |d| write_manifest(d, set("audio_offset_ms", serde_json::json!(i64::MAX))),
            2,
            "audio_offset_ms",
            Some("failed"),
        ),
        case(
            "an audio offset that skips all the audio",
            |d| write_manifest(d, set("audio_offset_ms", serde_json::json!(-40_000))),
            2,
            "skips all",
            Some("failed"),
        ),
        case(
            "invalid UTF-8 in the events",
            |d| {
                let path = d.join("events.jsonl");
                let mut bytes = std::fs::read(&path).unwrap();
                let second = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
                bytes.insert(second + 3, 0xff);
                std::fs::write(&path, bytes).unwrap();
            },
            2,
            "line 2",
            Some("failed"),
        ),
        case(
            "an impossible start date (30 February)",
            |d| {
                write_manifest(
                    d,
                    set("start_time", serde_json::json!("2026-02-30T10:00:00Z")),
                )
            },
            2,
            "2026-02 has no day 30",
            Some("failed"),
        ),
        case(
            "a start time at hour 25",
            |d| {
                write_manifest(
                    d,
                    set("start_time", serde_json::json!("2026-11-01T25:00:00+01:00")),
                )
            },
            2,
            "is not a time of day",
            Some("failed"),
        ),
        case(
            "an unknown session.json field",
            |d| write_manifest(d, set("colour", serde_json::json!("blue"))),
            2,
            "session.json",
            Some("failed"),
        ),
        // Not a valid id: the failure is stored under the folder's name.
        case(
            "a session id with a slash",
            |d| write_manifest(d, set("session_id", serde_json::json!("a/b"))),
            2,
            "session_id",
            Some("failed"),
        ),
        case(
            "random bytes as video",
            |d| {
                let bytes: Vec<u8> = (0..50_000u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect();
                std::fs::write(d.join("video.avi"), bytes).unwrap();
            },
            2,
            "video.avi",
            Some("failed"),
        ),
        case(
            "a WAV header with no samples",
            |d| {
                let path = d.join("audio.wav");
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..44]).unwrap();
            },
            2,
            "audio.wav",
            Some("failed"),
        ),
    ]
}

/// A database holding the demo session complete, and its digests.
fn base_db(dir: &Path) -> (PathBuf, Vec<(String, String)>) {
    let db = dir.join("base.db");
    let fast = config_without_vision_models(dir);
    let o = replay_cli(&demo_session(), &db, Some(&fast));
    assert!(o.status.success(), "{}", stderr(&o));
    let conn = crate::common::store::open_db(&db);
    (db.clone(), session_digests(&conn, BASE))
}

fn assert_base_unchanged(db: &Path, before: &[(String, String)], case: &str) {
    let conn = crate::common::store::open_db(db);
    assert_eq!(
        session_digests(&conn, BASE),
        before,
        "{case}: the stored complete session changed"
    );
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok", "{case}");
    let broken = count(&conn, "SELECT count(*) FROM pragma_foreign_key_check");
    assert_eq!(broken, 0, "{case}: foreign keys broken");
}

fn stored_status(db: &Path, id: &str) -> Option<(String, String)> {
    let conn = crate::common::store::open_db(db);
    conn.query_row(
        "SELECT status, COALESCE(status_reason, '') FROM sessions WHERE id = ?1",
        [id],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .ok()
}

fn replay_case(dir: &Path, db: &Path, config: &Path, replace: bool) -> Output {
    let mut args = vec![
        "replay",
        path_str(dir),
        "--db",
        path_str(db),
        "--config",
        path_str(config),
    ];
    if replace {
        args.push("--replace");
    }
    empathic(&args)
}

#[test]
fn every_bad_input_is_refused_and_nothing_stored_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, before) = base_db(tmp.path());
    for (i, c) in cases().into_iter().enumerate() {
        let dir = copy_session(&demo_session(), &tmp.path().join(format!("case{i}")));
        let id = if c.replace_base {
            BASE.to_string()
        } else {
            let id = format!("case-{i}");
            write_manifest(&dir, set("session_id", serde_json::json!(id)));
            id
        };
        (c.mutate)(&dir);
        let config = tmp.path().join(format!("case{i}.toml"));
        // The vision models are skipped unless the case's config has its own sections.
        let mut text = String::from(c.config);
        if !text.contains("[models]") {
            text.push_str("\n[models]\nappearance_encoder = \"\"\n");
        } else {
            text.push_str("appearance_encoder = \"\"\n");
        }
        text.push_str("\n[face]\nenabled = false\n\n[body]\nenabled = false\n");
        std::fs::write(&config, text).unwrap();
        let sessions_before = count(
            &crate::common::store::open_db(&db),
            "SELECT count(*) FROM sessions",
        );

        let o = replay_case(&dir, &db, &config, c.replace_base);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(c.exit), "{}: {err}", c.name);
        assert!(
            err.contains(c.message),
            "{}: expected `{}` in: {err}",
            c.name,
            c.message
        );
        assert_base_unchanged(&db, &before, c.name);
        // The session id a failure is stored under: the file's when valid, else the
        // folder's name (a case may have changed it).
        let case_id = RecordedId::of(&dir)
            .unwrap_or_else(|| dir.file_name().unwrap().to_string_lossy().into_owned());
        let _ = id;
        match c.stored {
            Some(status) => {
                let (got, reason) = stored_status(&db, &case_id)
                    .unwrap_or_else(|| panic!("{}: no session row for {case_id}", c.name));
                assert_eq!(got, status, "{}", c.name);
                assert!(reason.contains(c.message), "{}: reason `{reason}`", c.name);
            }
            None if !c.replace_base => {
                let after = count(
                    &crate::common::store::open_db(&db),
                    "SELECT count(*) FROM sessions",
                );
                assert_eq!(
                    after, sessions_before,
                    "{}: a session row was written",
                    c.name
                );
            }
            None => {}
        }
    }
}

/// The session id a case's folder declares (None when `session.json` does not parse).
struct RecordedId;

impl RecordedId {
    fn of(dir: &Path) -> Option<String> {
        let text = std::fs::read_to_string(dir.join("session.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let id = v.get("session_id")?.as_str()?;
        let valid = empathic::session::manifest::check_id("session_id", id).is_ok();
        valid.then(|| id.to_string())
    }
}

#[test]
fn a_mistyped_folder_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, before) = base_db(tmp.path());
    for target in [
        tmp.path().join("no-such-folder"),
        demo_session().join("video.avi"),
    ] {
        let o = replay_cli(&target, &db, None);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let n = count(
            &crate::common::store::open_db(&db),
            "SELECT count(*) FROM sessions",
        );
        assert_eq!(n, 1, "{}: a session row was written", target.display());
    }
    assert_base_unchanged(&db, &before, "mistyped folder");
}

#[test]
fn a_successful_replace_stores_what_a_fresh_replay_stores() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, before) = base_db(tmp.path());
    let fast = config_without_vision_models(tmp.path());
    let o = replay_cli_with(&demo_session(), &db, Some(&fast), &["--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_base_unchanged(&db, &before, "replace");
    let conn = crate::common::store::open_db(&db);
    // No staged copy is left behind, and the survey response belongs to the session.
    assert_eq!(count(&conn, "SELECT count(*) FROM sessions"), 1);
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM survey_responses WHERE session_id = 'demo-0001'"
        ),
        1
    );
}

#[test]
fn a_full_database_ends_the_session_incomplete_keeping_what_it_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("small.db");
    let config =
        config_without_vision_models_and(tmp.path(), "small.toml", "\n[store]\nmax_db_mib = 2\n");
    let o = replay_cli(&demo_session(), &db, Some(&config));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("full"), "{}", stderr(&o));
    // The store failing is not the session failing: what it committed before is good
    // (issue 56), kept `incomplete` with the reason, its counts those of its rows.
    let (status, reason) = stored_status(&db, BASE).expect("a session row");
    assert_eq!(status, "incomplete", "{reason}");
    assert!(
        reason.contains("database or disk is full") && reason.contains("kept"),
        "{reason}"
    );
    let conn = crate::common::store::open_db(&db);
    let stored = count(&conn, "SELECT count(*) FROM frames");
    assert!(stored > 0);
    assert_eq!(count(&conn, "SELECT frames FROM sessions"), stored);
    assert_eq!(
        count(&conn, "SELECT count(*) FROM phases WHERE end_ns IS NULL OR end_ns > (SELECT duration_ns FROM sessions)"),
        0,
        "phases end where the stored frames do"
    );
}

#[test]
fn a_lock_held_elsewhere_is_waited_for_up_to_the_busy_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, before) = base_db(tmp.path());
    let hold = |secs: f64| {
        let db = db.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let t = std::thread::Builder::new()
            .name("lock-holder".into())
            .spawn(move || {
                let conn = crate::common::store::open_db(&db);
                conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
                ready_tx.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_secs_f64(secs));
                conn.execute_batch("COMMIT").unwrap();
            })
            .unwrap();
        ready_rx.recv().unwrap();
        t
    };
    let config = |name: &str, busy_ms: u64| {
        config_without_vision_models_and(
            tmp.path(),
            name,
            &format!("\n[store]\nbusy_timeout_ms = {busy_ms}\n"),
        )
    };
    // Held 1 s, waited for up to 20 s: the replacement goes through.
    let patient = config("patient.toml", 20_000);
    let holder = hold(1.0);
    let o = replay_cli_with(&demo_session(), &db, Some(&patient), &["--replace"]);
    holder.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_base_unchanged(&db, &before, "patient replace");

    // Held 4 s, waited for 200 ms: a runtime error that says why; nothing changes.
    let hasty = config("hasty.toml", 200);
    let holder = hold(4.0);
    let o = replay_cli_with(&demo_session(), &db, Some(&hasty), &["--replace"]);
    holder.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("busy_timeout_ms"), "{}", stderr(&o));
    assert_base_unchanged(&db, &before, "hasty replace");
}

#[test]
fn extract_outputs_never_replace_links_and_bad_intrinsics_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target.csv");
    std::fs::write(&target, "keep me\n").unwrap();
    let link = tmp.path().join("link.csv");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let wav = demo_session().join("audio.wav");
    let o = empathic(&["extract", "audio", path_str(&wav), "--out", path_str(&link)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");

    let video = demo_session().join("video.avi");
    let out = tmp.path().join("face.csv");
    for (flag, value, needle) in [
        ("--fx", "0", "fx must be"),
        ("--fx", "-5", "fx must be"),
        ("--fy", "NaN", "fy must be"),
        ("--fx", "inf", "fx must be"),
        ("--cx", "5000", "outside the 640x480 image"),
    ] {
        let arg = format!("{flag}={value}");
        let o = empathic(&[
            "extract",
            "face",
            path_str(&video),
            "--out",
            path_str(&out),
            &arg,
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(needle),
            "{flag} {value}: {}",
            stderr(&o)
        );
        assert!(!out.exists());
    }
}

/// Every command that writes a file the user named (`report`, `study report`, `replay
/// --emit`, `extract audio`, `collect --study-page`) refuses a device, a FIFO, a symbolic
/// link and a name in a missing folder with exit 2 naming it, before any work, and leaves
/// what is there as it was (issue 43: `report --out /dev/full` once replaced the device node
/// with a regular file). A FIFO stands for the device: the test must not touch `/dev`.
#[test]
fn every_command_that_writes_a_file_refuses_devices_links_and_missing_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _) = base_db(tmp.path());
    let target = tmp.path().join("kept.html");
    std::fs::write(&target, "keep me\n").unwrap();
    let link = tmp.path().join("link.html");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let fifo = tmp.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let missing = tmp.path().join("no-such-folder/out.html");
    let central = tmp.path().join("central.db");
    let wav = demo_session().join("audio.wav");
    type Args<'a> = Box<dyn Fn(&Path) -> Vec<String> + 'a>;
    let commands: Vec<(&str, Args)> = vec![
        (
            "report",
            Box::new(|out: &Path| {
                [
                    "report",
                    BASE,
                    "--db",
                    path_str(&db),
                    "--out",
                    path_str(out),
                ]
                .map(String::from)
                .to_vec()
            }),
        ),
        (
            "study report",
            Box::new(|out: &Path| {
                [
                    "study",
                    "report",
                    "--central",
                    path_str(&central),
                    "--out",
                    path_str(out),
                ]
                .map(String::from)
                .to_vec()
            }),
        ),
        (
            "replay --emit",
            Box::new(|out: &Path| {
                let dbs = tmp.path().join("emit.db");
                [
                    "replay",
                    path_str(&demo_session()),
                    "--db",
                    path_str(&dbs),
                    "--emit",
                    path_str(out),
                ]
                .map(String::from)
                .to_vec()
            }),
        ),
        (
            "extract audio",
            Box::new(|out: &Path| {
                ["extract", "audio", path_str(&wav), "--out", path_str(out)]
                    .map(String::from)
                    .to_vec()
            }),
        ),
        (
            "collect --study-page",
            Box::new(|out: &Path| {
                [
                    "collect",
                    "--security",
                    "plain",
                    "--db",
                    path_str(&central),
                    "--study-page",
                    path_str(out),
                ]
                .map(String::from)
                .to_vec()
            }),
        ),
    ];
    for (name, args) in &commands {
        for (out, needle) in [
            (&link, "symbolic link"),
            (&fifo, "not a regular file"),
            (&missing, "no folder"),
            (&tmp.path().to_path_buf(), "folder"),
        ] {
            let args = args(out);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let o = empathic(&args);
            assert_eq!(
                o.status.code(),
                Some(2),
                "{name} {}: {}",
                out.display(),
                stderr(&o)
            );
            assert!(
                stderr(&o).contains(needle) && stderr(&o).contains(path_str(out)),
                "{name} {}: {}",
                out.display(),
                stderr(&o)
            );
        }
        let ft = |p: &Path| std::fs::symlink_metadata(p).unwrap().file_type();
        assert!(ft(&link).is_symlink(), "{name}");
        assert!(
            std::os::unix::fs::FileTypeExt::is_fifo(&ft(&fifo)),
            "{name}"
        );
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "keep me\n",
            "{name}"
        );
        assert!(!missing.parent().unwrap().exists(), "{name}");
        assert!(!central.exists(), "{name}: the collector started");
        assert!(
            !tmp.path().join("emit.db").exists(),
            "{name}: the replay ran"
        );
    }
    // A regular file is replaced whole, as before.
    let o = empathic(&[
        "report",
        BASE,
        "--db",
        path_str(&db),
        "--out",
        path_str(&target),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&target).unwrap().contains("<html"));
}

/// Issue 43: a WAV declaring 1 Hz resampled for minutes (1.2 GB for 20 kB), and `extract
/// audio` panicked at 1 to 2,000 Hz. Every reader of a WAV refuses a rate the extractors
/// cannot use, at once, naming the file and the rate; the stored session stays.
#[test]
fn audio_at_a_rate_the_extractors_cannot_use_is_refused_by_every_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, before) = base_db(tmp.path());
    for rate in [1u32, 100, 2_000, 7_999, 400_000] {
        let wav = tmp.path().join(format!("at-{rate}.wav"));
        let mut w = hound::WavWriter::create(
            &wav,
            hound::WavSpec {
                channels: 1,
                sample_rate: rate,
                bits_per_sample: 16,
                sample_format: hound::SampleFormat::Int,
            },
        )
        .unwrap();
        for i in 0..10_000 {
            w.write_sample((i % 100) as i16).unwrap();
        }
        w.finalize().unwrap();
        let out = tmp.path().join("rows.csv");
        let o = empathic(&["extract", "audio", path_str(&wav), "--out", path_str(&out)]);
        assert_eq!(o.status.code(), Some(2), "{rate} Hz: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("sampled at {rate} Hz"))
                && stderr(&o).contains(path_str(&wav)),
            "{rate} Hz: {}",
            stderr(&o)
        );
        assert!(!out.exists());
        // A session folder with it: transcribe and replay refuse it too.
        let session = tmp.path().join(format!("session-{rate}"));
        copy_session(&demo_session(), &session);
        std::fs::copy(&wav, session.join("audio.wav")).unwrap();
        let o = empathic(&["transcribe", path_str(&session)]);
        assert_eq!(o.status.code(), Some(2), "{rate} Hz: {}", stderr(&o));
        assert!(stderr(&o).contains("sampled at"), "{}", stderr(&o));
        write_manifest(&session, set("session_id", format!("rate-{rate}").into()));
        let fast = config_without_vision_models(tmp.path());
        let o = replay_case(&session, &db, &fast, false);
        assert_eq!(o.status.code(), Some(2), "{rate} Hz: {}", stderr(&o));
        assert!(stderr(&o).contains("sampled at"), "{}", stderr(&o));
        assert_base_unchanged(&db, &before, &format!("audio at {rate} Hz"));
    }
}

/// Issue 43: `..` as a session id made `export windows` write into the parent of `--out`.
/// A stored id that breaks the id rule (a database from before the rule, edited by hand)
/// is refused before anything is written; nothing lands beside `--out`.
#[test]
fn export_refuses_a_stored_session_id_that_would_leave_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let (db, _) = base_db(tmp.path());
    let conn = crate::common::store::open_db(&db);
    conn.execute_batch(&format!(
        "PRAGMA foreign_keys = OFF;
         UPDATE sessions SET id = '..' WHERE id = '{BASE}';
         UPDATE windows SET session_id = '..' WHERE session_id = '{BASE}';
         UPDATE frames SET session_id = '..' WHERE session_id = '{BASE}';"
    ))
    .unwrap();
    drop(conn);
    let parent = tmp.path().join("exports");
    std::fs::create_dir_all(&parent).unwrap();
    let out = parent.join("out");
    let o = empathic(&[
        "export",
        "windows",
        "--db",
        path_str(&db),
        "--out",
        path_str(&out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("only dots"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0);
}

/// Issue 44: a session that captured nothing was stored `complete` and counted toward the
/// participant's plan. Under 1 s of video and of audio, it is `incomplete`, saying why.
#[test]
fn a_session_that_captured_under_a_second_is_not_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let short = copy_session(&demo_session(), &tmp.path().join("short"));
    let cut = |args: &[&str]| {
        assert!(std::process::Command::new("ffmpeg")
            .args(["-loglevel", "error", "-y"])
            .args(args)
            .status()
            .unwrap()
            .success());
    };
    let video = demo_session().join("video.avi");
    let audio = demo_session().join("audio.wav");
    cut(&[
        "-i",
        path_str(&video),
        "-frames:v",
        "7",
        "-c",
        "copy",
        path_str(&short.join("video.avi")),
    ]);
    cut(&[
        "-i",
        path_str(&audio),
        "-t",
        "0.5",
        path_str(&short.join("audio.wav")),
    ]);
    let events = std::fs::read_to_string(short.join("events.jsonl")).unwrap();
    let early: String = events
        .lines()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["t_ms"].as_u64() < Some(400)
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(short.join("events.jsonl"), early).unwrap();
    write_manifest(&short, set("session_id", "short-1".into()));
    let db = tmp.path().join("s.db");
    let fast = config_without_vision_models(tmp.path());
    let o = replay_case(&short, &db, &fast, false);
    // Not complete: the replay says so in its exit code, as for any session not complete.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (status, reason) = stored_status(&db, "short-1").unwrap();
    assert_eq!(status, "incomplete");
    assert!(reason.contains("under the 1 s"), "{reason}");
}
