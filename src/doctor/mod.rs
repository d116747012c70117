//! `empathic doctor`: checks an installation and says precisely what is missing.
//!
//! Contract: each check reports ok, or what is missing and how to fix it. Checks are
//! grouped by what they are needed for: replaying recorded sessions (config, session store,
//! ONNX Runtime, models folder) and live capture on a station (camera, microphone). The exit
//! code is 0 when everything needed for the asked use (replay, or live with `--live`) is ok.

use std::path::Path;

use crate::config::Config;

pub mod models;

/// What a check is needed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Replay,
    Live,
    /// What a whole study session needs beyond capture (the story bank `recommend` draws
    /// from): said on its own line, it does not change `--live`'s exit code.
    Study,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub name: &'static str,
    pub need: Need,
    pub ok: bool,
    pub detail: String,
}

/// Runs every check. `config_path` is the file given with `--config`, if any.
pub fn run_checks(config_path: Option<&Path>, db_path: Option<&Path>) -> Vec<Check> {
    let mut checks = Vec::new();
    let config = match Config::load_or_default(config_path) {
        Ok(c) => {
            checks.push(Check {
                name: "config",
                need: Need::Replay,
                ok: true,
                detail: match Config::locate(config_path) {
                    Some(p) => format!("{} parses and validates", p.display()),
                    None => format!(
                        "no --config, no ${}, no {}: built-in defaults",
                        crate::config::CONFIG_ENV,
                        crate::config::INSTALLED_CONFIG
                    ),
                },
            });
            c
        }
        Err(e) => {
            checks.push(Check {
                name: "config",
                need: Need::Replay,
                ok: false,
                detail: e.to_string(),
            });
            Config::default()
        }
    };
    checks.push(check_store(db_path.unwrap_or(&config.store.db_path)));
    checks.push(check_onnxruntime(&config));
    checks.push(check_models(&config.models.dir));
    checks.push(check_speech(&config));
    checks.push(check_camera(&config));
    checks.push(check_microphone(&config));
    checks.extend(check_live_paths(&config));
    checks.push(check_control_group(&config));
    checks.push(check_sync(&config));
    checks
}

/// `[sync]` as the service will use it: the broker address parses, the station is named,
/// and under sealed sync every key is there and readable (nothing is sent: the broker may
/// be down while the station is set up).
fn check_sync(config: &Config) -> Check {
    let check = |ok: bool, detail: String| Check {
        name: "sync",
        need: Need::Live,
        ok,
        detail,
    };
    let s = &config.sync;
    if s.broker.is_empty() {
        return check(
            true,
            "no [sync] broker: every session stays on the station".into(),
        );
    }
    let address = match crate::sync::parse_broker(&s.broker) {
        Ok(a) => a,
        Err(e) => return check(false, format!("[sync] broker `{}`: {e}", s.broker)),
    };
    if config.station.id == crate::config::DEFAULT_STATION_ID {
        return check(
            false,
            "[station] id is not set: records would go out under the default name".into(),
        );
    }
    match crate::sync::Sealing::from_config(s) {
        Ok(sealing) => check(
            true,
            format!(
                "{}://{}:{}, study {}, station {}, {}",
                if address.tls { "mqtts" } else { "mqtt" },
                address.host,
                address.port,
                s.study,
                config.station.id,
                match sealing {
                    Some(k) => format!("sealed (station key {:?})", k),
                    None => "PLAIN: the broker reads everything".into(),
                }
            ),
        ),
        Err(e) => check(false, e.to_string()),
    }
}

fn check_store(db: &Path) -> Check {
    let dir = db
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let (ok, detail) = if !dir.is_dir() {
        (
            false,
            format!(
                "folder {} does not exist, and neither the service nor the commands create it: \
                 `make install` makes /var/lib/empathic; otherwise create it or pass --db",
                dir.display()
            ),
        )
    } else {
        let probe = dir.join(format!(".empathic-doctor-{}", std::process::id()));
        match std::fs::write(&probe, b"") {
            Ok(()) => {
                let _ = std::fs::remove_file(&probe);
                (true, format!("{} is writable", dir.display()))
            }
            Err(e) => (false, format!("cannot write in {}: {e}", dir.display())),
        }
    };
    Check {
        name: "session store",
        need: Need::Replay,
        ok,
        detail,
    }
}

