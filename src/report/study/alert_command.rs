//! Running `[collect] on_problem`, the study's alert command, so that it can neither
//! outlive its time-out nor flood the collector.
//!
//! Contract: [`run_alert`] runs the command through `sh -c` in a process group of its own,
//! with the problem lines on its standard input (written on the side: a command that does
//! not read cannot hold the caller), `$EMPATHIC_STUDY` and `$EMPATHIC_PROBLEMS` set. Its
//! standard output and error are read (never inherited: 1 GB printed by it once went to the
//! collector's own output), the first [`OUTPUT_KEPT`] bytes of each kept for the log line
//! and the rest counted and dropped. Past [`COMMAND_TIMEOUT`] the whole group is killed, so
//! children it started (a `curl`, a `sleep`) go with it. The result names the exit status or
//! the time-out; the output is logged with control characters made spaces.

use std::io::Read as _;
use std::time::{Duration, Instant};

use crate::sync::health::printable;

/// An alert command running longer is killed, with its whole process group (and retried
/// later).
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes kept of each of the command's output streams (for the log); the rest is dropped.
pub const OUTPUT_KEPT: usize = 4096;

/// Runs `command` (see the module's contract); an error names its exit status or the
/// time-out.
pub fn run_alert(command: &str, study: &str, count: usize, lines: &str) -> Result<(), String> {
    run_alert_within(command, study, count, lines, COMMAND_TIMEOUT)
}

pub(super) fn run_alert_within(
    command: &str,
    study: &str,
    count: usize,
    lines: &str,
    timeout: Duration,
) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::process::CommandExt as _;
    use std::process::Stdio;
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .env("EMPATHIC_STUDY", study)
        .env("EMPATHIC_PROBLEMS", count.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: the time-out kills what it started too.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let lines = lines.to_string();
        let _ = crate::named_thread::spawn("alert-input", move || {
            let _ = stdin.write_all(lines.as_bytes());
        });
    }
    let readers: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|stream| crate::named_thread::spawn("alert-output", move || bounded_read(stream)))
    .collect();
    let group = rustix::process::Pid::from_child(&child);
    let until = Instant::now() + timeout;
    let result = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break Ok(()),
            Ok(Some(status)) => break Err(format!("`{command}` ended with {status}")),
            Ok(None) if Instant::now() >= until => {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
                let _ = child.wait();
                break Err(format!(
                    "`{command}` ran for over {} s and was stopped (with every process it started)",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => break Err(format!("cannot wait for `{command}`: {e}")),
        }
    };
    // Children that outlived a command that ended by itself hold its output open: they
    // go with the group too, so the readers end.
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    for (stream, reader) in ["stdout", "stderr"].iter().zip(readers) {
        let Ok(reader) = reader else { continue };
        let Ok((kept, total)) = reader.join() else {
            continue;
        };
        if total > 0 {
            tracing::info!(
                stream,
                bytes = total,
                "collect: [collect] on_problem printed: {}",
                printable(&String::from_utf8_lossy(&kept), OUTPUT_KEPT)
            );
        }
    }
    result
}

/// Reads `stream` to its end, keeping the first [`OUTPUT_KEPT`] bytes; returns them and
/// how many bytes came.
fn bounded_read(mut stream: Box<dyn std::io::Read + Send>) -> (Vec<u8>, u64) {
    let mut kept = Vec::new();
    let mut total = 0u64;
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return (kept, total),
            Ok(n) => {
                total += n as u64;
                let room = OUTPUT_KEPT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_or_hung_command_says_why() {
        let e = run_alert("exit 3", "s", 1, "x\n").unwrap_err();
        assert!(e.contains("exit 3") && e.contains("exit status: 3"), "{e}");
        // One that neither reads a large input nor ends is stopped at the timeout.
        let big = "a problem line\n".repeat(20_000);
        let e = run_alert_within("sleep 30", "s", 1, &big, Duration::from_secs(1)).unwrap_err();
        assert!(e.contains("ran for over 1 s and was stopped"), "{e}");
    }

    /// Issue 43: a hung command's children outlived its time-out, and what it printed went
    /// to the collector's own output.
    #[test]
    fn the_time_out_kills_the_whole_group_and_output_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().join("pids");
        let command = format!(
            "for i in 1 2 3 4; do sleep 300 & echo $! >> '{}'; done; head -c 50000000 /dev/zero; sleep 300",
            pids.display()
        );
        let started = Instant::now();
        let e = run_alert_within(&command, "s", 1, "x\n", Duration::from_secs(2)).unwrap_err();
        assert!(e.contains("was stopped"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(30));
        std::thread::sleep(Duration::from_millis(300));
        let text = std::fs::read_to_string(&pids).unwrap();
        assert_eq!(text.lines().count(), 4);
        for pid in text.lines() {
            let alive = std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
                && !std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                    .unwrap_or_default()
                    .contains(") Z ");
            assert!(!alive, "child {pid} outlived the alert command");
        }
        // A command that ends but leaves a child behind does not keep it either.
        let e = run_alert_within(
            "sleep 300 & echo started",
            "s",
            1,
            "",
            Duration::from_secs(5),
        );
        assert!(e.is_ok(), "{e:?}");
        let (kept, total) = bounded_read(Box::new(std::io::repeat(b'a').take(1_000_000)));
        assert_eq!((kept.len(), total), (OUTPUT_KEPT, 1_000_000));
    }
}
