//! Sync load, loopback only and bounded: simulated stations (default 50) each publish a
//! month of session records (default 30, one a day) at once through one Mosquitto to one
//! collector, once into a SQLite central database and once into PostgreSQL (a throwaway
//! cluster). Each record is the demo session's real record (window features included) under
//! its own session id. Prints messages/s and MB/s from the first publish until the central
//! database holds everything, the lag from the broker's acknowledgement (the station's
//! `sent_at`) to the central commit (p50/p95), and CPU seconds of the collector thread, the
//! publishers, Mosquitto and PostgreSQL. `EMPATHIC_LOAD_STATIONS`, `EMPATHIC_LOAD_SESSIONS`
//! and `EMPATHIC_LOAD_LIMIT_SECS` (default 300 per database) change the bounds. Each
//! database is loaded twice: plain, and sealed (every station with its own enrolled key,
//! payloads sealed to the study, receipts signed), so the two rows give sealing's cost.
//! Meanwhile every station also sends its health (`sync::health`, retained, each on its own
//! short connection as the live service does; signed when sealed) every
//! `EMPATHIC_LOAD_HEALTH_MS` (default 2000: 450 times the stations' default rate of one per
//! 15 min, so the collector's share of health shows; 0: none); the line after each row says
//! how many went out and how many the central database kept.
//!
//! Needs `target/release/empathic` (`make bench` builds it) for the seed record, and
//! Debian's `mosquitto` and `postgresql` (`make setup`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

mod broker {
    pub fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port")
    }
}

#[path = "../tests/common/postgres.rs"]
mod postgres_cluster;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CPU seconds (user + system) from a `/proc/.../stat` line.
fn stat_cpu(stat: &str) -> f64 {
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn cpu_of_pid(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| stat_cpu(&s))
        .unwrap_or(0.0)
}

/// CPU seconds of the entries of `dir` (`/proc` or `/proc/self/task`) whose command is
/// `name`.
fn cpu_of_named(dir: &str, name: &str) -> f64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == name)
                })
                .map(|e| {
                    std::fs::read_to_string(e.path().join("stat"))
                        .map(|s| stat_cpu(&s))
                        .unwrap_or(0.0)
                })
                .sum()
        })
        .unwrap_or(0.0)
}

fn process_cpu() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .map(|s| stat_cpu(&s))
        .unwrap_or(0.0)
}

