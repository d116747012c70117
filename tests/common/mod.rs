//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The bundled demo session.
pub fn demo_session() -> PathBuf {
    root().join("demo/session")
}

/// The shared fixtures (`EMPATHIC_FIXTURES` or `../shared/fixtures`), when present; when
/// absent, says so in one line that shows even though test output is captured, or fails
/// the test when `EMPATHIC_REQUIRE_FIXTURES=1`.
pub fn fixtures_or_skip(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("EMPATHIC_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/fixtures"));
    if dir.is_dir() {
        return Some(dir);
    }
    assert!(
        !fixtures_required(),
        "{test}: shared fixtures not found at {} and EMPATHIC_REQUIRE_FIXTURES=1 (set EMPATHIC_FIXTURES)",
        dir.display()
    );
    // Written to the stream directly: libtest captures only the print macros.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: shared fixtures not found at {} (set EMPATHIC_FIXTURES)",
        dir.display()
    );
    None
}

/// Copies a session folder into `dest` (a fresh folder) and returns it.
pub fn copy_session(from: &Path, dest: &Path) -> PathBuf {
    std::fs::create_dir_all(dest).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dest.join(entry.file_name())).unwrap();
        }
    }
    dest.to_path_buf()
}

/// A copy of the session folder `from` in `dest` with these `session.json` fields set
/// (for example `("session_id", "demo-0002")`, `("participant_id", "P-OTHER")`).
pub fn copy_session_as(from: &Path, dest: &Path, fields: &[(&str, &str)]) -> PathBuf {
    let dir = copy_session(from, dest);
    let path = dir.join("session.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (key, value) in fields {
        v[*key] = (*value).into();
    }
    std::fs::write(&path, v.to_string()).unwrap();
    dir
}

/// The demo recording as a later session (`demo-0002`, a week on) of the same participant,
/// copied into `dest`.
pub fn later_demo_session(dest: &Path) -> PathBuf {
    copy_session_as(
        &demo_session(),
        dest,
        &[
            ("session_id", "demo-0002"),
            ("start_time", "2026-11-08T18:30:00Z"),
        ],
    )
}

