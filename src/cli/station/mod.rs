//! The station's commands: those that capture, extract features, replay or run models.
//! They exist only with the `sensing` feature (OpenCV, ONNX Runtime, ALSA, the camera
//! library): this folder is the one place the commands are gated, and the collector build
//! (`make collector`) has none of them.

pub mod doctor;
pub mod embed;
pub mod extract;
pub mod extract_audio;
pub mod extract_body;
pub mod extract_face;
pub mod live;
pub mod models;
pub mod replay;
pub mod stories;
pub mod tracked_video;
pub mod transcribe;

use std::process::ExitCode;

use super::Failure;

/// The station's commands, flattened into `empathic`'s own (`empathic replay`, ...).
#[derive(clap::Subcommand)]
pub enum StationCommand {
    Replay(replay::Args),
    Extract(extract::Args),
    Embed(embed::Args),
    Stories(stories::Args),
    Models(models::Args),
    Run(live::RunArgs),
    Ctl(live::CtlArgs),
    Status(live::StatusArgs),
    Recording(live::RecordingArgs),
    Transcribe(transcribe::Args),
    Words(transcribe::WordsArgs),
    Doctor(doctor::Args),
}

impl StationCommand {
    /// The command's `run`.
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self {
            StationCommand::Replay(a) => a.run(),
            StationCommand::Extract(a) => a.run(),
            StationCommand::Embed(a) => a.run(),
            StationCommand::Stories(a) => a.run(),
            StationCommand::Models(a) => a.run(),
            StationCommand::Run(a) => a.run(),
            StationCommand::Ctl(a) => a.run(),
            StationCommand::Status(a) => a.run(),
            StationCommand::Recording(a) => a.run(),
            StationCommand::Transcribe(a) => a.run(),
            StationCommand::Words(a) => a.run(),
            StationCommand::Doctor(a) => a.run(),
        }
    }
}
