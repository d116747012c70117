//! What is computed from the media: `[models]`, `[face]`, `[body]`, `[asr]`, `[text]`,
//! `[windows]`, `[quality]` and `[fusion]`.

use super::*;

/// On-station speech recognition (`features::speech`): whether the station's recogniser
/// runs and whose utterances feed the text modality. Nothing it hears leaves the station
/// but the words it stores (as the dialogue app's transcripts do).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AsrConfig {
    /// Run the station's recogniser where `source` asks for it (false: never).
    pub enabled: bool,
    /// `auto`: live sessions and replays of live recordings run the recogniser and feed
    /// the text modality from it (the dialogue app's utterances are stored as well); other
    /// replays run it only when their events carry no participant utterances. `station`:
    /// always the recogniser. `dialogue_app`: never (the runtime before issue 32). `both`:
    /// run it and feed the text modality from `text_from`.
    pub source: AsrSource,
    /// With `source = "both"`: `station` or `dialogue_app`.
    pub text_from: TextFrom,
    /// Silence that ends an utterance.
    pub min_silence_ms: u32,
    /// Audio kept after each utterance.
    pub pad_ms: u32,
    /// Audio kept before the moment speech was detected (the detector lags a word's
    /// onset); never reaches back into the previous utterance.
    pub pre_roll_ms: u32,
    /// Unbroken speech is cut into utterances of at most this (the recogniser's window).
    pub max_utterance_ms: u32,
    /// Speech probability (Silero VAD) at which speech starts.
    pub threshold: f32,
}

impl Default for AsrConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            source: AsrSource::Auto,
            text_from: TextFrom::Station,
            min_silence_ms: 200,
            pad_ms: 100,
            pre_roll_ms: 200,
            // Why 10 s: `features::speech::vad::SegmentRules::default` (measured).
            max_utterance_ms: 10_000,
            threshold: 0.5,
        }
    }
}

/// `[asr] source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AsrSource {
    Auto,
    Station,
    DialogueApp,
    Both,
}

/// `[asr] text_from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextFrom {
    Station,
    DialogueApp,
}

impl TextFrom {
    pub fn source(self) -> crate::core::TranscriptSource {
        match self {
            TextFrom::Station => crate::core::TranscriptSource::Asr,
            TextFrom::DialogueApp => crate::core::TranscriptSource::DialogueApp,
        }
    }
}

/// Which predictor runs on which phases' windows (see `fusion`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FusionConfig {
    /// Predictors; empty turns prediction off: `text-zero-shot`, a `fusion_model` of
    /// `models/MODELS.toml` by name, or the path of a fusion model under ONNX contract v1
    /// (`*.onnx`).
    pub predictors: Vec<String>,
    /// The phases whose windows are predicted (a window's phase is the one at its midpoint).
    pub phases: Vec<crate::core::Phase>,
    /// While the participant shares their story and before any story is shown, the stories
    /// in play are the top `retrieve_k` of the bank for what they have said so far (0: none).
    pub retrieve_k: usize,
    /// Attribute every prediction to the cues that moved it (docs/prediction.md, "Why a
    /// prediction"): stored with the predictions, shown by `explain`, the report and the
    /// `prediction` topic.
    pub explain: bool,
    /// The most coalitions (model runs on an altered window) one window's attribution may
    /// take per fusion model: exact Owen values when they fit, else sampled within it. The
    /// built-in `text-zero-shot` (microseconds a run) takes up to 4096.
    pub explain_max_coalitions: usize,
}

impl Default for FusionConfig {
    fn default() -> Self {
        Self {
            predictors: vec!["text-zero-shot".into()],
            phases: vec![
                crate::core::Phase::StoryShare,
                crate::core::Phase::Reflection,
            ],
            retrieve_k: 3,
            explain: true,
            explain_max_coalitions: 64,
        }
    }
}

/// Sliding windows handed to the fusion models.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WindowConfig {
    /// Frames per window (120 = 8 s at 15 fps, as in the paper).
    pub length_frames: usize,
    /// Frames between the starts of consecutive windows (15 = 1 s at 15 fps).
    pub hop_frames: usize,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self {
            length_frames: 120,
            hop_frames: 15,
        }
    }
}

/// Text per frame from the transcript.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TextConfig {
    /// Whose utterances give the per-frame text vector.
    pub speaker: String,
    /// After an utterance ends, frames keep its vector for this long.
    pub horizon_ms: u64,
}

impl Default for TextConfig {
    fn default() -> Self {
        Self {
            speaker: "participant".into(),
            horizon_ms: 3000,
        }
    }
}

/// Thresholds of the signal-quality stages.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QualityConfig {
    /// A 10 ms audio frame is voiced when its RMS level is above this absolute level ...
    pub vad_floor_dbfs: f64,
    /// ... and at least this far above the tracked noise floor.
    pub vad_margin_db: f64,
    /// A sample counts as clipped at or above this absolute value (full scale is 1.0).
    pub clipping_level: f64,
}

impl Default for QualityConfig {
    fn default() -> Self {
        Self {
            vad_floor_dbfs: -50.0,
            vad_margin_db: 9.0,
            clipping_level: 0.99,
        }
    }
}

/// Where models and the ONNX Runtime library are.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ModelsConfig {
    /// Folder with the ONNX models and their manifest.
    pub dir: PathBuf,
    /// The ONNX Runtime shared library. Empty: `ORT_DYLIB_PATH`, then
    /// `libonnxruntime.so.1` next to the executable.
    pub onnxruntime_library: Option<PathBuf>,
    /// Manifest name of the sentence encoder (`empathic embed`, stories, text per frame).
    pub sentence_encoder: String,
    /// Manifest name of the appearance encoder (per-frame CNN features); empty: no
    /// appearance features (replay then runs about 10x faster).
    pub appearance_encoder: String,
    /// What the appearance encoder looks at: `face` (the participant's aligned face crop
    /// from the facial stage; absent on frames without a face) or `frame` (the whole frame).
    pub appearance_input: AppearanceInput,
}