fn check_onnxruntime(config: &Config) -> Check {
    let configured = config.models.onnxruntime_library.as_deref();
    match crate::models::onnx::environment(configured) {
        Ok(_) => {
            let info = ort::info();
            let version = info
                .split(", ")
                .find(|p| p.contains("git-branch"))
                .unwrap_or(info);
            let found = crate::models::onnx::library_candidates(configured)
                .into_iter()
                .find(|p| p.is_file())
                .map_or_else(String::new, |p| p.display().to_string());
            Check {
                name: "ONNX Runtime",
                need: Need::Replay,
                ok: true,
                detail: format!("{found} loads ({version})"),
            }
        }
        Err(e) => Check {
            name: "ONNX Runtime",
            need: Need::Replay,
            ok: false,
            detail: e.to_string(),
        },
    }
}

fn check_models(dir: &Path) -> Check {
    if !dir.is_dir() {
        return Check {
            name: "models",
            need: Need::Replay,
            ok: false,
            detail: format!(
                "models folder {} does not exist: set models.dir in the config",
                dir.display()
            ),
        };
    }
    match crate::models::manifest::Manifest::load(dir) {
        Ok(m) => {
            let present = m.models.iter().filter(|e| e.path(dir).is_file()).count();
            // Name what is absent, and say whether it matters (a shipped model does; an
            // optional one, built by a tool, does not).
            let absent: Vec<String> = m
                .models
                .iter()
                .filter(|e| !e.path(dir).is_file())
                .map(|e| {
                    format!(
                        "{} ({})",
                        e.name,
                        if e.shipped {
                            "shipped: missing"
                        } else {
                            "optional, not installed"
                        }
                    )
                })
                .collect();
            Check {
                name: "models",
                need: Need::Replay,
                ok: m.models.iter().filter(|e| e.shipped).all(|e| e.path(dir).is_file()),
                detail: format!(
                    "{}: {} models in the manifest, {present} present{} (run `empathic models verify` for checksums and known answers)",
                    dir.display(),
                    m.models.len(),
                    if absent.is_empty() {
                        String::new()
                    } else {
                        format!("; absent: {}", absent.join(", "))
                    }
                ),
            }
        }
        Err(e) => Check {
            name: "models",
            need: Need::Replay,
            ok: false,
            detail: e.to_string(),
        },
    }
}

/// The station's recogniser (`[asr]`): its model files, when it is on. Without them a
/// session runs without the station's words, so a station meant to hear is not ready.
fn check_speech(config: &Config) -> Check {
    let m = crate::features::speech::SpeechModels::in_dir(&config.models.dir);
    let missing: Vec<String> = [&m.vad, &m.encoder, &m.decoder, &m.vocabulary]
        .into_iter()
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    let (ok, detail) = if !config.asr.enabled {
        (
            true,
            "off ([asr] enabled = false): text comes from the dialogue app only".to_string(),
        )
    } else if missing.is_empty() {
        (
            true,
            format!(
                "Silero VAD v6 and Moonshine tiny-en in {} (the participant's words are recognised on this station)",
                config.models.dir.join("speech").display()
            ),
        )
    } else {
        (
            false,
            format!(
                "missing {}: sessions run without the station's words; run scripts/setup.sh (or set [asr] enabled = false)",
                missing.join(", ")
            ),
        )
    };
    Check {
        name: "speech",
        need: Need::Live,
        ok,
        detail,
    }
}

/// Opens the configured camera for real and decodes one frame.
fn check_camera(config: &Config) -> Check {
    use crate::capture::camera::{decode_jpeg, opener_for};
    let v = &config.video;
    let opener = opener_for(&v.device, v.width, v.height, v.nominal_fps);
    let clock: std::sync::Arc<dyn crate::clock::Clock> =
        std::sync::Arc::new(crate::clock::MonotonicClock::new());
    let result = opener
        .open(clock)
        .and_then(|mut g| g.grab())
        .map_err(|e| e.to_string())
        .and_then(|g| {
            decode_jpeg(&g.jpeg).map_err(|e| format!("its first frame does not decode: {e}"))
        });
    Check {
        name: "camera",
        need: Need::Live,
        ok: result.is_ok(),
        detail: match result {
            Ok(img) => format!(
                "{}: a {}x{} frame captured and decoded",
                opener.describe(),
                img.width,
                img.height
            ),
            Err(e) => format!(
                "{}: {e} (live capture needs it; replay does not)",
                opener.describe()
            ),
        },
    }
}

