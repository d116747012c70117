//! `make install` leaves a station where the README's steps work in the documented order
//! (issue 28, "First day": consent before the first start failed on a missing state
//! folder, and `doctor` contradicted itself). The install recipe runs into a `DESTDIR`
//! tree (its `build` prerequisite is the binary under test, not rebuilt); the installed
//! `station.toml` has its state, run and model paths rewritten into the tree; then, with the
//! installed (stripped) binary: consent, `doctor`, `models verify`, and a replay of the demo
//! session into the installed store.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

fn installed(tree: &Path, args: &[&str]) -> Output {
    Command::new(tree.join("usr/bin/empathic"))
        .args(args)
        .env("EMPATHIC_LOG", "warn")
        .output()
        .unwrap()
}

#[test]
fn the_readme_steps_work_in_order_on_an_installed_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("pkg");
    // `-o build`: the build is the one this test runs under (make would otherwise run
    // set-up and cargo again, inside a test).
    let o = Command::new("make")
        .current_dir(root())
        .args(["-o", "build", "install", "PREFIX=/usr"])
        .arg(format!("DESTDIR={}", tree.display()))
        .output()
        .expect("make (Debian package `make`, installed by scripts/setup.sh)");
    assert!(o.status.success(), "make install: {}", stderr(&o));
    let bin = tree.join("usr/bin/empathic");
    let size = std::fs::metadata(&bin).unwrap().len();
    assert!(
        size < std::fs::metadata(env!("CARGO_BIN_EXE_empathic"))
            .unwrap()
            .len()
            / 2,
        "the installed binary is not stripped ({size} bytes)"
    );
    assert!(tree.join("usr/lib/debug/usr/bin/empathic.debug").is_file());
    for stale in [
        "this build has no live run command yet",
        "uses no model yet",
    ] {
        for doc in [
            "usr/share/empathic/models/README.md",
            "usr/share/doc/empathic/README.md",
        ] {
            let text = std::fs::read_to_string(tree.join(doc)).unwrap_or_default();
            assert!(!text.contains(stale), "{doc} says `{stale}`");
        }
    }
    let state = tree.join("var/lib/empathic");
    assert!(state.is_dir(), "no state folder before the first start");

    // The station's config, its paths moved into the tree (a real install keeps them).
    let config = tree.join("etc/empathic/station.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    for path in [
        "/var/lib/empathic",
        "/usr/share/empathic/models",
        "/run/empathic",
    ] {
        assert!(text.contains(path), "station.toml does not name {path}");
    }
    let text = text
        .replace("/var/lib/empathic", &state.display().to_string())
        .replace(
            "/usr/share/empathic/models",
            &tree.join("usr/share/empathic/models").display().to_string(),
        )
        .replace(
            "/run/empathic",
            &tree.join("run/empathic").display().to_string(),
        )
        .replace("id = \"unknown-station\"", "id = \"st-install\"");
    std::fs::write(&config, text).unwrap();
    let config = path_str(&config);

    // README step 4 (consent) before the service ever started.
    let o = installed(
        &tree,
        &[
            "participant",
            "consent",
            "P01",
            "--given",
            "--config",
            config,
        ],
    );
    assert!(
        o.status.success(),
        "consent before the first start: {}",
        stderr(&o)
    );
    assert!(state.join("empathic.db").is_file());

    // doctor: ready for replay; the live paths the service creates are not called writable
    // while missing, and nothing is both missing and fine.
    let o = installed(&tree, &["doctor", "--config", config]);
    let report = stdout(&o);
    assert!(o.status.success(), "{report}");
    assert!(report.contains("ready for replay: yes"), "{report}");
    for line in report.lines() {
        if line.starts_with("ok") && line.contains("is writable") {
            let before = &line[..line.find(" is writable").unwrap()];
            let path = before.rsplit(' ').next().unwrap().trim_start_matches('(');
            assert!(
                Path::new(path).is_dir(),
                "doctor calls missing {path} writable: {line}"
            );
        }
    }
    assert!(
        report.contains("does not exist yet: the service creates it at start"),
        "{report}"
    );
    assert!(!report.contains("MISSING session store"), "{report}");
    assert!(!report.contains("MISSING ONNX") && !report.contains("MISSING models"));

    // The installed models are whole, and the main job runs on the installed tree.
    let o = installed(&tree, &["models", "verify", "--config", config]);
    assert!(
        o.status.success(),
        "models verify: {}{}",
        stdout(&o),
        stderr(&o)
    );
    let o = installed(
        &tree,
        &["replay", path_str(&demo_session()), "--config", config],
    );
    assert!(
        o.status.success(),
        "replay on the installed tree: {}",
        stderr(&o)
    );
    let o = installed(&tree, &["sessions", "list", "--config", config]);
    assert!(stdout(&o).contains("demo-0001"), "{}", stdout(&o));
}
