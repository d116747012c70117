//! The end-to-end tests as one binary (ripgrep's `tests/tests.rs` pattern): the native
//! stack (OpenCV, ONNX Runtime, ALSA) is linked once instead of once per file. Each module
//! is one concern's tests; `common` holds what they share. The live service's tests are
//! their own binary (`tests/live/`), so they run alone, as real-time capture needs.

#[path = "../common/mod.rs"]
mod common;

mod acoustic;
mod architecture;
mod bad_input;
mod bad_input_corpus;
mod body;
mod bystanders;
mod cli;
mod collector_build;
mod collector_doors;
mod crash;
mod explain;
mod face;
mod failures;
mod formats_doc;
mod fusion_onnx;
mod golden;
mod install;
mod models;
mod package;
mod pipeline;
mod replay;
mod report;
mod speech;
mod stories;
mod sync;
mod sync_central;
mod sync_faults;
mod sync_refusals;
mod sync_sealed;
mod sync_secure;
mod systemd;
mod trust;
mod upgrade;
