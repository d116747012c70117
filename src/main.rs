//! The `empathic` command: parses the command line, sets up logging and dispatches to the
//! command bodies in [`empathic::cli`], after two process-wide settings made before any
//! thread exists (one malloc arena, [`share_one_malloc_arena`]; ONNX Runtime's telemetry
//! off, `empathic::models::onnx::TELEMETRY_OFF`); nothing else lives here.
#![deny(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "sensing")]
#[cfg(feature = "sensing")]
mod alsa_log;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use empathic::cli::{self, Failure};

#[derive(Parser)]
#[command(name = "empathic", version = empathic::BUILD)]
#[cfg_attr(
    feature = "sensing",
    command(about = "Senses empathy on an in-home social robot")
)]
#[cfg_attr(
    not(feature = "sensing"),
    command(
        about = "Senses empathy on an in-home social robot: the collector build (sync, collect and the reading commands; no capture, features or models)"
    )
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The station's commands (`cli::station`), in the sensing build only.
    #[cfg(feature = "sensing")]
    #[command(flatten)]
    Station(cli::station::StationCommand),
    Sessions(cli::sessions::Args),
    Export(cli::export::Args),
    Evaluate(cli::evaluate::Args),
    Explain(cli::explain::Args),
    Report(cli::report::Args),
    Sync(cli::sync::SyncArgs),
    Participant(cli::participant::Args),
    Collect(cli::collect::Args),
    /// The study at a glance from the central database (`study report`).
    Study(cli::study::Args),
    Keys(cli::keys::Args),
}

/// Every file and folder the program creates gets at most the permissions the service's
/// unit gives it (`UMask=0027`: files 0640, folders 0750): a database a command creates (a
/// first `participant consent`, `collect copy --into`), a recording or a report is not
/// readable by other users of the machine whatever the caller's umask. A stricter umask
/// is kept; files made public on purpose (the control socket) set their mode themselves.
fn private_files() {
    use rustix::fs::Mode;
    let old = rustix::process::umask(Mode::from_raw_mode(0o027));
    rustix::process::umask(old | Mode::from_raw_mode(0o027));
}

fn main() -> ExitCode {
    share_one_malloc_arena();
    private_files();
    // Before any thread exists (setting the environment later would race with readers).
    #[cfg(feature = "sensing")]
    if std::env::var_os(empathic::models::onnx::TELEMETRY_OFF).is_none() {
        std::env::set_var(empathic::models::onnx::TELEMETRY_OFF, "1");
    }
    init_logging();
    // Test builds only: fail points named in FAILPOINTS (runtime::pipeline::failures).
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    #[cfg(feature = "sensing")]
    alsa_log::route_messages();
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err((kind, message)) => {
            eprintln!("error: {message}");
            cli::exit_code(kind)
        }
    }
}

/// Limits glibc malloc to one arena for the whole process, unless `MALLOC_ARENA_MAX` is
/// set (then the environment wins). Called before any thread exists.
///
/// glibc otherwise gives a thread that allocates while another holds the lock an arena of
/// its own (up to 8 per core), and freed memory stays in the arena that allocated it. The
/// pipeline's dozen named threads each allocate a little per frame, so a replay held
/// 37-76 MiB more at its peak with 16 arenas than with one (`scripts/replay_throughput.sh`,
/// the same build run with `MALLOC_ARENA_MAX=16`, demo and the three shared sessions,
/// issue 18). Speed: in that sitting 16 arenas replayed 1-9 % faster; in a second one (demo,
/// 1, 2, 4 and 16 arenas: 119, 120, 111, 116 frames/s) one arena was as fast, so the cost is
/// within this machine's noise (the tensors live in ONNX Runtime's own arenas; per frame the
/// threads ask malloc for a few small vectors). The library crate forbids `unsafe`; this
/// one call is its only use.
fn share_one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter, before any other thread runs.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}

/// Logs go to stderr without colours or targets, one event per line, so a station's
/// journal (systemd captures stderr) reads them well. `EMPATHIC_LOG` takes an
/// `EnvFilter` directive (`debug` prints each thread's figures at the end of a run).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EMPATHIC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,ort=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// Each command's `Args::run` (its body is in `cli/`).
fn dispatch(command: Command) -> Result<ExitCode, Failure> {
    match command {
        #[cfg(feature = "sensing")]
        Command::Station(c) => c.run(),
        Command::Sessions(a) => a.run(),
        Command::Export(a) => a.run(),
        Command::Evaluate(a) => a.run(),
        Command::Explain(a) => a.run(),
        Command::Report(a) => a.run(),
        Command::Sync(a) => a.run(),
        Command::Participant(a) => a.run(),
        Command::Collect(a) => a.run(),
        Command::Study(a) => a.run(),
        Command::Keys(a) => a.run(),
    }
}

#[cfg(test)]
mod help_tests {
    use clap::CommandFactory;

    /// Every argument of every command says what it is (README: `--help` is the reference).
    #[test]
    fn every_argument_has_a_description() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "empathic", &mut missing);
        assert!(
            missing.is_empty(),
            "{} without help:\n{}",
            missing.len(),
            missing.join("\n")
        );
    }
}
