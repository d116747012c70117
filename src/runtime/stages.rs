//! Set-up of a run's stages and the modality layout they make.
//!
//! Contract: [`Stages::load`] opens every model the config asks for (a missing or broken
//! model fails here, naming the file), builds the stages, and fixes the
//! [`ModalityLayout`]: each stage's modality is added once, here, in this order. Adding a
//! modality is one `add` here plus its stage; every later part finds it by name or id.

use crate::config::Config;
use crate::core::{ModalityId, ModalityLayout, Stream};
use crate::features::acoustic::LldExtractor;
use crate::features::appearance::AppearanceEncoder;
use crate::features::body::rate::SampledBody;
use crate::features::body::stage::BodyStage;
use crate::features::body::BodyTracker;
use crate::features::face::pose::IntrinsicsArgs;
use crate::features::face::{FaceAnalyzer, FaceStage, Mode};
use crate::features::signal::{AudioSignalStage, VideoSignalStage};
use crate::features::speech::activity::SpeechActivityStage;
use crate::features::speech::stream::SpeechStream;
use crate::features::speech::SpeechModels;
use crate::features::text::{SentenceEncoder, SharedEncoder, TextStage};
use crate::features::{AudioStage, FrameStage};
use crate::fusion::onnx_model::OnnxPredictor;
use crate::fusion::{Configured, FusionStage};
use crate::models::manifest::{Manifest, ModelKind};
use crate::session::CameraIntrinsics;

use super::RunError;

/// A stage with the modality it computes.
pub struct StageSlot<S> {
    pub modality: ModalityId,
    pub stage: S,
}

/// A frame stage of the chain after the signal stage.
pub type FrameStageSlot = StageSlot<Box<dyn FrameStage>>;
/// An audio stage besides the signal stage.
pub type AudioStageSlot = StageSlot<Box<dyn AudioStage>>;
/// The video signal stage, run on the slot grid by the video-features thread.
pub type VideoSignalSlot = StageSlot<VideoSignalStage>;
/// The audio signal stage, run first on every block.
pub type AudioSignalSlot = StageSlot<AudioSignalStage>;
/// The text stage (sentence embeddings of the participant's utterances).
pub type TextSlot = StageSlot<TextStage>;

/// The stages of one run and the modality layout they make.
pub struct Stages {
    /// Video frame stages in pipeline order (each on its own thread after the first).
    /// The first is the signal stage, run with the slot grid.
    pub video_signal: VideoSignalSlot,
    pub frame_stages: Vec<FrameStageSlot>,
    pub text: TextSlot,
    pub audio_signal: AudioSignalSlot,
    pub audio_stages: Vec<AudioStageSlot>,
    pub layout: ModalityLayout,
    pub period_ns: f64,
    /// The configured predictors, checked against the layout (None: prediction is off).
    pub fusion: Option<FusionStage>,
    /// The station's recogniser, when the transcript plan (`super::transcripts`) runs it.
    pub speech: Option<SpeechStream>,
}

fn add(
    layout: &mut ModalityLayout,
    stream: Stream,
    spec: &crate::core::ModalitySpec,
) -> Result<ModalityId, RunError> {
    layout
        .add(stream, spec.clone())
        .map_err(|e| RunError::SetUp(e.to_string()))
}

/// The config's sentence encoder (`[models] sentence_encoder`), ready to share.
pub fn open_sentence_encoder(config: &Config) -> Result<SharedEncoder, RunError> {
    let models = &config.models;
    let manifest = Manifest::load(&models.dir)?;
    let entry = manifest.get(&models.sentence_encoder, &models.dir)?;
    Ok(SharedEncoder::new(SentenceEncoder::open(
        &models.dir,
        entry,
        models.onnxruntime_library.as_deref(),
    )?))
}

