//! What a study promises a participant, held under races and faults (issue 29, "Trust"):
//! one process owns a session at a time, and kept work is never destroyed by a rerun that
//! does not complete. Each test reproduces a probe's example before checking the class.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
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
    crate::common::store::open_db(db)
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
    crate::common::store::open_db(db)
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

/// A genuine station's session record, and a way to send a changed copy of it to a
/// central SQLite database as that station would (a client the broker lets in).
struct Forger {
    pending: empathic::store::outbox::Pending,
    opts: empathic::sync::SyncOptions,
    next: i64,
}

impl Forger {
    fn new(db: &Path) -> Self {
        let store = empathic::store::Store::open(db).unwrap();
        let pending = store
            .outbox()
            .pending(100, "9999", "")
            .unwrap()
            .into_iter()
            .find(|m| m.kind == "session")
            .unwrap();
        Forger {
            pending,
            opts: empathic::sync::SyncOptions {
                announce_status: false,
                host: "unused".into(),
                port: 0,
                study: "test-study".into(),
                station: "station-1".into(),
                auth: Default::default(),
                collectors: Vec::new(),
                sealing: None,
            },
            next: 100,
        }
    }

    fn record(&self) -> serde_json::Value {
        serde_json::from_str(&self.pending.payload).unwrap()
    }

    fn send(
        &mut self,
        central: &mut empathic::sync::central::Central,
        record: &serde_json::Value,
    ) -> empathic::sync::central::Stored {
        use sha2::Digest;
        let mut m = self.pending.clone();
        m.payload = record.to_string();
        m.sha256 = format!("{:x}", sha2::Sha256::digest(m.payload.as_bytes()));
        m.seq = self.next;
        m.message_id = format!("forged-{}", self.next);
        self.next += 1;
        let mut last = None;
        for e in empathic::sync::envelopes(&m, &self.opts) {
            last = Some(
                central
                    .store_publish("empathic/v1/test-study/station-1/session", e.as_bytes())
                    .unwrap(),
            );
        }
        last.unwrap()
    }
}

