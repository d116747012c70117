//! The bystander screen in the run: between the video source and everything downstream.
//!
//! Contract: under `[privacy] bystanders = "mask"` (the default) every frame passes
//! [`BystanderScreen::screen`] before any stage, the recorder or a stream sees it (docs/
//! station.md, "Bystanders"). Live ([`screen_buffer`]): the camera's JPEG buffer is kept as
//! it came when no region was masked, and re-encoded from the masked image when one was;
//! either way it carries the frame's [`Screening`] (`capture::screening`), and the stages
//! get the image decoded from exactly the bytes recorded, so a replay of the recording sees
//! what the live run saw. Replay ([`ScreenedVideo`]): a frame that carries a screening
//! (recorded under "mask") is taken as it is; any other frame is screened now. A screen that
//! fails lets no frame through unscreened: the live run drops it, a replay stops.

use crate::capture::camera::decode_jpeg;
use crate::capture::screening::{mark, Screening};
use crate::capture::{BgrImage, CaptureError, VideoFrame, VideoInfo, VideoSource};
use crate::config::{Bystanders, Config};
use crate::features::face::bystanders::BystanderScreen;
use crate::models::manifest::Manifest;
use crate::models::ModelError;

/// JPEG quality of a re-encoded (masked) frame.
pub const MASKED_JPEG_QUALITY: i32 = 90;

/// The screen `config` asks for: `None` under `"keep"` (said in the log, as a study's
/// consent must cover everyone in view). A session says `"mask"` in the log too; a
/// `one_off` command on a clip (`extract`) does not, as its summary line says what the
/// screen did.
pub fn open_screen(config: &Config, one_off: bool) -> Result<Option<BystanderScreen>, ModelError> {
    match config.privacy.bystanders {
        Bystanders::Keep => {
            tracing::warn!("[privacy] bystanders = \"keep\": every face in view is measured by nothing but kept in the recording as the camera saw it; the study's consent must cover everyone in view");
            Ok(None)
        }
        Bystanders::Mask => {
            if !one_off {
                tracing::info!("[privacy] bystanders = \"mask\": every face but the participant's is masked before the frame is recorded or measured (docs/station.md, \"Bystanders\")");
            }
            let models = &config.models;
            let manifest = Manifest::load(&models.dir)?;
            BystanderScreen::open(
                &models.dir,
                &manifest,
                models.onnxruntime_library.as_deref(),
            )
            .map(Some)
        }
    }
}

/// A replay's video source with the screen in front of it.
pub struct ScreenedVideo {
    inner: Box<dyn VideoSource>,
    screen: BystanderScreen,
}

impl ScreenedVideo {
    pub fn new(inner: Box<dyn VideoSource>, screen: BystanderScreen) -> Self {
        Self { inner, screen }
    }
}

impl VideoSource for ScreenedVideo {
    fn info(&self) -> &VideoInfo {
        self.inner.info()
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        let Some(mut frame) = self.inner.next_frame()? else {
            return Ok(None);
        };
        if frame.screening.is_none() {
            let s = self
                .screen
                .screen(&mut frame.image)
                .map_err(|e| CaptureError::Screen {
                    frame: frame.seq,
                    message: e.to_string(),
                })?;
            frame.screening = Some(s);
        }
        Ok(Some(frame))
    }
}

/// `source` behind `screen` when there is one (`extract face`, `extract body`).
pub fn screened(
    source: impl VideoSource + 'static,
    screen: Option<BystanderScreen>,
) -> Box<dyn VideoSource> {
    match screen {
        Some(screen) => Box::new(ScreenedVideo::new(Box::new(source), screen)),
        None => Box::new(source),
    }
}

/// Screens one live camera buffer and its decoded image: the bytes to record (marked with
/// the screening) and the image the stages get (decoded from those bytes when re-encoded).
pub fn screen_buffer(
    screen: &mut BystanderScreen,
    jpeg: &[u8],
    mut image: BgrImage,
) -> Result<(Vec<u8>, BgrImage, Screening), String> {
    let s = screen.screen(&mut image).map_err(|e| e.to_string())?;
    if s.masked == 0 {
        return Ok((mark(jpeg, &s), image, s));
    }
    let encoded = encode_jpeg(&image, MASKED_JPEG_QUALITY)?;
    let image = decode_jpeg(&encoded)?;
    Ok((mark(&encoded, &s), image, s))
}

/// Encodes packed BGR8 as a baseline JPEG.
pub fn encode_jpeg(image: &BgrImage, quality: i32) -> Result<Vec<u8>, String> {
    use opencv::core::{Mat, Vector};
    use opencv::prelude::*;
    let mat = Mat::new_rows_cols_with_data(
        image.height as i32,
        (image.width * 3) as i32,
        image.data.as_slice(),
    )
    .and_then(|m| {
        m.reshape(3, image.height as i32)
            .and_then(|m| m.try_clone())
    })
    .map_err(|e| format!("cannot wrap the frame for JPEG encoding: {e}"))?;
    let mut out = Vector::<u8>::new();
    let params = Vector::<i32>::from_slice(&[opencv::imgcodecs::IMWRITE_JPEG_QUALITY, quality]);
    opencv::imgcodecs::imencode(".jpg", &mat, &mut out, &params)
        .map_err(|e| format!("cannot encode the masked frame as JPEG: {e}"))?;
    Ok(out.to_vec())
}
