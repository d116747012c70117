//! The control socket: its bounds, a session tied to its dialogue app, the second probe's
//! doors.

use crate::common::live::*;
use crate::common::store::count;
use crate::common::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_control_socket_bounds_lines_connections_and_idle_time_and_always_answers() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &dir.path().join("no-camera.avi"));
    let station = Station::start(dir.path(), &config, &runtime);
    let answer = |stream: &mut UnixStream| {
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut line = String::new();
        BufReader::new(stream.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        serde_json::from_str::<Value>(&line).unwrap_or(Value::Null)
    };
    // Invalid UTF-8 gets an answer, and the connection stays usable.
    let mut s = UnixStream::connect(&station.socket).unwrap();
    s.write_all(b"{\"type\":\"st\xffatus\"}\n").unwrap();
    assert!(answer(&mut s)["error"].as_str().unwrap().contains("UTF-8"));
    // A refused request's words are not logged.
    writeln!(s, "{}", json!({"type": "utterance", "speaker": "participant", "start_ms": 0, "end_ms": 10, "text": "my secret okapi-turnip-5521"})).unwrap();
    assert_eq!(answer(&mut s)["ok"], false);
    assert!(
        !station.log_text().contains("okapi-turnip-5521"),
        "{}",
        station.log_text()
    );
    drop(s);
    // A line past the bound without a newline: answered, connection closed, no growth.
    let mut s = UnixStream::connect(&station.socket).unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..5 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let a = answer(&mut s);
    assert!(a["error"].as_str().unwrap().contains("longer than"), "{a}");
    drop(s);
    // Issue 43: 200 refused subscribe lines naming a 250 kB topic once grew the log by
    // 49 MB. Logged by kind and size, quoted text left out, at most 10 per 10 s.
    let before = station.log_text().len();
    let mut s = UnixStream::connect(&station.socket).unwrap();
    let long_topic = json!({"type": "subscribe", "topics": ["w".repeat(250_000)]}).to_string();
    for _ in 0..200 {
        writeln!(s, "{long_topic}").unwrap();
        assert_eq!(answer(&mut s)["ok"], false);
    }
    drop(s);
    sleep_s(0.5);
    let grown = station.log_text().len() - before;
    assert!(grown < 16 * 1024, "the log grew by {grown} bytes");
    assert!(!station.log_text().contains("wwwwwwww"));
    // A last line ended by the end of the stream, not a newline, is answered.
    let mut s = UnixStream::connect(&station.socket).unwrap();
    s.write_all(br#"{"type":"status"}"#).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let a = answer(&mut s);
    assert_eq!(a["ok"], true, "{a}");
    drop(s);
    // Every request slot held by an idle connection, and as many subscribers that never
    // read (issue 56: sixteen idle neighbours locked the station out of `status`, `stop`
    // and a withdrawal). A new connection that sends nothing is refused as busy, and a
    // request other than status or stop too; `status` still gets through, on a reserved
    // slot; one subscriber more than the bound is refused.
    let listeners: Vec<UnixStream> = (0..16)
        .map(|_| {
            let mut s = UnixStream::connect(&station.socket).unwrap();
            writeln!(s, "{}", json!({"type": "subscribe", "topics": ["session"]})).unwrap();
            assert_eq!(answer(&mut s)["ok"], true);
            s
        })
        .collect();
    let mut one_more = UnixStream::connect(&station.socket).unwrap();
    writeln!(
        one_more,
        "{}",
        json!({"type": "subscribe", "topics": ["session"]})
    )
    .unwrap();
    let a = answer(&mut one_more);
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("too many subscribers"),
        "{a}"
    );
    drop(one_more);
    let idle: Vec<UnixStream> = (0..16)
        .map(|_| UnixStream::connect(&station.socket).unwrap())
        .collect();
    sleep_s(0.5);
    let mut extra = UnixStream::connect(&station.socket).unwrap();
    let a = answer(&mut extra);
    assert!(a["error"].as_str().unwrap().contains("too many"), "{a}");
    assert_eq!(a["busy"], true, "{a}");
    let mut other = UnixStream::connect(&station.socket).unwrap();
    writeln!(other, "{}", json!({"type": "recommend", "k": 1})).unwrap();
    let a = answer(&mut other);
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("only status and stop_session"),
        "{a}"
    );
    let o = empathic(&["status", "--config", path_str(&config)]);
    assert!(
        o.status.success(),
        "status refused under a flood: {}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("station"), "{}", stdout(&o));
    let o = empathic(&["ctl", "start", "P-NONE", "--config", path_str(&config)]);
    assert_eq!(o.status.code(), Some(1), "busy is exit 1: {}", stderr(&o));
    drop(listeners);
    // Idle connections are closed after the idle timeout, with a reason; the slots free.
    let mut first = idle.into_iter().next().unwrap();
    let a = answer(&mut first);
    assert!(
        a["error"].as_str().unwrap().contains("no request for 30 s"),
        "{a}"
    );
    sleep_s(1.0);
    let o = empathic(&["status", "--config", path_str(&config)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A session belongs to the dialogue app that started it (issue 42): an app killed
/// mid-session leaves no camera recording past the grace; the killed app's requests are
/// refused afterwards; a session bound to one connection takes requests from another
/// only when they name it; `stop_session` answers once the next start is accepted; and
/// the reference app stops its session on SIGTERM.
#[test]
fn a_session_ends_with_its_dialogue_app_and_stale_requests_are_refused() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    with_live(&config, "app_grace_ms = 3000");
    consent(&config, "P-APP");
    import_bank(&dir.path().join("station.db"));
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let running = |s: &Value| s["session"]["session_id"].is_string();
    let running_id = || {
        station.ok(json!({"type": "status"}))["session"]["session_id"]
            .as_str()
            .unwrap()
            .to_string()
    };

    // 1. The reference app, killed (SIGKILL) while its session runs.
    let mut app = dialogue_app(&station, "P-APP", &["--face-s", "60", "--answer-s", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    station.wait_status("the app's session", 30, running);
    let id = running_id();
    let kept = station.ok(json!({"type": "status"}))["session"]["kept_by"].clone();
    assert_eq!(kept["bound_to"], "connection", "{kept}");
    sleep_s(2.0);
    app.kill().unwrap();
    let _ = app.wait();
    let killed = Instant::now();
    assert_eq!(station.wait_session_end(&id), "incomplete");
    let took = killed.elapsed().as_secs_f64();
    assert!(
        took < 3.0 + 4.0,
        "ended {took:.1} s after the app died (grace 3 s)"
    );
    let reason = status_reason(&station.db, &id).unwrap_or_default();
    assert!(
        reason.contains("connection closed without stop_session"),
        "{reason}"
    );
    let conn = crate::common::store::open_db(&station.db);
    assert!(
        count(
            &conn,
            &format!("SELECT frames FROM sessions WHERE id = '{id}'")
        ) > 0
    );
    // The dead app's session is over: a request naming it is refused with the reason.
    let a = station.ask(json!({"type": "stop_session", "session_id": id}));
    assert_eq!(a["ok"], false);
    assert!(
        a["error"].as_str().unwrap().contains("is not running"),
        "{a}"
    );

    // 2. A session bound to one connection (started without a lease).
    let mut owner = UnixStream::connect(&station.socket).unwrap();
    owner
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut owner_in = BufReader::new(owner.try_clone().unwrap());
    let mut on_owner = |request: Value| -> Value {
        writeln!(owner, "{request}").unwrap();
        let mut line = String::new();
        owner_in.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    };
    let started = on_owner(json!({"type": "start_session", "participant_id": "P-APP"}));
    assert_eq!(started["ok"], true, "{started}");
    assert_eq!(started["kept_by"]["bound_to"], "connection");
    let id2 = started["session_id"].as_str().unwrap().to_string();
    // Another connection must name the session; naming the old one is refused.
    let a = station.ask(json!({"type": "phase", "phase": "warm_up"}));
    assert_eq!(a["ok"], false);
    assert!(
        a["error"].as_str().unwrap().contains("name the session"),
        "{a}"
    );
    let a = station.ask(json!({"type": "phase", "phase": "warm_up", "session_id": id}));
    assert_eq!(a["ok"], false);
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains(&format!("`{id}` is not running")),
        "{a}"
    );
    station.ok(json!({"type": "phase", "phase": "warm_up", "session_id": id2}));
    assert_eq!(
        on_owner(json!({"type": "heartbeat", "session_id": id2}))["ok"],
        true
    );
    sleep_s(2.0);
    // stop_session answers once the session is stored: the next start is accepted at once.
    let stopped = on_owner(json!({"type": "stop_session"}));
    assert_eq!(stopped["ok"], true, "{stopped}");
    let next =
        station.ok(json!({"type": "start_session", "participant_id": "P-APP", "lease_s": 60}));
    assert_eq!(next["kept_by"]["bound_to"], "lease");
    let stored: String = conn
        .query_row("SELECT status FROM sessions WHERE id = ?1", [&id2], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(stored, "complete");
    station.ok(json!({"type": "stop_session"}));

    // 3. SIGTERM: the reference app stops the session it started, then exits 1.
    let app = dialogue_app(&station, "P-APP", &["--face-s", "60", "--answer-s", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    station.wait_status("the app's second session", 30, running);
    let id3 = running_id();
    sleep_s(1.5);
    assert!(Command::new("kill")
        .args(["-TERM", &app.id().to_string()])
        .status()
        .unwrap()
        .success());
    let out = app.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("SIGTERM"), "{}", stderr(&out));
    // Stopped by the app before it exited: no grace needed, nothing running. Cut short by
    // a signal, it is `incomplete` and says so (a trial found it stored `complete`).
    assert!(station.ok(json!({"type": "status"}))["session"].is_null());
    assert_eq!(station.wait_session_end(&id3), "incomplete");
    let reason: String = crate::common::store::open_db(&station.db)
        .query_row(
            "SELECT status_reason FROM sessions WHERE id = ?1",
            [&id3],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        reason.contains("before its end: the app got SIGTERM"),
        "{reason}"
    );
}

/// Issue 43, the station's doors of the second probe, on the live service: a subscriber
/// that half-closes its side keeps its stream; a busy service answers `ctl start` with exit
/// 1 (not 2, bad input); an utterance begun just before the story share counts in it (so
/// `recommend` right after the story share answers); eight clients asking `recommend` with
/// 210 kB texts are answered or told busy, and their texts never reach the log; consent
/// withdrawn mid-session stops capture at once and deletes the session's raw recording.
#[test]
fn second_probe_doors_hold_on_the_live_service() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    // The dialogue app's words feed the text here (no speech is played): the story share
    // rule is the same for the recogniser's.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[asr]\nsource = \"dialogue_app\"\n");
    std::fs::write(&config, text).unwrap();
    consent(&config, "P-DOORS");
    consent(&config, "P-OTHER");
    let station = Station::start(dir.path(), &config, &runtime);
    import_bank(&station.db);
    // A subscriber that shuts down its writing side right after subscribing.
    let mut sub = UnixStream::connect(&station.socket).unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(180)))
        .unwrap();
    writeln!(
        sub,
        "{}",
        json!({"type": "subscribe", "topics": ["session"]})
    )
    .unwrap();
    sub.shutdown(std::net::Shutdown::Write).unwrap();
    let listener = std::thread::Builder::new()
        .name("half-closed-subscriber".into())
        .spawn(move || until_ended(BufReader::new(sub)));
    // `ctl subscribe` as a staff member would run it: its lines are the stream's.
    let mut ctl_sub = Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["ctl", "subscribe", "session", "--config", path_str(&config)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ctl_lines = BufReader::new(ctl_sub.stdout.take().unwrap());
    let mut said = String::new();
    BufReader::new(ctl_sub.stderr.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    assert!(said.starts_with("subscribed to session at "), "{said}");
    let ctl_listener = std::thread::Builder::new()
        .name("ctl-subscribe".into())
        .spawn(move || until_ended(ctl_lines))
        .unwrap();
    sleep_s(1.0);
    let id = station
        .ok(json!({"type": "start_session", "lease_s": 600, "participant_id": "P-DOORS"}))
        ["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    // Busy: exit 1, the answer says so.
    let o = empathic(&["ctl", "start", "P-OTHER", "--config", path_str(&config)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("busy"), "{}", stderr(&o));
    station.ok(json!({"type": "phase", "phase": "warm_up"}));
    sleep_s(1.5);
    let share_at = station.now_ms();
    station.ok(json!({"type": "phase", "phase": "story_share"}));
    sleep_s(2.5);
    let now = station.now_ms();
    station.ok(json!({"type": "utterance", "speaker": "participant", "start_ms": share_at - 600,
                      "end_ms": now, "text": "When my grandmother fell ill I learned to cook her recipes."}));
    station.ok(json!({"type": "phase", "phase": "story_receive"}));
    let deadline = Instant::now() + Duration::from_secs(30);
    let recommended = loop {
        let a = station.ask(json!({"type": "recommend", "k": 3}));
        if a["ok"] == true || Instant::now() > deadline {
            break a;
        }
        sleep_s(0.5);
    };
    assert_eq!(recommended["ok"], true, "{recommended}");
    assert_eq!(recommended["from"], "story_share", "{recommended}");
    // Eight clients, 210 kB texts, for 8 s: every request answered, ok or busy.
    let status_before = station.ok(json!({"type": "status"}));
    let text = "my private words pelican-custard-4410 ".repeat(5_500);
    let answered = std::sync::atomic::AtomicU64::new(0);
    let busy = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let until = Instant::now() + Duration::from_secs(8);
                while Instant::now() < until {
                    let a = station.ask(json!({"type": "recommend", "k": 3, "text": text}));
                    answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if a["busy"] == true {
                        busy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    } else {
                        assert_eq!(a["ok"], true, "{a}");
                    }
                }
            });
        }
    });
    let status_after = station.ok(json!({"type": "status"}));
    let dropped = |s: &Value| s["session"]["frames_dropped"].as_u64().unwrap_or(0);
    let frames = |s: &Value| s["session"]["frames_captured"].as_u64().unwrap_or(0);
    eprintln!(
        "recommend flood: {} answered ({} busy); frames during it {}, dropped {}",
        answered.load(std::sync::atomic::Ordering::Relaxed),
        busy.load(std::sync::atomic::Ordering::Relaxed),
        frames(&status_after) - frames(&status_before),
        dropped(&status_after) - dropped(&status_before)
    );
    assert!(!station.log_text().contains("pelican-custard-4410"));
    // Consent withdrawn (another process, the staff's command): capture stops at once.
    let o = empathic(&[
        "participant",
        "consent",
        "P-DOORS",
        "--withdrawn",
        "--config",
        path_str(&config),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let withdrawn_at = Instant::now();
    let status = station.wait_session_end(&id);
    eprintln!(
        "consent withdrawn: session ended {:.1} s later",
        withdrawn_at.elapsed().as_secs_f64()
    );
    assert_eq!(status, "incomplete");
    let reason = status_reason(&station.db, &id).unwrap();
    assert!(reason.contains("consent withdrawn"), "{reason}");
    let left: Vec<_> = std::fs::read_dir(&station.recordings)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        left.iter().all(|p| !p.to_string_lossy().contains(&id)),
        "{left:?}"
    );
    let got = listener.unwrap().join().unwrap();
    let events: Vec<&str> = got.iter().filter_map(|v| v["event"].as_str()).collect();
    assert!(events.contains(&"start"), "{events:?}");
    assert!(events.contains(&"abandoned"), "{events:?}");
    assert_eq!(events.last(), Some(&"ended"), "{events:?}");
    let by_ctl = ctl_listener.join().unwrap();
    let _ = ctl_sub.kill();
    let _ = ctl_sub.wait();
    // The raw client read the subscription's answer too; `ctl` checked it and prints the
    // stream after it.
    assert_eq!(got[0]["subscribed"], json!(["session"]), "{:?}", got[0]);
    assert_eq!(
        by_ctl,
        got[1..],
        "`ctl subscribe session` printed another stream"
    );
    // An unknown topic is refused with the service's reason, exit 2.
    let o = empathic(&["ctl", "subscribe", "gossip", "--config", path_str(&config)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown topic \"gossip\""),
        "{}",
        stderr(&o)
    );
}

/// Every message of a session stream up to its `ended` (or the stream's end).
fn until_ended(reader: impl BufRead) -> Vec<Value> {
    let mut got = Vec::new();
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let ended = v["event"] == "ended";
        got.push(v);
        if ended {
            break;
        }
    }
    got
}

/// Issue 56 item 1: a session bound to a connection on which the app then subscribed (and
/// never read or asked anything again) kept the camera recording for ever. A bound app is
/// alive while it sends requests: silent for the idle timeout plus the grace, its session
/// ends `incomplete` with the reason, and what was captured is kept.
#[test]
fn a_hung_app_that_only_subscribed_on_its_connection_does_not_keep_the_camera_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    with_live(&config, "app_grace_ms = 3000");
    consent(&config, "P-HUNG");
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let mut owner = UnixStream::connect(&station.socket).unwrap();
    owner
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut owner_in = BufReader::new(owner.try_clone().unwrap());
    writeln!(
        owner,
        "{}",
        json!({"type": "start_session", "participant_id": "P-HUNG"})
    )
    .unwrap();
    let mut line = String::new();
    owner_in.read_line(&mut line).unwrap();
    let started: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(started["ok"], true, "{started}");
    let id = started["session_id"].as_str().unwrap().to_string();
    // The same connection turns into a subscription, and the app never reads it.
    writeln!(
        owner,
        "{}",
        json!({"type": "subscribe", "topics": ["face", "quality", "session"]})
    )
    .unwrap();
    let begun = Instant::now();
    assert_eq!(station.wait_session_end(&id), "incomplete");
    let took = begun.elapsed().as_secs_f64();
    assert!(
        took < 30.0 + 3.0 + 10.0,
        "ended {took:.1} s after the app fell silent"
    );
    let reason = status_reason(&station.db, &id).unwrap_or_default();
    assert!(reason.contains("sent no request"), "{reason}");
    let conn = crate::common::store::open_db(&station.db);
    assert!(
        count(
            &conn,
            &format!("SELECT frames FROM sessions WHERE id = '{id}'")
        ) > 0
    );
    drop(owner);
}

