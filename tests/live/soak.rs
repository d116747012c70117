//! A month, accelerated (issue 46, item 4): the live service driven through session after
//! session by the reference dialogue app, with a fault in most of them, and after each
//! session what a month would make grow: the service's resident memory, file descriptors
//! and threads, the database and its WAL, the log, and the recordings under `[recording]
//! retention_days`. One session stands for a day: after each, every recording is made a
//! day older, so a retention of 3 days is exercised a month over in an hour.
//!
//! Faults: none; the camera lost and back inside the session; the microphone lost and
//! back inside; the broker down (from before the session until after the next one in the
//! full run: minutes); the service killed (SIGKILL) inside the session and started again
//! 5 s later, as systemd's `Restart=on-failure` with `RestartSec=5` would; the disk nearly
//! full (the free-space floor above the free space: the service restarted with that
//! config, as an edit and `systemctl restart` would); the wall clock stepped by two hours
//! inside the session and back after it (libfaketime on the service: the wall clock moves,
//! the monotonic clock does not, as with an NTP step). Each fault once in the first seven
//! sessions and in the last seven; between them only the faults that leave the service
//! running, so one process runs most of the month ([`fault_of`]).
//!
//! Checked: every session is stored (complete, or incomplete when killed) and reaches the
//! collector exactly once; file descriptors and threads of one service process do not
//! grow with the session count; retention holds both ways. Memory, database, WAL and log
//! are recorded, not asserted (speed and memory are judged by the soak's figures, not by
//! timed assertions): `EMPATHIC_SOAK_CSV=FILE` keeps them, `scripts/soak.sh` runs the
//! full soak and plots them. `EMPATHIC_SOAK_SESSIONS` sets the count: 7 (each fault once)
//! by default, as CI runs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::common::broker::{free_port, start_broker, start_collector, Broker};
use crate::common::live::*;
use crate::common::store::{column, open_db};
use crate::common::*;

const FAULTS: [&str; 7] = [
    "none",
    "camera",
    "microphone",
    "broker",
    "kill",
    "disk",
    "clock",
];
const RETENTION_DAYS: u64 = 3;
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// What the soak records after each session.
struct Sample {
    session: usize,
    id: String,
    status: String,
    fault: &'static str,
    pid: u32,
    fresh: bool,
    rss_kib: u64,
    fds: usize,
    threads: u64,
    db_bytes: u64,
    wal_bytes: u64,
    log_bytes: u64,
    recordings: usize,
    with_media: usize,
    media_bytes: u64,
    wall_s: f64,
}

const HEADER: &str = "session,id,status,fault,pid,fresh,rss_kib,fds,threads,db_bytes,wal_bytes,log_bytes,recordings,with_media,media_bytes,wall_s";

impl Sample {
    fn csv(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.1}",
            self.session,
            self.id,
            self.status,
            self.fault,
            self.pid,
            u8::from(self.fresh),
            self.rss_kib,
            self.fds,
            self.threads,
            self.db_bytes,
            self.wal_bytes,
            self.log_bytes,
            self.recordings,
            self.with_media,
            self.media_bytes,
            self.wall_s
        )
    }
}

fn len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn proc_threads(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Threads:")
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn proc_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Every recording folder, with its age (by its session.json) and whether it holds raw media.
fn recordings(dir: &Path) -> Vec<(PathBuf, Duration, bool, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("session.json").exists())
        .map(|p| {
            let age = std::fs::metadata(p.join("session.json"))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .unwrap_or_default();
            let media: Vec<PathBuf> = ["video.avi", "audio.wav"]
                .iter()
                .map(|m| p.join(m))
                .collect();
            let bytes = media.iter().map(|m| len(m)).sum();
            let has = media.iter().any(|m| m.exists());
            (p, age, has, bytes)
        })
        .collect()
}

/// A day passes: every recording one day older, by its session.json and by its session's
/// stored end (retention ages recordings by the stored end, issue 56). A simulated day
/// cannot advance the kernel's boot clock, by which retention tells a day that passed from
/// a clock that was stepped; so the ended sessions are recorded as from an earlier boot, as
/// a month on a station spans reboots (a day passing within one boot passes for the boot
/// clock too).
fn a_day_passes(dir: &Path, db: &Path) {
    let conn = crate::common::store::open_db(db);
    conn.execute(
        "UPDATE sessions SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', updated_at, '-1 day'),
                             owner_boot_id = 'an-earlier-boot'
         WHERE status <> 'running'",
        [],
    )
    .unwrap();
    drop(conn);
    for (folder, _, _, _) in recordings(dir) {
        let f = folder.join("session.json");
        let t = std::fs::metadata(&f).and_then(|m| m.modified()).unwrap();
        let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() - 86_400;
        let ok = Command::new("touch")
            .arg("-m")
            .arg("-d")
            .arg(format!("@{secs}"))
            .arg(&f)
            .status();
        assert!(ok.is_ok_and(|s| s.success()), "touch {}", f.display());
    }
}

