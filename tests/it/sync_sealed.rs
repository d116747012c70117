//! Sealed sync (issue 31) on a real Mosquitto: stations sign and seal, the collector opens
//! and signs its receipts; a client the broker lets in can neither read a session's words
//! or ratings, nor forge a record, tombstone, purge or receipt; keys rotate and a stolen
//! station is revoked.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::{Client, Event, MqttOptions, Packet, QoS};

use crate::common::broker::{free_port, start_broker, start_sealed_collector, Collector};
use crate::common::central::{quarantined, record_rows, sessions_in, wait_subscribed, wait_until};
use crate::common::store::column;
use crate::common::{
    config_without_vision_models_and, copy_session_as, demo_session, empathic, later_demo_session,
    path_str, replay_cli, stderr, stdout,
};
use empathic::store::outbox::Pending;
use empathic::sync::keys::{self, KeyKind, SigningKey, StudyPublicKey};
use empathic::sync::{envelopes, sealed_envelopes, SyncOptions};

const STUDY: &str = "test-study";

use crate::common::key_init as key;

fn collector(central: &Path, port: u16, keys: &Path) -> Collector {
    start_sealed_collector(path_str(central), port, keys, "sealed-collector")
}

use crate::common::terminate as stop;

/// A station's config: sealed sync with its key, the study's and the collector's public
/// keys; transcripts synced (so the participant's words are in the record to be hidden).
fn station_config(dir: &Path, name: &str, key: &Path, study: &str, collector: &str) -> PathBuf {
    config_without_vision_models_and(
        dir,
        name,
        &format!(
            "[sync]\ntranscripts = true\nsecurity = \"sealed\"\nsigning_key = \"{}\"\nstudy_key = \"{study}\"\ncollector_keys = [\"{collector}\"]\n",
            key.display()
        ),
    )
}

fn sync(db: &Path, config: &Path, port: u16, station: &str, timeout: &str) -> std::process::Output {
    empathic(&[
        "sync",
        "--db",
        path_str(db),
        "--config",
        path_str(config),
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--study",
        STUDY,
        "--station",
        station,
        "--until-synced",
        "--timeout",
        timeout,
    ])
}

/// A client on the broker that answers each message on `empathic/v1/STUDY/{topic}` with
/// what `meddle` makes of it (a tampered copy, a replayed refusal), never its own.
struct Meddler {
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
}

impl Meddler {
    fn start(
        port: u16,
        topic: &str,
        mut meddle: impl FnMut(&rumqttc::Publish) -> Option<(String, Vec<u8>)> + Send + 'static,
    ) -> Meddler {
        let done = Arc::new(AtomicBool::new(false));
        let mut opts = MqttOptions::new("meddler", "127.0.0.1", port);
        opts.set_keep_alive(Duration::from_secs(5))
            .set_max_packet_size(1 << 24, 1 << 24);
        let (client, mut conn) = Client::new(opts, 256);
        client
            .subscribe(format!("empathic/v1/{STUDY}/{topic}"), QoS::AtLeastOnce)
            .unwrap();
        let d = done.clone();
        let thread = std::thread::Builder::new()
            .name("meddler".into())
            .spawn(move || {
                let (mut mine, mut sent) = (std::collections::HashSet::new(), 0);
                while !d.load(Ordering::Relaxed) {
                    let Ok(Ok(Event::Incoming(Packet::Publish(p)))) =
                        conn.recv_timeout(Duration::from_millis(100))
                    else {
                        continue;
                    };
                    if mine.contains(&p.payload.to_vec()) {
                        continue;
                    }
                    if let Some((t, payload)) = meddle(&p) {
                        mine.insert(payload.clone());
                        client.publish(t, QoS::AtLeastOnce, false, payload).unwrap();
                        sent += 1;
                    }
                }
                sent
            })
            .unwrap();
        // Subscribed before anything is published.
        std::thread::sleep(Duration::from_millis(500));
        Meddler { done, thread }
    }