/// Imports the stories of `file` (JSON lines) into the store `db`, asserting it succeeds.
pub fn import_stories(file: &Path, db: &Path) {
    let o = empathic(&["stories", "import", path_str(file), "--db", path_str(db)]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// Runs the `empathic` binary. `EMPATHIC_TEST_RUNNER` (development only) prefixes it with a
/// command, e.g. `qemu-x86_64 -cpu Haswell` to run it on another CPU class (see
/// `tests/it/golden.rs`).
pub fn empathic(args: &[&str]) -> Output {
    empathic_logging("error", args)
}

/// [`empathic`] with its log at `level` (an `EMPATHIC_LOG` directive): for a test that
/// reads what the command warned of.
pub fn empathic_logging(level: &str, args: &[&str]) -> Output {
    let runner = std::env::var("EMPATHIC_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    let mut cmd = match words.next() {
        Some(program) => {
            let mut c = Command::new(program);
            c.args(words).arg(env!("CARGO_BIN_EXE_empathic"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_empathic")),
    };
    cmd.args(args)
        .env("EMPATHIC_LOG", level)
        .output()
        .expect("run empathic")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A config without the appearance CNN and the facial stage, for tests about other parts:
/// they take about 25 ms and 11 ms a frame, most of a replay's time (the demo, face and
/// determinism tests keep them).
pub fn config_without_vision_models(dir: &Path) -> PathBuf {
    config_without_vision_models_and(dir, "no-vision-models.toml", "")
}

/// [`config_without_vision_models`] with `extra` TOML sections after it, written to
/// `dir/name`.
pub fn config_without_vision_models_and(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "[models]\nappearance_encoder = \"\"\n\n[face]\nenabled = false\n\n[body]\nenabled = false\n{extra}"
        ),
    )
    .unwrap();
    p
}

/// `empathic replay SESSION --db DB [--config CONFIG]`.
pub fn replay_cli(session: &Path, db: &Path, config: Option<&Path>) -> Output {
    replay_cli_with(session, db, config, &[])
}

/// `empathic replay SESSION --db DB [--config CONFIG]` with `extra` arguments (e.g.
/// `--replace`), the one place the tests spell a replay's command line.
pub fn replay_cli_with(session: &Path, db: &Path, config: Option<&Path>, extra: &[&str]) -> Output {
    let mut args = vec!["replay", path_str(session), "--db", path_str(db)];
    if let Some(c) = config {
        args.extend(["--config", path_str(c)]);
    }
    args.extend(extra);
    empathic(&args)
}

/// `empathic report ID --db DB --out PAGE`, the one place the tests spell a report's
/// command line.
pub fn report_cli(id: &str, db: &Path, page: &Path) -> Output {
    empathic(&["report", id, "--db", path_str(db), "--out", path_str(page)])
}

/// The CPU class the binary runs on: this machine's, or `EMPATHIC_TEST_CPU_CLASS` when
/// `EMPATHIC_TEST_RUNNER` runs it on an emulated one (e.g. `avx2,fma` for
/// `qemu-x86_64 -cpu Haswell`).
pub fn cpu_class() -> String {
    if let Ok(class) = std::env::var("EMPATHIC_TEST_CPU_CLASS") {
        return class;
    }
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = info
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>();
    ["avx2", "fma", "avx512f", "avx512_vnni", "avx512bw"]
        .iter()
        .filter(|f| flags.contains(f))
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}

/// The file of `dir` holding data computed on this CPU class: `{stem}.{class}.{ext}` with
/// the class's commas as `-` (ONNX Runtime's kernels differ between classes, so a model's
/// outputs are exact only within one). `None` when none was taken on this class.
pub fn cpu_class_file(dir: &Path, stem: &str, ext: &str) -> Option<PathBuf> {
    let p = dir.join(format!("{stem}.{}.{ext}", cpu_class().replace(',', "-")));
    p.exists().then_some(p)
}

pub mod broker;
pub mod central;
pub mod chromium;
pub mod csv;
pub mod live;
pub mod old_store;
pub mod postgres;
pub mod speech;
pub mod store;

/// Whether a missing fixture must fail the test (CI sets `EMPATHIC_REQUIRE_FIXTURES=1`,
/// since CI has the fixtures beside the clone: a skip there would pass silently).
pub fn fixtures_required() -> bool {
    std::env::var("EMPATHIC_REQUIRE_FIXTURES").is_ok_and(|v| v == "1")
}

/// Loads an `empathic export windows` folder through the training toolkit's reader
/// (`tools/fusion/data.py`, numpy only: `scripts/setup.sh` installs Debian's python3-numpy)
/// and returns its output: a JSON line of what it loaded, or its refusal on stderr. Debian's
/// own interpreter (`/usr/bin/python3`, where python3-numpy installs) unless
/// `EMPATHIC_PYTHON` names another: a `python3` earlier on PATH (pyenv) lacks numpy.
pub fn load_with_training_reader(export: &Path) -> Output {
    let python = std::env::var("EMPATHIC_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    let script = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
import data
ds = data.load(sys.argv[2])
print(json.dumps({
    "samples": len(ds.samples),
    "participants": ds.participants(),
    "modalities": sorted(ds.modalities),
    "encoder": ds.encoder,
    "stories": len(ds.story_ids),
    "window_shape": [list(a.shape) for a in ds.window(ds.samples[0], sorted(ds.modalities))[:1]],
}))
"#;
    let probe = Command::new(&python)
        .args(["-c", "import numpy"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): run scripts/setup.sh"));
    assert!(
        probe.status.success(),
        "{python} cannot import numpy: run scripts/setup.sh (Debian python3-numpy)"
    );
    Command::new(&python)
        .args([
            "-c",
            script,
            path_str(&root().join("tools/fusion")),
            path_str(export),
        ])
        .output()
        .unwrap()
}

/// `empathic keys init WHOSE --file FILE`; returns the public half it printed.
pub fn key_init(whose: &str, file: &Path) -> String {
    let o = empathic(&["keys", "init", whose, "--file", path_str(file)]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).trim().to_string()
}

/// Stops a service or collector the way systemd does (SIGTERM) and waits for it.
pub fn terminate(c: impl Into<broker::Collector>) {
    let mut c = c.into();
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .status();
    let _ = c.wait();
}

/// Two real faces side by side under `dir` (video.avi 640x480 MJPG at 15 fps, audio.wav):
/// the shared `still` clip's face on the left (the participant, alone for the first 2 s),
/// then `grid`'s real speakers on the right (a bystander) until the end, `seconds` long.
pub fn two_faces(fixtures: &Path, dir: &Path, seconds: u32) -> PathBuf {
    two_faces_with(fixtures, dir, seconds, None)
}

/// [`two_faces`], with the participant's half filled grey from `away.0` to `away.1`
/// seconds (the participant has left the view, the bystander stays).
pub fn two_faces_with(
    fixtures: &Path,
    dir: &Path,
    seconds: u32,
    away: Option<(u32, u32)>,
) -> PathBuf {
    let left = match away {
        Some((from, to)) => format!(
            ",drawbox=x=0:y=0:w=320:h=480:color=0x606060:t=fill:enable='between(t,{from},{to})'"
        ),
        None => String::new(),
    };
    still_and_grid(
        fixtures,
        dir,
        seconds,
        &format!(
            "[0:v]crop=320:480:160:0{left}[a];[1:v]crop=320:480:160:0,tpad=start_duration=2:color=0x606060[b];[a][b]hstack=inputs=2,trim=duration={seconds}[v]"
        ),
    )
}

/// [`two_faces`], with the bystander further back and their shoulders in view: `grid`'s
/// whole frame scaled to 0.75 (a 320x360 crop of it, its speaker's face about 0.7 of the
/// participant's width) at the foot of the right half, the half's top 120 rows grey;
/// from 2 s, as in [`two_faces`].
pub fn bystander_further_back(fixtures: &Path, dir: &Path, seconds: u32) -> PathBuf {
    still_and_grid(
        fixtures,
        dir,
        seconds,
        &format!(
            "[0:v]crop=320:480:160:0[a];[1:v]scale=480:360,crop=320:360:80:0,pad=320:480:0:120:color=0x606060,tpad=start_duration=2:color=0x606060[b];[a][b]hstack=inputs=2,trim=duration={seconds}[v]"
        ),
    )
}

/// A station config under `dir` that keeps every face (`[privacy] bystanders = "keep"`),
/// for tests that measure a stage against a reference that follows anyone.
pub fn keep_bystanders_config(dir: &Path) -> PathBuf {
    let path = dir.join("keep-bystanders.toml");
    std::fs::write(&path, "[privacy]\nbystanders = \"keep\"\n").unwrap();
    path
}

/// Runs ffmpeg (installed by set-up) quietly, overwriting; fails the test on error.
pub fn ffmpeg(args: &[&str]) {
    let ok = std::process::Command::new("ffmpeg")
        .args(["-loglevel", "error", "-y"])
        .args(args)
        .status()
        .expect("ffmpeg (installed by set-up)")
        .success();
    assert!(ok, "ffmpeg {args:?}");
}

/// Where the bystander's face is in [`crossing`]'s material: its x range on frame `i`
/// (the crop's face spans 34-223 of its 260 columns), and its rows.
pub const CROSSING_FACE_ROWS: (f32, f32) = (184.0, 386.0);
pub fn crossing_face_x(i: usize) -> (f32, f32) {
    let t = i as f32 / 15.0;
    let x = 640.0 - (t - CROSSING_ENTERS_S) * CROSSING_PX_PER_S;
    (x + 34.0, x + 223.0)
}
/// When the bystander's crop starts entering at the right edge, and its speed.
pub const CROSSING_ENTERS_S: f32 = 2.0;
pub const CROSSING_PX_PER_S: f32 = 200.0;

/// `seconds` of material where a bystander walks in front of the participant: `still`'s
/// whole frame (the participant, face at x 245-428), and `grid`'s speaker's head (a
/// 260x300 crop, face level with the participant's) passing from right to left at 200 px
/// a second from 2 s, over the participant's face from about 3.1 s to 5.0 s, gone at
/// 6.5 s. Audio: `still`'s.
pub fn crossing(fixtures: &Path, dir: &Path, seconds: u32) -> PathBuf {
    still_and_grid(
        fixtures,
        dir,
        seconds,
        &format!(
            "[1:v]crop=260:300:145:170[b];[0:v][b]overlay=x='640-(t-{CROSSING_ENTERS_S})*{CROSSING_PX_PER_S}':y=120:enable='gte(t,{CROSSING_ENTERS_S})',trim=duration={seconds}[v]"
        ),
    )
}

/// Material under `dir` made from the shared `still` (input 0) and `grid` (input 1) clips
/// by the ffmpeg filter `graph` (its output `[v]`): video.avi 640x480 MJPG at 15 fps, and
/// `still`'s audio cut to `seconds`.
fn still_and_grid(fixtures: &Path, dir: &Path, seconds: u32, graph: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let f = fixtures.join("sessions");
    ffmpeg(&[
        "-i",
        path_str(&f.join("still/video.avi")),
        "-i",
        path_str(&f.join("grid/video.avi")),
        "-filter_complex",
        graph,
        "-map",
        "[v]",
        "-c:v",
        "mjpeg",
        "-q:v",
        "3",
        "-r",
        "15",
        "-pix_fmt",
        "yuvj420p",
        path_str(&dir.join("video.avi")),
    ]);
    ffmpeg(&[
        "-i",
        path_str(&f.join("still/audio.wav")),
        "-t",
        &seconds.to_string(),
        path_str(&dir.join("audio.wav")),
    ]);
    dir.to_path_buf()
}