struct Soak {
    dir: PathBuf,
    station: Station,
    pulse: Pulse,
    camera: PathBuf,
    config: PathBuf,
    clock_file: PathBuf,
    port: u16,
    broker: Option<Broker>,
}

impl Soak {
    fn pid(&self) -> u32 {
        self.station.child.as_ref().map_or(0, Child::id)
    }

    /// systemd's `Restart=on-failure` after `RestartSec=5`, or a `systemctl restart`.
    fn restart(&mut self, kill: bool) {
        self.station.signal(if kill { "-KILL" } else { "-TERM" });
        let _ = self.station.wait_exit();
        if kill {
            sleep_s(5.0);
        }
        let runtime = self.pulse.runtime_dir.clone();
        self.station.spawn(&runtime);
    }

    fn set_floor(&mut self, min_free_mib: u64) {
        let text = std::fs::read_to_string(&self.config).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("min_free_mib = "))
            .unwrap()
            .to_string();
        std::fs::write(
            &self.config,
            text.replace(&line, &format!("min_free_mib = {min_free_mib}")),
        )
        .unwrap();
    }

    /// The reference dialogue app's session, quick timings.
    fn dialogue(&self, participant: &str, log: &Path) -> Child {
        let out = std::fs::File::create(log).unwrap();
        let err = out.try_clone().unwrap();
        dialogue_app(&self.station, participant, &[])
            .args([
                "--answer-s",
                "4",
                "--end-of-turn-ms",
                "600",
                "--max-turn-s",
                "6",
            ])
            .args([
                "--read-s",
                "2",
                "--face-s",
                "10",
                "--prediction-wait-s",
                "4",
                "--words-wait-s",
                "5",
            ])
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap()
    }

    fn running_id(&self) -> String {
        self.station.wait_status("the app's session", 30, |s| {
            s["session"]["session_id"].is_string()
        });
        self.station.ok(json!({"type": "status"}))["session"]["session_id"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

/// Session k's fault: each fault once in the first and the last seven sessions; between
/// them (the full run) only faults that leave the service running, so one process runs
/// fifty sessions and what it leaks would show.
fn fault_of(k: usize, n: usize) -> &'static str {
    const IN_PROCESS: [&str; 5] = ["none", "camera", "microphone", "broker", "clock"];
    if k < FAULTS.len() || k + FAULTS.len() >= n {
        FAULTS[k % FAULTS.len()]
    } else {
        IN_PROCESS[k % IN_PROCESS.len()]
    }
}

fn sessions_wanted() -> usize {
    std::env::var("EMPATHIC_SOAK_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FAULTS.len())
}

#[test]
fn a_month_of_sessions_with_faults_keeps_every_session_once_and_nothing_grows() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        Path::new(LIBFAKETIME).is_file(),
        "{LIBFAKETIME} missing (Debian package libfaketime, installed by scripts/setup.sh)"
    );
    let n = sessions_wanted();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let port = free_port();
    let broker = start_broker(&dir, port);
    let central = dir.join("central.db");
    let mut collector = start_collector(&central, port);
    // Room tone for the whole run (a null sink's monitor delivers samples only while
    // something plays): a minute a session is more than enough.
    long_room_tone(&dir, 60 * n as u32 + 300);
    let pulse = Pulse::start(&dir);
    let camera = dir.join("camera.avi");
    std::fs::copy(demo_session().join("video.avi"), &camera).unwrap();
    let config = station_config(&dir, &camera);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text = text.replace(
        "min_free_mib = 16",
        &format!("min_free_mib = 16\nretention_days = {RETENTION_DAYS}"),
    );
    text = text.replace("transcript_wait_ms = 15000", "transcript_wait_ms = 3000");
    text.push_str(&format!(
        "\n[sync]\nbroker = \"mqtt://127.0.0.1:{port}\"\nstudy = \"test-study\"\nsecurity = \"plain\"\n"
    ));
    std::fs::write(&config, text).unwrap();
    // Enough participants that none runs out of unseen stories in the 42-story demo bank
    // (3 a session; the first full run's participant 1 had seen all 42 by session 57, and
    // the reference app stops a session `recommend` has nothing left for).
    let participants: Vec<String> = (0..n.div_ceil(12).max(4))
        .map(|p| format!("P-SOAK-{p}"))
        .collect();
    for p in &participants {
        consent(&config, p);
    }
    import_bank(&dir.join("station.db"));
    let clock_file = dir.join("faketime");
    std::fs::write(&clock_file, "+0\n").unwrap();
    let envs = vec![
        ("LD_PRELOAD".to_string(), LIBFAKETIME.to_string()),
        (
            "FAKETIME_TIMESTAMP_FILE".to_string(),
            clock_file.display().to_string(),
        ),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
        ("FAKETIME_CACHE_DURATION".to_string(), "1".to_string()),
    ];
    let station = Station::start_with(&dir, &config, &pulse.runtime_dir, envs);
    let mut soak = Soak {
        dir: dir.clone(),
        station,
        pulse,
        camera,
        config,
        clock_file,
        port,
        broker: Some(broker),
    };
    let mut samples: Vec<Sample> = Vec::new();
    let csv_path = std::env::var_os("EMPATHIC_SOAK_CSV").map(PathBuf::from);
    let mut csv = vec![HEADER.to_string()];
    let answers = answers_wav(&dir);
    let full = n > FAULTS.len();

    let mut broker_back_after: Option<usize> = None;
    for k in 0..n {
        let fault = fault_of(k, n);
        let began = Instant::now();
        let participant = &participants[k % participants.len()];
        match fault {
            "broker" => {
                drop(soak.broker.take());
                // Down for minutes: over two sessions in the full run, one in CI's cut.
                broker_back_after = Some(if full { k + 1 } else { k });
            }
            "disk" => {
                soak.set_floor(1_000_000_000);
                soak.restart(false);
            }
            _ => {}
        }
        let pid_at_start = soak.pid();
        let mut player = soak.pulse.play(&answers);
        let app_log = soak.dir.join(format!("dialogue-{k}.log"));
        let mut app = soak.dialogue(participant, &app_log);
        let id = soak.running_id();
        let mut status_wanted = "complete";
        match fault {
            "camera" => {
                sleep_s(4.0);
                let away = soak.dir.join("camera.away");
                std::fs::rename(&soak.camera, &away).unwrap();
                sleep_s(3.0);
                std::fs::rename(&away, &soak.camera).unwrap();
            }
            "microphone" => {
                sleep_s(4.0);
                // The sink goes with the speech playing into it; the participant goes on
                // talking once it is back.
                soak.pulse.unplug();
                let _ = player.wait();
                sleep_s(3.0);
                let d = soak.dir.clone();
                soak.pulse.replug(&d);
                player = soak.pulse.play(&answers);
            }
            "kill" => {
                sleep_s(6.0);
                soak.restart(true);
                status_wanted = "incomplete";
            }
            "clock" => {
                sleep_s(4.0);
                std::fs::write(&soak.clock_file, "+2h\n").unwrap();
            }
            _ => {}
        }
        let app_status = app.wait().unwrap();
        let _ = player.kill();
        let _ = player.wait();
        if fault != "kill" {
            assert!(
                app_status.success(),
                "session {k} ({fault}): the dialogue app failed: {}\n{}",
                std::fs::read_to_string(&app_log).unwrap_or_default(),
                soak.station.log_text()
            );
        }
        let status = soak.station.wait_session_end(&id);
        assert_eq!(status, status_wanted, "session {k} {id} ({fault})");

        // Retention holds: raw media older than the retention are gone (deleted before this
        // session at the latest),
        let recs = recordings(&soak.station.recordings);
        // and younger ones keep theirs.
        for (folder, age, has_media, _) in &recs {
            let days = age.as_secs() / 86_400;
            if *age > Duration::from_secs(RETENTION_DAYS * 86_400) {
                assert!(
                    !has_media,
                    "session {k}: {} is {days} days old and keeps its media",
                    folder.display()
                );
            } else if *age < Duration::from_secs((RETENTION_DAYS - 1) * 86_400 + 3_600) {
                assert!(
                    *has_media,
                    "session {k}: {} is {days} days old and lost its media",
                    folder.display()
                );
            }
        }
        // Measured in the process that ran the session (after a kill: the one started
        // since, which has run none yet: `fresh`).
        let pid = soak.pid();
        let sample = Sample {
            session: k,
            id: id.clone(),
            status,
            fault,
            pid,
            fresh: pid != pid_at_start,
            rss_kib: rss_kib(pid),
            fds: proc_fds(pid),
            threads: proc_threads(pid),
            db_bytes: len(&soak.station.db),
            wal_bytes: len(&PathBuf::from(format!("{}-wal", soak.station.db.display()))),
            log_bytes: len(&soak.station.log),
            recordings: recs.len(),
            with_media: recs.iter().filter(|r| r.2).count(),
            media_bytes: recs.iter().map(|r| r.3).sum(),
            wall_s: began.elapsed().as_secs_f64(),
        };
        eprintln!("soak {}", sample.csv());
        csv.push(sample.csv());
        if let Some(p) = &csv_path {
            std::fs::write(p, csv.join("\n") + "\n").unwrap();
        }
        samples.push(sample);

        // What the fault changed is put back after the session.
        match fault {
            "disk" => {
                soak.set_floor(16);
                soak.restart(false);
            }
            "clock" => std::fs::write(&soak.clock_file, "+0\n").unwrap(),
            _ => {}
        }
        if broker_back_after.is_some_and(|j| j <= k) {
            soak.broker = Some(start_broker(&soak.dir, soak.port));
            broker_back_after = None;
        }
        a_day_passes(&soak.station.recordings, &soak.station.db);
    }

    // Every session reaches the collector, once.
    if soak.broker.is_none() {
        soak.broker = Some(start_broker(&soak.dir, soak.port));
    }
    let station_sessions: Vec<String> = column(
        &open_db(&soak.station.db),
        "SELECT id FROM sessions ORDER BY id",
    );
    assert_eq!(
        station_sessions.len(),
        n,
        "one stored session per session run"
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let pending: i64 = open_db(&soak.station.db)
            .query_row(
                "SELECT count(*) FROM outbox WHERE state != 'synced'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        let central_sessions: Vec<String> = crate::common::store::try_open_db(&central)
            .ok()
            .and_then(|c| {
                c.prepare("SELECT id FROM sessions ORDER BY id")
                    .ok()?
                    .query_map([], |r| r.get(0))
                    .ok()?
                    .collect::<Result<Vec<String>, _>>()
                    .ok()
            })
            .unwrap_or_default();
        if pending == 0 && central_sessions == station_sessions {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every session synced: {pending} pending; central {central_sessions:?}, station {station_sessions:?}\n{}",
            soak.station.log_text()
        );
        sleep_s(1.0);
    }
    let c = open_db(&central);
    let records: Vec<i64> = column(
        &c,
        "SELECT count(*) FROM collect_records WHERE kind = 'session' GROUP BY subject ORDER BY subject",
    );
    let announced: Vec<i64> = column(
        &open_db(&soak.station.db),
        "SELECT count(*) FROM outbox WHERE kind = 'session' GROUP BY subject ORDER BY subject",
    );
    assert_eq!(records, announced, "each session's record received once");

    // One service process's descriptors and threads do not grow with the sessions it ran
    // (the process that ran the most sessions; samples of a process that had run none
    // yet are left out: its models and pools start with its first session). Growth, not
    // variation: the median of its last quarter of sessions against its first quarter's
    // (a sample can catch a transient: the broker's connection down, -4 descriptors; a
    // microphone being reopened, +2 and a thread).
    let mut by_pid: std::collections::BTreeMap<u32, Vec<&Sample>> = Default::default();
    for s in samples.iter().filter(|s| !s.fresh) {
        by_pid.entry(s.pid).or_default().push(s);
    }
    let longest = by_pid.values().max_by_key(|v| v.len()).unwrap();
    assert!(longest.len() >= 3, "no process ran three sessions");
    let quarter = (longest.len() / 4).max(1);
    let median = |v: &[&Sample], f: fn(&Sample) -> u64| {
        let mut x: Vec<u64> = v.iter().map(|s| f(s)).collect();
        x.sort_unstable();
        x[x.len() / 2]
    };
    let (first, last) = (&longest[..quarter], &longest[longest.len() - quarter..]);
    let fds = |s: &Sample| s.fds as u64;
    let threads = |s: &Sample| s.threads;
    assert!(
        median(last, fds) <= median(first, fds) + 2,
        "file descriptors grow: {:?}",
        longest.iter().map(|s| s.fds).collect::<Vec<_>>()
    );
    assert!(
        median(last, threads) <= median(first, threads) + 1,
        "threads grow: {:?}",
        longest.iter().map(|s| s.threads).collect::<Vec<_>>()
    );
    let _ = collector.kill();
    let _ = collector.wait();
}