/// Where the models are when the config does not say: `$EMPATHIC_MODELS`; `models/` in
/// the working directory (a checkout); beside the executable (`<bin>/models`, an unpacked
/// install); `<bin>/../share/empathic/models` (`/usr/bin` with `/usr/share`); the checkout
/// a development build was made from (`target/release/..`). The first folder holding a
/// `MODELS.toml` wins; with none, `models` (and the error names it). So `empathic doctor`
/// finds its models from any working directory.
pub fn default_models_dir() -> PathBuf {
    let has_manifest = |d: &Path| d.join(crate::models::manifest::MANIFEST_FILE).is_file();
    if let Some(d) = std::env::var_os("EMPATHIC_MODELS") {
        return PathBuf::from(d);
    }
    let mut candidates = vec![PathBuf::from("models")];
    if let Some(bin) = std::env::current_exe()
        .ok()
        .and_then(|e| e.canonicalize().ok())
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(bin.join("models"));
        candidates.push(bin.join("../share/empathic/models"));
        candidates.push(bin.join("../../models"));
    }
    candidates
        .into_iter()
        .find(|d| has_manifest(d))
        .unwrap_or_else(|| PathBuf::from("models"))
}

impl Default for ModelsConfig {
    fn default() -> Self {
        Self {
            dir: default_models_dir(),
            onnxruntime_library: None,
            sentence_encoder: "all-MiniLM-L6-v2".into(),
            // 160x160: 0.54-0.60x the CPU of 224x224 (docs/performance.md, issue 18); "efficientnet-lite0" is
            // the same weights at 224.
            appearance_encoder: "efficientnet-lite0-160".into(),
            appearance_input: AppearanceInput::Face,
        }
    }
}

/// The body stage (`features::body`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct BodyConfig {
    /// MediaPipe's BlazePose GHUM 3D: the `body` modality (33 landmarks in pixels with
    /// visibility and presence, 33 world points in metres).
    pub enabled: bool,
    /// The body is computed on one frame in every `every` of the nominal frame grid and
    /// held on the frames between (`held_frames` says how long); 1: every frame. The
    /// default 3 (5 a second at 15 fps) puts the body's CPU under the facial stage's
    /// (docs/performance.md); posture and nearness change over seconds.
    pub every: u32,
}

impl Default for BodyConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            every: 3,
        }
    }
}

/// The facial stage and the camera it reads.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct FaceConfig {
    /// OpenFace-style facial behaviour per frame (the `face` modality).
    pub enabled: bool,
    /// Camera intrinsics in pixels, used when a session's `session.json` gives none.
    /// Left out: OpenFace's default fx = fy = 500 * width / 640 and the image centre.
    pub fx: Option<f64>,
    pub fy: Option<f64>,
    pub cx: Option<f64>,
    pub cy: Option<f64>,
    /// The eyeball model gaze is measured with: `"openface"` (OpenFace 2.0's geometry, the
    /// default, for analyses and models built on OpenFace) or `"anatomical"`.
    pub gaze_model: GazeModel,
    /// Store MediaPipe's 52 blendshape coefficients per frame as the `blendshapes`
    /// modality (computed either way: the action units read them).
    pub blendshapes: bool,
}

impl Default for FaceConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            fx: None,
            fy: None,
            cx: None,
            cy: None,
            gaze_model: Default::default(),
            blendshapes: true,
        }
    }
}

/// What the appearance encoder looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AppearanceInput {
    /// The participant's aligned face crop (needs the facial stage).
    Face,
    /// The whole frame.
    Frame,
}

/// Where the eyeball centre sits, which sets what "gaze" means.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Deserialize,
    serde::Serialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum GazeModel {
    /// OpenFace 2.0's documented geometry (`features::face::OPENFACE_EYEBALL_OFFSET_MM` from the eye
    /// corners): the gaze OpenFace users and models trained on its features expect.
    #[default]
    #[value(help = "OpenFace 2.0's eyeball geometry (eye-corner midpoint + R (0, -3.5, 7) mm)")]
    OpenFace,
    /// Adult anatomy (`features::face::EYEBALL_OFFSET_MM` from the middle of the eye opening): closer to
    /// the physical direction (into the lens when the person looks into it).
    #[value(help = "adult anatomy (0.75 mm above, 7.5 mm behind the eye opening's middle)")]
    Anatomical,
}

impl GazeModel {
    pub fn name(self) -> &'static str {
        match self {
            GazeModel::OpenFace => "openface",
            GazeModel::Anatomical => "anatomical",
        }
    }
}

/// What is kept of people in view other than the participant (`[privacy]`,
/// docs/station.md "Bystanders").
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PrivacyConfig {
    /// `"mask"` (the default): every face but the participant's is filled flat in the
    /// frames before any stage or the recorder sees them; `"keep"`: frames are kept as the
    /// camera gave them, for a study whose consent covers everyone in view (logged at the
    /// start of every session).
    pub bystanders: Bystanders,
}

impl Default for PrivacyConfig {
    fn default() -> Self {
        Self {
            bystanders: Bystanders::Mask,
        }
    }
}

/// `[privacy] bystanders`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Bystanders {
    Mask,
    Keep,
}
