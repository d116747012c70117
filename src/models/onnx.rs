//! The process's one ONNX Runtime environment, and sessions opened with clear errors.
//!
//! Contract: the shared library is looked up in order: `models.onnxruntime_library` from
//! the config, `$ORT_DYLIB_PATH`, `libonnxruntime.so.1` next to the executable, then in
//! `../lib/empathic/` beside it (where `make install` puts it). It is loaded
//! once per process (ONNX Runtime allows one environment); a missing library is an error
//! naming every place tried, never a panic.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;
use ort::session::Session;

use super::ModelError;

static ENVIRONMENT: OnceLock<Result<Environment, String>> = OnceLock::new();

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
    Session::builder(env)
        .map_err(|e| load(e.to_string()))?
        .with_intra_threads(threads)
        .map_err(|e| load(e.to_string()))?
        .commit_from_file(path)
        .map_err(|e| load(e.to_string()))
}
