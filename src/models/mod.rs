//! Model files and ONNX Runtime.
//!
//! Contract: every shipped model is listed in `models/MODELS.toml` ([`manifest`]) with its
//! sha256, source package and version, licence, inputs and outputs, and reference outputs.
//! [`onnx`] owns the one ONNX Runtime environment of the process and opens sessions with
//! errors that name the file. `empathic models verify` (checksum, load, shapes and a
//! known-answer test for each model) is `doctor::models`: it opens each model through the
//! stage that runs it. Nothing here downloads anything.

pub mod manifest;
#[cfg(feature = "sensing")]
pub mod onnx;

use std::path::PathBuf;

use crate::exit::{Classify, ExitKind};

/// Errors about model files and ONNX Runtime.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read the model manifest: {message}: {path}")]
    Manifest { path: PathBuf, message: String },
    #[error("model `{name}` is missing: {path}")]
    Missing { name: String, path: PathBuf },
    #[error("model `{name}` has sha256 {found}, the manifest says {expected} (corrupt or replaced file): {path}")]
    Checksum {
        name: String,
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("model `{name}` does not load in ONNX Runtime: {message}: {path}")]
    Load {
        name: String,
        path: PathBuf,
        message: String,
    },
    #[error("model `{name}` does not match the manifest: {message}: {path}")]
    Shape {
        name: String,
        path: PathBuf,
        message: String,
    },
    #[error("model `{name}` fails its known-answer test: {message}: {path}")]
    KnownAnswer {
        name: String,
        path: PathBuf,
        message: String,
    },
    #[error("ONNX Runtime is not available: {0}")]
    Runtime(String),
    #[error("model `{name}` failed: {message}")]
    Inference { name: String, message: String },
}

impl Classify for ModelError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            ModelError::Runtime(_) | ModelError::Inference { .. } => ExitKind::Runtime,
            // A missing, corrupt or wrong model file is something the user can fix.
            _ => ExitKind::BadInput,
        }
    }
}
