//! The collector build (`make collector`: `--no-default-features`, no `sensing`) links
//! neither OpenCV, ALSA, the camera library nor ONNX Runtime, and does study staff's whole
//! job on a real broker: it makes the keys, enrols the station, collects its sealed sync
//! into a central database, then lists, shows, reports, evaluates and exports what it holds.
//!
//! The binary is `target/collector/release/empathic` (`make test` builds it first), or
//! `EMPATHIC_COLLECTOR_BIN`. Absent on a laptop's `cargo test`, the test says so and skips;
//! under CI (`EMPATHIC_REQUIRE_FIXTURES=1`) an absent binary fails it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::broker::{free_port, start_broker};
use crate::common::central::{sessions_in, wait_subscribed, wait_until};
use crate::common::{
    config_without_vision_models_and, demo_session, fixtures_required, path_str, replay_cli, root,
    stderr, stdout,
};

fn collector_bin() -> Option<PathBuf> {
    let bin = std::env::var_os("EMPATHIC_COLLECTOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/collector/release/empathic"));
    if bin.is_file() {
        return Some(bin);
    }
    assert!(
        !fixtures_required(),
        "the collector build is not at {} and CI requires it: `make collector` builds it (`make test` does first)",
        bin.display()
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped the collector build's test: no binary at {} (run `make collector`)",
        bin.display()
    );
    None
}

fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("EMPATHIC_LOG", "warn")
        // No model folder and no ONNX Runtime: the collector must need neither.
        .env("EMPATHIC_MODELS", "/nonexistent/empathic-models")
        .env("ORT_DYLIB_PATH", "/nonexistent/libonnxruntime.so")
        .output()
        .unwrap()
}

