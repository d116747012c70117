//! The station's and the collector's systemd units: `systemd-analyze verify` passes (with
//! ExecStart pointing at the binary under test, as `make install` puts it at
//! /usr/bin/empathic) and the offline security analysis rates each one's overall exposure at
//! 2.0 or lower (issue: hardened service; issue 34: the collector hardened like the station).

use std::process::Command;

use crate::common::*;

const UNITS: [(&str, &str); 2] = [
    ("empathic.service", "ExecStart=/usr/bin/empathic run"),
    (
        "empathic-collect.service",
        "ExecStart=/usr/bin/empathic collect",
    ),
];

fn unit_for_test(dir: &std::path::Path, (name, exec): (&str, &str)) -> std::path::PathBuf {
    let text = std::fs::read_to_string(root().join("systemd").join(name)).unwrap();
    assert!(text.contains(exec), "{name}");
    let p = dir.join(name);
    std::fs::write(
        &p,
        text.replace("/usr/bin/empathic", env!("CARGO_BIN_EXE_empathic")),
    )
    .unwrap();
    p
}

#[test]
fn unit_verifies() {
    for u in UNITS {
        let dir = tempfile::tempdir().unwrap();
        let unit = unit_for_test(dir.path(), u);
        let o = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&unit)
            .output()
            .expect("systemd-analyze is installed by scripts/setup.sh (Debian package `systemd`)");
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "systemd-analyze verify {}: {}",
            u.0,
            stderr(&o)
        );
    }
}

#[test]
fn unit_exposure_is_at_most_2() {
    for u in UNITS {
        exposure_at_most_2(u);
    }
}

fn exposure_at_most_2(u: (&str, &str)) {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_test(dir.path(), u);
    let o = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze is installed by scripts/setup.sh (Debian package `systemd`)");
    let out = format!("{}{}", stdout(&o), stderr(&o));
    let line = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure in: {out}"));
    let level: f64 = line
        .split(':')
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("cannot read the level in: {line}"));
    assert!(level <= 2.0, "{}: {line}", u.0);
}