fn start_broker(dir: &Path, port: u16) -> Child {
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nmax_queued_messages 100000\n",
            dir.display()
        ),
    )
    .expect("write the broker config");
    let child = Command::new("mosquitto")
        .arg("-c")
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mosquitto (make setup installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "mosquitto did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// The demo session's record (payload, session id), made by the release binary.
fn seed_record(dir: &Path) -> (String, String) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/empathic");
    assert!(
        bin.exists(),
        "{} is missing: `make bench` builds it",
        bin.display()
    );
    let config = dir.join("seed.toml");
    std::fs::write(
        &config,
        "[models]\nappearance_encoder = \"\"\n\n[face]\nenabled = false\n",
    )
    .expect("write the seed config");
    let db = dir.join("seed.db");
    let o = Command::new(&bin)
        .arg("replay")
        .arg(root.join("demo/session"))
        .arg("--db")
        .arg(&db)
        .arg("--config")
        .arg(&config)
        .env("EMPATHIC_LOG", "error")
        .output()
        .expect("run empathic replay");
    assert!(
        o.status.success(),
        "seed replay failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let conn = rusqlite::Connection::open(&db).expect("open the seed store");
    conn.query_row(
        "SELECT payload, subject FROM outbox WHERE kind = 'session'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .expect("the seed record")
}

/// A station store whose outbox holds `sessions` records (the seed under new ids).
fn make_station(dir: &Path, k: u64, sessions: u64, seed: &(String, String)) -> PathBuf {
    let db = dir.join(format!("station-{k:02}.db"));
    let store = empathic::store::Store::open(&db).expect("a station store");
    let tx = store
        .connection_for_tests()
        .unchecked_transaction()
        .expect("a transaction");
    for d in 0..sessions {
        let id = format!("st{k:02}-{d:04}");
        let payload = seed.0.replace(&seed.1, &id);
        let sha: String = Sha256::digest(payload.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        tx.execute(
            "INSERT INTO outbox (message_id, kind, subject, payload, sha256, created_at)
             VALUES (?1, 'session', ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
            rusqlite::params![format!("load-{id}"), id, payload, sha],
        )
        .expect("enqueue a record");
    }
    tx.commit().expect("commit the outbox");
    db
}

fn millis(ts: &str) -> Option<f64> {
    // 2026-11-24T01:02:03.456Z: seconds of the day are enough within one run.
    let t = ts.split('T').nth(1)?.trim_end_matches('Z');
    let mut p = t.split(':');
    let (h, m, s): (f64, f64, f64) = (
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
        p.next()?.parse().ok()?,
    );
    Some((h * 3600.0 + m * 60.0 + s) * 1000.0)
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// How simulated station `k` publishes to the broker on `port`.
fn station_options(
    port: u16,
    k: u64,
    sealing: Option<empathic::sync::Sealing>,
) -> empathic::sync::SyncOptions {
    empathic::sync::SyncOptions {
        announce_status: false,
        host: "127.0.0.1".into(),
        port,
        study: "load".into(),
        station: format!("station-{k:02}"),
        auth: Default::default(),
        collectors: Vec::new(),
        sealing,
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let stations = env_or("EMPATHIC_LOAD_STATIONS", 50);
    let sessions = env_or("EMPATHIC_LOAD_SESSIONS", 30);
    let limit = Duration::from_secs(env_or("EMPATHIC_LOAD_LIMIT_SECS", 300));
    let tmp = tempfile::tempdir().expect("a temp folder");
    let seed = seed_record(tmp.path());
    println!(
        "sync load: {stations} stations x {sessions} records of {} KB (the demo session's record: 28 s, 21 windows, window features)",
        seed.0.len() / 1024
    );
    let pg = postgres_cluster::Postgres::start();
    // Each database plain and sealed (`[sync] security`): signed by each station, sealed to
    // the study, receipts signed by the collector; the difference is sealing's cost.
    let targets = [
        (
            "SQLite",
            tmp.path().join("central.db").display().to_string(),
            false,
        ),
        (
            "SQLite sealed",
            tmp.path().join("central-sealed.db").display().to_string(),
            true,
        ),
        ("PostgreSQL", pg.database("load"), false),
        ("PostgreSQL sealed", pg.database("load_sealed"), true),
    ];
    let keys = tmp.path().join("keys");
    let study_public = empathic::sync::keys::generate(
        &keys.join("study.key"),
        empathic::sync::keys::KeyKind::X25519,
    )
    .expect("the study key");
    let collector_public = empathic::sync::keys::generate(
        &keys.join("collector.key"),
        empathic::sync::keys::KeyKind::Ed25519,
    )
    .expect("the collector key");
    println!(
        "{:<17} {:>9} {:>8} {:>7} {:>8} {:>8} {:>8} {:>9} {:>10} {:>9} {:>8}",
        "central",
        "messages",
        "secs",
        "msg/s",
        "MB/s",
        "lag p50",
        "lag p95",
        "collector",
        "publishers",
        "mosquitto",
        "postgres"
    );
    for (name, target, sealed) in targets {
        let dir = tmp.path().join(name.replace(' ', "-"));
        std::fs::create_dir_all(&dir).expect("a folder");
        let port = broker::free_port();
        let mut broker = start_broker(&dir, port);
        let dbs: Vec<PathBuf> = (0..stations)
            .map(|k| make_station(&dir, k, sessions, &seed))
            .collect();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let collect_opts = empathic::sync::collect::CollectOptions {
            health_sweep: Duration::from_secs(60),
            host: "127.0.0.1".into(),
            port,
            auth: Default::default(),
            study: "load".into(),
            client_id: format!("load-collector-{}", name.replace(' ', "-")),
            share_group: None,
            changes: None,
        };
        // Sealed: every station enrolled with its own key before the collector starts.
        let sealings: Vec<Option<empathic::sync::Sealing>> = (0..stations)
            .map(|k| {
                sealed.then(|| {
                    let path = dir.join(format!("station-{k:02}.key"));
                    let public = empathic::sync::keys::generate(
                        &path,
                        empathic::sync::keys::KeyKind::Ed25519,
                    )
                    .expect("a station key");
                    empathic::sync::central::Central::open(&target)
                        .and_then(|mut c| {
                            c.enrol("load", &format!("station-{k:02}"), Some(&public), false)
                        })
                        .expect("enrol the station");
                    empathic::sync::Sealing {
                        key: std::sync::Arc::new(
                            empathic::sync::keys::SigningKey::load(&path).expect("the station key"),
                        ),
                        study_key: study_public.clone(),
                        study: empathic::sync::keys::StudyPublicKey::parse(&study_public)
                            .expect("the study key"),
                        collectors: vec![empathic::sync::keys::VerifyingKey::parse(
                            &collector_public,
                        )
                        .expect("the collector key")],
                    }
                })
            })
            .collect();
        let gate = empathic::sync::central::Gate {
            accept_plain: !sealed,
            study_key: sealed.then(|| {
                empathic::sync::keys::StudySecretKey::load(&keys.join("study.key"))
                    .expect("the study key")
            }),
        };
        let signing = sealed.then(|| {
            empathic::sync::keys::SigningKey::load(&keys.join("collector.key"))
                .expect("the collector key")
        });
        let collector = {
            let (stop, target) = (stop.clone(), target.clone());
            std::thread::Builder::new()
                .name("collector".into())
                .spawn(move || {
                    empathic::sync::collect::collect(
                        &target,
                        &collect_opts,
                        &gate,
                        signing.as_ref(),
                        &stop,
                    )
                })
                .expect("the collector thread")
        };
        std::thread::sleep(Duration::from_millis(1500));
        let (cpu0, broker0, pg0) = (
            process_cpu(),
            cpu_of_pid(broker.id()),
            cpu_of_named("/proc", "postgres"),
        );
        let collector0 = cpu_of_named("/proc/self/task", "collector");
        let started = Instant::now();
        // Health from every station while the records go out.
        let health_every = Duration::from_millis(env_or("EMPATHIC_LOAD_HEALTH_MS", 2000));
        let health_stop = std::sync::Arc::new(AtomicBool::new(false));
        let health_senders: Vec<_> = (0..stations)
            .filter(|_| !health_every.is_zero())
            .zip(sealings.clone())
            .map(|(k, sealing)| {
                let stop = health_stop.clone();
                let opts = station_options(port, k, sealing);
                std::thread::Builder::new()
                    .name("publisher".into())
                    .spawn(move || {
                        let (mut sent, mut failed) = (0u64, 0u64);
                        while !stop.load(Ordering::Relaxed) {
                            let h = empathic::sync::health::Health {
                                format: empathic::sync::health::HEALTH_FORMAT.into(),
                                v: empathic::sync::health::HEALTH_VERSION,
                                study: "load".into(),
                                station: opts.station.clone(),
                                sent_at: empathic::clock::utc_now(),
                                software: "load".into(),
                                outbox_pending: sent,
                                ..Default::default()
                            };
                            match empathic::sync::health::publish(&opts, h) {
                                Ok(()) => sent += 1,
                                Err(_) => failed += 1,
                            }
                            let next = Instant::now() + health_every;
                            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                                std::thread::sleep(Duration::from_millis(50));
                            }
                        }
                        (sent, failed)
                    })
                    .expect("a health thread")
            })
            .collect();
        let publishers: Vec<_> = dbs
            .iter()
            .enumerate()
            .zip(sealings)
            .map(|((k, db), sealing)| {
                let db = db.clone();
                let stop = stop.clone();
                let opts = station_options(port, k as u64, sealing);
                std::thread::Builder::new()
                    .name("publisher".into())
                    .spawn(move || empathic::sync::publish(&db, &opts, true, Some(limit), &stop))
                    .expect("a publisher thread")
            })
            .collect();
        let failed = publishers
            .into_iter()
            .map(|p| p.join().map_err(|_| ()).and_then(|r| r.map_err(|_| ())))
            .filter(Result::is_err)
            .count();
        let secs = started.elapsed().as_secs_f64();
        health_stop.store(true, Ordering::Relaxed);
        let (health_sent, health_failed) = health_senders
            .into_iter()
            .filter_map(|h| h.join().ok())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        // The collector takes what is still on its way.
        std::thread::sleep(Duration::from_secs(2));
        let collector_cpu = cpu_of_named("/proc/self/task", "collector") - collector0;
        let publishers_cpu = process_cpu() - cpu0 - collector_cpu;
        let broker_cpu = cpu_of_pid(broker.id()) - broker0;
        let pg_cpu = cpu_of_named("/proc", "postgres") - pg0;
        stop.store(true, Ordering::Relaxed);
        let _ = collector.join();
        let _ = broker.kill();
        let _ = broker.wait();
        // Lag: the broker's acknowledgement at the station to the commit at the centre.
        let mut sent = std::collections::HashMap::new();
        for db in &dbs {
            let c = rusqlite::Connection::open(db).expect("a station store");
            let mut st = c
                .prepare("SELECT message_id, sent_at FROM outbox WHERE sent_at IS NOT NULL")
                .expect("read the outbox");
            let rows = st
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .expect("read the outbox");
            for (id, at) in rows.flatten() {
                sent.insert(id, at);
            }
        }
        let received: Vec<(String, String)> = if target.starts_with("postgres://") {
            let mut c = postgres::Client::connect(&target, postgres::NoTls).expect("PostgreSQL");
            c.query("SELECT message_id, received_at FROM collect_records", &[])
                .expect("read the records")
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect()
        } else {
            let c = rusqlite::Connection::open(&target).expect("the central file");
            let mut st = c
                .prepare("SELECT message_id, received_at FROM collect_records")
                .expect("read the records");
            let rows = st
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .expect("read the records");
            rows.flatten().collect()
        };
        let mut lags: Vec<f64> = received
            .iter()
            .filter_map(|(id, at)| Some(millis(at)? - millis(sent.get(id)?)?))
            .collect();
        let messages = received.len();
        let health_kept: i64 = if target.starts_with("postgres://") {
            let mut c = postgres::Client::connect(&target, postgres::NoTls).expect("PostgreSQL");
            c.query_one("SELECT count(*) FROM collect_health_history", &[])
                .map(|r| r.get(0))
                .unwrap_or(-1)
        } else {
            rusqlite::Connection::open(&target)
                .and_then(|c| {
                    c.query_row("SELECT count(*) FROM collect_health_history", [], |r| {
                        r.get(0)
                    })
                })
                .unwrap_or(-1)
        };
        let mb = (messages * seed.0.len()) as f64 / 1e6;
        println!(
            "{name:<17} {messages:>9} {secs:>8.1} {:>7.1} {:>8.2} {:>6.0}ms {:>6.0}ms {:>8.1}s {:>9.1}s {:>8.1}s {:>7.1}s",
            messages as f64 / secs,
            mb / secs,
            percentile(&mut lags, 0.5),
            percentile(&mut lags, 0.95),
            collector_cpu,
            publishers_cpu,
            broker_cpu,
            pg_cpu
        );
        if !health_every.is_zero() {
            println!(
                "  health: {health_sent} sent ({health_failed} failed), {health_kept} kept, every {} ms from each of {stations} stations",
                health_every.as_millis()
            );
        }
        // The study page from what arrived, as `collect --study-page` makes it: a first
        // build (PostgreSQL: the light view read whole), then one with nothing new (the
        // kept view); the process's resident memory after them.
        {
            let mut central =
                empathic::sync::central::Central::open(&target).expect("the central database");
            let mut view = empathic::sync::central::PageView::default();
            let plan = empathic::config::StudyConfig::default();
            let (mut times, mut bytes) = (Vec::new(), 0);
            for _ in 0..2 {
                let t = Instant::now();
                let facts = empathic::report::study::StudyFacts::gather(
                    &mut central,
                    &mut view,
                    "load",
                    &plan,
                    "bench",
                    &empathic::clock::utc_now(),
                )
                .expect("the study page");
                bytes = empathic::report::study::html(&facts).len();
                times.push(t.elapsed().as_secs_f64());
            }
            let rss = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                })
                .unwrap_or(0.0);
            println!(
                "  study page: first build {:.2} s, again {:.2} s, {:.0} kB; bench RSS after {:.0} MiB",
                times[0],
                times[1],
                bytes as f64 / 1e3,
                rss / 1024.0
            );
        }
        if sealed {
            // What sealing puts on the wire per record: the sealed payload as kept in the
            // outbox (base64), against the record itself.
            if let Some(db) = dbs.first() {
                let c = rusqlite::Connection::open(db).expect("a station store");
                let (plain, wire): (f64, f64) = c
                    .query_row(
                        "SELECT avg(length(payload)), avg(length(sealed)) FROM outbox WHERE sealed IS NOT NULL",
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .expect("read the outbox");
                println!(
                    "  sealed on the wire: {:.1} kB a record of {:.1} kB ({:.2}x; {} chunk(s) of {} kB)",
                    wire / 1e3,
                    plain / 1e3,
                    wire / plain,
                    (wire as usize).div_ceil(empathic::sync::CHUNK_CHARS),
                    empathic::sync::CHUNK_CHARS / 1024
                );
            }
        }
        if failed > 0 || messages as u64 != stations * sessions {
            println!(
                "  {failed} publisher(s) did not finish within {} s; {messages} of {} records stored",
                limit.as_secs(),
                stations * sessions
            );
        }
    }
    drop(pg);
}