#[test]
fn the_collector_build_links_no_sensing_library_and_does_the_staff_job() {
    let Some(bin) = collector_bin() else {
        return;
    };

    // What the dynamic loader is asked for: no OpenCV, ALSA, V4L or ONNX Runtime.
    let ldd = Command::new("ldd").arg(&bin).output().unwrap();
    let linked = stdout(&ldd);
    for lib in ["opencv", "asound", "v4l", "onnxruntime", "pulse"] {
        assert!(
            !linked.contains(lib),
            "the collector build links {lib}:\n{linked}"
        );
    }
    let help = stdout(&run(&bin, &["--help"]));
    for present in [
        "collect", "sync", "sessions", "report", "export", "evaluate",
    ] {
        assert!(help.contains(present), "{present} missing:\n{help}");
    }
    let replay = run(&bin, &["replay", "demo/session"]);
    assert_eq!(replay.status.code(), Some(2), "{}", stderr(&replay));

    // A station (the full build) replays the demo; the collector build receives it,
    // sealed: the keys, the enrolment and the collection are the collector build's.
    let tmp = tempfile::tempdir().unwrap();
    let broker = start_broker(tmp.path(), free_port());
    let central = tmp.path().join("central.db");
    let keys = tmp.path().join("keys");
    let public = |whose: &str, file: &str| {
        let o = run(
            &bin,
            &["keys", "init", whose, "--file", path_str(&keys.join(file))],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        stdout(&o).trim().to_string()
    };
    let (study, collector_key, station_key) = (
        public("study", "study.key"),
        public("collector", "collector.key"),
        public("station", "station.key"),
    );
    let o = run(
        &bin,
        &[
            "collect",
            "enrol",
            "station-1",
            &station_key,
            "--db",
            path_str(&central),
            "--study",
            "test-study",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut collector = Command::new(&bin)
        .args([
            "collect",
            "--study-key",
            path_str(&keys.join("study.key")),
            "--signing-key",
            path_str(&keys.join("collector.key")),
            "--central",
            path_str(&central),
            "--broker",
            &format!("mqtt://127.0.0.1:{}", broker.port),
            "--study",
            "test-study",
            "--client-id",
            "c-collector-build",
        ])
        .env("EMPATHIC_LOG", "warn")
        .env("EMPATHIC_MODELS", "/nonexistent/empathic-models")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_subscribed(broker.port, &[path_str(&central)], Duration::from_secs(20));
    let fast = config_without_vision_models_and(
        tmp.path(),
        "station.toml",
        &format!(
            "[sync]\nsigning_key = \"{}\"\nstudy_key = \"{study}\"\ncollector_keys = [\"{collector_key}\"]\n",
            keys.join("station.key").display()
        ),
    );
    let station = tmp.path().join("station.db");
    let o = replay_cli(&demo_session(), &station, Some(&fast));
    assert!(o.status.success(), "{}", stderr(&o));
    // The station's sync, from the collector build too (sync is in it), sealed.
    let broker_url = format!("mqtt://127.0.0.1:{}", broker.port);
    let o = run(
        &bin,
        &[
            "sync",
            "--db",
            path_str(&station),
            "--config",
            path_str(&fast),
            "--broker",
            &broker_url,
            "--study",
            "test-study",
            "--station",
            "station-1",
            "--until-synced",
            "--timeout",
            "60",
        ],
    );
    assert!(o.status.success(), "sync: {}", stderr(&o));
    wait_until("the demo session in the central database", || {
        central.exists()
            && crate::common::store::try_open_db(&central)
                .map(|c| sessions_in(&c) == ["demo-0001"])
                .unwrap_or(false)
    });
    let _ = collector.kill();
    let _ = collector.wait();

    // Staff read what arrived, with the collector build only.
    let db = path_str(&central);
    let o = run(
        &bin,
        &[
            "collect",
            "stations",
            "--db",
            db,
            "--study",
            "test-study",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let one = v["received"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["station"] == "station-1"))
        .cloned();
    assert_eq!(one.and_then(|r| r["sealed"].as_i64()), Some(1), "{v}");
    let o = run(&bin, &["sessions", "list", "--db", db, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let listed: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    // The study page from the collector build: the synced session's participant, its data
    // quality and its ratings, beside the station.
    let o = run(
        &bin,
        &[
            "study",
            "report",
            "--db",
            db,
            "--study",
            "test-study",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let study: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let p = &study["participants"][0];
    assert_eq!(p["participant"], "P-DEMO", "{study:#}");
    assert_eq!(
        (p["sessions"].as_u64(), p["complete"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(p["ratings"], 3, "{study:#}");
    assert_eq!(study["quality"][0]["session_id"], "demo-0001", "{study:#}");
    assert_eq!(study["quality"][0]["station"], "station-1", "{study:#}");
    assert_eq!(
        study["ratings"]["ratings"]
            .as_array()
            .map(|r| r.iter().filter_map(|v| v.as_u64()).sum::<u64>()),
        Some(3)
    );
    assert!(
        !study["ratings"]["predictions"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{study:#}"
    );
    // Its agreement is `empathic evaluate`'s, to rounding.
    let o = run(&bin, &["evaluate", "--db", db, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let evaluated: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let page = &study["ratings"]["agreement"][0];
    let same = evaluated
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["predictor"] == page["predictor"] && e["phase"].is_null())
        .unwrap_or_else(|| panic!("{evaluated:#}"));
    assert_eq!(page["rated"], same["overall"]["n"], "{page} {same}");
    for (mine, theirs) in [("spearman_rho", "spearman_rho"), ("mse", "mse")] {
        let (a, b) = (
            page[mine].as_f64().unwrap(),
            same["overall"][theirs]["value"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-9, "{mine}: {a} against evaluate's {b}");
    }
    let o = run(&bin, &["sessions", "show", "demo-0001", "--db", db]);
    assert!(o.status.success(), "{}", stderr(&o));
    let page = tmp.path().join("report.html");
    let o = run(
        &bin,
        &["report", "demo-0001", "--db", db, "--out", path_str(&page)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .contains("demo-0001"));
    let o = run(&bin, &["evaluate", "--db", db, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = tmp.path().join("export");
    let o = run(
        &bin,
        &["export", "windows", "--db", db, "--out", path_str(&out)],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("manifest.json").is_file());
    // A bank the central database holds without embeddings cannot be embedded by this
    // build: the export says so (and is otherwise whole).
    let stories: i64 = crate::common::store::open_db(&central)
        .query_row("SELECT COUNT(*) FROM stories", [], |r| r.get(0))
        .unwrap();
    assert!(stories > 0, "the shown stories reach the central database");
    assert!(
        stderr(&o).contains("cannot embed"),
        "no word about the missing stories: {}",
        stderr(&o)
    );
    assert!(!out.join("stories").exists());
}
