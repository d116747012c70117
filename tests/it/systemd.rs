//! The station's systemd unit: `systemd-analyze verify` passes (with ExecStart pointing at
//! the binary under test, as `make install` puts it at /usr/bin/empathic) and the offline
//! security analysis rates its overall exposure at 2.0 or lower (issue: hardened service).

use std::process::Command;

use crate::common::*;

fn unit_for_test(dir: &std::path::Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(root().join("systemd/empathic.service")).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/empathic run"));
    let p = dir.join("empathic.service");
    std::fs::write(
        &p,
        text.replace("/usr/bin/empathic", env!("CARGO_BIN_EXE_empathic")),
    )
    .unwrap();
    p
}

#[test]
fn unit_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_test(dir.path());
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze is installed by scripts/setup.sh (Debian package `systemd`)");
    assert!(
        o.status.success() && o.stderr.is_empty(),
        "systemd-analyze verify: {}",
        stderr(&o)
    );
}

#[test]
fn unit_exposure_is_at_most_2() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_test(dir.path());
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
    assert!(level <= 2.0, "{line}");
}
