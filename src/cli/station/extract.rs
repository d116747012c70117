//! `empathic extract audio|face|body`: openSMILE- and OpenFace-compatible CSVs of any file
//! (the CSV writers are `extract_audio.rs`, `extract_face.rs` and `extract_body.rs`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::extract_audio::extract_audio_csv;
use super::extract_body::extract_body_csv;
use super::extract_face::{extract_face_csv, FaceExtractOptions};
use crate::cli::options::ConfigOption;
use crate::cli::{fail, load_config, progress_bar, Failure, ModelFiles};
use crate::core::LldSet;
use crate::features::face::pose::IntrinsicsArgs;
use crate::runtime::screen::open_screen;

/// Extract features from a media file.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FeatureSet {
    Compare,
    Egemaps,
}

#[derive(clap::Subcommand)]
enum Command {
    /// openSMILE-compatible low-level descriptors per 10 ms (its names and order) as CSV.
    Audio {
        /// A PCM WAV file, mono or stereo (averaged), any sample rate.
        input: PathBuf,
        /// The CSV to write.
        #[arg(long)]
        out: PathBuf,
        /// Feature set: `compare` (ComParE-2016, 65 LLDs) or `egemaps` (eGeMAPSv02, 25 LLDs).
        #[arg(long, default_value = "compare")]
        set: FeatureSet,
    },
    /// OpenFace 2.0-compatible facial behaviour per video frame (its 714 columns) as CSV.
    Face {
        /// A video file (any format FFmpeg reads).
        input: PathBuf,
        /// The CSV to write.
        #[arg(long)]
        out: PathBuf,
        /// Also write the video with the landmarks, gaze, head axes and AUs drawn on every
        /// frame (Motion-JPEG, *.avi), to check the tracking by eye.
        #[arg(long)]
        tracked: Option<PathBuf>,
        /// Append MediaPipe's 52 blendshape coefficients (ARKit names) after the 714 columns.
        #[arg(long)]
        blendshapes: bool,
        /// The eyeball model of the gaze columns: `openface` (OpenFace 2.0's geometry) or
        /// `anatomical` (default: `[face] gaze_model`, itself `openface` by default).
        #[arg(long, value_name = "MODEL")]
        gaze_model: Option<crate::features::face::GazeModel>,
        /// Camera focal length in pixels (default 500 * width / 640, OpenFace's default).
        #[arg(long)]
        fx: Option<f64>,
        /// Camera focal length in y, in pixels (default: fx).
        #[arg(long)]
        fy: Option<f64>,
        /// Principal point x (default: the image centre).
        #[arg(long)]
        cx: Option<f64>,
        /// Principal point y (default: the image centre).
        #[arg(long)]
        cy: Option<f64>,
        #[command(flatten)]
        config: ConfigOption,
    },
    /// The body per video frame (MediaPipe's BlazePose GHUM 3D: 33 landmarks in pixels with
    /// visibility and presence, 33 world points in metres) as CSV in OpenFace's style.
    Body {
        /// A video file (any format FFmpeg reads).
        input: PathBuf,
        /// The CSV to write.
        #[arg(long)]
        out: PathBuf,
        /// Also write the video with the skeleton drawn on every frame (Motion-JPEG,
        /// *.avi), to check the tracking by eye.
        #[arg(long)]
        tracked: Option<PathBuf>,
        /// Compute the body on one frame in every N of the nominal grid and hold it between
        /// (`held_frames` marks the held rows); 1: every frame (default: `[body] every`,
        /// itself 3, as the station computes it).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=30))]
        every: Option<u32>,
        #[command(flatten)]
        config: ConfigOption,
    },
}

impl Args {
    pub fn run(self) -> Result<ExitCode, Failure> {
        match self.command {
            Command::Audio { input, out, set } => extract_audio(
                &input,
                &out,
                match set {
                    FeatureSet::Compare => LldSet::Compare,
                    FeatureSet::Egemaps => LldSet::Egemaps,
                },
            ),
            Command::Face {
                input,
                out,
                tracked,
                blendshapes,
                gaze_model,
                fx,
                fy,
                cx,
                cy,
                config,
            } => extract_face(
                &input,
                &out,
                tracked.as_deref(),
                IntrinsicsArgs { fx, fy, cx, cy },
                blendshapes,
                gaze_model,
                config.path(),
            ),
            Command::Body {
                input,
                out,
                tracked,
                every,
                config,
            } => extract_body(&input, &out, tracked.as_deref(), every, config.path()),
        }
    }
}