/// Opens the configured microphone for real and waits up to 2 s for its first samples.
fn check_microphone(config: &Config) -> Check {
    let clock: std::sync::Arc<dyn crate::clock::Clock> =
        std::sync::Arc::new(crate::clock::MonotonicClock::new());
    let device = &config.audio.device;
    let result =
        crate::capture::microphone::MicStream::open(device, config.audio.sample_rate_hz, clock)
            .map_err(|e| e.to_string())
            .and_then(|mic| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while mic.first_clock_ns().is_none() {
                    if std::time::Instant::now() > deadline {
                        return Err("opened, but no samples came in 2 s".to_string());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Ok(mic.rate_hz())
            });
    Check {
        name: "microphone",
        need: Need::Live,
        ok: result.is_ok(),
        detail: match result {
            Ok(rate) => format!("microphone `{device}`: capturing at {rate} Hz"),
            Err(e) => format!("{e} (live capture needs it; replay does not)"),
        },
    }
}

/// A folder the service creates at start when missing (`create_dir_all`): ready when it
/// exists and `probe` succeeds in it, or when it does not exist yet and its nearest existing
/// ancestor is writable. The detail says which, so doctor never calls a missing folder
/// writable.
fn creatable(dir: &Path, probe: impl Fn(&Path) -> std::io::Result<()>) -> Result<String, String> {
    if dir.is_dir() {
        return probe(dir)
            .map(|()| format!("{} is writable", dir.display()))
            .map_err(|e| format!("cannot write in {}: {e}", dir.display()));
    }
    let existing = dir
        .ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .unwrap_or(Path::new("."));
    let file = existing.join(format!(".empathic-doctor-{}", std::process::id()));
    match std::fs::write(&file, b"") {
        Ok(()) => {
            let _ = std::fs::remove_file(&file);
            Ok(format!(
                "{} does not exist yet: the service creates it at start ({} is writable)",
                dir.display(),
                existing.display()
            ))
        }
        Err(e) => Err(format!(
            "{} does not exist and cannot be created: {e} in {}",
            dir.display(),
            existing.display()
        )),
    }
}

/// What a dialogue app running as its own user will meet at the control socket: the
/// configured group exists, this user (the service's, when doctor runs as it) may give the
/// socket to it, and a running service's socket and folder let the group in.
fn check_control_group(config: &Config) -> Check {
    use std::os::unix::fs::MetadataExt;
    let group = &config.live.socket_group;
    let socket = &config.live.socket;
    let check = |ok: bool, detail: String| Check {
        name: "control group",
        need: Need::Live,
        ok,
        detail,
    };
    if group.is_empty() {
        return check(
            true,
            "none ([live] socket_group): only the service's own user can connect; an app running as its own user needs the package's group (socket_group = \"empathic-ctl\")".into(),
        );
    }
    let Some((gid, members)) = group_entry(group) else {
        return check(
            false,
            format!("no group `{group}` in /etc/group ([live] socket_group): the packages make `empathic-ctl`; otherwise `sudo addgroup --system {group}`"),
        );
    };
    let uid = rustix::process::getuid().as_raw();
    // As root, the packaged service's user stands for the service (the unit runs as it).
    if uid == 0 && passwd_has("empathic") && !members.iter().any(|m| m == "empathic") {
        return check(
            false,
            format!("the service's user `empathic` is not in group `{group}`: it could not give the socket to the group (`sudo adduser empathic {group}`, then restart the service)"),
        );
    }
    let in_group = uid == 0
        || rustix::process::getgid().as_raw() == gid
        || rustix::process::getgroups()
            .map(|g| g.iter().any(|g| g.as_raw() == gid))
            .unwrap_or(false);
    if !in_group {
        return check(
            false,
            format!("this user (uid {uid}) is not in group `{group}`: the service running as it could not give the socket to the group (`sudo adduser USER {group}`, then log in again or restart the service)"),
        );
    }
    let who = if members.is_empty() {
        "no member yet: add the dialogue app's user with `sudo adduser APPUSER ".to_string()
            + group
            + "`"
    } else {
        format!("members: {}", members.join(", "))
    };
    let Ok(meta) = std::fs::metadata(socket) else {
        return check(
            true,
            format!(
                "group `{group}` (gid {gid}), {who}; the socket is made when the service starts"
            ),
        );
    };
    let dir = socket.parent().and_then(|d| std::fs::metadata(d).ok());
    let mode = meta.mode() & 0o777;
    let socket_ok = meta.gid() == gid && mode & 0o060 == 0o060;
    let dir_ok = dir
        .as_ref()
        .is_some_and(|d| d.mode() & 0o001 != 0 || (d.gid() == gid && d.mode() & 0o010 != 0));
    let dir_text = dir.map_or("unreadable".to_string(), |d| {
        format!("gid {} mode {:o}", d.gid(), d.mode() & 0o777)
    });
    check(
        socket_ok && dir_ok,
        format!(
            "group `{group}` (gid {gid}), {who}; the socket: uid {} gid {} mode {mode:o}, its folder: {dir_text}{}",
            meta.uid(),
            meta.gid(),
            if socket_ok && dir_ok {
                String::from(": the group's members can connect")
            } else if !socket_ok {
                format!(": members of `{group}` cannot connect (the socket is not theirs to write)")
            } else {
                format!(": members of `{group}` cannot reach the socket through its folder")
            }
        ),
    )
}

/// Whether /etc/passwd has user `name`.
fn passwd_has(name: &str) -> bool {
    std::fs::read_to_string("/etc/passwd")
        .is_ok_and(|t| t.lines().any(|l| l.split(':').next() == Some(name)))
}

/// The gid of `name` and its listed members, from /etc/group.
fn group_entry(name: &str) -> Option<(u32, Vec<String>)> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then_some(())?;
        let members = f[3]
            .split(',')
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect();
        Some((f[2].parse().ok()?, members))
    })
}

