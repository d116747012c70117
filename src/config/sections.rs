//! The config's sections: one struct per TOML table with its documented defaults
//! (`firmware-config/station.toml` lists them); [`super::Config`] holds one of each.

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
            max_utterance_ms: 20_000,
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

/// The live service (`empathic run`): its control socket and timing.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LiveConfig {
    /// Unix socket the robot's dialogue app talks to (JSON lines).
    pub socket: PathBuf,
    /// Group given the socket (empty: the service's own group).
    pub socket_group: String,
    /// Permission bits of the socket, octal as a string (e.g. "660").
    pub socket_mode: String,
    /// How long frames wait for transcripts: an utterance is stamped at its start but sent
    /// when it ends, so frames within this of now are held until it may have arrived.
    /// Utterances arriving later than this after their start still count, but frames
    /// already stored carry no text for them (the live run then differs from a replay).
    pub transcript_wait_ms: u64,
    /// SCHED_FIFO priority for the capture threads (1-99; 0: normal priority). Needs the
    /// unit's `LimitRTPRIO=`; when refused the service logs it and carries on.
    pub realtime_priority: u8,
    /// A session bound to its dialogue app's connection (started without `lease_s`) ends
    /// this long after that connection closes without `stop_session` (the app crashed or
    /// was killed), stored `incomplete` with the reason. 1 000 - 600 000.
    pub app_grace_ms: u64,
    /// The longest lease a one-shot client (`empathic ctl start`) may ask for with
    /// `lease_s`: such a session ends when no request names it for its lease. 10 - 86 400.
    pub max_lease_s: u64,
}

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/empathic/control.sock"),
            socket_group: String::new(),
            socket_mode: "660".into(),
            transcript_wait_ms: 10_000,
            realtime_priority: 20,
            app_grace_ms: 30_000,
            max_lease_s: 3_600,
        }
    }
}

/// Raw media recorded by the live service.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RecordingConfig {
    /// Record each live session into a folder `empathic replay` reads.
    pub enabled: bool,
    /// Where the session folders go.
    pub dir: PathBuf,
    /// Raw media stop (features and the database carry on) below this much free disk.
    pub min_free_mib: u64,
    /// Run (through `sh -c`) when recording starts and stops, e.g. to light the station's
    /// ring light. Empty: nothing. The session id is in `$EMPATHIC_SESSION`.
    pub on_start: String,
    pub on_stop: String,
    /// Raw media (video.avi, audio.wav) of sessions older than this many days are deleted
    /// when the service starts and before every session (events and session.json are
    /// kept). 0: kept forever.
    pub retention_days: u64,
}

impl Default for RecordingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            dir: PathBuf::from("/var/lib/empathic/recordings"),
            min_free_mib: 1024,
            on_start: String::new(),
            on_stop: String::new(),
            retention_days: 0,
        }
    }
}

/// Study sync over MQTT (`empathic sync`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// `mqtt://HOST:PORT` or `mqtts://HOST:PORT` (TLS); empty: no broker configured (flags
    /// can still give one).
    pub broker: String,
    /// The study's name, in every topic.
    pub study: String,
    /// Broker login (empty: none) and the file holding its password.
    pub username: String,
    pub password_file: PathBuf,
    /// With an `mqtts://` broker: the CA (PEM) its certificate chains to, and optionally a
    /// client certificate and key (PEM).
    pub ca_file: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// What a session's record carries besides the session, phases, stories, ratings,
    /// surveys, windows' quality and predictions (sizes per hour in the README): window
    /// features (yes by default, for training), transcripts (no by default) and per-frame
    /// features (no by default).
    pub window_features: bool,
    pub transcripts: bool,
    pub frame_features: bool,
    /// The collectors that must each confirm a message before the station counts it synced:
    /// a collector's client id, or the share group of collectors splitting the load into one
    /// database. Name every independent central database's collector here; empty: any one
    /// collector's receipt suffices (one central database).
    pub collectors: Vec<String>,
    /// `sealed` (the default): every message signed with this station's key and its payload
    /// sealed to the study's key, receipts counted only when signed by a collector of
    /// `collector_keys`. `plain`: readable by whoever runs the broker, and forgeable by any
    /// client it lets in; for a first try on a laptop only.
    pub security: SyncSecurity,
    /// The station's signing key (`empathic keys init station` makes it; mode 0600).
    pub signing_key: PathBuf,
    /// The study's public sealing key (`x25519:...`, from `empathic keys init study`).
    pub study_key: String,
    /// The public keys (`ed25519:...`) of the collectors whose receipts count.
    pub collector_keys: Vec<String>,
    /// Minutes between the station's health messages when nothing changes (it also sends
    /// one at start and at every change; `sync::health`).
    pub health_interval_min: u32,
}