/// `empathic extract body`.
pub fn extract_body(
    input: &Path,
    out: &Path,
    tracked: Option<&Path>,
    every: Option<u32>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let models = ModelFiles::open(&config)?;
    let progress = progress_bar("frames");
    let screen = open_screen(&config, true).map_err(fail)?;
    let every = every.unwrap_or(config.body.every);
    let result = extract_body_csv(input, out, &models, tracked, screen, every, &progress);
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    eprintln!(
        "wrote {} rows of the body's 33 landmarks to {}: a person on {} ({:.1} %), the body computed on {} ({}), the detector run on {}, {:.1} ms a frame{}",
        summary.rows,
        out.display(),
        frames(summary.frames_with_person),
        100.0 * summary.frames_with_person as f64 / summary.rows.max(1) as f64,
        frames(summary.frames_computed),
        if every == 1 {
            "every frame".to_string()
        } else {
            format!("one in {every}, held between")
        },
        frames(summary.detector_runs),
        summary.ms_per_frame,
        bystanders_said(summary.frames_with_bystanders)
    );
    Ok(ExitCode::SUCCESS)
}

/// "1 frame", "140 frames".
fn frames(n: u64) -> String {
    format!("{n} frame{}", if n == 1 { "" } else { "s" })
}

/// What the bystander screen did, for the summary line (empty when it saw no one else).
fn bystanders_said(frames: u64) -> String {
    if frames == 0 {
        return String::new();
    }
    format!("; someone other than the participant in view on {frames} frames: masked in the tracked video, never measured")
}

/// `empathic extract audio`.
pub fn extract_audio(input: &Path, out: &Path, set: LldSet) -> Result<ExitCode, Failure> {
    let progress = progress_bar("samples");
    let result = extract_audio_csv(input, out, set, &progress);
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    eprintln!(
        "wrote {} rows of {} {} LLDs ({:.2} s at {} Hz, {} channel(s)) to {}",
        summary.rows,
        set.dims(),
        match set {
            LldSet::Compare => "ComParE-2016",
            LldSet::Egemaps => "eGeMAPSv02",
        },
        summary.duration_secs,
        summary.sample_rate_hz,
        summary.input_channels,
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `empathic extract face`.
pub fn extract_face(
    input: &Path,
    out: &Path,
    tracked: Option<&Path>,
    intrinsics: IntrinsicsArgs,
    blendshapes: bool,
    gaze_model: Option<crate::features::face::GazeModel>,
    config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let config = load_config(config)?;
    let models = ModelFiles::open(&config)?;
    let screen = open_screen(&config, true).map_err(fail)?;
    let progress = progress_bar("frames");
    let result = extract_face_csv(
        input,
        out,
        &models,
        &FaceExtractOptions {
            intrinsics,
            tracked,
            progress: &progress,
            blendshapes,
            gaze_model: gaze_model.unwrap_or(config.face.gaze_model),
        },
        screen,
    );
    progress.finish_and_clear();
    let summary = result.map_err(fail)?;
    eprintln!(
        "wrote {} rows of the {} columns to {}: face on {} frames ({:.1} %), at most {} face(s) seen, fx {:.1} fy {:.1} cx {:.1} cy {:.1}, {:.0} frames/s",
        summary.rows,
        if blendshapes { "714 OpenFace and 52 blendshape" } else { "714 OpenFace" },
        out.display(),
        summary.frames_with_face,
        100.0 * summary.frames_with_face as f64 / summary.rows.max(1) as f64,
        summary.max_faces_seen,
        summary.intrinsics.fx,
        summary.intrinsics.fy,
        summary.intrinsics.cx,
        summary.intrinsics.cy,
        summary.frames_per_second
    );
    if summary.frames_with_bystanders > 0 {
        eprintln!(
            "{}",
            bystanders_said(summary.frames_with_bystanders).trim_start_matches("; ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