/// The control socket's folder must take a socket, and the recordings folder a file; the
/// service creates either folder when missing.
fn check_live_paths(config: &Config) -> Vec<Check> {
    let socket = &config.live.socket;
    let dir = socket.parent().unwrap_or(Path::new("."));
    let socket_ok = creatable(dir, |d| {
        let probe = d.join(format!(".empathic-doctor-{}.sock", std::process::id()));
        let bound = std::os::unix::net::UnixListener::bind(&probe).map(|_| ());
        let _ = std::fs::remove_file(&probe);
        bound
    });
    let rec = &config.recording.dir;
    let rec_ok = creatable(rec, |d| {
        let probe = d.join(format!(".empathic-doctor-{}", std::process::id()));
        let written = std::fs::write(&probe, b"");
        let _ = std::fs::remove_file(&probe);
        written
    });
    vec![
        Check {
            name: "control socket",
            need: Need::Live,
            ok: socket_ok.is_ok(),
            detail: match socket_ok {
                Ok(d) => format!("{} can be created: {d}", socket.display()),
                Err(e) => format!("{e} (live.socket)"),
            },
        },
        Check {
            name: "recordings",
            need: Need::Live,
            ok: rec_ok.is_ok() || !config.recording.enabled,
            detail: match rec_ok {
                Ok(d) => format!(
                    "{d}{}",
                    crate::capture::record::free_bytes(
                        rec.ancestors().find(|a| a.is_dir()).unwrap_or(rec)
                    )
                    .map(|f| format!(", {} MiB free", f >> 20))
                    .unwrap_or_default()
                ),
                Err(e) => format!("{e} (recording.dir)"),
            },
        },
    ]
}

/// The report printed by `empathic doctor`, and whether the asked use is ready.
pub fn render(checks: &[Check], live: bool) -> (String, bool) {
    let mut out = String::new();
    for c in checks {
        let mark = if c.ok { "ok     " } else { "MISSING" };
        let need = match c.need {
            Need::Replay => "replay",
            Need::Live => "live",
            Need::Study => "study",
        };
        out.push_str(&format!("{mark} {:<14} [{need}] {}\n", c.name, c.detail));
    }
    let ready = |need: Need| checks.iter().filter(|c| c.need == need).all(|c| c.ok);
    let replay_ready = ready(Need::Replay);
    let live_ready = replay_ready && ready(Need::Live);
    // A "no" names the checks behind it, so nobody has to scan the list for MISSING.
    let answer = |needs: &[Need]| -> String {
        let missing: Vec<&str> = checks
            .iter()
            .filter(|c| needs.contains(&c.need) && !c.ok)
            .map(|c| c.name)
            .collect();
        if missing.is_empty() {
            "yes".to_string()
        } else {
            format!("no (missing: {})", missing.join(", "))
        }
    };
    out.push_str(&format!(
        "ready for replay: {}\nready for live capture: {}\n",
        answer(&[Need::Replay]),
        answer(&[Need::Replay, Need::Live])
    ));
    if checks.iter().any(|c| c.need == Need::Study) {
        out.push_str(&format!(
            "ready for study sessions (stories recommended): {}\n",
            answer(&[Need::Replay, Need::Live, Need::Study])
        ));
    }
    (out, if live { live_ready } else { replay_ready })
}