impl Stages {
    /// Sets up the stages for a session at `nominal_fps`; `camera` is the session's own
    /// calibration, which wins over the station's config.
    pub fn load(
        config: &Config,
        nominal_fps: f64,
        camera: Option<CameraIntrinsics>,
    ) -> Result<Self, RunError> {
        let encoder = open_sentence_encoder(config)?;
        Self::load_sharing(config, nominal_fps, camera, encoder)
    }

    /// [`Stages::load`] with the sentence encoder the caller already holds (the live
    /// service's, shared with its `recommend` thread: one copy of the model in memory).
    pub fn load_sharing(
        config: &Config,
        nominal_fps: f64,
        camera: Option<CameraIntrinsics>,
        encoder: SharedEncoder,
    ) -> Result<Self, RunError> {
        let models = &config.models;
        let manifest = Manifest::load(&models.dir)?;
        let frame_stages = open_frame_stages(config, &manifest, camera, nominal_fps)?;
        let video_signal = VideoSignalStage::new();
        let text = TextStage::new(encoder, &config.text.speaker);
        let audio_signal = AudioSignalStage::new(&config.quality, config.audio.sample_rate_hz);
        let audio_stages = open_audio_stages(config)?;

        // The layout: one entry per modality, in the order frame records carry them.
        let mut layout = ModalityLayout::new();
        let video_signal_id = add(&mut layout, Stream::Video, video_signal.spec())?;
        let mut frame_slots = Vec::new();
        for stage in frame_stages {
            let modality = add(&mut layout, Stream::Video, stage.spec())?;
            frame_slots.push(FrameStageSlot { modality, stage });
        }
        let text_id = add(&mut layout, Stream::Text, text.spec())?;
        let audio_signal_id = add(&mut layout, Stream::Audio, audio_signal.spec())?;
        let mut audio_slots = Vec::new();
        for stage in audio_stages {
            let modality = add(&mut layout, Stream::Audio, stage.spec())?;
            audio_slots.push(AudioStageSlot { modality, stage });
        }
        let mut predictors: Vec<Configured> = Vec::new();
        for p in &config.fusion.predictors {
            let predictor = open_predictor(p, config, &manifest)?;
            predictors.push(Configured {
                predictor,
                phases: config.fusion.phases.clone(),
            });
        }
        let fusion = if predictors.is_empty() {
            None
        } else {
            let mut stage = FusionStage::new(layout.clone(), predictors)?;
            stage.set_explain(
                config
                    .fusion
                    .explain
                    .then_some(config.fusion.explain_max_coalitions),
            );
            Some(stage)
        };
        Ok(Self {
            fusion,
            speech: None,
            video_signal: StageSlot {
                modality: video_signal_id,
                stage: video_signal,
            },
            frame_stages: frame_slots,
            text: StageSlot {
                modality: text_id,
                stage: text,
            },
            audio_signal: StageSlot {
                modality: audio_signal_id,
                stage: audio_signal,
            },
            audio_stages: audio_slots,
            layout,
            period_ns: 1e9 / nominal_fps,
        })
    }
}

