//! `empathic extract face`: OpenFace 2.0's 714-column CSV for every frame of a video.
//!
//! Contract: frames are read in order with the replay's video source and tracked as in
//! replay; one row per decoded frame (`frame` 1-based). The CSV is written beside the
//! target and renamed into place at the end, so a failure never leaves a partial file
//! under the requested name; so is the optional tracked video ([`super::tracked_video`]).
//! Under `[privacy] bystanders = "mask"` (the default) every frame passes the bystander
//! screen first, as in replay: the rows are the participant's, and the tracked video shows
//! every other face masked.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::ProgressBar;

use super::tracked_video::TrackedVideo;
use crate::capture::video_file::FileVideoSource;
use crate::capture::CaptureError;
use crate::cli::ModelFiles;
use crate::exit::{Classify, ExitKind};
use crate::features::face::bystanders::BystanderScreen;
use crate::features::face::pose::{Intrinsics, IntrinsicsArgs};
use crate::features::face::{openface, FaceAnalyzer, GazeModel, Mode};
use crate::models::ModelError;
use crate::runtime::screen::screened;

#[derive(Debug, thiserror::Error)]
pub enum FaceExtractError {
    #[error("camera intrinsics: {0}")]
    Intrinsics(String),
    #[error(transparent)]
    Output(#[from] crate::files::OutputError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("cannot write the tracked video: {message}: {path}")]
    Tracked { path: PathBuf, message: String },
    #[error("cannot write the CSV: {source}: {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for FaceExtractError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            FaceExtractError::Capture(e) => e.exit_kind(),
            FaceExtractError::Output(e) => e.exit_kind(),
            FaceExtractError::Intrinsics(_) => ExitKind::BadInput,
            FaceExtractError::Model(e) => e.exit_kind(),
            FaceExtractError::Write { .. } | FaceExtractError::Tracked { .. } => ExitKind::Runtime,
        }
    }
}

/// What an extraction produced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FaceExtractSummary {
    pub rows: u64,
    pub frames_with_face: u64,
    pub max_faces_seen: u32,
    /// Frames where the bystander screen saw someone other than the participant (masked
    /// before the facial stage and the tracked video saw the frame).
    pub frames_with_bystanders: u64,
    pub intrinsics: Intrinsics,
    /// Frames per second of the facial stage (decoding excluded).
    pub frames_per_second: f64,
}

/// How to run an extraction.
#[derive(Debug, Clone)]
pub struct FaceExtractOptions<'a> {
    pub intrinsics: IntrinsicsArgs,
    /// Also write every frame with the tracking drawn over it (Motion-JPEG AVI).
    pub tracked: Option<&'a Path>,
    /// Advanced by one per frame; its length is set to the video's declared frames.
    pub progress: &'a ProgressBar,
    /// Append the 52 blendshape columns after OpenFace's 714.
    pub blendshapes: bool,
    /// The eyeball model of the gaze columns.
    pub gaze_model: GazeModel,
}

pub fn extract_face_csv(
    input: &Path,
    output: &Path,
    models: &ModelFiles,
    options: &FaceExtractOptions,
    screen: Option<BystanderScreen>,
) -> Result<FaceExtractSummary, FaceExtractError> {
    let FaceExtractOptions {
        intrinsics,
        tracked,
        progress,
        blendshapes,
        gaze_model,
    } = *options;
    crate::files::check_output(output).map_err(crate::files::OutputError::from)?;
    if let Some(t) = tracked {
        crate::files::check_output(t).map_err(crate::files::OutputError::from)?;
    }
    let mut source = screened(FileVideoSource::open(input)?, screen);
    let info = source.info().clone();
    intrinsics
        .check(Some((info.width, info.height)))
        .map_err(FaceExtractError::Intrinsics)?;
    let k = intrinsics.resolve(info.width, info.height);
    let mut analyzer = FaceAnalyzer::open(
        models.dir(),
        &models.manifest,
        models.onnxruntime_library(),
        IntrinsicsArgs::from(k),
        Mode::Video,
    )?
    .with_gaze_model(gaze_model);
    let write_err = |source: std::io::Error| FaceExtractError::Write {
        path: output.to_path_buf(),
        source,
    };
    let video_err = |message: String| FaceExtractError::Tracked {
        path: tracked.map(Path::to_path_buf).unwrap_or_default(),
        message,
    };
    // Dropped unfinished on any error below, it removes its partial file.
    let mut video = tracked
        .map(|path| TrackedVideo::create(path, info.declared_fps, info.width, info.height))
        .transpose()
        .map_err(video_err)?;
    let (partial, file) = crate::files::Partial::create(output)?;
    let mut w = BufWriter::new(file);
    let bar = progress;
    if let Some(n) = info.declared_frames {
        bar.set_length(n);
    }
    let mut summary = FaceExtractSummary {
        rows: 0,
        frames_with_face: 0,
        max_faces_seen: 0,
        frames_with_bystanders: 0,
        intrinsics: k,
        frames_per_second: 0.0,
    };
    let mut busy = std::time::Duration::ZERO;
    let result = (|| -> Result<(), FaceExtractError> {
        openface::write_header(&mut w, blendshapes).map_err(write_err)?;
        while let Some(frame) = source.next_frame()? {
            let started = Instant::now();
            let obs = analyzer.analyze(&frame.image)?;
            busy += started.elapsed();
            summary.rows += 1;
            summary.frames_with_face += u64::from(obs.success());
            // Under the screen the facial stage sees only the participant's face: the
            // faces in view are the screen's count.
            let in_view = frame.screening.map_or(0, |s| u32::from(s.faces));
            summary.max_faces_seen = summary.max_faces_seen.max(obs.faces_seen).max(in_view);
            summary.frames_with_bystanders +=
                u64::from(frame.screening.is_some_and(|s| s.bystanders > 0));
            openface::write_row(
                &mut w,
                summary.rows,
                frame.t_ns as f64 / 1e9,
                &obs,
                blendshapes,
            )
            .map_err(write_err)?;
            if let Some(v) = video.as_mut() {
                v.write(summary.rows, &frame.image, &obs, &k)
                    .map_err(video_err)?;
            }
            bar.inc(1);
        }
        w.flush().map_err(write_err)
    })();
    bar.finish_and_clear();
    let result = result.and_then(|()| match video.take() {
        Some(v) => v.finish().map_err(video_err),
        None => Ok(()),
    });
    // On error the partial file goes with `partial` (dropped uncommitted).
    result?;
    partial.commit()?;
    summary.frames_per_second = summary.rows as f64 / busy.as_secs_f64().max(1e-9);
    Ok(summary)
}
