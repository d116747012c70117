//! `empathic doctor`: checks an installation and says precisely what is missing.
//!
//! Contract: each check reports ok, or what is missing and how to fix it. Checks are
//! grouped by what they are needed for: replaying recorded sessions (config, session store,
//! ONNX Runtime, models folder) and live capture on a station (camera, microphone). The exit
//! code is 0 when everything needed for the asked use (replay, or live with `--live`) is ok.

use std::path::{Path, PathBuf};

use crate::config::Config;

/// What a check is needed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Replay,
    Live,
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
                detail: match config_path {
                    Some(p) => format!("{} parses and validates", p.display()),
                    None => "no --config given: built-in defaults".into(),
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
    checks.push(check_camera(&config.video.device));
    checks.push(check_microphone(&config.audio.device));
    checks
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
                "folder {} does not exist: create it or pass --db",
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
            Check {
                name: "models",
                need: Need::Replay,
                ok: m.models.iter().filter(|e| e.shipped).all(|e| e.path(dir).is_file()),
                detail: format!(
                    "{}: {} models in the manifest, {present} present (run `empathic models verify` for checksums and known answers)",
                    dir.display(),
                    m.models.len()
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

fn check_camera(device: &Path) -> Check {
    let ok = device.exists();
    Check {
        name: "camera",
        need: Need::Live,
        ok,
        detail: if ok {
            format!("{} exists", device.display())
        } else {
            format!(
                "{} does not exist: no webcam is connected (live capture needs one; replay does not)",
                device.display()
            )
        },
    }
}

fn check_microphone(device: &str) -> Check {
    let alsa_cards = std::fs::read_to_string("/proc/asound/cards")
        .map(|s| !s.contains("no soundcards") && !s.trim().is_empty())
        .unwrap_or(false);
    let pulse = std::env::var_os("XDG_RUNTIME_DIR")
        .map(|d| PathBuf::from(d).join("pulse/native").exists())
        .unwrap_or(false)
        || std::env::var_os("PULSE_SERVER").is_some();
    let ok = alsa_cards || pulse;
    Check {
        name: "microphone",
        need: Need::Live,
        ok,
        detail: if ok {
            format!(
                "audio input available for device `{device}` ({})",
                if alsa_cards {
                    "ALSA sound card"
                } else {
                    "PulseAudio server"
                }
            )
        } else {
            format!("no sound card in /proc/asound/cards and no PulseAudio server: device `{device}` cannot be opened (live capture needs a microphone; replay does not)")
        },
    }
}

/// The report printed by `empathic doctor`, and whether the asked use is ready.
pub fn render(checks: &[Check], live: bool) -> (String, bool) {
    let mut out = String::new();
    for c in checks {
        let mark = if c.ok { "ok     " } else { "MISSING" };
        let need = match c.need {
            Need::Replay => "replay",
            Need::Live => "live",
        };
        out.push_str(&format!("{mark} {:<14} [{need}] {}\n", c.name, c.detail));
    }
    let ready = |need: Need| checks.iter().filter(|c| c.need == need).all(|c| c.ok);
    let replay_ready = ready(Need::Replay);
    let live_ready = replay_ready && ready(Need::Live);
    out.push_str(&format!(
        "ready for replay: {}; ready for live capture: {}\n",
        if replay_ready { "yes" } else { "no" },
        if live_ready { "yes" } else { "no" }
    ));
    (out, if live { live_ready } else { replay_ready })
}
