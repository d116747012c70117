//! `empathic extract body`: the body's 33 landmarks (image and world) for every frame of a
//! video, as CSV in OpenFace's style (`features::body::stage::csv_header`).
//!
//! Contract: frames are read in order with the replay's video source and tracked as the
//! body stage tracks them (the detector only when no person is followed; computed on one
//! frame in every `every` of the nominal grid and held between, `held_frames` marking the
//! held rows, as `[body] every` in the pipeline); one row per decoded frame (`frame` 1-based, `timestamp` in seconds from the first frame). The CSV,
//! and the optional tracked video, are written beside their targets and renamed into place
//! at the end, so a failure never leaves a partial file under the requested name.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::ProgressBar;

use super::tracked_video::TrackedVideo;
use crate::capture::video_file::FileVideoSource;
use crate::capture::CaptureError;
use crate::cli::ModelFiles;
use crate::exit::{Classify, ExitKind};
use crate::features::body::rate::SampledBody;
use crate::features::body::stage::{csv_header, csv_row, participants_body};
use crate::features::body::BodyTracker;
use crate::features::face::bystanders::BystanderScreen;
use crate::features::face::crop::mat_of;
use crate::models::ModelError;
use crate::runtime::screen::screened;

#[derive(Debug, thiserror::Error)]
pub enum BodyExtractError {
    #[error(transparent)]
    Output(#[from] crate::files::OutputError),
    #[error(transparent)]
    Capture(#[from] CaptureError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("frame {frame}: {message}")]
    Frame { frame: u64, message: String },
    #[error("cannot write the tracked video: {message}: {path}")]
    Tracked { path: PathBuf, message: String },
    #[error("cannot write the CSV: {source}: {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Classify for BodyExtractError {
    fn exit_kind(&self) -> ExitKind {
        match self {
            BodyExtractError::Capture(e) => e.exit_kind(),
            BodyExtractError::Output(e) => e.exit_kind(),
            BodyExtractError::Model(e) => e.exit_kind(),
            BodyExtractError::Frame { .. }
            | BodyExtractError::Write { .. }
            | BodyExtractError::Tracked { .. } => ExitKind::Runtime,
        }
    }
}

/// What an extraction produced.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BodyExtractSummary {
    pub rows: u64,
    pub frames_with_person: u64,
    /// Frames on which the body was computed (the others hold the last computed pose).
    pub frames_computed: u64,
    /// Frames on which the person detector ran (tracking lost or not yet found).
    pub detector_runs: u64,
    /// Frames where the bystander screen saw someone other than the participant (masked
    /// in the tracked video; their body never written).
    pub frames_with_bystanders: u64,
    /// Milliseconds of the body stage per frame, held frames included (decoding excluded).
    pub ms_per_frame: f64,
}

pub fn extract_body_csv(
    input: &Path,
    output: &Path,
    models: &ModelFiles,
    tracked: Option<&Path>,
    screen: Option<BystanderScreen>,
    every: u32,
    progress: &ProgressBar,
) -> Result<BodyExtractSummary, BodyExtractError> {
    crate::files::check_output(output).map_err(crate::files::OutputError::from)?;
    if let Some(t) = tracked {
        crate::files::check_output(t).map_err(crate::files::OutputError::from)?;
    }
    let mut source = screened(FileVideoSource::open(input)?, screen);
    let info = source.info().clone();
    let tracker = BodyTracker::open(
        models.dir(),
        &models.manifest,
        models.onnxruntime_library(),
        info.declared_fps,
    )?;
    let mut body = SampledBody::new(tracker, every);
    let write_err = |source: std::io::Error| BodyExtractError::Write {
        path: output.to_path_buf(),
        source,
    };
    let video_err = |message: String| BodyExtractError::Tracked {
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
    if let Some(n) = info.declared_frames {
        progress.set_length(n);
    }
    let mut summary = BodyExtractSummary {
        rows: 0,
        frames_with_person: 0,
        frames_computed: 0,
        detector_runs: 0,
        frames_with_bystanders: 0,
        ms_per_frame: 0.0,
    };
    let mut busy = std::time::Duration::ZERO;
    let result = (|| -> Result<(), BodyExtractError> {
        writeln!(w, "{}", csv_header()).map_err(write_err)?;
        let mut first_ns = None;
        while let Some(frame) = source.next_frame()? {
            summary.rows += 1;
            let n = summary.rows;
            let started = Instant::now();
            let mat = mat_of(&frame.image)
                .map_err(|message| BodyExtractError::Frame { frame: n, message })?;
            let sample = body.next(
                &mat,
                frame.image.width,
                frame.image.height,
                frame.t_ns,
                |p| participants_body(p, frame.screening.as_ref(), None),
            )?;
            busy += started.elapsed();
            summary.frames_with_bystanders +=
                u64::from(frame.screening.is_some_and(|s| s.bystanders > 0));
            summary.frames_with_person += u64::from(sample.is_some());
            let t0 = *first_ns.get_or_insert(frame.t_ns);
            let t = frame.t_ns.saturating_sub(t0) as f64 / 1e9;
            writeln!(w, "{}", csv_row(n, t, sample.as_ref())).map_err(write_err)?;
            if let Some(v) = video.as_mut() {
                v.write_body(n, &frame.image, sample.as_ref().map(|s| &s.pose))
                    .map_err(video_err)?;
            }
            progress.inc(1);
        }
        w.flush().map_err(write_err)
    })();
    progress.finish_and_clear();
    let result = result.and_then(|()| match video.take() {
        Some(v) => v.finish().map_err(video_err),
        None => Ok(()),
    });
    // On error the partial file goes with `partial` (dropped uncommitted).
    result?;
    partial.commit()?;
    summary.detector_runs = body.detections_run();
    summary.frames_computed = body.frames_computed();
    summary.ms_per_frame = busy.as_secs_f64() * 1e3 / summary.rows.max(1) as f64;
    Ok(summary)
}
