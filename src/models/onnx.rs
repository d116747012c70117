//! The process's one ONNX Runtime environment, and sessions opened with clear errors.
//!
//! Contract: the shared library is looked up in order: `models.onnxruntime_library` from
//! the config, `$ORT_DYLIB_PATH`, `libonnxruntime.so.1` next to the executable, then in
//! `../lib/empathic/` beside it (where `make install` puts it). It is loaded
//! once per process (ONNX Runtime allows one environment); a missing library is an error
//! naming every place tried, never a panic. ONNX Runtime's own telemetry is off
//! ([`TELEMETRY_OFF`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::session::Session;

use super::ModelError;

static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

/// The environment variable that turns off ONNX Runtime's own telemetry, which the
/// Microsoft-built library from PyPI has on Linux too (1DS): without it, every process
/// that loads the library writes a device id and usage events (model producers, operator
/// sets, execution providers, run counts) into a SQLite queue under
/// `~/.cache/Microsoft/DeveloperTools/.onnxruntime/` for upload to Microsoft when a
/// network is there. A station in someone's home sends nothing anywhere the study did not
/// choose, so `main` sets it to `1` before any thread exists (unless it is already set),
/// and `tests/it/models.rs` checks that no such queue appears.
pub const TELEMETRY_OFF: &str = "ORT_DISABLE_TELEMETRY";

/// Where the ONNX Runtime library is looked for, in order.
pub fn library_candidates(configured: Option<&Path>) -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(p) = configured {
        c.push(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH") {
        c.push(PathBuf::from(p));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        c.push(dir.join("libonnxruntime.so.1"));
        c.push(dir.join("../lib/empathic/libonnxruntime.so.1"));
    }
    c
}

/// The environment, loading the library on first use.
pub fn environment(configured: Option<&Path>) -> Result<&'static Environment, ModelError> {
    let result = ENVIRONMENT.get_or_init(|| {
        let candidates = library_candidates(configured);
        let Some(found) = candidates.iter().find(|p| p.is_file()) else {
            let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
            return Err(format!(
                "library not found (tried: {}); run scripts/setup.sh or set models.onnxruntime_library",
                tried.join(", ")
            ));
        };
        ort::init_from(found)
            .map_err(|e| format!("{}: {e}", found.display()))?
            .with_name("empathic")
            // No usage events (see `TELEMETRY_OFF`); `main` also sets the variable, which
            // is what keeps the library from opening its event queue at all.
            .with_telemetry(false)
            .build()
            .map_err(|e| format!("{}: {e}", found.display()))
    });
    result.as_ref().map_err(|e| ModelError::Runtime(e.clone()))
}

/// Opens `path` as model `name` with `threads` intra-op threads.
pub fn open_session(
    name: &str,
    path: &Path,
    threads: usize,
    configured_library: Option<&Path>,
) -> Result<Session, ModelError> {
    open_with(name, path, threads, configured_library, Shapes::Fixed)
}

/// Opens a model whose inputs change length from run to run (a recogniser's audio, a
/// sentence's tokens) without ONNX Runtime's CPU arena and memory pattern: the arena keeps
/// the largest run's buffers for the session's life (a 10 s utterance's attention
/// matrices), and a pattern is only reused for the same shapes. Measured (2026-11-30, one
/// sitting, two replays each): peak RSS of the demo replay 309-311 against 327-328 MiB, of
/// the shared `still` session (the recogniser on its speech) 413-416 against 423-424 MiB.
pub fn open_variable_session(
    name: &str,
    path: &Path,
    threads: usize,
    configured_library: Option<&Path>,
) -> Result<Session, ModelError> {
    open_with(name, path, threads, configured_library, Shapes::Variable)
}

#[derive(Clone, Copy, PartialEq)]
enum Shapes {
    Fixed,
    Variable,
}

fn open_with(
    name: &str,
    path: &Path,
    threads: usize,
    configured_library: Option<&Path>,
    shapes: Shapes,
) -> Result<Session, ModelError> {
    if !path.is_file() {
        return Err(ModelError::Missing {
            name: name.to_string(),
            path: path.to_path_buf(),
        });
    }
    let env = environment(configured_library)?;
    let load = |message: String| ModelError::Load {
        name: name.to_string(),
        path: path.to_path_buf(),
        message,
    };
    let mut builder = Session::builder(env)
        .map_err(|e| load(e.to_string()))?
        .with_intra_threads(threads)
        .map_err(|e| load(e.to_string()))?;
    if shapes == Shapes::Variable {
        builder = builder
            .with_memory_pattern(false)
            .map_err(|e| load(e.to_string()))?
            .with_execution_providers([ort::ep::CPU::default().with_arena_allocator(false).build()])
            .map_err(|e| load(e.to_string()))?;
    }
    builder
        .commit_from_file(path)
        .map_err(|e| load(e.to_string()))
}