/// Appends `row` (column name -> value) to `table` of a version 2 record.
fn add_row(record: &mut serde_json::Value, table: &str, row: &[(&str, serde_json::Value)]) {
    let t = &mut record["tables"][table];
    let columns: Vec<String> = t["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    let template = t["rows"][0].clone();
    let mut values = template.as_array().unwrap().clone();
    for (name, v) in row {
        let i = columns.iter().position(|c| c == name).unwrap();
        values[i] = v.clone();
    }
    t["rows"].as_array_mut().unwrap().push(values.into());
}

fn central_rows(central: &Path) -> Vec<String> {
    let conn = crate::common::store::open_db(central);
    let mut lines = Vec::new();
    for table in [
        "sessions",
        "participants",
        "stations",
        "stories",
        "phases",
        "survey_responses",
        "self_ratings",
    ] {
        let mut st = conn.prepare(&format!("SELECT * FROM {table}")).unwrap();
        let n = st.column_count();
        let rows: Vec<String> = st
            .query_map([], |r| {
                Ok((0..n)
                    .map(|i| match r.get_ref(i).unwrap() {
                        rusqlite::types::ValueRef::Text(t) => {
                            String::from_utf8_lossy(t).into_owned()
                        }
                        other => format!("{other:?}"),
                    })
                    .collect::<Vec<_>>()
                    .join(" "))
            })
            .unwrap()
            .map(|r| format!("{table}: {}", r.unwrap()))
            .collect();
        lines.extend(rows);
    }
    lines.sort();
    lines
}

#[test]
fn a_record_writes_only_its_own_session_and_what_that_session_owns() {
    use empathic::sync::central::{Central, Stored};
    use serde_json::json;
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("station.db");
    let fast = config_without_vision_models(tmp.path());
    let bank = root().join("demo/stories/stories.jsonl");
    assert!(
        empathic(&["stories", "import", path_str(&bank), "--db", path_str(&db)])
            .status
            .success()
    );
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let central_path = tmp.path().join("central.db");
    let mut central = Central::open(path_str(&central_path)).unwrap();
    let mut forger = Forger::new(&db);
    // Another station's session already stored centrally.
    let mut other = forger.record();
    let rename = |v: &mut serde_json::Value, from: &str, to: &str| {
        *v = serde_json::from_str(&v.to_string().replace(from, to)).unwrap();
    };
    rename(&mut other, "demo-0001", "theirs-0001");
    rename(&mut other, "P-DEMO", "P-THEIRS");
    let mut theirs_opts = forger.opts.clone();
    theirs_opts.station = "station-2".into();
    {
        use sha2::Digest;
        let mut m = forger.pending.clone();
        m.subject = "theirs-0001".into();
        m.payload = other.to_string();
        m.sha256 = format!("{:x}", sha2::Sha256::digest(m.payload.as_bytes()));
        let mut last = None;
        for e in empathic::sync::envelopes(&m, &theirs_opts) {
            last = Some(
                central
                    .store_publish("empathic/v1/test-study/station-2/session", e.as_bytes())
                    .unwrap(),
            );
        }
        assert!(matches!(last, Some(Stored::Record { .. })), "{last:?}");
    }
    // The genuine record goes in.
    let genuine = forger.record();
    assert!(matches!(
        forger.send(&mut central, &genuine),
        Stored::Record { .. }
    ));
    let before = central_rows(&central_path);
    assert!(before.iter().any(|l| l.contains("theirs-0001")));

    // The probe's examples: rows for another station's session, its ratings, another
    // participant's consent, a story nobody was shown here, a second session row, a
    // survey answer of someone else.
    let story = genuine["tables"]["story_exposures"]["rows"][0][1].clone();
    let cases: Vec<(&str, serde_json::Value)> = vec![
        ("phases", {
            let mut r = genuine.clone();
            add_row(
                &mut r,
                "phases",
                &[("session_id", json!("theirs-0001")), ("seq", json!(99))],
            );
            r
        }),
        ("self_ratings", {
            let mut r = genuine.clone();
            add_row(
                &mut r,
                "self_ratings",
                &[("session_id", json!("theirs-0001")), ("value", json!(1))],
            );
            r
        }),
        ("participants", {
            let mut r = genuine.clone();
            add_row(
                &mut r,
                "participants",
                &[("id", json!("P-THEIRS")), ("consent", json!("withdrawn"))],
            );
            r
        }),
        ("stories", {
            let mut r = genuine.clone();
            add_row(
                &mut r,
                "stories",
                &[("id", json!("demo-story-40")), ("text", json!("rewritten"))],
            );
            r
        }),
        ("sessions", {
            let mut r = genuine.clone();
            add_row(
                &mut r,
                "sessions",
                &[("id", json!("theirs-0001")), ("status", json!("failed"))],
            );
            r
        }),
        ("survey_responses", {
            let mut r = genuine.clone();
            add_row(
                &mut r,
                "survey_responses",
                &[("participant_id", json!("P-THEIRS"))],
            );
            r
        }),
    ];
    for (table, record) in cases {
        if record["tables"][table]["rows"]
            .as_array()
            .is_none_or(|r| r.is_empty())
        {
            continue;
        }
        match forger.send(&mut central, &record) {
            Stored::Quarantined { reason, .. } => {
                assert!(reason.contains(table), "{table}: {reason}")
            }
            other => panic!("{table}: a record writing outside its session was stored: {other:?}"),
        }
        assert_eq!(
            central_rows(&central_path),
            before,
            "{table} changed the central rows"
        );
    }
    // Its own story's text cannot be rewritten either: the first text stored stays.
    let mut rewrite = genuine.clone();
    let rows = rewrite["tables"]["stories"]["rows"].as_array_mut().unwrap();
    let i = rows.iter().position(|r| r[0] == story).unwrap();
    rows[i][2] = json!("a text nobody was shown");
    assert!(matches!(
        forger.send(&mut central, &rewrite),
        Stored::Record { .. }
    ));
    let text: String = crate::common::store::open_db(&central_path)
        .query_row(
            "SELECT text FROM stories WHERE id = ?1",
            [story.as_str().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_ne!(text, "a text nobody was shown");
}

#[test]
fn one_oversized_message_never_stops_collection_and_incomplete_chunks_are_bounded() {
    use crate::common::broker::{free_port, start_broker, start_collector};
    use crate::common::central::{sync_ok, wait_subscribed};
    use empathic::sync::central::{Central, Stored, CHUNK_BYTES_PER_STATION};
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let central = tmp.path().join("central.db");
    let mut collector = start_collector(&central, broker.port);
    wait_subscribed(broker.port, &[path_str(&central)], Duration::from_secs(20));
    // The probe's example: a 2 MB publish on a station's topic.
    {
        use rumqttc::{Client, MqttOptions, QoS};
        let mut opts = MqttOptions::new("flooder", "127.0.0.1", broker.port);
        opts.set_max_packet_size(4 << 20, 4 << 20);
        let (client, mut conn) = Client::new(opts, 4);
        client
            .publish(
                "empathic/v1/test-study/station-1/session",
                QoS::AtLeastOnce,
                false,
                vec![b'x'; 2 << 20],
            )
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_)))) =
                conn.recv_timeout(Duration::from_millis(200))
            {
                break;
            }
        }
    }
    // Genuine syncs still go through, and the oversized one is in quarantine with why.
    let db = tmp.path().join("station.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    sync_ok(&db, broker.port, "station-1");
    let reasons: Vec<String> = crate::common::store::open_db(&central)
        .prepare("SELECT reason FROM collect_quarantine")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        reasons.iter().any(|r| r.contains("over the")),
        "{reasons:?}"
    );
    let _ = collector.kill();
    let _ = collector.wait();

    // Incomplete chunk sets: an old one expires, and one station's cannot grow past its
    // bound (its oldest incomplete messages go, noted).
    let mut c = Central::open(path_str(&tmp.path().join("chunks.db"))).unwrap();
    let chunk = |id: &str, n: u64, data: &str| {
        serde_json::json!({"v": 1, "message_id": id, "seq": 1, "kind": "session",
            "study": "test-study", "station": "station-9", "subject": id, "chunk": n,
            "chunks": 2, "sha256": "0".repeat(64), "data": data})
        .to_string()
    };
    let topic = "empathic/v1/test-study/station-9/session";
    let big = "y".repeat(900 * 1024);
    let messages = (CHUNK_BYTES_PER_STATION / (900 * 1024)) + 3;
    for i in 0..messages {
        let stored = c
            .store_publish(topic, chunk(&format!("m{i}"), 0, &big).as_bytes())
            .unwrap();
        assert!(matches!(stored, Stored::Chunk));
    }
    let conn = crate::common::store::open_db(tmp.path().join("chunks.db"));
    let kept: i64 = conn
        .query_row("SELECT sum(length(data)) FROM collect_chunks", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        kept <= CHUNK_BYTES_PER_STATION,
        "{kept} bytes of chunks kept"
    );
    let dropped: i64 = conn
        .query_row(
            "SELECT count(*) FROM collect_quarantine WHERE reason LIKE '%incomplete message m0 %'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dropped, 1, "the oldest went first, noted");
    conn.execute(
        "UPDATE collect_chunks SET received_at = '2020-01-01T00:00:00.000Z' WHERE message_id = 'm10'",
        [],
    )
    .unwrap();
    c.store_publish(topic, chunk("fresh", 0, "z").as_bytes())
        .unwrap();
    let old: i64 = conn
        .query_row(
            "SELECT count(*) FROM collect_chunks WHERE message_id = 'm10'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(old, 0, "a day-old incomplete chunk set expired");
    drop(broker);
}

/// A real full disk: a 3 MiB tmpfs (needs the right to mount, as root in a container with
/// CAP_SYS_ADMIN; where it cannot be mounted the test says so and checks nothing).
struct SmallDisk(tempfile::TempDir);

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk(dir))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_run_stopped_by_a_full_disk_keeps_what_it_stored_with_its_reason() {
    let mut reproduced = 0;
    for size in ["3m", "5m"] {
        let Some(disk) = SmallDisk::mount(size) else {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs CAP_SYS_ADMIN); the full-disk case is not checked");
            return;
        };
        let db = disk.0.path().join("e.db");
        let o = replay_cli(&demo_session(), &db, None);
        assert_eq!(o.status.code(), Some(1), "{size}: {}", stderr(&o));
        assert!(stderr(&o).contains("full"), "{}", stderr(&o));
        // Read where it is, without a write (the next start's recovery must not be what
        // closes the row).
        let conn =
            Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let (status, reason, frames): (String, String, i64) = conn
            .query_row(
                "SELECT status, status_reason, frames FROM sessions",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        // What the store committed before the disk filled is kept (`incomplete`); a run
        // that committed no frame is `failed`. Never left `running`.
        let stored: i64 = conn
            .query_row("SELECT count(*) FROM frames", [], |r| r.get(0))
            .unwrap();
        match status.as_str() {
            "incomplete" => assert!(
                stored > 0 && frames == stored,
                "{size}: {frames} vs {stored}"
            ),
            "failed" => assert_eq!(stored, 0, "{size}: a failed session keeps no frame"),
            other => panic!("{size}: left {other}"),
        }
        assert!(reason.contains("full"), "{reason}");
        reproduced += 1;
    }
    assert_eq!(reproduced, 2);
}