    /// Stops it; how many messages it published.
    fn stop(self) -> usize {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Every payload published on the broker, as a subscriber to `#` sees it.
/// What the spy saw: (topic, payload) of every publish.
type Seen = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

struct Spy {
    seen: Seen,
    done: Arc<AtomicBool>,
}

impl Spy {
    fn start(port: u16) -> Spy {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let done = Arc::new(AtomicBool::new(false));
        let mut opts = MqttOptions::new("spy", "127.0.0.1", port);
        opts.set_keep_alive(Duration::from_secs(5))
            .set_max_packet_size(1 << 24, 1 << 24);
        let (client, mut conn) = Client::new(opts, 64);
        client.subscribe("#", QoS::AtLeastOnce).unwrap();
        let (s, d) = (seen.clone(), done.clone());
        std::thread::Builder::new()
            .name("spy".into())
            .spawn(move || {
                let _client = client;
                while !d.load(Ordering::Relaxed) {
                    if let Ok(Ok(Event::Incoming(Packet::Publish(p)))) =
                        conn.recv_timeout(Duration::from_millis(100))
                    {
                        s.lock()
                            .unwrap()
                            .push((p.topic.clone(), p.payload.to_vec()));
                    }
                }
            })
            .unwrap();
        // Subscribed before anything is published.
        std::thread::sleep(Duration::from_millis(500));
        Spy { seen, done }
    }
}

impl Drop for Spy {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Publishes `items` (topic, payload) as a client the broker lets in, waiting for the
/// broker to take each.
fn publish_raw(port: u16, name: &str, items: &[(String, String)]) {
    let mut opts = MqttOptions::new(name, "127.0.0.1", port);
    opts.set_keep_alive(Duration::from_secs(5))
        .set_max_packet_size(1 << 24, 1 << 24);
    let (client, mut conn) = Client::new(opts, items.len() + 8);
    for (t, p) in items {
        client
            .publish(t.clone(), QoS::AtLeastOnce, false, p.clone())
            .unwrap();
    }
    let (mut acks, deadline) = (0, Instant::now() + Duration::from_secs(20));
    while acks < items.len() {
        assert!(
            Instant::now() < deadline,
            "the broker did not take {name}'s messages"
        );
        match conn.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(Event::Incoming(Packet::PubAck(_)))) => acks += 1,
            Ok(Err(e)) => panic!("{name}: {e}"),
            _ => {}
        }
    }
}

fn opts(station: &str) -> SyncOptions {
    SyncOptions {
        announce_status: false,
        host: "unused".into(),
        port: 0,
        study: STUDY.into(),
        station: station.into(),
        auth: Default::default(),
        collectors: Vec::new(),
        sealing: None,
    }
}

/// A session message of `db`'s outbox (its latest of `kind`), as the station stored it.
fn outbox_message(db: &Path, kind: &str) -> Pending {
    let c = crate::common::store::open_db(db);
    c.query_row(
        "SELECT seq, message_id, kind, subject, payload, sha256 FROM outbox WHERE kind = ?1
         ORDER BY seq DESC LIMIT 1",
        [kind],
        |r| {
            Ok(Pending {
                seq: r.get(0)?,
                message_id: r.get(1)?,
                kind: r.get(2)?,
                subject: r.get(3)?,
                payload: r.get(4)?,
                sha256: r.get(5)?,
            })
        },
    )
    .unwrap()
}

/// `m` as a new message (`id`, `seq`, `kind`, `subject`, `payload`), sealed to the study
/// and signed with `signer`, on `station`'s topic.
#[allow(clippy::too_many_arguments)]
fn forged(
    station: &str,
    signer: &SigningKey,
    study: &StudyPublicKey,
    id: &str,
    seq: i64,
    kind: &str,
    subject: &str,
    payload: &str,
) -> Vec<(String, String)> {
    use sha2::Digest;
    let m = Pending {
        seq,
        message_id: id.into(),
        kind: kind.into(),
        subject: subject.into(),
        payload: payload.into(),
        sha256: format!("{:x}", sha2::Sha256::digest(payload.as_bytes())),
    };
    let sealed = study.seal(payload.as_bytes()).unwrap();
    let topic = format!("empathic/v1/{STUDY}/{station}/{kind}");
    sealed_envelopes(
        &m,
        &sealed,
        &opts(station),
        signer,
        &empathic::digest::nonce_hex(),
    )
    .into_iter()
    .map(|e| (topic.clone(), e))
    .collect()
}

/// What the central file holds: every session's carried rows, and the collector's records.
fn central_state(central: &Path) -> Vec<String> {
    let c = crate::common::store::open_db(central);
    let mut all = Vec::new();
    for id in sessions_in(&c) {
        all.push(format!("session {id}"));
        all.extend(record_rows(&c, &id, true));
    }
    all.extend(column::<String>(
        &c,
        "SELECT message_id || ' ' || kind || ' ' || voided || ' ' || applied FROM collect_records ORDER BY message_id",
    ));
    all
}

fn quarantine_reasons(central: &Path) -> Vec<String> {
    let c = crate::common::store::open_db(central);
    column(&c, "SELECT reason FROM collect_quarantine ORDER BY id")
}

fn wait_quarantined(central: &Path, n: i64) {
    wait_until(&format!("{n} messages in quarantine"), || {
        quarantined(path_str(central)) >= n
    });
}

fn sync_status(db: &Path, config: &Path) -> serde_json::Value {
    let o = empathic(&[
        "sync",
        "status",
        "--db",
        path_str(db),
        "--config",
        path_str(config),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn sealed_sync_hides_content_and_refuses_forgeries_rotated_and_revoked_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let broker = start_broker(dir, free_port());
    let port = broker.port;
    let keys = dir.join("keys");
    let study_public = key("study", &keys.join("study.key"));
    let collector_public = key("collector", &keys.join("collector.key"));
    let s1_public = key("station", &keys.join("s1.key"));
    let s2_public = key("station", &keys.join("s2.key"));
    assert!(study_public.starts_with("x25519:") && s1_public.starts_with("ed25519:"));
    // A secret key file is the owner's only, and never overwritten.
    let again = empathic(&[
        "keys",
        "init",
        "station",
        "--file",
        path_str(&keys.join("s1.key")),
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));

    let central = dir.join("central.db");
    for (station, public) in [("station-1", &s1_public), ("station-2", &s2_public)] {
        let o = empathic(&[
            "collect",
            "enrol",
            station,
            public,
            "--db",
            path_str(&central),
            "--study",
            STUDY,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    // One key belongs to one station.
    let o = empathic(&[
        "collect",
        "enrol",
        "station-3",
        &s1_public,
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // Without its keys a sealed collector does not start.
    let o = empathic(&[
        "collect",
        "--db",
        path_str(&central),
        "--broker",
        &format!("mqtt://127.0.0.1:{port}"),
        "--study-key",
        path_str(&dir.join("missing.key")),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--study-key"), "{}", stderr(&o));

    let spy = Spy::start(port);
    let mut c = collector(&central, port, &keys);
    wait_subscribed(port, &[path_str(&central)], Duration::from_secs(20));
    let mut in_quarantine = quarantined(path_str(&central));

    // Two stations, the participant's words synced.
    let cfg1 = station_config(
        dir,
        "s1.toml",
        &keys.join("s1.key"),
        &study_public,
        &collector_public,
    );
    let cfg2 = station_config(
        dir,
        "s2.toml",
        &keys.join("s2.key"),
        &study_public,
        &collector_public,
    );
    let db1 = dir.join("station-1.db");
    let db2 = dir.join("station-2.db");
    assert!(replay_cli(&demo_session(), &db1, Some(&cfg1))
        .status
        .success());
    let other = copy_session_as(
        &demo_session(),
        &dir.join("other"),
        &[("session_id", "other-0001"), ("participant_id", "P-OTHER")],
    );
    assert!(replay_cli(&other, &db2, Some(&cfg2)).status.success());

    let o = sync(&db1, &cfg1, port, "station-1", "30");
    assert!(o.status.success(), "{}", stderr(&o));
    let s = sync_status(&db1, &cfg1);
    assert_eq!(
        (s["synced"].as_u64(), s["security"].as_str()),
        (Some(1), Some("sealed"))
    );
    wait_until("demo-0001 centrally", || {
        sessions_in(&crate::common::store::open_db(&central)) == ["demo-0001"]
    });
    // The collector greets each enrolled station with a retained hello (what it reads, a
    // too_new refusal is lifted when that changes), signed over the study and station: a
    // station believes only that.
    let hello = crate::common::broker::retained(
        port,
        &format!("empathic/v1/{STUDY}/station-1/collector/sealed-collector"),
        Duration::from_secs(20),
        |_| true,
    )
    .expect("a retained hello for station-1");
    let hello: empathic::sync::Hello = serde_json::from_slice(&hello).unwrap();
    assert_eq!(hello.reads, empathic::sync::collector_reads());
    let (signer, sig) = (hello.signer.clone().unwrap(), hello.sig.clone().unwrap());
    assert_eq!(signer, collector_public);
    let verifier = keys::VerifyingKey::parse(&signer).unwrap();
    let bytes = |station: &str, reads: &str| {
        keys::signed_hello(STUDY, station, "sealed-collector", reads, &signer)
    };
    assert!(verifier.verifies(&bytes("station-1", &hello.reads), &sig));
    assert!(!verifier.verifies(&bytes("station-2", &hello.reads), &sig));
    assert!(!verifier.verifies(&bytes("station-1", "records v99, consent v1"), &sig));

    // The broker and anyone on it saw envelopes, never the words or the ratings: the
    // record (as the station holds it) names them, no payload on the wire does.
    let record = outbox_message(&db1, "session").payload;
    let station = crate::common::store::open_db(&db1);
    let words: Vec<String> = column(&station, "SELECT text FROM utterances");
    assert!(!words.is_empty());
    let mut secrets: Vec<String> = words.into_iter().filter(|w| w.len() >= 12).collect();
    secrets.extend(["self_ratings", "utterances", "survey_responses"].map(String::from));
    for s in &secrets {
        assert!(record.contains(s.as_str()), "the record does not hold {s}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let seen = spy.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|(t, _)| t.ends_with("station-1/session")));
    for (topic, payload) in &seen {
        let text = String::from_utf8_lossy(payload);
        for s in &secrets {
            assert!(
                !text.contains(s.as_str()),
                "{topic} carries `{s}` in the clear"
            );
        }
    }

    // Forgeries by a client the broker lets in. Central data must not change.
    let before = central_state(&central);
    let study = StudyPublicKey::parse(&study_public).unwrap();
    keys::generate(&keys.join("rogue.key"), KeyKind::Ed25519).unwrap();
    let rogue = SigningKey::load(&keys.join("rogue.key")).unwrap();
    let s1 = SigningKey::load(&keys.join("s1.key")).unwrap();
    let genuine = outbox_message(&db1, "session");
    let participant = "P-DEMO";
    let mut forgeries = Vec::new();
    // A record, a tombstone and a purge signed by an unenrolled key.
    forgeries.extend(forged(
        "station-1",
        &rogue,
        &study,
        "forged-1",
        900,
        "session",
        "forged-0001",
        &record,
    ));
    forgeries.extend(forged(
        "station-1",
        &rogue,
        &study,
        "forged-2",
        901,
        "tombstone",
        "demo-0001",
        r#"{"session_id":"demo-0001"}"#,
    ));
    forgeries.extend(forged(
        "station-1",
        &rogue,
        &study,
        "forged-3",
        902,
        "purge",
        participant,
        &format!(r#"{{"participant_id":"{participant}"}}"#),
    ));
    // Station 1's own key claiming station 2.
    forgeries.extend(forged(
        "station-2",
        &s1,
        &study,
        "forged-4",
        903,
        "session",
        "demo-0001",
        &record,
    ));
    // Unsigned (plain) from an enrolled station.
    let mut plain = genuine.clone();
    plain.message_id = "forged-5".into();
    plain.seq = 904;
    let topic = format!("empathic/v1/{STUDY}/station-1/session");
    forgeries.extend(
        envelopes(&plain, &opts("station-1"))
            .into_iter()
            .map(|e| (topic.clone(), e)),
    );
    // A genuine chunk whose data was altered after signing.
    let mut altered: serde_json::Value = serde_json::from_str(
        &forged(
            "station-1",
            &s1,
            &study,
            "forged-6",
            905,
            "session",
            "demo-0001",
            &record,
        )[0]
        .1,
    )
    .unwrap();
    altered["data"] = "AAAA".into();
    forgeries.push((topic.clone(), altered.to_string()));
    // Each envelope is refused on arrival, before anything of it is kept: one quarantine
    // row each.
    publish_raw(port, "forger", &forgeries);
    in_quarantine += forgeries.len() as i64;
    wait_quarantined(&central, in_quarantine);
    let reasons = quarantine_reasons(&central).join("\n");
    for why in [
        "a key no station of study test-study is enrolled with",
        "signed by station station-1's key but names station station-2",
        "unsigned (plain) message from station station-1",
        "does not verify",
    ] {
        assert!(
            reasons.contains(why),
            "no quarantine says `{why}`:\n{reasons}"
        );
    }
    assert_eq!(
        central_state(&central),
        before,
        "a forgery changed central data"
    );

    // A forged receipt does not make a message synced: with the collector down, station 2's
    // record reaches the broker; receipts for it, unsigned and signed by the rogue key,
    // are ignored and it stays pending until the genuine receipt.
    stop(c);
    let pending = outbox_message(&db2, "session");
    let forger = {
        let (id, sha, rogue_public) = (
            pending.message_id.clone(),
            pending.sha256.clone(),
            rogue.public().to_string(),
        );
        let sig = rogue.sign(&keys::signed_receipt(
            STUDY,
            "station-2",
            &id,
            &sha,
            "sealed-collector",
            &rogue_public,
        ));
        let receipts = [
            serde_json::json!({"message_id": id, "collector": "sealed-collector", "sha256": sha}).to_string(),
            serde_json::json!({"message_id": id, "collector": "sealed-collector", "sha256": sha, "signer": rogue_public, "sig": sig}).to_string(),
        ];
        let topic = format!("empathic/v1/{STUDY}/station-2/receipt");
        std::thread::Builder::new()
            .name("receipt-forger".into())
            .spawn(move || {
                let end = Instant::now() + Duration::from_secs(7);
                while Instant::now() < end {
                    publish_raw(
                        port,
                        "receipt-forger",
                        &receipts
                            .iter()
                            .map(|r| (topic.clone(), r.clone()))
                            .collect::<Vec<_>>(),
                    );
                    std::thread::sleep(Duration::from_millis(300));
                }
            })
            .unwrap()
    };
    let o = sync(&db2, &cfg2, port, "station-2", "6");
    forger.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let s = sync_status(&db2, &cfg2);
    assert_eq!(
        (s["synced"].as_u64(), s["sent"].as_u64()),
        (Some(0), Some(1)),
        "{s}"
    );
    // The collector comes back from the keys' backup (copied with their 0600 mode, as a
    // restore would): the study key opens what was sealed before.
    let restored = dir.join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    for k in ["study.key", "collector.key"] {
        std::fs::copy(keys.join(k), restored.join(k)).unwrap();
    }
    c = collector(&central, port, &restored);
    let o = sync(&db2, &cfg2, port, "station-2", "30");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(sync_status(&db2, &cfg2)["synced"].as_u64(), Some(1));
    wait_until("other-0001 centrally", || {
        sessions_in(&crate::common::store::open_db(&central)) == ["demo-0001", "other-0001"]
    });

    // Rotation: station 1 gets a new key, staff enrol it, the old one is revoked: later
    // messages signed with the old key are refused, what it sent before stays.
    let s1b_public = key("station", &keys.join("s1b.key"));
    let o = empathic(&[
        "collect",
        "enrol",
        "station-1",
        &s1b_public,
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cfg1b = station_config(
        dir,
        "s1b.toml",
        &keys.join("s1b.key"),
        &study_public,
        &collector_public,
    );
    let later = later_demo_session(&dir.join("later"));
    assert!(replay_cli(&later, &db1, Some(&cfg1b)).status.success());
    let o = sync(&db1, &cfg1b, port, "station-1", "30");
    assert!(o.status.success(), "{}", stderr(&o));
    let o = empathic(&[
        "collect",
        "revoke",
        "station-1",
        "--key",
        &s1_public,
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A stolen station 2: everything of it revoked.
    let o = empathic(&[
        "collect",
        "revoke",
        "station-2",
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until("demo-0002 centrally", || {
        sessions_in(&crate::common::store::open_db(&central)).len() == 3
    });
    let before = central_state(&central);
    let s2 = SigningKey::load(&keys.join("s2.key")).unwrap();
    let mut late = forged(
        "station-1",
        &s1,
        &study,
        "late-1",
        2000,
        "tombstone",
        "demo-0001",
        r#"{"session_id":"demo-0001"}"#,
    );
    late.extend(forged(
        "station-2",
        &s2,
        &study,
        "late-2",
        2001,
        "tombstone",
        "other-0001",
        r#"{"session_id":"other-0001"}"#,
    ));
    publish_raw(port, "thief", &late);
    // Waited for by content, not by count: the forger above may have had a message
    // quarantined after `in_quarantine` was last counted.
    wait_until("both late messages quarantined as revoked", || {
        let reasons = quarantine_reasons(&central).join("\n");
        reasons.contains("station-1's key revoked at")
            && reasons.contains("station-2's key revoked at")
    });
    assert!(quarantined(path_str(&central)) >= in_quarantine + late.len() as i64);
    let reasons = quarantine_reasons(&central).join("\n");
    assert!(reasons.contains("station-1's key revoked at"), "{reasons}");
    assert!(reasons.contains("station-2's key revoked at"), "{reasons}");
    assert_eq!(
        central_state(&central),
        before,
        "a revoked key changed central data"
    );

    // Staff see it all per station.
    let o = empathic(&[
        "collect",
        "stations",
        "--db",
        path_str(&central),
        "--study",
        STUDY,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let received = v["received"].as_array().unwrap();
    let one = received
        .iter()
        .find(|r| r["station"] == "station-1")
        .unwrap();
    assert_eq!(
        (one["sealed"].as_i64(), one["plain"].as_i64()),
        (Some(2), Some(0)),
        "{v}"
    );
    assert!(one["quarantined"].as_i64().unwrap() >= 5, "{v}");
    assert_eq!(v["enrolments"].as_array().unwrap().len(), 3, "{v}");
    stop(c);
}

/// The same gate over PostgreSQL: enrolment, a sealed record opened and applied, a forgery
/// by an unenrolled key quarantined, the per-station counts.
#[test]
fn sealed_sync_into_postgresql_enrols_opens_and_refuses_alike() {
    use crate::common::central::pg_view;
    use crate::common::postgres::Postgres;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let broker = start_broker(dir, free_port());
    let port = broker.port;
    let pg = Postgres::start();
    let url = pg.database("sealed");
    let keys = dir.join("keys");
    let study_public = key("study", &keys.join("study.key"));
    let collector_public = key("collector", &keys.join("collector.key"));
    let station_public = key("station", &keys.join("s1.key"));
    let o = empathic(&[
        "collect",
        "enrol",
        "station-1",
        &station_public,
        "--central",
        &url,
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = start_sealed_collector(&url, port, &keys, "sealed-pg");
    wait_subscribed(port, &[url.as_str()], Duration::from_secs(20));
    let probes = quarantined(&url);
    let cfg = station_config(
        dir,
        "s1.toml",
        &keys.join("s1.key"),
        &study_public,
        &collector_public,
    );
    let db = dir.join("station-1.db");
    assert!(replay_cli(&demo_session(), &db, Some(&cfg))
        .status
        .success());
    let o = sync(&db, &cfg, port, "station-1", "30");
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until("demo-0001 in PostgreSQL", || {
        sessions_in(pg_view(&url).connection_for_tests()) == ["demo-0001"]
    });
    let record = outbox_message(&db, "session").payload;
    keys::generate(&keys.join("rogue.key"), KeyKind::Ed25519).unwrap();
    let rogue = SigningKey::load(&keys.join("rogue.key")).unwrap();
    let study = StudyPublicKey::parse(&study_public).unwrap();
    let forged = forged(
        "station-1",
        &rogue,
        &study,
        "pg-forged",
        900,
        "session",
        "forged-0001",
        &record,
    );
    publish_raw(port, "pg-forger", &forged);
    wait_until("the forgery quarantined", || {
        quarantined(&url) >= probes + forged.len() as i64
    });
    assert_eq!(
        sessions_in(pg_view(&url).connection_for_tests()),
        ["demo-0001"]
    );
    let o = empathic(&[
        "collect",
        "stations",
        "--central",
        &url,
        "--study",
        STUDY,
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let one = v["received"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["station"] == "station-1")
        .cloned()
        .unwrap();
    assert_eq!(
        (one["sealed"].as_i64(), one["plain"].as_i64()),
        (Some(1), Some(0)),
        "{v}"
    );
    // Counted per message: the forgery's chunks are one refused message.
    assert!(forged.len() > 1);
    assert_eq!(one["quarantined"].as_i64(), Some(1), "{v}");
    stop(c);
}

/// Issue 56 item 4: `collect copy` verifies what it reads. A source central database holds
/// one genuine sealed record and a hostile source's additions: a forged enrolment (a key of
/// its own, `allow_plain`), an unsigned purge of the genuine participant whose payload
/// names someone else, and a copy of the genuine record with its payload altered. Copied
/// into a SQLite file and a PostgreSQL database alike: nothing is taken on the source's
/// word (exit 1, each left-out record named); once the target enrols the station itself,
/// the genuine record alone is copied; `--accept-unsigned` lets the unsigned purge reach
/// the rules, which refuse it (its payload disagrees with its subject), so nothing is
/// erased; the forged enrolment is never copied without `--with-enrolments`.
#[test]
fn a_copy_verifies_every_record_and_takes_no_enrolment_or_purge_on_the_sources_word() {
    use empathic::sync::central::{Central, Gate, Stored};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keys = dir.join("keys");
    let study_public = key("study", &keys.join("study.key"));
    let s1_public = key("station", &keys.join("s1.key"));
    let rogue_public = key("station", &keys.join("rogue.key"));
    let s1 = SigningKey::load(&keys.join("s1.key")).unwrap();
    let study = StudyPublicKey::parse(&study_public).unwrap();
    let fast = config_without_vision_models_and(dir, "fast.toml", "");
    let db = dir.join("station.db");
    assert!(replay_cli(&crate::common::demo_session(), &db, Some(&fast))
        .status
        .success());
    let genuine = outbox_message(&db, "session");

    let source_path = dir.join("source.db");
    let mut source = Central::open(path_str(&source_path)).unwrap();
    source
        .enrol(STUDY, "station-1", Some(&s1_public), false)
        .unwrap();
    let gate = Gate {
        accept_plain: false,
        study_key: Some(keys::StudySecretKey::load(&keys.join("study.key")).unwrap()),
    };
    let mut last = None;
    for (topic, e) in forged(
        "station-1",
        &s1,
        &study,
        &genuine.message_id,
        genuine.seq,
        "session",
        &genuine.subject,
        &genuine.payload,
    ) {
        last = Some(
            source
                .store_publish_with(&topic, e.as_bytes(), &gate)
                .unwrap(),
        );
    }
    assert!(matches!(last, Some(Stored::Record { .. })), "{last:?}");
    drop(source);
    // The hostile source's additions, written straight into its tables.
    let purge = serde_json::json!({"format": "empathic-purge", "version": 2,
        "participant_id": "P-OTHER", "sessions": []})
    .to_string();
    let purge_sha = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(purge.as_bytes()))
    };
    let conn = crate::common::store::open_db(&source_path);
    conn.execute(
        "INSERT INTO collect_stations (study, station, key, allow_plain, enrolled_at)
         VALUES (?1, 'station-x', ?2, 1, '2026-01-01T00:00:00.000Z')",
        [STUDY, rogue_public.as_str()],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO collect_records (message_id, study, station, kind, subject, participant,
             seq, payload, sha256, received_at, voided, applied, sealed)
         VALUES ('forged-purge', ?1, 'station-1', 'purge', 'P-DEMO', 'P-DEMO', ?2, ?3, ?4,
                 '2099-01-01T00:00:00.000Z', 0, 0, 0)",
        rusqlite::params![STUDY, genuine.seq + 1, purge, purge_sha],
    )
    .unwrap();
    conn.execute(
        "INSERT INTO collect_records (message_id, study, station, kind, subject, participant,
             seq, payload, sha256, received_at, voided, applied, sealed, proof)
         SELECT 'altered', study, station, kind, subject, participant, seq + 2,
                replace(payload, 'P-DEMO', 'P-EVIL'), sha256, received_at, 1, 0, sealed, proof
         FROM collect_records WHERE message_id = ?1",
        [&genuine.message_id],
    )
    .unwrap();
    drop(conn);

    let pg = crate::common::postgres::Postgres::start();
    let copy = |target: &str, flags: &[&str]| -> (Option<i32>, serde_json::Value) {
        let mut args = vec![
            "collect",
            "copy",
            "--from",
            path_str(&source_path),
            "--into",
            target,
            "--json",
        ];
        args.extend(flags);
        let o = empathic(&args);
        (o.status.code(), serde_json::from_str(&stdout(&o)).unwrap())
    };
    let lite = dir.join("target.db").display().to_string();
    for target in [lite.as_str(), pg.database("copied").as_str()] {
        // Nothing enrolled in the target: nothing verifies; nothing is copied.
        let (code, v) = copy(target, &[]);
        assert_eq!(code, Some(1), "{target}: {v}");
        assert_eq!(v["records"], 0, "{target}: {v}");
        assert_eq!(v["unverified"], 3, "{target}: {v}");
        assert_eq!(v["enrolments"], 0, "{target}: {v}");
        assert_eq!(v["enrolments_not_copied"], 2, "{target}: {v}");
        let reasons = v["unverified_reasons"].to_string();
        assert!(
            reasons.contains("does not enrol") && reasons.contains("unsigned"),
            "{reasons}"
        );
        // The target enrols the station itself: the genuine record verifies, the altered
        // one does not (its payload no longer matches what the station signed).
        let o = empathic(&[
            "collect",
            "enrol",
            "station-1",
            &s1_public,
            "--central",
            target,
            "--study",
            STUDY,
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let (code, v) = copy(target, &[]);
        assert_eq!(code, Some(1), "{target}: {v}");
        assert_eq!(
            (v["records"].as_u64(), v["unverified"].as_u64()),
            (Some(1), Some(2)),
            "{target}: {v}"
        );
        assert!(
            v["unverified_reasons"]
                .to_string()
                .contains("does not match its sha256"),
            "{v}"
        );
        // Unsigned records on the source's word: the purge reaches the rules, which refuse
        // it (its payload names another participant than its subject).
        let (_, v) = copy(target, &["--accept-unsigned"]);
        assert_eq!(
            (v["records"].as_u64(), v["refused"].as_u64()),
            (Some(0), Some(1)),
            "{target}: {v}"
        );
        let o = empathic(&["sessions", "list", "--db", target]);
        assert!(o.status.success(), "{target}: {}", stderr(&o));
        assert!(
            stdout(&o).contains(&genuine.subject),
            "{target}: nothing may be erased: {}",
            stdout(&o)
        );
        let o = empathic(&[
            "collect",
            "stations",
            "--central",
            target,
            "--study",
            STUDY,
            "--json",
        ]);
        assert!(
            !stdout(&o).contains("station-x"),
            "{target}: {}",
            stdout(&o)
        );
        let o = empathic(&[
            "collect",
            "quarantine",
            "list",
            "--central",
            target,
            "--study",
            STUDY,
        ]);
        assert!(stdout(&o).contains("P-OTHER"), "{target}: {}", stdout(&o));
    }
}

/// Issue 56 item 3 (probe case 6): anyone on the broker republishes each of a station's
/// chunks with one character of its signature changed, at once. The collector refuses the
/// copies (`bad_signature`, signed, naming the genuine message id and sha256 and the bytes
/// it refused); the station takes no refusal for bytes it did not publish, so nothing is
/// held and `sync --until-synced` ends synced.
#[test]
fn a_refusal_of_a_tampered_copy_holds_nothing_at_the_station() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let broker = start_broker(dir, free_port());
    let port = broker.port;
    let keys = dir.join("keys");
    let study_public = key("study", &keys.join("study.key"));
    let collector_public = key("collector", &keys.join("collector.key"));
    let s1_public = key("station", &keys.join("s1.key"));
    let central = dir.join("central.db");
    let o = empathic(&[
        "collect",
        "enrol",
        "station-1",
        &s1_public,
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let spy = Spy::start(port);
    let c = collector(&central, port, &keys);
    wait_subscribed(port, &[path_str(&central)], Duration::from_secs(20));
    let cfg = station_config(
        dir,
        "s1.toml",
        &keys.join("s1.key"),
        &study_public,
        &collector_public,
    );
    let db = dir.join("station-1.db");
    assert!(replay_cli(&demo_session(), &db, Some(&cfg))
        .status
        .success());

    // The tamperer: every chunk the station publishes comes again, its `sig` altered.
    let tamperer = Meddler::start(port, "station-1/session", |p| {
        let mut v = serde_json::from_slice::<serde_json::Value>(&p.payload).ok()?;
        let sig = v["sig"].as_str()?.to_string();
        let flipped = if sig.starts_with('A') { "B" } else { "A" };
        v["sig"] = format!("{flipped}{}", &sig[1..]).into();
        Some((p.topic.clone(), v.to_string().into_bytes()))
    });
    std::thread::sleep(Duration::from_millis(500));
    let o = sync(&db, &cfg, port, "station-1", "30");
    // The collector's refusals of the copies take a moment more: wait for them too.
    let refusal_of_a_copy = || {
        spy.seen.lock().unwrap().iter().any(|(t, p)| {
            t.ends_with("station-1/refusal")
                && serde_json::from_slice::<serde_json::Value>(p)
                    .is_ok_and(|r| r["code"] == "bad_signature" && r["sig"].is_string())
        })
    };
    wait_until(
        "the collector's refusal of a tampered copy",
        refusal_of_a_copy,
    );
    assert!(tamperer.stop() > 0, "no chunk was tampered with");
    assert!(o.status.success(), "{}", stderr(&o));
    // A second sync, with the refusals now all published: nothing held, nothing sent.
    let o = sync(&db, &cfg, port, "station-1", "10");
    assert!(o.status.success(), "{}", stderr(&o));
    let s = sync_status(&db, &cfg);
    assert_eq!(s["synced"].as_u64(), Some(1), "{s}");
    assert!(s["last_refusal"].is_null(), "{s}");
    let station = crate::common::store::open_db(&db);
    let held: Vec<String> = column(
        &station,
        "SELECT message_id FROM outbox WHERE refused_code IS NOT NULL",
    );
    assert!(held.is_empty(), "{held:?}");
    wait_until("demo-0001 centrally", || {
        sessions_in(&crate::common::store::open_db(&central)) == ["demo-0001"]
    });
    stop(c);
}

/// Issue 56, item 3 (the probe's case 7): a genuine signed refusal captured on the broker
/// and replayed after the station was enrolled. Every send attempt signs a fresh nonce, so
/// the replayed refusal names bytes this attempt never published: it holds nothing, and
/// the message is stored and synced at the first try.
#[test]
fn a_refusal_replayed_from_an_earlier_attempt_holds_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let broker = start_broker(dir, free_port());
    let port = broker.port;
    let keys = dir.join("keys");
    let study_public = key("study", &keys.join("study.key"));
    let collector_public = key("collector", &keys.join("collector.key"));
    let s1_public = key("station", &keys.join("s1.key"));
    let central = dir.join("central.db");
    let spy = Spy::start(port);
    let c = collector(&central, port, &keys);
    wait_subscribed(port, &[path_str(&central)], Duration::from_secs(20));
    let cfg = station_config(
        dir,
        "s1.toml",
        &keys.join("s1.key"),
        &study_public,
        &collector_public,
    );
    let db = dir.join("station-1.db");
    assert!(replay_cli(&demo_session(), &db, Some(&cfg))
        .status
        .success());
    // Not enrolled yet: a genuine, signed `not_enrolled` refusal, which the spy keeps.
    let o = sync(&db, &cfg, port, "station-1", "10");
    assert!(!o.status.success(), "{}", stderr(&o));
    let captured = || {
        spy.seen.lock().unwrap().iter().find_map(|(t, p)| {
            (t.ends_with("station-1/refusal")
                && serde_json::from_slice::<serde_json::Value>(p)
                    .is_ok_and(|r| r["code"] == "not_enrolled" && r["sig"].is_string()))
            .then(|| p.clone())
        })
    };
    wait_until("the collector's signed not_enrolled refusal", || {
        captured().is_some()
    });
    let refusal = captured().unwrap();
    let o = empathic(&[
        "collect",
        "enrol",
        "station-1",
        &s1_public,
        "--db",
        path_str(&central),
        "--study",
        STUDY,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The replayer: each chunk the station publishes now is answered at once with the
    // refusal captured before. The collector is down meanwhile, so no receipt can win the
    // race: the station hears the replayed refusal alone.
    stop(c);
    let replayer = Meddler::start(port, "station-1/session", move |p| {
        Some((p.topic.replace("/session", "/refusal"), refusal.clone()))
    });
    let sync_retrying = |timeout: &str| {
        crate::common::empathic_logging(
            "warn",
            &[
                "sync",
                "--db",
                path_str(&db),
                "--config",
                path_str(&cfg),
                "--broker",
                &format!("mqtt://127.0.0.1:{port}"),
                "--study",
                STUDY,
                "--station",
                "station-1",
                "--until-synced",
                "--timeout",
                timeout,
                "--retry-refused",
            ],
        )
    };
    let o = sync_retrying("6");
    let err = stderr(&o);
    assert!(replayer.stop() > 0, "no refusal was replayed");
    assert!(
        err.contains("a refusal ignored: it names envelope bytes this station did not publish"),
        "{err}"
    );
    assert!(!err.contains("the collector refused this message"), "{err}");
    let station = crate::common::store::open_db(&db);
    let held: Vec<String> = column(
        &station,
        "SELECT message_id FROM outbox WHERE refused_code IS NOT NULL",
    );
    assert!(held.is_empty(), "the replayed refusal held {held:?}");
    drop(station);
    // The collector back: the message goes at the next sync, nothing held.
    let c = collector(&central, port, &keys);
    wait_subscribed(port, &[path_str(&central)], Duration::from_secs(20));
    let o = sync(&db, &cfg, port, "station-1", "30");
    assert!(o.status.success(), "{}", stderr(&o));
    let s = sync_status(&db, &cfg);
    assert_eq!(s["synced"].as_u64(), Some(1), "{s}");
    assert!(s["last_refusal"].is_null(), "{s}");
    wait_until("demo-0001 centrally", || {
        sessions_in(&crate::common::store::open_db(&central)) == ["demo-0001"]
    });
    stop(c);
}