/// How sync protects what it carries (`[sync] security`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum SyncSecurity {
    /// Signed by the station, sealed to the study, receipts signed by collectors.
    #[default]
    Sealed,
    /// Plain JSON: the broker reads everything and any client it lets in can forge.
    Plain,
}

impl SyncSecurity {
    pub fn name(self) -> &'static str {
        match self {
            SyncSecurity::Sealed => "sealed",
            SyncSecurity::Plain => "plain",
        }
    }
}

/// Which optional tables a session record carries (`[sync]` `window_features`,
/// `transcripts`, `frame_features`), as the station's config last said; kept in the store
/// (`sync_settings`) so every writer of a record (the pipeline, recovery at open, a backfill)
/// sees the same choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct SyncContent {
    pub window_features: bool,
    pub transcripts: bool,
    pub frame_features: bool,
}

impl Default for SyncContent {
    /// Window features yes (training needs them), transcripts no (a participant's words
    /// are intimate), per-frame features no (hundreds of MB an hour).
    fn default() -> Self {
        Self {
            window_features: true,
            transcripts: false,
            frame_features: false,
        }
    }
}

impl SyncConfig {
    pub fn content(&self) -> SyncContent {
        SyncContent {
            window_features: self.window_features,
            transcripts: self.transcripts,
            frame_features: self.frame_features,
        }
    }
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            broker: String::new(),
            study: "study".into(),
            username: String::new(),
            password_file: PathBuf::new(),
            ca_file: PathBuf::new(),
            client_cert: PathBuf::new(),
            client_key: PathBuf::new(),
            window_features: true,
            transcripts: false,
            frame_features: false,
            collectors: Vec::new(),
            security: SyncSecurity::Sealed,
            signing_key: PathBuf::from("keys/station.key"),
            study_key: String::new(),
            collector_keys: Vec::new(),
            health_interval_min: 15,
        }
    }
}

/// The study's plan, which the study page (`empathic study report`, `collect
/// --study-page`) measures each participant against. Zero: no plan (the page shows what was
/// done, without "behind plan"). Serialized as the study page's `plan`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StudyConfig {
    /// Sessions each participant is to do.
    pub sessions_per_participant: u32,
    /// Days each participant's study lasts, from their first session.
    pub days: u32,
    /// More days than this since a participant's last session (before they are done, and
    /// not withdrawn) is flagged "missed days".
    pub max_days_between_sessions: u32,
    /// A participant's last this-many sessions all with a "bad" data-quality verdict is
    /// flagged (the station probably needs a visit).
    pub bad_sessions_in_a_row: u32,
}

impl Default for StudyConfig {
    fn default() -> Self {
        Self {
            sessions_per_participant: 0,
            days: 0,
            max_days_between_sessions: 3,
            bad_sessions_in_a_row: 2,
        }
    }
}

/// The collector's own settings (`empathic collect`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CollectConfig {
    /// Run (through `sh -c`) when new problems appear on the study page: the new problems
    /// come on its standard input, one a line; `$EMPATHIC_STUDY` names the study and
    /// `$EMPATHIC_PROBLEMS` says how many. Empty: no alerts. Each problem is reported once
    /// until it clears.
    pub on_problem: String,
    /// At most one `on_problem` run in this many minutes; problems that appear meanwhile go
    /// together in the next run.
    pub alert_interval_min: u32,
    /// Every this many seconds the collector asks the broker again for every station's
    /// retained health and status, so one lost to a flood of strangers' messages (a broker
    /// drops what overflows a client's queue) is stored at the next sweep.
    pub health_sweep_s: u32,
}