#[test]
fn sequence_numbers_and_receipts_are_not_taken_on_trust() {
    use empathic::sync::central::{Central, Stored};
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("station.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let central_path = tmp.path().join("central.db");
    let mut central = Central::open(path_str(&central_path)).unwrap();
    let mut forger = Forger::new(&db);
    let genuine = forger.record();
    assert!(matches!(
        forger.send(&mut central, &genuine),
        Stored::Record { .. }
    ));
    // The probe's example: a tombstone with an absurd sequence number. It would void the
    // session and make every later genuine record look older; it is quarantined instead.
    let tombstone = serde_json::json!({"format": "empathic-tombstone", "version": 2,
        "session_id": "demo-0001", "reason": "deleted"})
    .to_string();
    let envelope = serde_json::json!({"v": 1, "message_id": "absurd-1", "seq": 4_000_000_000_000_000_000i64,
        "kind": "tombstone", "study": "test-study", "station": "station-1",
        "subject": "demo-0001", "chunk": 0, "chunks": 1,
        "sha256": format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(tombstone.as_bytes())),
        "data": tombstone});
    match central
        .store_publish(
            "empathic/v1/test-study/station-1/tombstone",
            envelope.to_string().as_bytes(),
        )
        .unwrap()
    {
        Stored::Quarantined {
            reason, receipt, ..
        } => {
            assert!(reason.contains("sequence number"), "{reason}");
            assert!(receipt.is_some(), "answered, so the sender stops resending");
        }
        other => panic!("an absurd sequence number was taken: {other:?}"),
    }
    let sessions: i64 = crate::common::store::open_db(&central_path)
        .query_row(
            "SELECT count(*) FROM sessions WHERE id = 'demo-0001'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(sessions, 1, "the session was voided");
    // A later genuine record is applied, not dropped as older.
    assert!(matches!(
        forger.send(&mut central, &genuine),
        Stored::Record { .. }
    ));

    // Receipts: only for a message the station handed to the broker, naming its sha256.
    let store = empathic::store::Store::open(&db).unwrap();
    let outbox = store.outbox();
    let m = outbox.pending(1, "9999", "").unwrap().pop().unwrap();
    let check = |sha: Option<&str>, in_flight: Option<&str>| {
        outbox
            .receipt_matches(&m.message_id, sha, in_flight)
            .unwrap()
    };
    assert!(
        check(Some(&m.sha256), None).is_err(),
        "a receipt for a message never sent"
    );
    assert!(
        check(Some(&m.sha256), Some(&m.message_id)).is_ok(),
        "in flight"
    );
    outbox.mark_sent(m.seq).unwrap();
    assert!(check(None, None).is_err(), "a receipt naming no sha256");
    assert!(
        check(Some(&"0".repeat(64)), None).is_err(),
        "a receipt naming another sha256"
    );
    assert!(check(Some(&m.sha256), None).is_ok());
    assert!(outbox
        .receipt_matches("no-such-message", Some(&m.sha256), None)
        .unwrap()
        .is_err());
}

#[test]
fn an_exposure_keeps_the_words_the_participant_saw() {
    // Probe: a `story_shown` whose text differed from the stored story of that id was stored
    // as the stored story: what the participant actually read was lost.
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("shown.db");
    let config = config_without_vision_models(tmp.path());
    let o = replay_cli(&demo_session(), &db, Some(&config));
    assert!(o.status.success(), "{}", stderr(&o));
    let later = later_demo_session(&tmp.path().join("later"));
    let events = later.join("events.jsonl");
    let text = std::fs::read_to_string(&events).unwrap();
    let edited = text.replace(
        "\"title\": \"The bus driver who waited\", \"text\": \"I missed",
        "\"title\": \"The driver who waited\", \"text\": \"Shortened: I missed",
    );
    assert_ne!(edited, text, "the demo's first story_shown changed");
    std::fs::write(&events, edited).unwrap();
    let o = replay_cli(&later, &db, Some(&config));
    assert!(o.status.success(), "{}", stderr(&o));

    let conn = crate::common::store::open_db(&db);
    let shown = |session: &str, story: &str| -> (Option<String>, Option<String>) {
        conn.query_row(
            "SELECT shown_title, shown_text FROM story_exposures
             WHERE session_id = ?1 AND story_id = ?2",
            [session, story],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    // The first session showed the stored story itself: nothing extra kept.
    assert_eq!(shown("demo-0001", "demo-story-03"), (None, None));
    // The later one showed other words: they are on its exposure, the bank is unchanged.
    let (title, text) = shown("demo-0002", "demo-story-03");
    assert_eq!(title.as_deref(), Some("The driver who waited"));
    assert!(text.unwrap().starts_with("Shortened: I missed"));
    assert_eq!(shown("demo-0002", "demo-story-11"), (None, None));
    let bank: String = conn
        .query_row(
            "SELECT title FROM stories WHERE id = 'demo-story-03'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(bank, "The bus driver who waited");

    // The report names the title shown and says the words differ.
    let page = tmp.path().join("later.html");
    let o = empathic(&[
        "report",
        "demo-0002",
        "--db",
        path_str(&db),
        "--out",
        path_str(&page),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("The driver who waited"));
    assert!(html.contains("the words shown differ from the stored story"));
}

#[test]
fn reading_commands_read_a_database_in_a_folder_nobody_may_write() {
    // Probe: on a read-only folder (a mounted backup) `sessions list` failed with "attempt to
    // write a readonly database": SQLite could not create the -shm file a WAL file needs.
    let Some(disk) = SmallDisk::mount("64m") else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs CAP_SYS_ADMIN); the read-only folder case is not checked");
        return;
    };
    let db = disk.0.path().join("backup.db");
    let tmp = tempfile::tempdir().unwrap();
    let config = config_without_vision_models(tmp.path());
    let o = replay_cli(&demo_session(), &db, Some(&config));
    assert!(o.status.success(), "{}", stderr(&o));
    let remount = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(disk.0.path())
        .status()
        .unwrap();
    assert!(remount.success());
    let o = empathic(&["sessions", "list", "--db", path_str(&db)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("demo-0001"));
    let o = empathic(&["sessions", "show", "demo-0001", "--db", path_str(&db)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = tmp.path().join("r.html");
    let o = report_cli("demo-0001", &db, &page);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .contains("demo-0001"));
    // Nothing was created beside it.
    let names: Vec<String> = std::fs::read_dir(disk.0.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.ends_with("-shm") && !n.ends_with("-wal")),
        "{names:?}"
    );
}

/// Issue 56 item 4: one gate for every way into a central database. A record from a
/// station the collector lets in, whose `sessions` row has no `station_id`, is refused
/// (quarantined, answered) by a SQLite central file and a PostgreSQL database alike, and
/// every read works after it. A PostgreSQL database that already applied such a record (an
/// older collector let it in) is still read: the record is left out with a warning naming
/// it, not every read broken.
#[test]
fn a_record_that_cannot_be_applied_is_refused_by_both_central_databases_and_breaks_no_read() {
    use empathic::sync::central::{Central, Stored};
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("station.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let pg = crate::common::postgres::Postgres::start();
    let lite = tmp.path().join("central.db").display().to_string();
    let pg_url = pg.database("gate");
    let mut reasons = Vec::new();
    for target in [lite.as_str(), pg_url.as_str()] {
        let mut central = Central::open(target).unwrap();
        let mut forger = Forger::new(&db);
        let mut bad = forger.record();
        let sessions = &mut bad["tables"]["sessions"];
        let at = sessions["columns"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c == "station_id")
            .unwrap();
        sessions["rows"][0][at] = serde_json::Value::Null;
        match forger.send(&mut central, &bad) {
            Stored::Quarantined {
                reason, receipt, ..
            } => {
                assert!(receipt.is_some(), "{target}: answered");
                reasons.push(reason);
            }
            other => panic!("{target}: a record that cannot be applied was taken: {other:?}"),
        }
        let genuine = forger.record();
        assert!(
            matches!(forger.send(&mut central, &genuine), Stored::Record { .. }),
            "{target}"
        );
        drop(central);
        for args in [
            vec!["sessions", "list", "--db", target],
            vec![
                "study",
                "report",
                "--central",
                target,
                "--study",
                "test-study",
                "--json",
            ],
        ] {
            let o = empathic(&args);
            assert!(o.status.success(), "{target} {args:?}: {}", stderr(&o));
        }
    }
    // One gate: the same reason from both.
    assert_eq!(reasons[0], reasons[1]);
    // An older collector's leftover: the applied record made unappliable in place.
    let bad_payload = {
        let mut r = Forger::new(&db).record();
        let sessions = &mut r["tables"]["sessions"];
        let at = sessions["columns"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c == "station_id")
            .unwrap();
        sessions["rows"][0][at] = serde_json::Value::Null;
        r.to_string()
    };
    let mut c = ::postgres::Client::connect(&pg_url, ::postgres::NoTls).unwrap();
    let n = c
        .execute(
            "UPDATE collect_records SET payload = $1 WHERE kind = 'session' AND applied = 1",
            &[&bad_payload],
        )
        .unwrap();
    assert_eq!(n, 1);
    // Read as a user would (warnings shown: the tests' helper shows errors only).
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_empathic"))
        .args(["sessions", "list", "--db", &pg_url])
        .env("EMPATHIC_LOG", "warn")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot be applied and is left out"),
        "{}\n{}",
        stderr(&o),
        stdout(&o)
    );
    let o = empathic(&[
        "study",
        "report",
        "--central",
        &pg_url,
        "--study",
        "test-study",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Issue 56 item 5: text that arrives is cleaned where it enters. Station ids at enrolment
/// follow the one id rule (no `<`, newline, ESC, or 5,000 characters), and the refusal
/// shows the id escaped; a stranger's envelope with control characters in its fields is
/// quarantined with a reason that has none (it goes to the log, the table and the page).
#[test]
fn text_from_strangers_is_cleaned_where_it_enters() {
    use empathic::sync::central::{Central, Stored};
    let tmp = tempfile::tempdir().unwrap();
    let central = tmp.path().join("central.db");
    let long = "s".repeat(5000);
    for bad in [
        "st<b>",
        "st\nnew",
        "st\u{1b}[31mred",
        "st\u{7}",
        long.as_str(),
    ] {
        let o = empathic(&[
            "collect",
            "enrol",
            bad,
            "--allow-plain",
            "--db",
            path_str(&central),
            "--study",
            "s",
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains('\u{1b}') && !stderr(&o).contains('\u{7}'),
            "{:?}",
            stderr(&o)
        );
    }
    let o = empathic(&[
        "collect",
        "stations",
        "--db",
        path_str(&central),
        "--study",
        "s",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).contains("st<b>"), "{}", stdout(&o));
    let mut c = Central::open(path_str(&central)).unwrap();
    for envelope in [
        serde_json::json!({"v": 1, "message_id": "m-1", "kind": "x\u{7}\u{1b}[2J",
            "study": "s", "station": "st", "subject": "a", "sha256": "00", "data": "",
            "chunk": 0, "chunks": 1}),
        serde_json::json!({"v": 1, "message_id": "m\u{1b}]0;owned\u{7}", "kind": "session",
            "study": "s", "station": "st", "subject": "a", "sha256": "00", "data": "",
            "chunk": 0, "chunks": 1}),
    ] {
        match c
            .store_publish("empathic/v1/s/st/session", envelope.to_string().as_bytes())
            .unwrap()
        {
            Stored::Quarantined { reason, .. } => {
                assert!(!reason.chars().any(char::is_control), "{reason:?}")
            }
            other => panic!("{other:?}"),
        }
    }
}

/// Issue 56 item 10: a record newer than its collector is not stranded. It is refused
/// `too_new`, not settled and with no receipt (the station holds it and sends it again),
/// and when it comes again to a collector that reads it (here: the same message id with a
/// version this build reads, standing for the upgrade) it is judged again and stored, not
/// answered as a duplicate.
#[test]
fn a_record_newer_than_its_collector_is_held_for_an_upgrade_not_settled() {
    use empathic::sync::central::{Central, Stored};
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("station.db");
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let mut central = Central::open(path_str(&tmp.path().join("central.db"))).unwrap();
    let mut forger = Forger::new(&db);
    let genuine = forger.record();
    let mut newer = genuine.clone();
    newer["version"] = 3.into();
    match forger.send(&mut central, &newer) {
        Stored::Quarantined {
            reason,
            receipt,
            refusal,
        } => {
            assert!(
                receipt.is_none(),
                "no receipt: the station must send it again"
            );
            let r = refusal.expect("a refusal");
            assert_eq!(r.code, "too_new");
            assert!(!r.settled, "held, not settled");
            assert!(
                reason.contains("version 3") && reason.contains("upgrade"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The same message again, as an upgraded collector would read it.
    forger.next -= 1;
    assert!(
        matches!(forger.send(&mut central, &genuine), Stored::Record { .. }),
        "judged again and stored"
    );
}
