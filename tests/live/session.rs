//! A live session end to end: stored, recorded and replayed the same; ids and starts
//! checked; a withdrawal mid-session; SIGTERM and SIGKILL; a nearly full disk; retention;
//! a stage failing; a realistic session through the reference app.

use crate::common::live::*;
use crate::common::store::{count, table_lines};
use crate::common::*;
use rusqlite::Connection;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn scripted_session_is_stored_recorded_and_its_replay_matches() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-LIVE");
    // `doctor --live` opens the camera and the microphone for real.
    let o = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["doctor", "--live", "--config", path_str(&config)])
        .env("XDG_RUNTIME_DIR", &pulse.runtime_dir)
        .output()
        .unwrap();
    let text = stdout(&o);
    assert!(
        o.status.success() && text.contains("ready for live capture: yes"),
        "{text}"
    );
    assert!(
        text.contains("frame captured and decoded") && text.contains("capturing at 16000 Hz"),
        "{text}"
    );
    import_bank(&dir.path().join("station.db"));
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);

    // Refusals name their reason.
    let a = station.ask(json!({"type": "phase", "phase": "warm_up"}));
    assert_eq!(a["error"], "no session is running");
    let a = station.ask(json!({"type": "recommend", "k": 3, "text": "a story"}));
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("no session is running"),
        "{a}"
    );
    let a =
        station.ask(json!({"type": "start_session", "lease_s": 600, "participant_id": "P-NOBODY"}));
    assert!(
        a["error"].as_str().unwrap().contains("unknown participant"),
        "{a}"
    );

    // The robot's view: one subscriber to everything, one that never reads, and an
    // unknown topic refused with the known ones named.
    let a = station.ask(json!({"type": "subscribe", "topics": ["voice", "gossip"]}));
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("unknown topic \"gossip\""),
        "{a}"
    );
    let listener = station.subscribe(&[
        "voice",
        "utterance",
        "face",
        "prediction",
        "quality",
        "session",
    ]);
    let mut stuck = UnixStream::connect(&station.socket).unwrap();
    writeln!(
        stuck,
        "{}",
        json!({"type": "subscribe", "topics": ["face", "voice", "prediction"]})
    )
    .unwrap();
    let (id, mut player) = scripted_session(&station, &pulse, "P-LIVE");
    // Stories chosen on the station for this participant: never one shown in this session,
    // each with why; logged as the session's event.
    let r = station.ok(json!({"type": "recommend", "k": 2, "policy": "explore",
                              "text": "I moved to a new city for work and felt very alone"}));
    let chosen = r["stories"].as_array().unwrap();
    assert_eq!(chosen.len(), 2, "{r}");
    for c in chosen {
        assert!(
            !["demo-story-01", "demo-story-02", "demo-story-03"]
                .contains(&c["story_id"].as_str().unwrap()),
            "{r}"
        );
        assert!(
            c["similarity"].is_f64() && c["predicted"].is_f64() && c["calibration"] == "population",
            "{r}"
        );
    }
    assert_eq!(r["left_out"], 3, "{r}");
    let a = station.ask(json!({"type": "recommend", "k": 0}));
    assert!(a["error"].as_str().unwrap().contains("1-50"), "{a}");
    let a = station
        .ask(json!({"type": "recommendation", "policy": "x", "story_ids": [], "calibration": "x"}));
    assert!(
        a["error"].as_str().unwrap().contains("station's own"),
        "{a}"
    );
    let a = station.ask(json!({"type": "rating", "story_id": "demo-story-01", "value": 9}));
    assert!(a["error"].as_str().unwrap().contains("1-5"), "{a}");
    let a = station.ask(json!({"type": "phase", "phase": "warm_up"}));
    assert!(a["error"].as_str().unwrap().contains("out of order"), "{a}");
    let status = station.ok(json!({"type": "status"}));
    assert_eq!(status["camera"]["present"], true, "{status}");
    assert_eq!(status["microphone"]["present"], true, "{status}");
    assert_eq!(status["session"]["session_id"], id.as_str());
    let stop = station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(
        station.wait_session_end(&id),
        "complete",
        "{}",
        station.log_text()
    );
    let folder = PathBuf::from(stop["recording"].as_str().unwrap());
    let heard = listener.join().unwrap();
    let live_stream = heard.clone();
    drop(stuck);
    eprintln!("live stream: {} messages", heard.len());
    for m in &heard {
        assert!(m["topic"].is_string() && m["t_ms"].is_u64(), "{m}");
    }
    let of = |topic: &str, event: &str| {
        heard
            .iter()
            .filter(|m| m["topic"] == topic && (event.is_empty() || m["event"] == event))
            .count()
    };
    let summary = |what: &str| format!("no {what} among {} messages: {heard:?}", heard.len());
    assert_eq!(of("session", "start"), 1, "{}", summary("start"));
    assert_eq!(of("session", "phase"), 5, "{}", summary("5 phases"));
    assert_eq!(of("session", "ended"), 1, "{}", summary("end"));
    assert!(
        of("voice", "started") >= 1 && of("voice", "stopped") >= 1,
        "{}",
        summary("voice")
    );
    assert!(of("utterance", "") >= 2, "{}", summary("utterances"));
    assert!(
        of("face", "found") >= 1 && of("face", "summary") >= 5,
        "{}",
        summary("face")
    );
    assert!(of("prediction", "") >= 1, "{}", summary("predictions"));
    let p = heard.iter().find(|m| m["topic"] == "prediction").unwrap();
    assert!(
        p["predictions"][0]["score"].is_f64() && p["at_ms"].is_u64(),
        "{p}"
    );
    let smile = heard
        .iter()
        .find(|m| {
            m["topic"] == "face" && m["event"] == "summary" && m["face_frames"].as_u64() > Some(0)
        })
        .unwrap();
    assert!(
        smile["smile"].is_f64() && smile["head_pose_rad"].is_array(),
        "{smile}"
    );
    assert!(
        dir.path().join("ring-light-on").exists() && dir.path().join("ring-light-off").exists()
    );

    let conn = crate::common::store::open_db(&station.db);
    let frames = count(
        &conn,
        &format!("SELECT count(*) FROM frames WHERE session_id = '{id}' AND decoded = 1"),
    );
    let duration_s = count(
        &conn,
        &format!("SELECT duration_ns / 1000000000 FROM sessions WHERE id = '{id}'"),
    );
    assert!(
        frames as f64 >= 14.0 * duration_s as f64,
        "{frames} frames in {duration_s} s"
    );
    for (what, sql) in [
        ("face", "SELECT count(*) FROM frame_features WHERE modality = 'face' AND present = 1"),
        ("voice", "SELECT count(*) FROM frame_features WHERE modality = 'acoustic_compare' AND present = 1"),
        ("text", "SELECT count(*) FROM frame_features WHERE modality = 'text' AND present = 1"),
        ("windows", "SELECT count(*) FROM windows"),
        ("predictions", "SELECT count(*) FROM predictions"),
        ("ratings", "SELECT count(*) FROM self_ratings"),
        ("surveys", "SELECT count(*) FROM survey_responses"),
    ] {
        assert!(count(&conn, sql) > 0, "no {what} stored");
    }
    assert_eq!(count(&conn, "SELECT count(*) FROM self_ratings"), 3);
    assert_eq!(count(&conn, "SELECT count(DISTINCT phase) FROM phases"), 5);
    // The station's recogniser heard the demo speech playing into the microphone and fed
    // the text modality; the dialogue app's utterance is stored beside its words.
    let heard = count(
        &conn,
        "SELECT count(*) FROM utterances WHERE source = 'asr' AND speaker = 'participant' AND model = 'moonshine-tiny-en'",
    );
    assert!(heard >= 1, "no utterance heard: {}", station.log_text());
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM utterances WHERE source = 'dialogue_app'"
        ),
        1
    );
    let words: String = conn
        .query_row(
            "SELECT group_concat(text, ' ') FROM utterances WHERE source = 'asr'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // The player starts as the session does; the microphone's first fragment may come a
    // second or two later, so the opening words are not asserted.
    let words = words.to_lowercase();
    assert!(
        words.contains("leisure") || words.contains("young man"),
        "{words}"
    );
    let text_source: String = conn
        .query_row("SELECT text_source FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(text_source, "asr");
    // The latency from an utterance's end to the store writer, as the service logged it.
    let log = station.log_text();
    let latency = log
        .lines()
        .find(|l| l.contains("speech recognition latency"))
        .unwrap_or_default();
    assert!(latency.contains("p95_ms="), "{log}");
    eprintln!("live {latency}");

    let m = manifest(&folder);
    assert_eq!(m["format_version"], 2);
    assert_eq!(m["recording"]["state"], "finalised", "{m}");
    let logged = count(
        &conn,
        "SELECT count(*) FROM events WHERE type = 'recommendation'",
    );
    assert_eq!(logged, 1);
    import_bank(&dir.path().join("replayed.db"));
    // The replay of the recording stores the same rows and emits the same stream of what
    // was perceived (`t_ms`, the sending time, apart).
    let db = dir.path().join("replayed.db");
    let emitted = dir.path().join("stream.jsonl");
    let o = replay_cli_with(&folder, &db, None, &["--emit", path_str(&emitted)]);
    assert!(
        o.status.success(),
        "replay of the recording failed: {}",
        stderr(&o)
    );
    assert_same_rows(&station.db, &db, &id);
    let perceived = |messages: Vec<Value>| -> Vec<String> {
        let mut v: Vec<String> = messages
            .into_iter()
            .filter(|m| {
                ["voice", "utterance", "face", "prediction"]
                    .contains(&m["topic"].as_str().unwrap_or(""))
            })
            .map(|mut m| {
                // When it was sent, and (live) when its audio reached the runtime.
                let o = m.as_object_mut().unwrap();
                o.remove("t_ms");
                o.remove("handed_ms");
                m.to_string()
            })
            .collect();
        v.sort();
        v
    };
    let replayed: Vec<Value> = std::fs::read_to_string(&emitted)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (live, again) = (perceived(live_stream), perceived(replayed));
    assert!(live.len() > 20, "{live:?}");
    let differing: Vec<_> = live.iter().filter(|m| !again.contains(m)).collect();
    assert!(
        live.len() == again.len() && differing.is_empty(),
        "{} live messages, {} replayed; live only: {differing:?}",
        live.len(),
        again.len()
    );
}

#[test]
fn session_without_a_microphone_is_recorded_without_audio_and_its_recording_replays() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // No sound server in this runtime directory: the station has no microphone.
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-LIVE");
    let station = Station::start(dir.path(), &config, &runtime);
    let id = start_session_p_live(&station);
    station.ok(json!({"type": "phase", "phase": "warm_up"}));
    sleep_s(2.0);
    station.ok(json!({"type": "phase", "phase": "story_share"}));
    sleep_s(3.0);
    let stop = station.ok(json!({"type": "stop_session"}));
    assert_eq!(
        station.wait_session_end(&id),
        "complete",
        "{}",
        station.log_text()
    );
    let folder = PathBuf::from(stop["recording"].as_str().unwrap());
    assert!(folder.join("video.avi").exists());
    assert!(
        !folder.join("audio.wav").exists(),
        "a microphone that delivered nothing left an audio file"
    );
    let conn = crate::common::store::open_db(&station.db);
    let voiced = count(
        &conn,
        "SELECT count(*) FROM frame_features WHERE modality = 'acoustic_compare' AND present = 1",
    );
    assert_eq!(voiced, 0, "acoustic features present with no microphone");
    // The report says no audio was captured, rather than "silence 100 % bad" beside a
    // perfect audio-video offset.
    let page = dir.path().join("no-audio.html");
    let o = empathic(&[
        "report",
        &id,
        "--db",
        path_str(&station.db),
        "--out",
        path_str(&page),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("video only: no audio (the microphone delivered nothing)"),
        "no media-captured row"
    );
    assert!(html.contains("<td>silence</td><td>not measured (no audio)</td>"));
    assert!(html.contains("<td>audio-video coverage</td><td>not measured (no audio)</td>"));
    assert!(count(&conn, "SELECT count(*) FROM frames") > 0);
    // The recording replays, with the audio stored missing on every frame as it was live.
    let db = replay_recording(dir.path(), &folder);
    assert_same_rows(&station.db, &db, &id);
    // A station recording whose audio file was deleted after the microphone delivered
    // samples is refused, naming what happened.
    let mut m = manifest(&folder);
    m["audio_offset_ms"] = json!(0);
    std::fs::write(folder.join("session.json"), m.to_string()).unwrap();
    let o = replay_cli(&folder, &dir.path().join("other.db"), None);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("deleted since") && stderr(&o).contains("audio.wav"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn session_ids_and_starts_are_checked_before_anything_is_written() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-LIVE");
    consent(&config, "P-OTHER");
    let station = Station::start(dir.path(), &config, &runtime);
    let first = station.ok(
        json!({"type": "start_session", "lease_s": 600, "participant_id": "P-LIVE", "session_id": "crashed-1"}),
    );
    assert_eq!(first["session_id"], "crashed-1");
    sleep_s(1.0);
    station.ok(json!({"type": "stop_session"}));
    station.wait_session_end("crashed-1");
    let conn = crate::common::store::open_db(&station.db);
    let snapshot = |conn: &Connection| {
        (
            table_lines(conn, "sessions", "id", "crashed-1"),
            count(conn, "SELECT count(*) FROM sessions"),
            count(conn, "SELECT count(*) FROM outbox"),
            count(conn, "SELECT count(*) FROM frames"),
        )
    };
    let before = snapshot(&conn);
    // The probe's example: another participant's start with a stored session's id.
    let a = station.ask(
        json!({"type": "start_session", "lease_s": 600, "participant_id": "P-OTHER", "session_id": "crashed-1"}),
    );
    assert!(
        a["error"].as_str().unwrap_or("").contains("already stored"),
        "{a}"
    );
    assert_eq!(snapshot(&conn), before, "a refused start wrote something");
    assert!(station.ok(json!({"type": "status"}))["session"].is_null());

    // Two starts at the same moment: one session, the other refused.
    let station_ref = &station;
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = ["P-LIVE", "P-OTHER"]
            .into_iter()
            .map(|p| {
                s.spawn(move || {
                    station_ref
                        .ask(json!({"type": "start_session", "lease_s": 600, "participant_id": p}))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let started: Vec<&Value> = answers.iter().filter(|a| a["ok"] == true).collect();
    assert_eq!(started.len(), 1, "{answers:?}");
    let refused = answers.iter().find(|a| a["ok"] != true).unwrap();
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("already running"),
        "{refused}"
    );
    let id = started[0]["session_id"].as_str().unwrap().to_string();
    let status = station.ok(json!({"type": "status"}));
    assert_eq!(status["session"]["session_id"], id.as_str(), "{status}");
    station.ok(json!({"type": "stop_session"}));
    station.wait_session_end(&id);
    assert_eq!(
        count(
            &conn,
            "SELECT count(*) FROM sessions WHERE status = 'running'"
        ),
        0
    );
}

#[test]
fn a_purge_during_the_participants_live_session_stops_it_and_leaves_no_byte_of_theirs() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-GONE");
    consent(&config, "P-STAYS");
    let station = Station::start(dir.path(), &config, &runtime);
    // Words only the withdrawing participant said, and words of one who stays.
    let said = |participant: &str, words: &str| {
        let id = station
            .ok(json!({"type": "start_session", "lease_s": 600, "participant_id": participant}))
            ["session_id"]
            .as_str()
            .unwrap()
            .to_string();
        station.ok(json!({"type": "phase", "phase": "warm_up"}));
        station.ok(json!({"type": "phase", "phase": "story_share"}));
        sleep_s(1.5);
        let now = station.now_ms();
        station.ok(json!({"type": "utterance", "speaker": "participant", "start_ms": now - 1000, "end_ms": now, "text": words}));
        station.ok(json!({"type": "survey", "instrument": "SSE", "item": "q1", "value": 3.0, "time_point": "pre_study"}));
        sleep_s(1.0);
        id
    };
    let stays = said("P-STAYS", "the harbour lights quoll-parsnip-2210 at dusk");
    station.ok(json!({"type": "stop_session"}));
    station.wait_session_end(&stays);
    let ended = said("P-GONE", "my sister zebra-marmalade-7731 moved away");
    station.ok(json!({"type": "stop_session"}));
    station.wait_session_end(&ended);
    // A second session of theirs, still running when they withdraw.
    let running = said("P-GONE", "the night zebra-marmalade-7731 called me");
    let o = empathic(&[
        "participant",
        "purge",
        "P-GONE",
        "--config",
        path_str(&config),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("2 session(s) and 2 recording(s) removed"),
        "{}",
        stdout(&o)
    );
    assert!(station.ok(json!({"type": "status"}))["session"].is_null());
    let conn = crate::common::store::open_db(&station.db);
    for id in [&ended, &running] {
        assert_eq!(
            count(
                &conn,
                &format!("SELECT count(*) FROM sessions WHERE id = '{id}'")
            ),
            0
        );
    }
    drop(conn);
    // Not in any table, nor in the files' free pages, the log, or the recordings.
    let needle = b"zebra-marmalade-7731";
    assert_eq!(files_holding(dir.path(), needle), Vec::<PathBuf>::new());
    // The participant who stays keeps everything.
    let kept = files_holding(dir.path(), b"quoll-parsnip-2210");
    assert!(kept.iter().any(|p| p.ends_with("events.jsonl")), "{kept:?}");
    assert!(
        kept.iter()
            .any(|p| p.to_string_lossy().contains("station.db")),
        "{kept:?}"
    );
    // Their consent went with them: no new session starts for them.
    let a =
        station.ask(json!({"type": "start_session", "lease_s": 600, "participant_id": "P-GONE"}));
    assert!(
        a["error"].as_str().unwrap().contains("unknown participant"),
        "{a}"
    );
}

#[test]
fn sigterm_and_sigkill_mid_session_keep_what_was_stored_and_the_recording() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    consent(&config, "P-LIVE");
    let mut station = Station::start(dir.path(), &config, &pulse.runtime_dir);

    // SIGTERM: the session is closed incomplete with the reason; the recording finalised.
    let id = station
        .ok(json!({"type": "start_session", "lease_s": 600, "participant_id": "P-LIVE", "session_id": "term-1"}))
        ["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut player = pulse.play(&demo_session().join("audio.wav"));
    station.ok(json!({"type": "phase", "phase": "warm_up"}));
    sleep_s(12.0);
    station.signal("-TERM");
    assert!(station.wait_exit().success(), "{}", station.log_text());
    let conn = crate::common::store::open_db(&station.db);
    let (status, reason): (String, String) = conn
        .query_row(
            "SELECT status, status_reason FROM sessions WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(status, "incomplete");
    assert!(reason.contains("stopped"), "{reason}");
    assert!(
        count(
            &conn,
            "SELECT count(*) FROM windows WHERE session_id = 'term-1'"
        ) > 0
    );
    let folder = station.recordings.join(&id);
    assert_eq!(manifest(&folder)["recording"]["state"], "finalised");

    // SIGKILL: the next start marks the session incomplete and repairs the folder. Frames
    // are stored as they are heard (their words follow), so the kill loses at most about a
    // second of them although the words wait `transcript_wait_ms` (15 s).
    station.spawn(&pulse.runtime_dir);
    station
        .ok(json!({"type": "start_session", "lease_s": 600, "participant_id": "P-LIVE", "session_id": "kill-1"}));
    let started = Instant::now();
    sleep_s(12.0);
    let stored_before = {
        let c = crate::common::store::open_db(&station.db);
        count(
            &c,
            "SELECT count(*) FROM frames WHERE session_id = 'kill-1'",
        )
    };
    let elapsed = started.elapsed().as_secs_f64();
    station.signal("-KILL");
    station.wait_exit();
    let _ = player.kill();
    let _ = player.wait();
    station.spawn(&pulse.runtime_dir);
    let conn = crate::common::store::open_db(&station.db);
    let status: String = conn
        .query_row("SELECT status FROM sessions WHERE id = 'kill-1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(status, "incomplete");
    let kept = count(
        &conn,
        "SELECT count(*) FROM frames WHERE session_id = 'kill-1'",
    );
    assert!(kept >= stored_before);
    let duration_s: f64 = conn
        .query_row(
            "SELECT duration_ns / 1e9 FROM sessions WHERE id = 'kill-1'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        duration_s > elapsed - 1.5 && duration_s <= elapsed + 0.5,
        "killed {elapsed:.1} s in, {duration_s:.1} s kept ({kept} frames)"
    );
    // Every frame has a row per modality: the words that never came are absent.
    let modalities = count(
        &conn,
        "SELECT count(*) FROM modalities WHERE session_id = 'kill-1'",
    );
    let rows = count(
        &conn,
        "SELECT count(*) FROM frame_features WHERE session_id = 'kill-1'",
    );
    assert_eq!(rows, kept * modalities);
    let folder = station.recordings.join("kill-1");
    let m = manifest(&folder);
    assert_eq!(m["recording"]["state"], "repaired", "{m}");
    assert!(
        m["recording"]["video_frames"].as_u64().unwrap() > 100,
        "{m}"
    );
    // The repaired folder replays, and the session says why it ended (exit 1: stored
    // `incomplete`, the reason on stderr).
    let db = dir.path().join("replayed.db");
    let o = replay_cli(&folder, &db, None);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("repaired"), "{}", stderr(&o));
    let c = crate::common::store::open_db(&db);
    assert!(
        count(
            &c,
            "SELECT count(*) FROM windows WHERE session_id = 'kill-1'"
        ) > 0
    );
    let (status, reason): (String, String) = c
        .query_row(
            "SELECT status, status_reason FROM sessions WHERE id = 'kill-1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(
        status == "incomplete" && reason.contains("killed") && reason.contains("repaired"),
        "{status}: {reason}"
    );
    // Replayed into the station's own database it displaces the shorter run the kill
    // left (a trial found the shorter one kept): a rerun that is not complete displaces
    // a stored one only for a repaired recording, and only with more frames.
    let replayed_frames = count(
        &c,
        "SELECT count(*) FROM frames WHERE session_id = 'kill-1'",
    );
    assert!(replayed_frames > kept, "{replayed_frames} vs {kept}");
    let o = replay_cli_with(&folder, &station.db, None, &["--replace"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (frames, reason): (i64, String) = crate::common::store::open_db(&station.db)
        .query_row(
            "SELECT frames, status_reason FROM sessions WHERE id = 'kill-1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(
        frames == replayed_frames && reason.contains("repaired"),
        "{frames} frames: {reason}"
    );
}

#[test]
fn disk_nearly_full_stops_raw_media_first_and_keeps_the_session() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    // A floor above any disk here: the first check finds the disk "nearly full".
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("min_free_mib = 16", "min_free_mib = 1000000000");
    std::fs::write(&config, text).unwrap();
    consent(&config, "P-LIVE");
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    // The robot is told: as a standing problem when it subscribes after the service's
    // first look at the disk, as a change when before.
    let listener = station.subscribe(&["quality", "session"]);
    let (id, mut player) = start_warm_up(&station, &pulse);
    // No story bank on this station: recommend says so.
    let a = station.ask(json!({"type": "recommend", "k": 3, "text": "I moved to a new city"}));
    assert!(
        a["error"].as_str().unwrap().contains("stories import"),
        "{a}"
    );
    sleep_s(6.0);
    station.ok(json!({"type": "note", "text": "still recording events"}));
    station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(station.wait_session_end(&id), "complete");
    let folder = station.recordings.join(&id);
    let m = manifest(&folder);
    let why = m["recording"]["raw_media_stopped"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("free on the disk"), "{m}");
    let recorded = m["recording"]["video_frames"].as_u64().unwrap();
    let conn = crate::common::store::open_db(&station.db);
    let stored = count(
        &conn,
        &format!("SELECT count(*) FROM frames WHERE session_id = '{id}'"),
    );
    assert!(
        recorded < 30 && stored > 60,
        "raw media stop early ({recorded} frames recorded), features go on ({stored} stored)"
    );
    // The media written before the stop are whole files; the events file has every event.
    assert!(avi_is_indexed(&folder.join("video.avi")));
    let events = std::fs::read_to_string(folder.join("events.jsonl")).unwrap();
    assert!(events.contains("still recording events"), "{events}");
    let heard = listener.join().unwrap();
    let low: Vec<&Value> = heard
        .iter()
        .filter(|m| m["topic"] == "quality" && m["event"] == "disk_low")
        .collect();
    assert_eq!(low.len(), 1, "{heard:?}");
    assert!(
        low[0]["free_mib"].is_u64() && low[0]["min_free_mib"] == 1_000_000_000u64,
        "{heard:?}"
    );
}

#[test]
fn a_database_that_fills_mid_session_stops_capture_and_keeps_what_was_stored() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    // A database limit of 2 MiB: a few seconds of every modality's features fill it.
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[store]\n", "[store]\nmax_db_mib = 2\n");
    std::fs::write(&config, text).unwrap();
    consent(&config, "P-LIVE");
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let (id, mut player) = start_warm_up(&station, &pulse);
    // The app goes on as apps do; once the store has failed its requests are refused with
    // the reason (not answered `ok` into nothing).
    let deadline = Instant::now() + Duration::from_secs(90);
    let refusal = loop {
        let a = station.ask(json!({"type": "note", "text": "still here", "session_id": id}));
        if let Some(e) = a["error"].as_str() {
            break e.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "never refused: {}",
            station.log_text()
        );
        sleep_s(0.3);
    };
    assert!(
        refusal.contains("full") && refusal.contains(&id),
        "{refusal}"
    );
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(station.wait_session_end(&id), "incomplete");
    let status = station.ok(json!({"type": "status"}));
    assert!(
        status["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("full"),
        "{status}"
    );
    // Capture stopped: the session is not running, and what was stored before is kept,
    // with counts and a duration that are those of its rows.
    let conn = crate::common::store::open_db(&station.db);
    let (frames, reason, duration_ns): (i64, String, i64) = conn
        .query_row(
            "SELECT frames, status_reason, duration_ns FROM sessions WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    let stored = count(
        &conn,
        &format!("SELECT count(*) FROM frames WHERE session_id = '{id}'"),
    );
    assert!(frames > 0 && frames == stored, "{frames} vs {stored}");
    assert!(
        reason.contains("full") && reason.contains("kept"),
        "{reason}"
    );
    assert!(duration_ns > 0, "{duration_ns}");
    let open_phases = count(
        &conn,
        &format!("SELECT count(*) FROM phases WHERE session_id = '{id}' AND end_ns IS NULL"),
    );
    assert_eq!(open_phases, 0);
}

#[test]
fn raw_media_past_retention_are_deleted_at_start_and_the_rest_is_kept() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = station_config(dir.path(), &dir.path().join("no-camera.avi"));
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "min_free_mib = 16",
        "min_free_mib = 16\nretention_days = 30",
    );
    std::fs::write(&config, text).unwrap();
    let recordings = dir.path().join("recordings");
    for (name, age) in [("old-1", "40 days ago"), ("new-1", "2 days ago")] {
        let folder = recordings.join(name);
        std::fs::create_dir_all(&folder).unwrap();
        for f in ["video.avi", "audio.wav", "events.jsonl", "session.json"] {
            std::fs::write(folder.join(f), b"x").unwrap();
        }
        assert!(Command::new("touch")
            .args(["-d", age])
            .arg(folder.join("session.json"))
            .status()
            .unwrap()
            .success());
    }
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let _station = Station::start(dir.path(), &config, &runtime);
    let old = recordings.join("old-1");
    assert!(!old.join("video.avi").exists() && !old.join("audio.wav").exists());
    assert!(old.join("events.jsonl").exists() && old.join("session.json").exists());
    let new = recordings.join("new-1");
    assert!(new.join("video.avi").exists() && new.join("audio.wav").exists());
}

/// A stage that fails during a live session (the facial stage, by a fail point compiled
/// into the test build) costs only its modality: `status` says so while the session runs
/// (and never calls the devices fine while their data stop), subscribers hear it, and the
/// session is stored complete with every frame and the failure.
#[cfg(feature = "failpoints")]
#[test]
fn a_stage_failing_in_a_live_session_is_shown_and_the_session_goes_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    with_live(&config, "transcript_wait_ms = 3000");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("transcript_wait_ms = 15000\n", "")).unwrap();
    consent(&config, "P-LIVE");
    let station = Station::start_with(
        dir.path(),
        &config,
        &pulse.runtime_dir,
        vec![("FAILPOINTS".into(), "stage-face=return(4000)".into())],
    );
    let quality = station.subscribe(&["quality", "session"]);
    let id = station
        .ok(json!({"type": "start_session", "participant_id": "P-LIVE", "lease_s": 600}))
        ["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut player = pulse.play(&demo_session().join("audio.wav"));
    station.wait_status("the failure in status", 30, |s| {
        s["session"]["stage_failures"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    });
    sleep_s(3.0);
    let s = station.ok(json!({"type": "status"}));
    let failure = &s["session"]["stage_failures"][0];
    assert_eq!(failure["stage"], "face", "{s}");
    assert!(
        s["session"]["frames_age_ms"].as_u64().unwrap() < 2_000,
        "{s}"
    );
    assert!(
        s["session"]["audio_age_ms"].as_u64().unwrap() < 2_000,
        "{s}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["status", "--config", path_str(&config)])
        .output()
        .unwrap();
    let shown = stdout(&o);
    assert!(shown.contains("FAILED    stage face at"), "{shown}");
    assert!(!shown.contains("STALLED"), "{shown}");
    station.ok(json!({"type": "stop_session"}));
    let _ = player.kill();
    let _ = player.wait();
    assert_eq!(station.wait_session_end(&id), "complete");
    let heard = quality.join().unwrap();
    assert!(
        heard.iter().any(|m| m["topic"] == "quality"
            && m["event"] == "stage_failed"
            && m["stage"] == "face"),
        "{heard:?}"
    );
    let conn = crate::common::store::open_db(&station.db);
    let reason = status_reason(&station.db, &id).unwrap_or_default();
    assert!(reason.contains("stage face failed at"), "{reason}");
    let frames = count(
        &conn,
        &format!("SELECT frames FROM sessions WHERE id = '{id}'"),
    );
    let stored = count(
        &conn,
        &format!("SELECT count(*) FROM frames WHERE session_id = '{id}'"),
    );
    assert!(frames > 100 && stored == frames, "{stored} of {frames}");
    let late = count(
        &conn,
        "SELECT count(*) FROM frame_features f JOIN frames USING (session_id, frame_index) \
         WHERE f.modality = 'face' AND f.present = 1 AND t_ns >= 5000000000",
    );
    assert_eq!(late, 0);
    let audio = count(
        &conn,
        "SELECT count(*) FROM frame_features WHERE modality = 'acoustic_compare' AND present = 1",
    );
    assert!(audio > frames / 2, "{audio} of {frames}");
}

/// A session as a study runs it (issue 42), driven live by the reference dialogue app with
/// a participant who answers each prompt (real read speech played into the microphone when
/// the robot has finished speaking): a warm-up answer, a story share of minutes of speech
/// without a pause, three stories read and rated, a reflection; the CPU kept busy by
/// another process meanwhile. Complete, every frame, the station's words, predictions,
/// robot turns stamped on the session clock, and the replay of its recording equal to the
/// live run. Prints the figures (duration, peak RSS and CPU per phase, `face` and `voice`
/// latency) that docs/performance.md reports.
#[test]
fn a_realistic_session_runs_live_through_the_reference_app_and_replays_the_same() {
    let Some(fixtures) = fixtures_or_skip("a realistic session") else {
        return;
    };
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let plan = script();
    let dir = tempfile::tempdir().unwrap();
    long_room_tone(dir.path(), 15 * 60);
    let pulse = Pulse::start(dir.path());
    // The participant's voice: cuts of continuous read speech (LJ Speech, pauses removed).
    let (speech, speech_s, _) = crate::common::speech::continuous_speech(
        &fixtures,
        &dir.path().join("speech.wav"),
        plan.warm_up_s + plan.share_s + plan.reflection_s + 5.0,
    );
    assert!(speech_s >= plan.warm_up_s + plan.share_s + plan.reflection_s);
    let warm_up =
        crate::common::speech::cut(&speech, 0.0, plan.warm_up_s, &dir.path().join("w.wav"));
    let share = crate::common::speech::cut(
        &speech,
        plan.warm_up_s,
        plan.share_s,
        &dir.path().join("s.wav"),
    );
    let reflection = crate::common::speech::cut(
        &speech,
        plan.warm_up_s + plan.share_s,
        plan.reflection_s,
        &dir.path().join("r.wav"),
    );
    // The defaults a station runs with (transcript wait 10 s), the demo video as camera.
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("transcript_wait_ms = 15000\n", "")).unwrap();
    // `EMPATHIC_REALISTIC_PREDICTORS=a,b` (development, for docs/performance.md): the
    // station and the replay run these predictors (with their attributions, the default).
    let fusion = std::env::var("EMPATHIC_REALISTIC_PREDICTORS")
        .ok()
        .map(|list| {
            let quoted: Vec<String> = list.split(',').map(|p| format!("\"{p}\"")).collect();
            format!("\n[fusion]\npredictors = [{}]\n", quoted.join(", "))
        });
    if let Some(section) = &fusion {
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(&config, text + section).unwrap();
    }
    consent(&config, "P-REAL");
    import_bank(&dir.path().join("station.db"));
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let pid = station.child.as_ref().unwrap().id();
    let heard = station.subscribe(&["session", "face", "voice", "quality"]);
    // Another process keeps one core busy (niced, as a study laptop's other work would).
    let mut busy = Command::new("nice")
        .args(["-n", "5", "sh", "-c", "while :; do :; done"])
        .spawn()
        .unwrap();

    // Memory and CPU, sampled per phase as the status reports it.
    let stop_sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop_sampling.clone();
        let socket = station.socket.clone();
        std::thread::Builder::new()
            .name("test-sampler".into())
            .spawn(move || {
                let mut by_phase: std::collections::BTreeMap<String, PhaseLoad> =
                    Default::default();
                let mut last = (Instant::now(), cpu_ticks(pid), String::from("start"));
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(500));
                    let phase = UnixStream::connect(&socket)
                        .ok()
                        .and_then(|mut s| {
                            s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
                            writeln!(s, "{}", json!({"type": "status"})).ok()?;
                            let mut line = String::new();
                            BufReader::new(s).read_line(&mut line).ok()?;
                            let v: Value = serde_json::from_str(&line).ok()?;
                            v["session"]["phase"].as_str().map(str::to_string)
                        })
                        .unwrap_or_else(|| "none".into());
                    let (now, ticks) = (Instant::now(), cpu_ticks(pid));
                    let e = by_phase.entry(last.2.clone()).or_default();
                    e.peak_rss_kib = e.peak_rss_kib.max(rss_kib(pid));
                    e.cpu_ticks += ticks - last.1;
                    e.wall_s += (now - last.0).as_secs_f64();
                    last = (now, ticks, phase);
                }
                by_phase
            })
            .unwrap()
    };

    // The participant: answers when the robot has finished its prompt.
    let started = Instant::now();
    let summary_path = dir.path().join("dialogue.json");
    let read_s = plan.read_s.to_string();
    let mut app = dialogue_app(
        &station,
        "P-REAL",
        &[
            "--policy",
            "predicted_empathy",
            "--answer-s",
            "15",
            "--end-of-turn-ms",
            "800",
            "--max-turn-s",
            "400",
            "--read-s",
            &read_s,
            "--face-s",
            "30",
            "--prediction-wait-s",
            "30",
            "--summary",
            path_str(&summary_path),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let said = BufReader::new(app.stdout.take().unwrap());
    let mut players = Vec::new();
    let mut lines = Vec::new();
    for line in said.lines() {
        let line = line.unwrap();
        lines.push(line.clone());
        let Some(robot) = line.strip_prefix("robot: ") else {
            continue;
        };
        let answer = if robot.starts_with("Hello") {
            Some(&warm_up)
        } else if robot.starts_with("Could you tell me") {
            Some(&share)
        } else if robot.starts_with("I think \"") {
            Some(&reflection)
        } else {
            None
        };
        if let Some(wav) = answer {
            // The robot speaks 2.5 words a second; the participant answers after it.
            let words = robot.split_whitespace().count() as f64;
            sleep_s((words / 2.5).max(0.5) + 0.7);
            players.push(pulse.play(wav));
        }
    }
    let out = app.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    stop_sampling.store(true, std::sync::atomic::Ordering::SeqCst);
    let by_phase = sampler.join().unwrap();
    let _ = busy.kill();
    let _ = busy.wait();
    for mut p in players {
        let _ = p.kill();
        let _ = p.wait();
    }
    assert!(
        out.status.success(),
        "the dialogue app failed: {}\n{}\n{}",
        stderr(&out),
        lines.join("\n"),
        station.log_text()
    );
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap()).unwrap();
    let id = summary["session_id"].as_str().unwrap().to_string();
    assert_eq!(summary["ended"]["status"], "complete", "{summary}");
    assert_eq!(summary["share_words_waited"], true, "{summary}");
    assert_eq!(summary["recommended_from"], "story_share", "{summary}");
    assert_eq!(station.wait_session_end(&id), "complete");
    let messages = heard.join().unwrap();

    // Stored: every frame, five phases, the station's words of the share, robot turns
    // stamped on the session clock, predictions.
    let conn = crate::common::store::open_db(&station.db);
    let q = |sql: &str| count(&conn, &sql.replace("{id}", &id));
    let frames = q("SELECT frames FROM sessions WHERE id = '{id}'");
    let duration_s = q("SELECT duration_ns FROM sessions WHERE id = '{id}'") as f64 / 1e9;
    assert_eq!(
        q("SELECT count(*) FROM frames WHERE session_id = '{id}'"),
        frames
    );
    assert!(
        (frames as f64 - duration_s * 15.0).abs() <= 20.0,
        "{frames} frames over {duration_s:.1} s"
    );
    assert!(
        q("SELECT count(*) FROM frames WHERE session_id = '{id}' AND decoded = 1") as f64
            >= frames as f64 * 0.95,
        "frames decoded"
    );
    assert_eq!(
        q("SELECT count(DISTINCT phase) FROM phases WHERE session_id = '{id}'"),
        5
    );
    let share_words = q(
        "SELECT count(*) FROM utterances u JOIN phases p ON p.session_id = u.session_id \
         WHERE u.session_id = '{id}' AND u.source = 'asr' AND u.speaker = 'participant' \
         AND p.phase = 'story_share' AND u.start_ns >= p.start_ns",
    );
    assert!(
        share_words as f64 >= plan.share_s / 20.0,
        "{share_words} utterances in the share"
    );
    let robot_unstamped = q(
        "SELECT count(*) FROM utterances WHERE session_id = '{id}' AND speaker = 'robot' \
         AND source = 'dialogue_app' AND (start_ns = 0 OR end_ns <= start_ns)",
    );
    assert_eq!(robot_unstamped, 0, "robot turns stamped 0");
    assert!(q("SELECT count(*) FROM predictions WHERE session_id = '{id}'") > 0);
    assert!(q("SELECT count(*) FROM self_ratings WHERE session_id = '{id}'") == 3);

    // `face` within half a second of its frame; looking does not flap on the demo's face.
    let mut face_ms: Vec<u64> = messages
        .iter()
        .filter(|m| m["topic"] == "face")
        .filter_map(|m| Some(m["t_ms"].as_u64()?.saturating_sub(m["at_ms"].as_u64()?)))
        .collect();
    face_ms.sort_unstable();
    let pct = |v: &[u64], p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    assert!(!face_ms.is_empty());
    let looking_flips = messages
        .iter()
        .filter(|m| {
            m["topic"] == "face" && (m["event"] == "looking" || m["event"] == "looking_away")
        })
        .count();
    let voice = &summary["latency_ms"]["voice"]["total"];

    let mut figures = format!(
        "realistic session ({}{}): {:.1} s session, {:.0} s wall, {frames} frames, share {:.0} s of continuous LJ Speech, {share_words} utterances in it\n\
         face latency (t_ms - at_ms) p50 {} ms p95 {} ms over {} messages; looking/looking_away changes {looking_flips}; voice total p50 {} ms p95 {} ms\n",
        if std::env::var("EMPATHIC_REALISTIC").as_deref() == Ok("full") { "full" } else { "CI cut" },
        fusion.as_deref().map(|f| format!(", {}", f.trim())).unwrap_or_default(),
        duration_s,
        elapsed.as_secs_f64(),
        plan.share_s,
        pct(&face_ms, 0.5),
        pct(&face_ms, 0.95),
        face_ms.len(),
        voice["p50"],
        voice["p95"],
    );
    let tick = 100.0; // USER_HZ on Linux
    let order = [
        "start",
        "none",
        "warm_up",
        "story_share",
        "story_receive",
        "reflection",
        "cool_down",
    ];
    let mut phases: Vec<(&String, &PhaseLoad)> = by_phase.iter().collect();
    phases.sort_by_key(|(p, _)| order.iter().position(|o| o == p).unwrap_or(order.len()));
    for (phase, l) in phases {
        figures.push_str(&format!(
            "phase {phase:<14} {:>6.1} s  peak RSS {:>4} MiB  CPU {:>5.1} % of one core\n",
            l.wall_s,
            l.peak_rss_kib / 1024,
            l.cpu_ticks as f64 / tick / l.wall_s.max(0.1) * 100.0
        ));
    }
    eprintln!("{figures}");
    if let Ok(keep) = std::env::var("EMPATHIC_REALISTIC_FIGURES") {
        std::fs::write(keep, &figures).unwrap();
    }
    // The replay of the recording (into a store with the same bank) stores the same rows.
    let folder = station.recordings.join(&id);
    import_bank(&dir.path().join("replayed.db"));
    let replayed = match &fusion {
        Some(section) => {
            let cfg = dir.path().join("replay.toml");
            std::fs::write(&cfg, section).unwrap();
            replay_recording_with(dir.path(), &folder, Some(&cfg))
        }
        None => replay_recording(dir.path(), &folder),
    };
    assert_same_rows(&station.db, &replayed, &id);

    assert!(pct(&face_ms, 0.95) <= 500, "{figures}");
    assert!(
        looking_flips as f64 <= duration_s / 10.0,
        "looking flapped {looking_flips} times: {figures}"
    );
}