impl Default for CollectConfig {
    fn default() -> Self {
        Self {
            on_problem: String::new(),
            alert_interval_min: 10,
            health_sweep_s: 60,
        }
    }
}

/// What `empathic report` may show.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// Include the participant's utterances verbatim (off by default: words are intimate,
    /// and a report is a file that travels).
    pub transcript: bool,
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
        }
    }
}

/// Who this station is.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StationConfig {
    /// Station id written on live sessions and on replayed sessions whose `session.json` has none.
    pub id: String,
}

/// The station id of a config that sets none: fine for replays on a laptop, refused for
/// publishing to a study (every unnamed station would share it).
pub const DEFAULT_STATION_ID: &str = "unknown-station";

/// The longest `[recording] retention_days` (a century): longer is refused, 0 keeps forever.
pub const MAX_RETENTION_DAYS: u64 = 36_500;

impl Default for StationConfig {
    fn default() -> Self {
        Self {
            id: DEFAULT_STATION_ID.into(),
        }
    }
}

/// The camera (live) and the nominal video rate (live and replay).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct VideoConfig {
    /// V4L2 device of the station camera (live capture; checked by `empathic doctor`), or
    /// a Motion-JPEG AVI file played as a camera in real time (tests, demos).
    pub device: PathBuf,
    /// Nominal frame rate when a session does not state one; the rate asked of the camera.
    pub nominal_fps: f64,
    /// Frame size asked of the camera (Motion-JPEG).
    pub width: u32,
    pub height: u32,
}

impl Default for VideoConfig {
    fn default() -> Self {
        Self {
            device: PathBuf::from("/dev/video0"),
            nominal_fps: 15.0,
            width: 640,
            height: 480,
        }
    }
}

/// The microphone (live) and the audio timeline (live and replay).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AudioConfig {
    /// ALSA/PulseAudio device name of the station microphone (live capture).
    pub device: String,
    /// Rate every audio stream is resampled to before the feature stages.
    pub sample_rate_hz: u32,
    /// Size of the audio blocks handed to the audio stages.
    pub block_ms: u32,
    /// openSMILE-compatible LLD set stored per frame: `compare` (ComParE-2016, 65) or
    /// `egemaps` (eGeMAPSv02, 25).
    pub lld_set: crate::core::LldSet,
}

impl Default for AudioConfig {
    fn default() -> Self {
        Self {
            device: "default".into(),
            sample_rate_hz: 16_000,
            block_ms: 20,
            lld_set: crate::core::LldSet::Compare,
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

/// Queue sizes between the runtime's threads.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Decoded frames waiting for the video stages (replay blocks when full; live drops oldest).
    pub video_queue_frames: usize,
    /// Audio blocks waiting for the audio stages (never dropped).
    pub audio_queue_blocks: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            video_queue_frames: 8,
            audio_queue_blocks: 256,
        }
    }
}

/// The session store.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// SQLite file used when `--db` is not given.
    pub db_path: PathBuf,
    /// The writer commits once this many rows are pending ...
    pub batch_max_rows: usize,
    /// ... or once the oldest pending row is this old.
    pub batch_max_ms: u64,
    /// How long a write waits for a lock another process holds on the database (a
    /// `sessions list` mid-commit, a backup) before the run fails with that reason.
    pub busy_timeout_ms: u64,
    /// The most the database file may grow to, in MiB (0: no limit but the disk). A
    /// station shares its disk with the robot: past the limit the run fails as on a full
    /// disk, with everything committed before kept.
    pub max_db_mib: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            db_path: PathBuf::from("empathic.db"),
            batch_max_rows: 512,
            batch_max_ms: 500,
            busy_timeout_ms: 10_000,
            max_db_mib: 0,
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
    /// MediaPipe's BlazePose GHUM 3D on every frame: the `body` modality (33 landmarks in
    /// pixels with visibility and presence, 33 world points in metres).
    pub enabled: bool,
}

impl Default for BodyConfig {
    fn default() -> Self {
        Self { enabled: true }
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
