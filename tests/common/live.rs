//! The live service's test harness: a user-space PulseAudio sound server with a null sink
//! (`Pulse`), a station running `empathic run` as a child process with the demo session's
//! video as its camera (`Station`), and the scripted sessions, checks and measurements the
//! live tests share (tests/live/).
//!
//! The live tests run one at a time ([`ONE_AT_A_TIME`]): each is a real-time session, and on
//! a two-core machine two at once would make the camera drop frames.

use super::store::table_lines;
use super::*;
use rusqlite::Connection;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A user-space PulseAudio whose default source is the monitor of a 16 kHz mono null sink,
/// with silence always playing into it: a null sink's monitor delivers samples only while
/// something plays, a microphone delivers them all the time.
pub struct Pulse {
    pub child: Child,
    pub runtime_dir: PathBuf,
    pub room_tone: Option<Child>,
}

impl Drop for Pulse {
    fn drop(&mut self) {
        if let Some(mut r) = self.room_tone.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
        // SIGTERM: the server closes its clients' streams, as a sound server (or a USB
        // device) going away does; SIGKILL only if it does not exit.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three minutes of 16 kHz mono 16-bit silence.
pub fn silence_wav(dir: &Path) -> PathBuf {
    let p = dir.join("silence.wav");
    let mut w = hound::WavWriter::create(
        &p,
        hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        },
    )
    .unwrap();
    for _ in 0..16_000 * 180 {
        w.write_sample(0i16).unwrap();
    }
    w.finalize().unwrap();
    p
}

impl Pulse {
    pub fn start(dir: &Path) -> Pulse {
        let runtime_dir = dir.join("pulse-runtime");
        std::fs::create_dir_all(&runtime_dir).unwrap();
        let child = Command::new("pulseaudio")
            .args([
                "-n",
                "--daemonize=no",
                "--exit-idle-time=-1",
                "--disallow-exit",
                "--log-target=stderr",
                "-L",
                "module-native-protocol-unix",
                "-L",
                "module-null-sink sink_name=mic rate=16000 channels=1",
            ])
            .env("XDG_RUNTIME_DIR", &runtime_dir)
            .env("HOME", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pulseaudio is installed by scripts/setup.sh (Debian package `pulseaudio`)");
        let mut pulse = Pulse {
            child,
            runtime_dir,
            room_tone: None,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !pulse.pactl(&["info"]) {
            assert!(Instant::now() < deadline, "pulseaudio did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(pulse.pactl(&["set-default-source", "mic.monitor"]));
        let silence = dir.join("silence.wav");
        let silence = if silence.exists() {
            silence
        } else {
            silence_wav(dir)
        };
        pulse.room_tone = Some(pulse.play(&silence));
        pulse
    }

    /// The microphone goes away, as a USB microphone pulled out does: its source leaves
    /// the sound server.
    pub fn unplug(&mut self) {
        if let Some(mut r) = self.room_tone.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
        assert!(self.pactl(&["unload-module", "module-null-sink"]));
    }

    /// ... and comes back.
    pub fn replug(&mut self, dir: &Path) {
        assert!(self.pactl(&[
            "load-module",
            "module-null-sink",
            "sink_name=mic",
            "rate=16000",
            "channels=1"
        ]));
        assert!(self.pactl(&["set-default-source", "mic.monitor"]));
        self.room_tone = Some(self.play(&dir.join("silence.wav")));
    }

    pub fn pactl(&self, args: &[&str]) -> bool {
        Command::new("pactl")
            .args(args)
            .env("XDG_RUNTIME_DIR", &self.runtime_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Plays a WAV into the null sink (the microphone hears it), in the background.
    pub fn play(&self, wav: &Path) -> Child {
        Command::new("paplay")
            .arg("-d")
            .arg("mic")
            .arg(wav)
            .env("XDG_RUNTIME_DIR", &self.runtime_dir)
            .spawn()
            .expect("paplay is installed by scripts/setup.sh (Debian package `pulseaudio-utils`)")
    }
}

/// `empathic run` as a child process.
pub struct Station {
    pub child: Option<Child>,
    /// The `empathic` binary it runs (the build under test unless a test gives a copy).
    pub binary: PathBuf,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub db: PathBuf,
    pub recordings: PathBuf,
    pub log: PathBuf,
    /// Extra environment for the service (e.g. systemd's NOTIFY_SOCKET).
    pub envs: Vec<(String, String)>,
}

impl Drop for Station {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes the station config: the given camera, the test's socket, database and recordings.
pub fn station_config(dir: &Path, camera: &Path) -> PathBuf {
    let config = dir.join("station.toml");
    std::fs::write(
        &config,
        format!(
            "[station]\nid = \"st-live\"\n\n[video]\ndevice = \"{}\"\n\n[store]\ndb_path = \"{}\"\n\n\
             [live]\nsocket = \"{}\"\ntranscript_wait_ms = 15000\nrealtime_priority = 0\n\n\
             [recording]\ndir = \"{}\"\nmin_free_mib = 16\non_start = \"touch {}\"\non_stop = \"touch {}\"\n",
            camera.display(),
            dir.join("station.db").display(),
            dir.join("control.sock").display(),
            dir.join("recordings").display(),
            dir.join("ring-light-on").display(),
            dir.join("ring-light-off").display(),
        ),
    )
    .unwrap();
    config
}

impl Station {
    pub fn start(dir: &Path, config: &Path, pulse_runtime: &Path) -> Station {
        Self::start_with(dir, config, pulse_runtime, Vec::new())
    }

    pub fn start_with(
        dir: &Path,
        config: &Path,
        pulse_runtime: &Path,
        envs: Vec<(String, String)>,
    ) -> Station {
        let mut s = Station {
            envs,
            child: None,
            binary: PathBuf::from(env!("CARGO_BIN_EXE_empathic")),
            config: config.to_path_buf(),
            socket: dir.join("control.sock"),
            db: dir.join("station.db"),
            recordings: dir.join("recordings"),
            log: dir.join("service.log"),
        };
        s.spawn(pulse_runtime);
        s
    }

    pub fn spawn(&mut self, pulse_runtime: &Path) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(&self.binary)
            .args(["run", "--config", path_str(&self.config)])
            .env("XDG_RUNTIME_DIR", pulse_runtime)
            .env("EMPATHIC_LOG", "info,ort=warn")
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while UnixStream::connect(&self.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "the service did not open its socket: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends one request; returns the answer.
    pub fn ask(&self, request: Value) -> Value {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        writeln!(stream, "{request}").unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// Subscribes to `topics`; the thread returned collects the messages until the
    /// session's `ended` message (or 180 s).
    pub fn subscribe(&self, topics: &[&str]) -> std::thread::JoinHandle<Vec<Value>> {
        let mut stream = UnixStream::connect(&self.socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(180)))
            .unwrap();
        writeln!(stream, "{}", json!({"type": "subscribe", "topics": topics})).unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["ok"], true, "{answer}");
        std::thread::Builder::new()
            .name("test-subscriber".into())
            .spawn(move || {
                let mut got = Vec::new();
                for line in reader.lines() {
                    let Ok(line) = line else { break };
                    let v: Value = serde_json::from_str(&line).unwrap();
                    let ended = v["topic"] == "session" && v["event"] == "ended";
                    got.push(v);
                    if ended {
                        break;
                    }
                }
                got
            })
            .unwrap()
    }

    /// Sends a request that must be accepted.
    pub fn ok(&self, request: Value) -> Value {
        let a = self.ask(request.clone());
        assert_eq!(a["ok"], true, "{request} refused: {a}\n{}", self.log_text());
        a
    }

    /// Polls `status` until `ready` holds, failing after `secs` with `what` and the status.
    pub fn wait_status(&self, what: &str, secs: u64, ready: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.ok(json!({"type": "status"}));
            if ready(&s) {
                return;
            }
            assert!(Instant::now() < deadline, "{what}: {s}");
            sleep_s(0.2);
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.ok(json!({"type": "note", "text": "clock"}))["t_ms"]
            .as_u64()
            .unwrap()
    }

    pub fn signal(&mut self, signal: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        assert!(Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success());
    }

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(Instant::now() < deadline, "the service did not exit");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the session's row leaves `running`; returns its status.
    pub fn wait_session_end(&self, id: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(conn) = crate::common::store::try_open_db(&self.db) {
                let status: Option<String> = conn
                    .query_row("SELECT status FROM sessions WHERE id = ?1", [id], |r| {
                        r.get(0)
                    })
                    .ok();
                if let Some(s) = status.filter(|s| s != "running") {
                    // The recording is finalised after the row: wait for the service to say
                    // the session is over.
                    if self.ask(json!({"type": "status"}))["session"].is_null() {
                        return s;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "session {id} did not end: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn sleep_s(s: f64) {
    std::thread::sleep(Duration::from_secs_f64(s));
}

pub fn story(n: u32) -> Value {
    json!({"type": "story_shown", "story_id": format!("demo-story-0{n}"), "title": format!("Story {n}"),
           "text": format!("Story {n}: I moved to a new city for work and felt alone until a neighbour invited me to dinner.")})
}

/// The scripted session: five phases, an utterance sent when it ends, three stories,
/// three ratings, a survey item. Returns the session id.
pub fn scripted_session(station: &Station, pulse: &Pulse, participant: &str) -> (String, Child) {
    let start =
        station.ok(json!({"type": "start_session", "lease_s": 600, "participant_id": participant}));
    let id = start["session_id"].as_str().unwrap().to_string();
    let player = pulse.play(&demo_session().join("audio.wav"));
    station.ok(json!({"type": "phase", "phase": "warm_up"}));
    sleep_s(2.0);
    station.ok(json!({"type": "phase", "phase": "story_share"}));
    sleep_s(3.0);
    let now = station.now_ms();
    station.ok(json!({"type": "utterance", "speaker": "participant", "start_ms": now - 2500, "end_ms": now,
                      "text": "When I moved here I did not know anyone and the evenings were very long."}));
    station.ok(json!({"type": "phase", "phase": "story_receive"}));
    for n in 1..=3 {
        station.ok(story(n));
        // A retried `story_shown` is refused on arrival and costs the session nothing.
        let again = station.ask(story(n));
        assert_eq!(again["ok"], false, "{again}");
        assert!(
            again["error"].as_str().unwrap().contains("already shown"),
            "{again}"
        );
        sleep_s(1.5);
        station
            .ok(json!({"type": "rating", "story_id": format!("demo-story-0{n}"), "value": 1 + n}));
    }
    station.ok(json!({"type": "phase", "phase": "reflection"}));
    station.ok(json!({"type": "survey", "instrument": "SSE", "item": "q1", "value": 3.0, "time_point": "mid_study"}));
    sleep_s(2.0);
    station.ok(json!({"type": "phase", "phase": "cool_down"}));
    sleep_s(2.0);
    (id, player)
}

/// Starts a session for `P-LIVE` with the demo speech playing and the warm-up phase
/// entered; returns its id and the player.
pub fn start_warm_up(station: &Station, pulse: &Pulse) -> (String, Child) {
    let id = start_session_p_live(station);
    let player = pulse.play(&demo_session().join("audio.wav"));
    station.ok(json!({"type": "phase", "phase": "warm_up"}));
    (id, player)
}

/// Starts a session for `P-LIVE` (a 600 s lease) and returns its id.
pub fn start_session_p_live(station: &Station) -> String {
    station.ok(json!({"type": "start_session", "lease_s": 600, "participant_id": "P-LIVE"}))
        ["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

pub fn consent(config: &Path, participant: &str) {
    let o = empathic(&[
        "participant",
        "consent",
        participant,
        "--given",
        "--config",
        path_str(config),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The session-scoped rows of `id` in two stores must be the same, except the session row
/// itself (source, status) and the event rows' storage order.
pub fn assert_same_rows(live: &Path, replayed: &Path, id: &str) {
    let a = crate::common::store::open_db(live);
    let b = crate::common::store::open_db(replayed);
    for (table, key) in super::store::SESSION_TABLES {
        if *table == "sessions" {
            continue;
        }
        // Event rows (and the utterance, story, rating and survey rows naming them) are
        // numbered in the order they were stored: live, in arrival order (an utterance
        // arrives when it ends but is stamped at its start); replayed, in time order. The
        // same rows, by time and content, must be there.
        let lines = |c: &Connection| {
            let mut l = table_lines(c, table, key, id);
            {
                l = l
                    .into_iter()
                    .map(|x| {
                        x.split(' ')
                            .filter(|p| !p.starts_with("seq="))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect();
                l.sort();
            }
            l
        };
        let (la, lb) = (lines(&a), lines(&b));
        assert_eq!(la.len(), lb.len(), "{table}: row counts differ");
        let differing = la.iter().zip(&lb).filter(|(x, y)| x != y).count();
        assert_eq!(
            differing,
            0,
            "{table}: {differing} of {} rows differ between the live run and the replay of its recording; first: {:?}",
            la.len(),
            la.iter().zip(&lb).find(|(x, y)| x != y)
        );
    }
}

pub fn replay_recording(dir: &Path, folder: &Path) -> PathBuf {
    replay_recording_with(dir, folder, None)
}

/// [`replay_recording`] with a configuration file.
pub fn replay_recording_with(dir: &Path, folder: &Path, config: Option<&Path>) -> PathBuf {
    let db = dir.join("replayed.db");
    let o = replay_cli(folder, &db, config);
    assert!(
        o.status.success(),
        "replay of the recording failed: {}",
        stderr(&o)
    );
    db
}

/// Imports the demo's story bank into `db` (the station's, and the replay's, so retrieval
/// and `recommend` have a bank in both).
pub fn import_bank(db: &Path) {
    super::import_stories(&root().join("demo/stories/stories.jsonl"), db);
}

pub fn manifest(folder: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(folder.join("session.json")).unwrap()).unwrap()
}

/// Every file under `dir` (recursively) holding `needle`, as raw bytes.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(files_holding(&p, needle));
        } else if let Ok(bytes) = std::fs::read(&p) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(p);
            }
        }
    }
    found
}

pub fn avi_is_indexed(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    bytes.windows(4).any(|w| w == b"idx1")
}

/// The participant's side for the dialogue app: the demo speech cut into 5 s answers with
/// 3 s of silence after each (two minutes), so a robot that waits for the end of a turn
/// has ends to find.
pub fn answers_wav(dir: &Path) -> PathBuf {
    let mut reader = hound::WavReader::open(demo_session().join("audio.wav")).unwrap();
    let spec = reader.spec();
    assert_eq!((spec.sample_rate, spec.channels), (16_000, 1));
    let speech: Vec<i16> = reader.samples::<i16>().map(|s| s.unwrap()).collect();
    let path = dir.join("answers.wav");
    let mut w = hound::WavWriter::create(&path, spec).unwrap();
    let (answer, pause) = (5 * 16_000, 3 * 16_000);
    for k in 0..15 {
        let from = (k * answer) % (speech.len() - answer);
        for &s in &speech[from..from + answer] {
            w.write_sample(s).unwrap();
        }
        for _ in 0..pause {
            w.write_sample(0i16).unwrap();
        }
    }
    w.finalize().unwrap();
    path
}

/// Silence of `secs` seconds as the room tone (written before [`Pulse::start`], which plays
/// `silence.wav` when one is there): a null sink's monitor delivers samples only while
/// something plays, so a session longer than the default three minutes needs a longer one.
pub fn long_room_tone(dir: &Path, secs: u32) {
    let mut w = hound::WavWriter::create(
        dir.join("silence.wav"),
        hound::WavSpec {
            channels: 1,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        },
    )
    .unwrap();
    for _ in 0..16_000 * secs {
        w.write_sample(0i16).unwrap();
    }
    w.finalize().unwrap();
}

pub fn with_live(config: &Path, lines: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(
        config,
        text.replace("[live]\n", &format!("[live]\n{lines}\n")),
    )
    .unwrap();
}

pub fn dialogue_app(station: &Station, participant: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_empathic-dialogue"));
    c.args([
        "--socket",
        path_str(&station.socket),
        "--participant",
        participant,
        "--ratings",
        "4,2,5",
    ])
    .args(extra);
    c
}

pub fn status_reason(db: &Path, id: &str) -> Option<String> {
    crate::common::store::open_db(db)
        .query_row(
            "SELECT status_reason FROM sessions WHERE id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

/// The length of the realistic session: CI's cut (a story share of 95 s of continuous
/// speech, about 4.5 minutes in all), or with `EMPATHIC_REALISTIC=full` a session of the
/// study's length (about 11 minutes, a share of 160 s).
pub struct Script {
    pub warm_up_s: f64,
    pub share_s: f64,
    pub reflection_s: f64,
    pub read_s: u32,
}

pub fn script() -> Script {
    if std::env::var("EMPATHIC_REALISTIC").as_deref() == Ok("full") {
        Script {
            warm_up_s: 35.0,
            share_s: 160.0,
            reflection_s: 60.0,
            read_s: 100,
        }
    } else {
        Script {
            warm_up_s: 12.0,
            share_s: 95.0,
            reflection_s: 20.0,
            read_s: 30,
        }
    }
}

/// Peak resident memory and CPU of the service per phase, sampled every half second.
#[derive(Default, Debug)]
pub struct PhaseLoad {
    pub peak_rss_kib: u64,
    pub cpu_ticks: u64,
    pub wall_s: f64,
}

pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}