/// A neighbour in the control group (here `nobody`, the socket opened to everyone) holds
/// at most four subscriptions (issue 56: sixteen that never read locked the robot's app
/// out): the fifth is refused naming the bound; the station's own user subscribes still;
/// a neighbour's slots are freed when its connections close.
#[test]
fn one_user_holds_at_most_four_subscriptions_and_the_stations_own_user_more() {
    if !Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| stdout(&o).trim() == "0")
    {
        assert!(
            !fixtures_required(),
            "the per-user bound needs root to connect as another user"
        );
        eprintln!("SKIP: the per-user bound needs root to connect as another user");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let runtime = dir.path().join("pulse-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let config = station_config(dir.path(), &dir.path().join("no-camera.avi"));
    with_live(&config, "socket_mode = \"0666\"");
    let station = Station::start(dir.path(), &config, &runtime);
    let neighbour = || {
        let mut c = Command::new("runuser")
            .args(["-u", "nobody", "--", "env"])
            .arg(format!(
                "EMPATHIC_TEST_NEIGHBOUR_SOCKET={}",
                station.socket.display()
            ))
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "control::neighbour_subscriber",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut answers = Vec::new();
        let mut out = BufReader::new(c.stdout.take().unwrap());
        let mut line = String::new();
        while answers.len() < 5 && out.read_line(&mut line).unwrap() > 0 {
            // (libtest may print "test ... " on the same line first.)
            if let Some((_, a)) = line.split_once("NEIGHBOUR ") {
                answers.push(serde_json::from_str::<Value>(a.trim()).unwrap());
            }
            line.clear();
        }
        (c, answers, out)
    };
    // Closes the neighbour's standard input (it lets its connections go) and reads what
    // it says until it exits.
    let release = |mut c: std::process::Child, mut out: BufReader<std::process::ChildStdout>| {
        drop(c.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        assert!(c.wait().unwrap().success(), "{rest}");
    };
    let (held, answers, held_out) = neighbour();
    assert_eq!(answers.len(), 5, "{answers:?}");
    for a in &answers[..4] {
        assert_eq!(a["ok"], true, "{a}");
    }
    let refused = answers[4]["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains("(uid 65534) holds 4 subscriptions already") && answers[4]["busy"] == true,
        "{}",
        answers[4]
    );
    // The station's own user is not bounded per user while the neighbour holds its four.
    let mine: Vec<UnixStream> = (0..6)
        .map(|_| {
            let mut s = UnixStream::connect(&station.socket).unwrap();
            writeln!(s, "{}", json!({"type": "subscribe", "topics": ["session"]})).unwrap();
            let mut line = String::new();
            BufReader::new(s.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            let a: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(a["ok"], true, "{a}");
            s
        })
        .collect();
    drop(mine);
    release(held, held_out);
    sleep_s(1.0);
    // Its connections closed, the neighbour has its four again (and no more).
    let (again, answers, again_out) = neighbour();
    let ok = answers.iter().filter(|a| a["ok"] == true).count();
    assert_eq!(ok, 4, "{answers:?}");
    release(again, again_out);
}

/// Not a scenario on its own: the neighbour of the test above, run by it as `nobody`
/// (returns at once otherwise). Subscribes five times, prints each answer, and holds the
/// connections until its standard input closes.
#[test]
fn neighbour_subscriber() {
    let Ok(socket) = std::env::var("EMPATHIC_TEST_NEIGHBOUR_SOCKET") else {
        return;
    };
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut s = UnixStream::connect(&socket).unwrap();
        writeln!(s, "{}", json!({"type": "subscribe", "topics": ["session"]})).unwrap();
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        println!("NEIGHBOUR {}", line.trim());
        held.push(s);
    }
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
}

/// A neighbour (`nobody`, the socket opened to everyone) that learns the running session's
/// id from `status` acts on nothing (issue 56): its `ctl stop` and `ctl event` are refused
/// naming the token (exit 2),
/// and `status` shows no token; with the token `start_session` answered, it stops it.
#[test]
fn a_neighbour_that_knows_the_session_id_acts_on_nothing_without_its_token() {
    if !Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| stdout(&o).trim() == "0")
    {
        assert!(
            !fixtures_required(),
            "connecting as another user needs root"
        );
        eprintln!("SKIP: connecting as another user needs root");
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let pulse = Pulse::start(dir.path());
    let config = station_config(dir.path(), &demo_session().join("video.avi"));
    with_live(&config, "socket_mode = \"0666\"");
    consent(&config, "P-TOKEN");
    let station = Station::start(dir.path(), &config, &pulse.runtime_dir);
    let mut owner = UnixStream::connect(&station.socket).unwrap();
    owner
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    writeln!(
        owner,
        "{}",
        json!({"type": "start_session", "participant_id": "P-TOKEN"})
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(owner.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    let started: Value = serde_json::from_str(&line).unwrap();
    let (id, token) = (
        started["session_id"].as_str().unwrap().to_string(),
        started["token"].as_str().unwrap().to_string(),
    );
    let as_nobody = |args: &[&str]| {
        Command::new("runuser")
            .args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_empathic")])
            .args(args)
            .args(["--socket", path_str(&station.socket)])
            .env("EMPATHIC_LOG", "error")
            .current_dir("/")
            .output()
            .unwrap()
    };
    let o = as_nobody(&["status", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = stdout(&o);
    assert!(said.contains(&id), "{said}");
    assert!(!said.contains(&token), "status shows the token: {said}");
    // Refused for who asks, not because the station is busy: the same request never
    // passes, so exit 2 (busy is 1).
    let o = as_nobody(&["ctl", "stop"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("another client's"), "{}", stderr(&o));
    let o = as_nobody(&[
        "ctl",
        "event",
        r#"{"type":"rating","story_id":"s1","value":1}"#,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("another client's"), "{}", stderr(&o));
    assert!(
        station.ask(json!({"type": "status"}))["session"]["session_id"] == id.as_str(),
        "the session runs on"
    );
    let o = as_nobody(&["ctl", "--token", &token, "stop"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(station.wait_session_end(&id), "complete");
    drop(owner);
}