/// The frame stages after the signal stage, in pipeline order: the facial stage (and its
/// blendshapes), the body, then the appearance encoder, as the configuration asks.
fn open_frame_stages(
    config: &Config,
    manifest: &Manifest,
    camera: Option<CameraIntrinsics>,
    nominal_fps: f64,
) -> Result<Vec<Box<dyn FrameStage>>, RunError> {
    let models = &config.models;
    let mut frame_stages: Vec<Box<dyn FrameStage>> = Vec::new();
    if config.face.enabled {
        let intrinsics = match camera {
            Some(k) => IntrinsicsArgs::from(k),
            None => IntrinsicsArgs {
                fx: config.face.fx,
                fy: config.face.fy,
                cx: config.face.cx,
                cy: config.face.cy,
            },
        };
        let analyzer = FaceAnalyzer::open(
            &models.dir,
            manifest,
            models.onnxruntime_library.as_deref(),
            intrinsics,
            Mode::Video,
        )?
        .with_gaze_model(config.face.gaze_model);
        let blendshapes = analyzer.blendshape_stage();
        frame_stages.push(Box::new(FaceStage::new(analyzer)));
        if config.face.blendshapes {
            // After the facial stage, whose blendshapes it stores.
            frame_stages.push(Box::new(blendshapes));
        }
    }
    if config.body.enabled {
        let tracker = BodyTracker::open(
            &models.dir,
            manifest,
            models.onnxruntime_library.as_deref(),
            nominal_fps,
        )?;
        frame_stages.push(Box::new(BodyStage::new(SampledBody::new(
            tracker,
            config.body.every,
        ))));
    }
    if !models.appearance_encoder.is_empty() {
        let entry = manifest.get(&models.appearance_encoder, &models.dir)?;
        frame_stages.push(Box::new(
            AppearanceEncoder::open(&models.dir, entry, models.onnxruntime_library.as_deref())?
                .with_input(models.appearance_input),
        ));
    }
    Ok(frame_stages)
}

/// The audio stages besides the signal stage: the LLDs, and the learned voice activity
/// when the station's speech models are there.
fn open_audio_stages(config: &Config) -> Result<Vec<Box<dyn AudioStage>>, RunError> {
    let models = &config.models;
    let mut audio_stages: Vec<Box<dyn AudioStage>> = vec![Box::new(LldExtractor::new(
        config.audio.lld_set,
        config.audio.sample_rate_hz,
    ))];
    // The learned voice activity beside the energy rule, with the station's speech
    // models (`[asr]`); without them the session runs without it and says so once.
    if config.asr.enabled {
        let path = SpeechModels::in_dir(&models.dir).vad;
        match (config.audio.sample_rate_hz, path.is_file()) {
            (16_000, true) => audio_stages.push(Box::new(SpeechActivityStage::open(
                &path,
                models.onnxruntime_library.as_deref(),
            )?)),
            (16_000, false) => tracing::warn!(
                "no speech_activity modality: {} is missing (run scripts/setup.sh)",
                path.display()
            ),
            (rate, _) => tracing::warn!(
                "no speech_activity modality: the voice activity model runs on 16000 Hz audio and audio.sample_rate_hz is {rate}"
            ),
        }
    }

    Ok(audio_stages)
}

/// Predictor `p` of `[fusion] predictors`: a built-in id, a model file, or a fusion model
/// of the manifest (its sha256 checked first).
fn open_predictor(
    p: &str,
    config: &Config,
    manifest: &Manifest,
) -> Result<Box<dyn crate::fusion::Predictor>, RunError> {
    let models = &config.models;
    Ok(match crate::fusion::builtin(p) {
        Some(builtin) => builtin,
        None if p.ends_with(".onnx") => Box::new(OnnxPredictor::open(
            std::path::Path::new(p),
            models.onnxruntime_library.as_deref(),
        )?),
        None => {
            let entry = manifest
                .models
                .iter()
                .find(|m| m.name == *p && m.kind == ModelKind::FusionModel)
                .ok_or_else(|| {
                    let known: Vec<&str> = crate::core::BUILTIN_PREDICTORS
                        .iter()
                        .copied()
                        .chain(
                            manifest
                                .models
                                .iter()
                                .filter(|m| m.kind == ModelKind::FusionModel)
                                .map(|m| m.name.as_str()),
                        )
                        .collect();
                    crate::models::ModelError::Manifest {
                        path: models.dir.join(crate::models::manifest::MANIFEST_FILE),
                        message: format!(
                            "fusion.predictors: unknown predictor `{p}` (known: {}, or the path of a fusion model, *.onnx)",
                            known.join(", ")
                        ),
                    }
                })?;
            entry.check_files(&models.dir)?;
            Box::new(OnnxPredictor::open(
                &entry.path(&models.dir),
                models.onnxruntime_library.as_deref(),
            )?)
        }
    })
}
