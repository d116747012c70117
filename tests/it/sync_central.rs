//! The central database, SQLite and PostgreSQL side by side, against a real Mosquitto and a
//! real PostgreSQL (a throwaway cluster the test starts): two stations sync, two collectors
//! (one per database) take every message, and each central database then holds every
//! session's rows exactly as its station does, reads with `sessions`, `evaluate`, `report`
//! and `export windows`, follows a `--replace` and removes a withdrawn participant.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::broker::*;
use crate::common::central::*;
use crate::common::postgres::Postgres;
use crate::common::*;
use empathic::store::CentralError;

fn stop(mut c: Collector) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    c.wait().unwrap();
}

/// The demo session as station 2's `other-0001` of participant `P-OTHER`, under `dir`.
fn other_station_session(dir: &Path) -> std::path::PathBuf {
    copy_session_as(
        &demo_session(),
        &dir.join("other"),
        &[
            ("session_id", "other-0001"),
            ("participant_id", "P-OTHER"),
            ("station_id", "station-2"),
        ],
    )
}

#[test]
fn sqlite_and_postgresql_central_databases_hold_what_the_stations_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let pg = Postgres::start();
    let pg_url = pg.database("study");
    let central = tmp.path().join("central.db");
    let mut collectors = vec![
        start_collector_as(path_str(&central), broker.port, "c-sqlite"),
        start_collector_as(&pg_url, broker.port, "c-postgres"),
    ];
    // A probe proves both collectors subscribed: each quarantines it.
    wait_subscribed(
        broker.port,
        &[path_str(&central), pg_url.as_str()],
        Duration::from_secs(20),
    );

    // Station 1: the demo and a later session (default content: window features, no
    // transcript). Station 2: another participant, transcripts synced.
    let fast = config_without_vision_models(tmp.path());
    let with_words =
        config_without_vision_models_and(tmp.path(), "words.toml", "[sync]\ntranscripts = true\n");
    let db1 = tmp.path().join("station-1.db");
    let db2 = tmp.path().join("station-2.db");
    assert!(replay_cli(&demo_session(), &db1, Some(&fast))
        .status
        .success());
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db1, Some(&fast)).status.success());
    let other = other_station_session(tmp.path());
    assert!(replay_cli(&other, &db2, Some(&with_words)).status.success());
    sync_ok(&db1, broker.port, "station-1");
    sync_ok(&db2, broker.port, "station-2");
    for db in [&db1, &db2] {
        let s = empathic(&["sync", "status", "--db", path_str(db), "--json"]);
        let s: serde_json::Value = serde_json::from_str(&stdout(&s)).unwrap();
        assert_eq!(
            (s["pending"].as_u64(), s["sent"].as_u64()),
            (Some(0), Some(0))
        );
    }
    let all = ["demo-0001", "demo-0002", "other-0001"];
    wait_until("three sessions in both central databases", || {
        let lite = empathic::store::Store::open(&central).unwrap();
        sessions_in(lite.connection_for_tests()) == all
            && sessions_in(pg_view(&pg_url).connection_for_tests()) == all
    });

    // Every carried row, equal to the station's, in both.
    let check = |db: &Path, id: &str, transcripts: bool| {
        let station = crate::common::store::open_db(db);
        let want = record_rows(&station, id, transcripts);
        assert!(want.iter().any(|l| l.starts_with("window_features ")));
        assert_eq!(
            want.iter().any(|l| l.starts_with("utterances ")),
            transcripts
        );
        let lite = crate::common::store::open_db(&central);
        same_rows(
            &record_rows(&lite, id, transcripts),
            &want,
            &format!("{id} in SQLite"),
        );
        let pg_store = pg_view(&pg_url);
        same_rows(
            &record_rows(pg_store.connection_for_tests(), id, transcripts),
            &want,
            &format!("{id} in PostgreSQL"),
        );
    };
    check(&db1, "demo-0001", false);
    check(&db1, "demo-0002", false);
    check(&db2, "other-0001", true);

    // The reading commands work on both, and agree.
    for target in [path_str(&central), pg_url.as_str()] {
        let o = empathic(&["sessions", "list", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let listed: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 3, "{target}");
        let page = tmp.path().join("report.html");
        let o = empathic(&[
            "report",
            "demo-0001",
            "--db",
            target,
            "--out",
            path_str(&page),
        ]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let html = std::fs::read_to_string(&page).unwrap();
        assert!(html.contains("demo-0001"));
        // What this database does not hold is said, never shown as zero.
        assert!(html.contains("This is a central database"), "{target}");
        assert!(html.contains("not synced here"), "{target}");
        assert!(!html.contains(" of 420 frames"), "{target}");
        assert!(
            html.contains("Drawn from the stored window means"),
            "{target}"
        );
        assert!(
            html.contains("utterances are not synced to this database"),
            "{target}"
        );
        let o = empathic(&["sessions", "show", "demo-0001", "--db", target]);
        let text = stdout(&o);
        assert!(
            text.contains("a central database")
                && text.contains("per-frame values not synced here")
                && text.contains("events not synced here")
                && text.contains("utterances not synced here")
                && !text.contains("present on 0"),
            "{target}: {text}"
        );
        let o = empathic(&["sessions", "show", "other-0001", "--db", target]);
        let text = stdout(&o);
        assert!(
            text.contains("utterances") && !text.contains("utterances not synced"),
            "{target}: {text}"
        );
        // The list names station and participant, and a long id keeps its column.
        let o = empathic(&["sessions", "list", "--db", target]);
        let text = stdout(&o);
        let header = text.lines().next().unwrap();
        assert!(
            header.contains("station") && header.contains("participant"),
            "{text}"
        );
        assert!(
            text.lines().any(|l| l.contains("other-0001")
                && l.contains("station-2")
                && l.contains("P-OTHER")),
            "{text}"
        );
    }
    // The station's own database says nothing of syncing.
    let o = empathic(&["sessions", "show", "demo-0001", "--db", path_str(&db1)]);
    assert!(
        !stdout(&o).contains("central database") && stdout(&o).contains("present on"),
        "{}",
        stdout(&o)
    );
    // `sync` with no station id refuses rather than publish as `unknown-station`.
    let o = empathic(&[
        "sync",
        "--db",
        path_str(&db1),
        "--broker",
        &format!("mqtt://127.0.0.1:{}", broker.port),
        "--until-synced",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no station id"), "{}", stderr(&o));
    let evaluate = |target: &str| {
        let o = empathic(&["evaluate", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        stdout(&o)
    };
    assert_eq!(evaluate(path_str(&central)), evaluate(&pg_url));
    let show = |target: &str| {
        let o = empathic(&["sessions", "show", "demo-0001", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let mut v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        // Where the station read the recording stays on the station, and so do the raw
        // event log, the transcript and the per-frame features this study does not sync
        // (what `show` counts of them).
        v["source_path"] = serde_json::Value::Null;
        v["synced_content"] = serde_json::Value::Null;
        v["events"] = serde_json::Value::Null;
        v["utterances"] = serde_json::Value::Null;
        for m in v["modalities"].as_array_mut().unwrap() {
            m["present_frames"] = serde_json::Value::Null;
        }
        v
    };
    assert_eq!(show(path_str(&db1)), show(path_str(&central)));
    assert_eq!(show(path_str(&db1)), show(&pg_url));
    // Export from the central file: window means equal to the station's export.
    for (db, out) in [
        (path_str(&db1), "from-station"),
        (path_str(&central), "from-central"),
        (pg_url.as_str(), "from-postgres"),
    ] {
        let o = empathic(&[
            "export",
            "windows",
            "--db",
            db,
            "--out",
            path_str(&tmp.path().join(out)),
            "--session",
            "demo-0001",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // Issue 44: field by field, not only the arrays: every window line, and every field of
    // the session in the manifest (text_source was `dialogue_app` centrally, `asr` on the
    // station) but what per-frame features decide (not synced here: `frames` 0 centrally).
    let lines =
        |dir: &str| std::fs::read_to_string(tmp.path().join(dir).join("windows.jsonl")).unwrap();
    let session_entry = |dir: &str| {
        let m: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(tmp.path().join(dir).join("manifest.json")).unwrap(),
        )
        .unwrap();
        let mut s = m["sessions"][0].clone();
        s["frames"] = serde_json::Value::Null;
        if let Some(mods) = s["modalities"].as_array_mut() {
            for m in mods {
                m["present_frames"] = serde_json::Value::Null;
            }
        }
        s
    };
    for central_dir in ["from-central", "from-postgres"] {
        assert_eq!(lines("from-station"), lines(central_dir), "{central_dir}");
        assert_eq!(
            session_entry("from-station"),
            session_entry(central_dir),
            "{central_dir}"
        );
    }
    // The central database holds the stories shown but no embeddings: the export embeds
    // them with the same encoder from the same text, so the rows equal the station's.
    let stories = |dir: &str| {
        let d = tmp.path().join(dir).join("stories");
        let lines = std::fs::read_to_string(d.join("all-MiniLM-L6-v2.jsonl")).unwrap();
        let ids: Vec<String> = lines
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["story_id"].to_string())
            .collect();
        use ndarray_npy::ReadNpyExt;
        let m = ndarray::Array2::<f32>::read_npy(
            std::fs::File::open(d.join("all-MiniLM-L6-v2.npy")).unwrap(),
        )
        .unwrap();
        (ids, m)
    };
    let (central_ids, central_vectors) = stories("from-central");
    let (station_ids, station_vectors) = stories("from-station");
    assert!(!central_ids.is_empty());
    for (i, id) in central_ids.iter().enumerate() {
        let j = station_ids.iter().position(|s| s == id).unwrap();
        let dot: f32 = central_vectors
            .row(i)
            .iter()
            .zip(station_vectors.row(j))
            .map(|(a, b)| a * b)
            .sum();
        assert!(dot > 0.9999, "story {id}: cosine {dot}");
    }
    // Without per-frame features synced, the training reader says what is missing.
    let o = load_with_training_reader(&tmp.path().join("from-central"));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("frame_features = true"),
        "{}",
        stderr(&o)
    );
    let o = load_with_training_reader(&tmp.path().join("from-station"));
    assert!(o.status.success(), "data.py: {}", stderr(&o));
    for name in [
        "acoustic_compare_window_mean.npy",
        "acoustic_compare_window_present.npy",
    ] {
        let read = |dir: &str| std::fs::read(tmp.path().join(dir).join("demo-0001").join(name));
        assert_eq!(
            read("from-station").unwrap(),
            read("from-central").unwrap(),
            "{name}"
        );
    }

    // A replacement on station 1 and a withdrawal on station 2 reach both.
    let o = replay_cli_with(&demo_session(), &db1, Some(&fast), &["--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A record of theirs whose last chunk never came: its first chunk holds their words.
    for target in [path_str(&central), pg_url.as_str()] {
        let data = "{\"tables\":{\"utterances\":\"zebra-marmalade-7731";
        let envelope = serde_json::json!({"v": 1, "message_id": "stray-1", "seq": 99,
            "kind": "session", "study": "test-study", "station": "station-2",
            "subject": "other-0001", "chunk": 0, "chunks": 2,
            "sha256": "0".repeat(64), "data": data});
        let mut c = empathic::sync::central::Central::open(target).unwrap();
        let stored = c
            .store_publish(
                "empathic/v1/test-study/station-2/session",
                envelope.to_string().as_bytes(),
            )
            .unwrap();
        assert!(
            matches!(stored, empathic::sync::central::Stored::Chunk),
            "{target}"
        );
    }
    let o = empathic(&["participant", "purge", "P-OTHER", "--db", path_str(&db2)]);
    assert!(o.status.success(), "{}", stderr(&o));
    sync_ok(&db1, broker.port, "station-1");
    sync_ok(&db2, broker.port, "station-2");
    let two = ["demo-0001", "demo-0002"];
    wait_until("the purge in both central databases", || {
        let lite = empathic::store::Store::open(&central).unwrap();
        sessions_in(lite.connection_for_tests()) == two
            && sessions_in(pg_view(&pg_url).connection_for_tests()) == two
    });
    check(&db1, "demo-0001", false);
    let lite = crate::common::store::open_db(&central);
    for sql in [
        "SELECT count(*) FROM utterances",
        "SELECT count(*) FROM participants WHERE id = 'P-OTHER'",
        "SELECT count(*) FROM collect_records WHERE participant = 'P-OTHER' AND kind = 'session'",
    ] {
        assert_eq!(crate::common::store::count(&lite, sql), 0, "{sql}");
    }
    assert_eq!(
        crate::common::store::count(
            &lite,
            "SELECT count(*) FROM collect_purges WHERE participant_id = 'P-OTHER'"
        ),
        1
    );
    // No byte of theirs in the central files: not their words (synced with transcripts
    // on), not the stray chunk, neither in live pages nor free ones nor the log.
    assert_eq!(
        crate::common::store::count(&lite, "SELECT count(*) FROM collect_chunks"),
        0
    );
    drop(lite);
    for needle in [&b"zebra-marmalade-7731"[..], &b"prudently in his power"[..]] {
        for file in ["central.db", "central.db-wal", "central.db-shm"] {
            let bytes = std::fs::read(tmp.path().join(file)).unwrap_or_default();
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{file} still holds `{}`",
                String::from_utf8_lossy(needle)
            );
        }
    }
    // PostgreSQL: the collector tables' files hold none either (the server's own
    // write-ahead log recycles on its schedule, see README).
    let needle = b"zebra-marmalade-7731";
    let mut stack = vec![pg.data_dir().join("base")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "{} still holds the purged chunk",
                    p.display()
                );
            }
        }
    }
    let mut pgc = ::postgres::Client::connect(&pg_url, ::postgres::NoTls).unwrap();
    let chunks: i64 = pgc
        .query_one("SELECT count(*) FROM collect_chunks", &[])
        .unwrap()
        .get(0);
    assert_eq!(chunks, 0);
    let left: i64 = pgc
        .query_one(
            "SELECT count(*) FROM collect_records WHERE participant = 'P-OTHER' AND kind = 'session'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    let purges: i64 = pgc
        .query_one("SELECT count(*) FROM collect_purges", &[])
        .unwrap()
        .get(0);
    assert_eq!(purges, 1);
    // Each central database holds each station message once.
    let station_ids = |db: &Path| -> Vec<String> {
        crate::common::store::column(
            &crate::common::store::open_db(db),
            "SELECT message_id FROM outbox",
        )
    };
    let mut want: Vec<String> = station_ids(&db1);
    want.extend(station_ids(&db2));
    want.sort();
    let lite = crate::common::store::open_db(&central);
    let mut lite_ids: Vec<String> =
        crate::common::store::column(&lite, "SELECT message_id FROM collect_records");
    lite_ids.sort();
    assert_eq!(lite_ids, want);
    let mut pg_ids: Vec<String> = pgc
        .query("SELECT message_id FROM collect_records", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    pg_ids.sort();
    assert_eq!(pg_ids, want);
    for c in collectors.drain(..) {
        stop(c);
    }
    drop(broker);
    drop(pg);
}

/// The station's outbox messages as the collector receives them: (seq, kind, topic,
/// envelopes).
fn deliveries(db: &Path) -> Vec<(i64, String, String, Vec<String>)> {
    let store = empathic::store::Store::open(db).unwrap();
    let opts = empathic::sync::SyncOptions {
        announce_status: false,
        host: "unused".into(),
        port: 0,
        study: "test-study".into(),
        station: "station-1".into(),
        auth: Default::default(),
        collectors: Vec::new(),
        sealing: None,
    };
    store
        .outbox()
        .pending(100, "9999", "")
        .unwrap()
        .into_iter()
        .map(|m| {
            let topic = format!("empathic/v1/test-study/station-1/{}", m.kind);
            (
                m.seq,
                m.kind.clone(),
                topic,
                empathic::sync::envelopes(&m, &opts),
            )
        })
        .collect()
}

#[test]
fn out_of_order_duplicated_and_malformed_messages_do_no_harm_in_either_database() {
    use empathic::sync::central::{Central, Stored};
    let tmp = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    let fast = config_without_vision_models(tmp.path());
    // A station: demo-0001 stored, then replaced (its record, a tombstone, a new record).
    let db = tmp.path().join("station.db");
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let o = replay_cli_with(&demo_session(), &db, Some(&fast), &["--replace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A later session of the same participant answers the same survey item: on the
    // station it now owns the answer.
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db, Some(&fast)).status.success());
    let msgs = deliveries(&db);
    let kinds: Vec<(i64, &str)> = msgs.iter().map(|m| (m.0, m.1.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (1, "session"),
            (2, "tombstone"),
            (3, "session"),
            (4, "session")
        ]
    );
    assert!(msgs[2].3.len() > 1, "the record spans several chunks");
    let station = crate::common::store::open_db(&db);
    let want = record_rows(&station, "demo-0001", false);
    let want_later = record_rows(&station, "demo-0002", false);
    assert!(want_later
        .iter()
        .any(|l| l.starts_with("survey_responses ")));
    assert!(!want.iter().any(|l| l.starts_with("survey_responses ")));
    for target in [
        tmp.path().join("central.db").to_string_lossy().into_owned(),
        pg.database("faults"),
    ] {
        let mut central = Central::open(&target).unwrap();
        let mut deliver = |topic: &str, envelope: &str| {
            central.store_publish(topic, envelope.as_bytes()).unwrap()
        };
        // The later session's record first: the older one arriving after it must not
        // take its survey answer.
        for c in &msgs[3].3 {
            deliver(&msgs[3].2, c);
        }
        // The newest record of demo-0001, its chunks backwards and one of them twice.
        let (_, _, topic, chunks) = &msgs[2];
        let mut outcomes = Vec::new();
        for c in chunks.iter().rev().chain(chunks.last()) {
            outcomes.push(deliver(topic, c));
        }
        assert!(outcomes[..chunks.len() - 1]
            .iter()
            .all(|o| *o == Stored::Chunk));
        assert!(
            matches!(outcomes[chunks.len() - 1], Stored::Record { .. }),
            "{target}"
        );
        assert!(matches!(outcomes[chunks.len()], Stored::Duplicate { .. }));
        // Then the older tombstone and the older record: kept, voided, harmless.
        for m in [&msgs[1], &msgs[0]] {
            let mut last = Stored::Chunk;
            for c in &m.3 {
                last = deliver(&m.2, c);
            }
            assert!(matches!(last, Stored::Record { .. }), "{target}: {last:?}");
        }
        // Garbage: not JSON, oversized, on the wrong topic, a tampered chunk (no receipt:
        // a clean resend can still come), and a record of a version newer than this build
        // reads (no receipt either: the station holds it for an upgraded collector, and its
        // resend is judged again, not answered as a duplicate).
        let quarantined = |s: Stored| match s {
            Stored::Quarantined { receipt, .. } => receipt.is_some(),
            other => panic!("{target}: {other:?}"),
        };
        assert!(!quarantined(deliver(topic, "not json")));
        assert!(!quarantined(deliver(topic, &"x".repeat((1 << 20) + 1))));
        assert!(!quarantined(deliver(
            "empathic/v1/test-study/station-2/session",
            &msgs[0].3[0]
        )));
        let mut tampered: serde_json::Value = serde_json::from_str(&msgs[0].3[0]).unwrap();
        tampered["message_id"] = "tampered".into();
        tampered["chunks"] = 1.into();
        tampered["chunk"] = 0.into();
        assert!(!quarantined(deliver(topic, &tampered.to_string())));
        let unreadable = r#"{"format":"empathic-session","version":9}"#;
        let mut bad = tampered.clone();
        bad["message_id"] = "unreadable".into();
        bad["data"] = unreadable.into();
        bad["sha256"] = format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(unreadable)).into();
        for _ in 0..2 {
            match deliver(topic, &bad.to_string()) {
                Stored::Quarantined {
                    receipt: None,
                    refusal: Some(r),
                    ..
                } => assert!(r.code == "too_new" && !r.settled, "{target}: {r:?}"),
                other => panic!("{target}: {other:?}"),
            }
        }
        // The view shows the newest records, exactly; the answer stays with demo-0002.
        let view = Central::open(&target).unwrap().read_view().unwrap();
        same_rows(
            &record_rows(view.connection_for_tests(), "demo-0001", false),
            &want,
            &target,
        );
        same_rows(
            &record_rows(view.connection_for_tests(), "demo-0002", false),
            &want_later,
            &target,
        );
        // The study page's light view, kept between reads, agrees on the sessions and
        // leaves the feature vectors out (PostgreSQL; SQLite reads the file itself).
        let listed =
            |s: &empathic::store::Store| -> Result<Vec<(String, Option<String>, String)>, CentralError> {
                let mut l: Vec<_> = s
                    .list_sessions()?
                    .into_iter()
                    .map(|x| (x.id, x.participant_id, x.status))
                    .collect();
                l.sort();
                Ok(l)
            };
        let mut page_view = empathic::sync::central::PageView::default();
        let mut reader = Central::open(&target).unwrap();
        let full = listed(&Central::open(&target).unwrap().read_view().unwrap()).unwrap();
        assert_eq!(full.len(), 2, "{full:?}");
        assert_eq!(reader.with_page_view(&mut page_view, listed).unwrap(), full);
        if target.starts_with("postgres") {
            let features = reader
                .with_page_view(&mut page_view, |s| {
                    Ok(crate::common::store::count(
                        s.connection_for_tests(),
                        "SELECT count(*) FROM window_features",
                    ))
                })
                .unwrap();
            assert_eq!(features, 0, "the page view carries no feature vectors");
            // Its folded predictions say what the raw rows say: the same bins per phase,
            // the same session-level prediction of each rated story.
            let full_view = Central::open(&target).unwrap().read_view().unwrap();
            let (bins, rated) = (
                full_view.prediction_bins().unwrap(),
                full_view.rated_stories().unwrap(),
            );
            assert!(!bins.is_empty() && !rated.is_empty());
            let (got_bins, got_rated) = reader
                .with_page_view(&mut page_view, |s| {
                    Ok((s.prediction_bins()?, s.rated_stories()?))
                })
                .unwrap();
            assert_eq!(got_bins, bins);
            assert_eq!(got_rated.len(), rated.len());
            for (g, w) in got_rated.iter().zip(&rated) {
                assert_eq!(
                    (&g.predictor, &g.session_id, &g.story_id, g.rating),
                    (&w.predictor, &w.session_id, &w.story_id, w.rating)
                );
                assert!((g.predicted - w.predicted).abs() < 1e-9, "{g:?} {w:?}");
            }
        }
        // A withdrawal (seq 10), then a late redelivery of a record from before it.
        let purge = serde_json::json!({"format": "empathic-purge", "version": 2,
            "participant_id": "P-DEMO", "sessions": ["demo-0001"]})
        .to_string();
        let envelope = serde_json::json!({"v": 1, "message_id": "purge-1", "seq": 10,
            "kind": "purge", "study": "test-study", "station": "station-1",
            "subject": "P-DEMO", "chunk": 0, "chunks": 1,
            "sha256": format!("{:x}", <sha2::Sha256 as sha2::Digest>::digest(&purge)),
            "data": purge});
        let mut central = Central::open(&target).unwrap();
        assert!(matches!(
            central
                .store_publish(
                    "empathic/v1/test-study/station-1/purge",
                    envelope.to_string().as_bytes()
                )
                .unwrap(),
            Stored::Record { .. }
        ));
        for c in &msgs[2].3 {
            central.store_publish(topic, c.as_bytes()).unwrap();
        }
        let view = central.read_view().unwrap();
        assert!(
            sessions_in(view.connection_for_tests()).is_empty(),
            "{target}"
        );
        // The kept page view follows: the purged session is gone from it too.
        let after = reader.with_page_view(&mut page_view, listed).unwrap();
        assert_eq!(after, listed(&view).unwrap(), "{target}");
        assert!(after.is_empty(), "{target}: {after:?}");
        assert_eq!(
            crate::common::store::count(
                view.connection_for_tests(),
                "SELECT count(*) FROM participants WHERE id = 'P-DEMO'"
            ),
            0
        );
    }
}

/// Station health in the central database, SQLite and PostgreSQL alike: the latest by
/// `sent_at` (a retained older one handed out again changes nothing), a history, the
/// status word; malformed, from the future, unsigned where sealed is required, signed by a
/// key not enrolled for the station it names, or with a forged field: quarantined with the
/// reason, nothing kept.
#[test]
fn station_health_is_kept_latest_first_and_refused_with_a_reason_in_either_database() {
    use empathic::sync::central::{Central, Gate, Stored};
    use empathic::sync::health::{signed_bytes, Health, HEALTH_FORMAT, HEALTH_VERSION};
    use empathic::sync::keys::{generate, KeyKind, SigningKey};
    use empathic::sync::status::{
        signed_bytes as status_signed_bytes, SignedStatus, STATUS_FORMAT, STATUS_VERSION,
    };
    let tmp = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    let key_a = generate(&tmp.path().join("a.key"), KeyKind::Ed25519).unwrap();
    let _key_b = generate(&tmp.path().join("b.key"), KeyKind::Ed25519).unwrap();
    let signing_a = SigningKey::load(&tmp.path().join("a.key")).unwrap();
    let signing_b = SigningKey::load(&tmp.path().join("b.key")).unwrap();
    let sign = |mut h: Health, k: &SigningKey| {
        h.signer = Some(k.public().to_string());
        h.sig = Some(k.sign(&signed_bytes(&h)));
        h
    };
    let health = |station: &str, sent_at: &str, camera: bool| Health {
        format: HEALTH_FORMAT.into(),
        v: HEALTH_VERSION,
        study: "hs".into(),
        station: station.into(),
        sent_at: sent_at.into(),
        software: "0.1.0".into(),
        camera: empathic::sync::health::DeviceHealth {
            present: camera,
            problem: (!camera).then(|| "no camera at /dev/video0".to_string()),
        },
        ..Health::default()
    };
    let bytes = |h: &Health| serde_json::to_vec(h).unwrap();
    let topic = |s: &str| format!("empathic/v1/hs/{s}/health");
    let sealed = Gate {
        accept_plain: false,
        study_key: None,
    };
    for target in [
        tmp.path().join("central.db").display().to_string(),
        pg.database("health"),
    ] {
        let mut c = Central::open(&target).unwrap();
        c.enrol("hs", "a", Some(&key_a), false).unwrap();
        let newer = sign(health("a", "2026-11-25T10:00:00.000Z", false), &signing_a);
        let older = sign(health("a", "2026-11-25T09:00:00.000Z", true), &signing_a);
        assert_eq!(
            c.store_health(&topic("a"), &bytes(&newer), &sealed)
                .unwrap(),
            Stored::Health {
                station: "a".into()
            }
        );
        // The retained older one, handed out again, is history, not the latest.
        c.store_health(&topic("a"), &bytes(&older), &sealed)
            .unwrap();
        let status_a = |word: &str, connection: &str, k: &SigningKey| {
            let mut s = SignedStatus {
                format: STATUS_FORMAT.into(),
                v: STATUS_VERSION,
                study: "hs".into(),
                station: "a".into(),
                status: word.into(),
                connection: connection.into(),
                signer: k.public().to_string(),
                sig: String::new(),
            };
            s.sig = k.sign(&status_signed_bytes(&s));
            serde_json::to_vec(&s).unwrap()
        };
        let status_topic = "empathic/v1/hs/a/status";
        let first = "2026-11-25T09:59:00.000Z";
        let second = "2026-11-25T10:10:00.000Z";
        c.store_status(
            status_topic,
            &status_a("online", second, &signing_a),
            &sealed,
        )
        .unwrap();
        // A signed `offline` of an earlier connection (a replayed last will) changes nothing.
        c.store_status(
            status_topic,
            &status_a("offline", first, &signing_a),
            &sealed,
        )
        .unwrap();
        assert_eq!(
            c.station_health("hs").unwrap()[0].status.as_deref(),
            Some("online"),
            "{target}"
        );
        let refused = |c: &mut Central, t: &str, payload: &[u8], why: &str| match c
            .store_health(t, payload, &sealed)
            .unwrap()
        {
            Stored::Quarantined {
                reason, receipt, ..
            } => {
                assert!(reason.contains(why), "{target}: {reason}");
                assert!(receipt.is_none());
            }
            other => panic!("{target}: {why}: {other:?}"),
        };
        refused(
            &mut c,
            &topic("a"),
            b"not json",
            "not an empathic-health object",
        );
        let future = sign(health("a", "2099-01-01T00:00:00.000Z", true), &signing_a);
        refused(&mut c, &topic("a"), &bytes(&future), "from the future");
        let unsigned = health("a", "2026-11-25T10:30:00.000Z", true);
        refused(
            &mut c,
            &topic("a"),
            &bytes(&unsigned),
            "only sealed messages",
        );
        let stranger = sign(health("a", "2026-11-25T10:30:00.000Z", true), &signing_b);
        refused(
            &mut c,
            &topic("a"),
            &bytes(&stranger),
            "no station of study hs",
        );
        let mut forged = sign(health("a", "2026-11-25T10:30:00.000Z", false), &signing_a);
        forged.camera.present = true;
        refused(&mut c, &topic("a"), &bytes(&forged), "does not verify");
        refused(&mut c, &topic("b"), &bytes(&newer), "came on");
        // Issue 43: under sealed sync no unsigned word changes what staff see; a word signed
        // by another key, or forged, neither.
        for (payload, why) in [
            (b"rebooting".to_vec(), "neither a word"),
            (b"offline".to_vec(), "only a status signed"),
            (
                status_a("offline", second, &signing_b),
                "no station of study hs",
            ),
            (
                {
                    let mut v: serde_json::Value =
                        serde_json::from_slice(&status_a("offline", second, &signing_a)).unwrap();
                    v["connection"] = "2026-11-25T10:20:00.000Z".into();
                    serde_json::to_vec(&v).unwrap()
                },
                "does not verify",
            ),
        ] {
            match c.store_status(status_topic, &payload, &sealed).unwrap() {
                Stored::Quarantined { reason, .. } => {
                    assert!(reason.contains(why), "{target}: {reason}")
                }
                other => panic!("{target}: {why}: {other:?}"),
            }
        }
        assert_eq!(
            c.station_health("hs").unwrap()[0].status.as_deref(),
            Some("online"),
            "{target}"
        );
        // The same connection's signed last will is believed.
        c.store_status(
            status_topic,
            &status_a("offline", second, &signing_a),
            &sealed,
        )
        .unwrap();
        // Strangers: unsigned words on made-up names make no station (sealed), and where
        // plain is taken from anyone, at most STRANGERS_KEPT of them are kept.
        for i in 0..30 {
            c.store_status(
                &format!("empathic/v1/hs/made-up-{i}/status"),
                b"offline",
                &sealed,
            )
            .unwrap();
        }
        assert_eq!(c.station_health("hs").unwrap().len(), 1, "{target}");
        let kept = empathic::sync::central::STRANGERS_KEPT;
        for i in 0..kept + 20 {
            c.store_status(
                &format!("empathic/v1/hs/plain-{i}/status"),
                b"online",
                &Gate::plain(),
            )
            .unwrap();
        }
        let stations = c.station_health("hs").unwrap();
        assert_eq!(stations.len(), 1 + kept, "{target}");
        assert!(stations
            .iter()
            .any(|s| s.station == format!("plain-{}", kept + 19)));
        let stations = c.station_health("hs").unwrap();
        let a = stations.iter().find(|s| s.station == "a").unwrap();
        assert_eq!(
            a.health.as_ref().unwrap()["sent_at"],
            "2026-11-25T10:00:00.000Z"
        );
        assert_eq!(a.health.as_ref().unwrap()["camera"]["present"], false);
        assert_eq!(a.status.as_deref(), Some("offline"));
        assert_eq!(a.history, 2, "{target}");
    }
}

/// Issue 44: `participant purge P --db CENTRAL` printed "purged" and left PostgreSQL as it
/// was, and on a central SQLite file kept every stored payload. On both databases it now
/// erases every record, chunk and quarantined copy of the participant, exits 0 only when
/// nothing of theirs is left (the raw SQLite file and `pg_dump` are searched), keeps the
/// other participant whole, and drops a record of theirs that arrives later.
#[test]
fn a_withdrawal_on_a_central_database_erases_the_participant_in_sqlite_and_postgresql() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let pg = Postgres::start();
    let pg_url = pg.database("withdraw");
    let central = tmp.path().join("central.db");
    let start = || {
        let c = vec![
            start_collector_as(path_str(&central), broker.port, "w-sqlite"),
            start_collector_as(&pg_url, broker.port, "w-postgres"),
        ];
        wait_subscribed(
            broker.port,
            &[path_str(&central), pg_url.as_str()],
            Duration::from_secs(20),
        );
        c
    };
    let collectors = start();
    let words =
        config_without_vision_models_and(tmp.path(), "words.toml", "[sync]\ntranscripts = true\n");
    let db1 = tmp.path().join("station-1.db");
    let db2 = tmp.path().join("station-2.db");
    assert!(replay_cli(&demo_session(), &db1, Some(&words))
        .status
        .success());
    let other = other_station_session(tmp.path());
    assert!(replay_cli(&other, &db2, Some(&words)).status.success());
    sync_ok(&db1, broker.port, "station-1");
    sync_ok(&db2, broker.port, "station-2");
    let both = ["demo-0001", "other-0001"];
    wait_until("both sessions in both central databases", || {
        let lite = empathic::store::Store::open(&central).unwrap();
        sessions_in(lite.connection_for_tests()) == both
            && sessions_in(pg_view(&pg_url).connection_for_tests()) == both
    });
    let participant: String = crate::common::store::open_db(&db1)
        .query_row("SELECT participant_id FROM sessions", [], |r| r.get(0))
        .unwrap();
    // Issue 55 item 5 (docs/station.md, "Backing up and restoring"): backups taken online,
    // as the docs say (the collectors still run), restore every session.
    a_backup_taken_online_restores_every_session(tmp.path(), &db1, &central, &pg, &pg_url);
    for c in collectors {
        stop(c);
    }
    let pg_dump = |url: &str| {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin/pg_dump")))
            .find(|p| p.exists())
            .unwrap();
        let o = Command::new(bin)
            .args(["--data-only", url])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let raw = |p: &Path| {
        let mut bytes = std::fs::read(p).unwrap();
        if let Ok(wal) = std::fs::read(format!("{}-wal", p.display())) {
            bytes.extend(wal);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    assert!(raw(&central).contains("demo-0001"));
    assert!(pg_dump(&pg_url).contains("demo-0001"));
    for target in [path_str(&central), pg_url.as_str()] {
        let o = empathic(&["participant", "purge", &participant, "--db", target]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        assert!(
            stdout(&o).contains(&format!("withdrew participant {participant}"))
                && stdout(&o).contains("1 session(s)"),
            "{target}: {}",
            stdout(&o)
        );
        // Again: nothing left to withdraw, said so, exit 2.
        let o = empathic(&["participant", "purge", &participant, "--db", target]);
        assert_eq!(o.status.code(), Some(2), "{target}: {}", stderr(&o));
    }
    assert!(
        !raw(&central).contains("demo-0001"),
        "the SQLite file holds demo-0001"
    );
    let dump = pg_dump(&pg_url);
    assert!(!dump.contains("demo-0001"), "pg_dump holds demo-0001");
    assert!(raw(&central).contains("other-0001") && dump.contains("other-0001"));
    for target in [path_str(&central), pg_url.as_str()] {
        let o = empathic(&["sessions", "list", "--db", target, "--json"]);
        let listed: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let ids: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s["id"]
                    .as_str()
                    .unwrap_or(s["session_id"].as_str().unwrap_or(""))
            })
            .collect();
        assert_eq!(ids, ["other-0001"], "{target}");
    }
    // A record of theirs arriving later (the station replays and syncs again) is dropped.
    let collectors = start();
    assert!(empathic(&[
        "replay",
        path_str(&demo_session()),
        "--db",
        path_str(&db1),
        "--config",
        path_str(&words),
        "--replace"
    ])
    .status
    .success());
    sync_ok(&db1, broker.port, "station-1");
    std::thread::sleep(Duration::from_secs(1));
    let lite = empathic::store::Store::open(&central).unwrap();
    assert_eq!(sessions_in(lite.connection_for_tests()), ["other-0001"]);
    assert_eq!(
        sessions_in(pg_view(&pg_url).connection_for_tests()),
        ["other-0001"]
    );
    // And it leaves nothing naming them: only its message id, to acknowledge it once (a
    // trial found a stub row with the pseudonym, and a second purge "removing" it).
    let named: i64 = lite
        .connection_for_tests()
        .query_row(
            "SELECT count(*) FROM collect_records WHERE participant = ?1",
            [&participant],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(named, 0, "a later record brought {participant} back");
    let o = empathic(&[
        "participant",
        "purge",
        &participant,
        "--db",
        path_str(&central),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    // Issue 55 item 8: a pseudonym that occurs by chance inside another participant's
    // encoded data (here: four characters of a long string of other-0001's record, as
    // `P01` occurred in P02's base64 features) is withdrawn, and the check that nothing
    // of them is left does not take that substring for a trace of theirs.
    let payload: String = lite
        .connection_for_tests()
        .query_row(
            "SELECT payload FROM collect_records WHERE subject = 'other-0001' AND kind = 'session'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let inside = long_strings(&serde_json::from_str(&payload).unwrap())
        .into_iter()
        .find_map(|s| {
            s.as_bytes()
                .windows(4)
                .find(|w| w[0].is_ascii_alphabetic() && w.iter().all(u8::is_ascii_alphanumeric))
                .map(|w| String::from_utf8(w.to_vec()).unwrap())
        })
        .expect("a long string of letters and digits in other-0001's record");
    let o = empathic(&[
        "participant",
        "consent",
        &inside,
        "--given",
        "--db",
        path_str(&db2),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    sync_ok(&db2, broker.port, "station-2");
    let consent_of = |target: &str| {
        let sql = format!(
            "SELECT count(*) FROM collect_records WHERE kind = 'consent' AND subject = '{inside}'"
        );
        if target.starts_with("postgres://") {
            ::postgres::Client::connect(target, ::postgres::NoTls)
                .and_then(|mut c| c.query_one(sql.as_str(), &[]))
                .map(|r| r.get::<_, i64>(0))
                .unwrap_or(0)
        } else {
            empathic::store::Store::open(Path::new(target))
                .unwrap()
                .connection_for_tests()
                .query_row(&sql, [], |r| r.get(0))
                .unwrap_or(0)
        }
    };
    wait_until("the consent record in both central databases", || {
        consent_of(path_str(&central)) == 1 && consent_of(&pg_url) == 1
    });
    for c in collectors {
        stop(c);
    }
    for target in [path_str(&central), pg_url.as_str()] {
        let o = empathic(&["participant", "purge", &inside, "--db", target]);
        assert!(
            o.status.success(),
            "{target}: `{inside}` occurs inside other-0001's record: {}",
            stderr(&o)
        );
        assert!(stdout(&o).contains(&format!("withdrew participant {inside}")));
        // Item 9: a study named for a pseudonym it never held is refused (exit 2), with
        // no audit line written.
        let o = empathic(&[
            "participant",
            "purge",
            "P-NEVER",
            "--db",
            target,
            "--study",
            "test-study",
        ]);
        assert_eq!(o.status.code(), Some(2), "{target}: {}", stderr(&o));
        assert!(stderr(&o).contains("no participant `P-NEVER` in study test-study"));
    }
    let lite = empathic::store::Store::open(&central).unwrap();
    assert_eq!(sessions_in(lite.connection_for_tests()), ["other-0001"]);
    assert_eq!(
        sessions_in(pg_view(&pg_url).connection_for_tests()),
        ["other-0001"]
    );
    let audit: i64 = lite
        .connection_for_tests()
        .query_row(
            "SELECT count(*) FROM collect_purges WHERE participant_id = 'P-NEVER'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(audit, 0);
}

/// A station database and a central SQLite file copied with `sqlite3 .backup` while open,
/// and PostgreSQL with `pg_dump -Fc` / `pg_restore` into a new database: each restored copy
/// lists the same sessions as its original.
fn a_backup_taken_online_restores_every_session(
    tmp: &Path,
    station: &Path,
    central: &Path,
    pg: &Postgres,
    pg_url: &str,
) {
    let listed = |target: &str| {
        let o = empathic(&["sessions", "list", "--db", target, "--json"]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let mut ids: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s["id"]
                    .as_str()
                    .or(s["session_id"].as_str())
                    .unwrap_or("")
                    .to_string()
            })
            .collect();
        ids.sort();
        assert!(!ids.is_empty(), "{target} lists no session");
        ids
    };
    for (name, original) in [("station", station), ("central", central)] {
        // Held open by a reader while the backup runs, as a service would.
        let _open = crate::common::store::open_db(original);
        let copy = tmp.join(format!("{name}-backup.db"));
        let o = Command::new("sqlite3")
            .arg(original)
            .arg(format!(".backup '{}'", copy.display()))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let restored = tmp.join(format!("{name}-restored.db"));
        std::fs::copy(&copy, &restored).unwrap();
        assert_eq!(
            listed(path_str(&restored)),
            listed(path_str(original)),
            "{name}"
        );
    }
    let bin = |tool: &str| {
        std::fs::read_dir("/usr/lib/postgresql")
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin").join(tool)))
            .find(|p| p.exists())
            .unwrap()
    };
    let dump = tmp.join("central.dump");
    let o = Command::new(bin("pg_dump"))
        .args(["-Fc", "-d", pg_url, "-f", path_str(&dump)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let restored = pg.database("restored");
    let o = Command::new(bin("pg_restore"))
        .args(["-d", &restored, path_str(&dump)])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(listed(&restored), listed(pg_url));
}

/// Every string of 40 characters or more in a JSON value, depth first.
fn long_strings(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::String(s) if s.len() >= 40 => vec![s.clone()],
        serde_json::Value::Array(a) => a.iter().flat_map(long_strings).collect(),
        serde_json::Value::Object(o) => o.values().flat_map(long_strings).collect(),
        _ => Vec::new(),
    }
}

/// Issue 44: `sessions.text_source` (and the recogniser's `source`, `model`, `confidence` of
/// each utterance) never reached the central database, though the docs promise its rows
/// equal the station's. Every column of every table a record carries is synced, but the
/// station-local ones named in `STATION_LOCAL`; a column added to the schema fails here
/// until it is carried or named station-local.
#[test]
fn a_record_carries_every_column_of_the_station_schema_but_the_station_local_ones() {
    use empathic::store::outbox::{RECORD_TABLES, STATION_LOCAL};
    let tmp = tempfile::tempdir().unwrap();
    let store = empathic::store::Store::open(&tmp.path().join("s.db")).unwrap();
    let conn = store.connection_for_tests();
    for t in RECORD_TABLES {
        let mut schema: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .unwrap()
            .query_map([t.name], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        schema.retain(|c| !STATION_LOCAL.contains(&(t.name, c.as_str())));
        let mut carried: Vec<String> = t.columns.split(',').map(|c| c.trim().to_string()).collect();
        schema.sort();
        carried.sort();
        assert_eq!(carried, schema, "table {}", t.name);
    }
}

/// Issue 44 item 2: a consent change is its own record, on the study page within one sync,
/// in a central SQLite file and in PostgreSQL: a participant consented before any session
/// is listed as `given`; a later withdrawal of consent (not yet a purge) shows `withdrawn`
/// although their session's record still carries `given`.
#[test]
fn consent_changes_reach_the_study_page_within_one_sync_in_either_database() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let pg = Postgres::start();
    let pg_url = pg.database("consent");
    let central = tmp.path().join("central.db");
    let collectors = vec![
        start_collector_as(path_str(&central), broker.port, "k-sqlite"),
        start_collector_as(&pg_url, broker.port, "k-postgres"),
    ];
    wait_subscribed(
        broker.port,
        &[path_str(&central), pg_url.as_str()],
        Duration::from_secs(20),
    );
    let db = tmp.path().join("station-1.db");
    let consent = |who: &str, how: &str| {
        let o = empathic(&["participant", "consent", who, how, "--db", path_str(&db)]);
        assert!(o.status.success(), "{}", stderr(&o));
    };
    let page_consent = |target: &str, who: &str| -> Option<String> {
        let o = empathic(&[
            "study",
            "report",
            "--central",
            target,
            "--study",
            "test-study",
            "--json",
        ]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["participants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["participant"] == who)
            .map(|p| p["consent"].as_str().unwrap().to_string())
    };
    // The demo's participant has a session; P-NEW has only consented.
    let fast = config_without_vision_models(tmp.path());
    assert!(replay_cli(&demo_session(), &db, Some(&fast))
        .status
        .success());
    let participant: String = crate::common::store::open_db(&db)
        .query_row("SELECT participant_id FROM sessions", [], |r| r.get(0))
        .unwrap();
    consent(&participant, "--given");
    consent("P-NEW", "--given");
    sync_ok(&db, broker.port, "station-1");
    for target in [path_str(&central), pg_url.as_str()] {
        wait_until("the consent records stored", || {
            page_consent(target, "P-NEW").as_deref() == Some("given")
        });
        assert_eq!(page_consent(target, &participant).as_deref(), Some("given"));
    }
    // Consent withdrawn on the station: one sync, and both pages say so.
    consent(&participant, "--withdrawn");
    sync_ok(&db, broker.port, "station-1");
    for target in [path_str(&central), pg_url.as_str()] {
        wait_until("the withdrawal of consent stored", || {
            page_consent(target, &participant).as_deref() == Some("withdrawn")
        });
        assert_eq!(page_consent(target, "P-NEW").as_deref(), Some("given"));
    }
    // A purge on the station withdraws the consent records too: nothing of P-NEW stays
    // but the audit line.
    let o = empathic(&["participant", "purge", "P-NEW", "--db", path_str(&db)]);
    assert!(o.status.success(), "{}", stderr(&o));
    sync_ok(&db, broker.port, "station-1");
    for target in [path_str(&central), pg_url.as_str()] {
        wait_until("the purge stored", || {
            page_consent(target, "P-NEW").as_deref() == Some("withdrawn")
        });
    }
    let lite = crate::common::store::open_db(&central);
    let left: i64 = lite
        .query_row(
            "SELECT count(*) FROM collect_records WHERE participant = 'P-NEW' AND kind <> 'purge'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    for c in collectors {
        stop(c);
    }
}

/// Issue 44 item 6: a new or second central database gets the history. A central SQLite
/// file that collected two stations (a replaced session, consent records, a station purge
/// and a central withdrawal among them) is copied into a PostgreSQL database and into a new
/// SQLite file: the same records, the same session shown per id with the same rows, the
/// withdrawals held; copied again, nothing is stored twice.
#[test]
fn a_new_central_database_is_filled_with_the_history_without_duplicates() {
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let pg = Postgres::start();
    let pg_url = pg.database("second");
    let central = tmp.path().join("central.db");
    let c = start_collector_as(path_str(&central), broker.port, "h-sqlite");
    wait_subscribed(broker.port, &[path_str(&central)], Duration::from_secs(20));
    let words =
        config_without_vision_models_and(tmp.path(), "words.toml", "[sync]\ntranscripts = true\n");
    let db1 = tmp.path().join("station-1.db");
    let db2 = tmp.path().join("station-2.db");
    assert!(replay_cli(&demo_session(), &db1, Some(&words))
        .status
        .success());
    let later = later_demo_session(&tmp.path().join("later"));
    assert!(replay_cli(&later, &db1, Some(&words)).status.success());
    // demo-0001 replaced (a tombstone and a newer record).
    assert!(empathic(&[
        "replay",
        path_str(&demo_session()),
        "--db",
        path_str(&db1),
        "--config",
        path_str(&words),
        "--replace"
    ])
    .status
    .success());
    let other = other_station_session(tmp.path());
    assert!(replay_cli(&other, &db2, Some(&words)).status.success());
    for (who, how) in [("P-KEEP", "--given"), ("P-GONE", "--given")] {
        let o = empathic(&["participant", "consent", who, how, "--db", path_str(&db1)]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = empathic(&["participant", "purge", "P-GONE", "--db", path_str(&db1)]);
    assert!(o.status.success(), "{}", stderr(&o));
    sync_ok(&db1, broker.port, "station-1");
    sync_ok(&db2, broker.port, "station-2");
    let all = ["demo-0001", "demo-0002", "other-0001"];
    wait_until("three sessions centrally", || {
        let lite = empathic::store::Store::open(&central).unwrap();
        sessions_in(lite.connection_for_tests()) == all
    });
    stop(c);
    // Staff withdraw station-2's participant centrally.
    let o = empathic(&[
        "participant",
        "purge",
        "P-OTHER",
        "--db",
        path_str(&central),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let kept = ["demo-0001", "demo-0002"];

    let records = |target: &str| -> Vec<String> {
        let q = "SELECT message_id || ' ' || kind || ' ' || subject || ' ' || voided || ' ' || applied || ' ' || sha256 FROM collect_records ORDER BY message_id";
        if target.starts_with("postgres") {
            let mut c = ::postgres::Client::connect(target, ::postgres::NoTls).unwrap();
            c.query(q, &[]).unwrap().iter().map(|r| r.get(0)).collect()
        } else {
            crate::common::store::column(&crate::common::store::open_db(target), q)
        }
    };
    let want = records(path_str(&central));
    assert!(
        want.iter().any(|r| r.contains(" consent P-KEEP ")),
        "{want:?}"
    );
    assert!(
        want.iter().any(|r| r.contains(" tombstone demo-0001 ")),
        "{want:?}"
    );
    let second = tmp.path().join("second.db");
    let lite = empathic::store::Store::open(&central).unwrap();
    let copy_into = |target: &str| -> serde_json::Value {
        let o = empathic(&[
            "collect",
            "copy",
            "--from",
            path_str(&central),
            "--into",
            target,
            "--json",
            // Plain sync: nothing signed to verify, copied on the source's word (issue 56).
            "--accept-unsigned",
        ]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap()
    };
    for target in [pg_url.as_str(), path_str(&second)] {
        let v = copy_into(target);
        assert_eq!(
            v["records"].as_u64(),
            Some(want.len() as u64),
            "{target}: {v}"
        );
        assert_eq!(
            (v["refused"].as_u64(), v["withdrawals"].as_u64()),
            (Some(0), Some(1))
        );
        assert_eq!(records(target), want, "{target}");
        let view = if target.starts_with("postgres") {
            pg_view(target)
        } else {
            empathic::store::Store::open(Path::new(target)).unwrap()
        };
        assert_eq!(sessions_in(view.connection_for_tests()), kept, "{target}");
        for id in kept {
            same_rows(
                &record_rows(view.connection_for_tests(), id, true),
                &record_rows(lite.connection_for_tests(), id, true),
                &format!("{id} in {target}"),
            );
        }
        // Again: nothing stored twice.
        let v = copy_into(target);
        assert_eq!(
            (v["records"].as_u64(), v["already_held"].as_u64()),
            (Some(0), Some(want.len() as u64)),
            "{target}: {v}"
        );
        assert_eq!(records(target), want, "{target}");
        // The withdrawal holds there too: the audit line, no record of theirs.
        let o = empathic(&[
            "study",
            "report",
            "--central",
            target,
            "--study",
            "test-study",
            "--json",
        ]);
        let page: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let p = page["participants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["participant"] == "P-OTHER")
            .cloned()
            .unwrap();
        assert_eq!(p["consent"], "withdrawn", "{target}: {p}");
    }
    // The same database, or no database to read: refused.
    let o = empathic(&[
        "collect",
        "copy",
        "--from",
        path_str(&central),
        "--into",
        path_str(&central),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = empathic(&[
        "collect",
        "copy",
        "--from",
        path_str(&tmp.path().join("none.db")),
        "--into",
        path_str(&second),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
