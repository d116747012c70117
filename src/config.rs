//! Configuration: one TOML file parsed into typed structs.
//!
//! Contract: every table and field is optional and has a documented default; unknown fields
//! are rejected (a typo must not silently fall back to a default); units are in field names;
//! [`Config::load`] parses and then runs one [`Config::validate`] whose errors name the field
//! and the file. `firmware-config/station.toml` is the documented example.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exit::{Classify, ExitKind};

/// Errors from reading or validating a configuration file. All of them are bad input.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file: {source}: {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config: {message}: {path}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config: field `{field}` {problem}: {path}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        problem: String,
    },
}

impl Classify for ConfigError {
    fn exit_kind(&self) -> ExitKind {
        ExitKind::BadInput
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub station: StationConfig,
    pub video: VideoConfig,
    pub audio: AudioConfig,
    pub windows: WindowConfig,
    pub text: TextConfig,
    pub quality: QualityConfig,
    pub runtime: RuntimeConfig,
    pub store: StoreConfig,
    pub models: ModelsConfig,
    pub face: FaceConfig,
    pub fusion: FusionConfig,
    pub report: ReportConfig,
    pub sync: SyncConfig,
    pub live: LiveConfig,
    pub recording: RecordingConfig,
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
}

impl Default for LiveConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from("/run/empathic/control.sock"),
            socket_group: String::new(),
            socket_mode: "660".into(),
            transcript_wait_ms: 10_000,
            realtime_priority: 20,
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
    /// when the service starts (events and session.json are kept). 0: kept forever.
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
    pub phases: Vec<crate::session::Phase>,
    /// While the participant shares their story and before any story is shown, the stories
    /// in play are the top `retrieve_k` of the bank for what they have said so far (0: none).
    pub retrieve_k: usize,
}

impl Default for FusionConfig {
    fn default() -> Self {
        Self {
            predictors: vec!["text-zero-shot".into()],
            phases: vec![
                crate::session::Phase::StoryShare,
                crate::session::Phase::Reflection,
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
    pub lld_set: crate::features::acoustic::LldSet,
}

impl Default for AudioConfig {
    fn default() -> Self {
        Self {
            device: "default".into(),
            sample_rate_hz: 16_000,
            block_ms: 20,
            lld_set: crate::features::acoustic::LldSet::Compare,
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
    pub appearance_input: crate::features::appearance::AppearanceInput,
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
            appearance_input: crate::features::appearance::AppearanceInput::Face,
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
    pub gaze_model: crate::features::face::GazeModel,
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

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses and validates config text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            // toml's message already names the line, column and field; flatten it to one line.
            message: e.to_string().trim().replace('\n', " "),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Loads `path` when given, else the defaults.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            Some(p) => Config::load(p),
            None => Ok(Config::default()),
        }
    }

    /// Checks values that parse but make no sense. Errors name the field and the file.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |field: &'static str, problem: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            field,
            problem,
        };
        // Integers within [lo, hi].
        let within = |field: &'static str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(invalid(
                    field,
                    format!("must be between {lo} and {hi}, got {v}"),
                ))
            }
        };
        crate::session::manifest::check_id("station.id", &self.station.id)
            .map_err(|m| invalid("station.id", m))?;
        if let Some(c) = self.sync.collectors.iter().find(|c| c.trim().is_empty()) {
            return Err(invalid(
                "sync.collectors",
                format!("a collector's name (client id or share group) cannot be blank, got {c:?}"),
            ));
        }
        if u32::from_str_radix(&self.live.socket_mode, 8).map_or(true, |m| m > 0o777) {
            return Err(invalid(
                "live.socket_mode",
                format!(
                    "must be octal permission bits like \"660\", got \"{}\"",
                    self.live.socket_mode
                ),
            ));
        }
        within(
            "live.realtime_priority",
            u64::from(self.live.realtime_priority),
            0,
            99,
        )?;
        within(
            "live.transcript_wait_ms",
            self.live.transcript_wait_ms,
            0,
            120_000,
        )?;
        let fps = self.video.nominal_fps;
        if !(fps.is_finite() && (1.0..=240.0).contains(&fps)) {
            return Err(invalid(
                "video.nominal_fps",
                format!("must be between 1 and 240, got {fps}"),
            ));
        }
        if !(8_000..=192_000).contains(&self.audio.sample_rate_hz) {
            return Err(invalid(
                "audio.sample_rate_hz",
                format!(
                    "must be between 8000 and 192000, got {}",
                    self.audio.sample_rate_hz
                ),
            ));
        }
        if !(1..=1000).contains(&self.audio.block_ms) {
            return Err(invalid(
                "audio.block_ms",
                format!("must be between 1 and 1000, got {}", self.audio.block_ms),
            ));
        }
        // Ten minutes at 60 fps; the assembler holds one window of frame references.
        within(
            "windows.length_frames",
            self.windows.length_frames as u64,
            1,
            36_000,
        )?;
        if self.windows.hop_frames == 0 || self.windows.hop_frames > self.windows.length_frames {
            return Err(invalid(
                "windows.hop_frames",
                format!(
                    "must be between 1 and windows.length_frames ({}), got {}",
                    self.windows.length_frames, self.windows.hop_frames
                ),
            ));
        }
        if !(self.quality.clipping_level > 0.0 && self.quality.clipping_level <= 1.0) {
            return Err(invalid(
                "quality.clipping_level",
                format!("must be in (0, 1], got {}", self.quality.clipping_level),
            ));
        }
        if !(self.quality.vad_floor_dbfs.is_finite() && self.quality.vad_floor_dbfs < 0.0) {
            return Err(invalid(
                "quality.vad_floor_dbfs",
                format!("must be below 0 dBFS, got {}", self.quality.vad_floor_dbfs),
            ));
        }
        if !(self.quality.vad_margin_db.is_finite() && self.quality.vad_margin_db >= 0.0) {
            return Err(invalid(
                "quality.vad_margin_db",
                format!("must be 0 or more, got {}", self.quality.vad_margin_db),
            ));
        }
        for (field, v) in [
            ("face.fx", self.face.fx),
            ("face.fy", self.face.fy),
            ("face.cx", self.face.cx),
            ("face.cy", self.face.cy),
        ] {
            if let Some(v) = v {
                crate::session::manifest::check_intrinsic(field, v)
                    .map_err(|m| invalid(field, m))?;
            }
        }
        within("text.horizon_ms", self.text.horizon_ms, 0, 600_000)?;
        if self.models.appearance_input == crate::features::appearance::AppearanceInput::Face
            && !self.models.appearance_encoder.is_empty()
            && !self.face.enabled
        {
            return Err(invalid(
                "models.appearance_input",
                "is `face`, which needs the facial stage: set face.enabled = true or appearance_input = \"frame\"".into(),
            ));
        }
        within(
            "runtime.video_queue_frames",
            self.runtime.video_queue_frames as u64,
            1,
            1024,
        )?;
        within(
            "runtime.audio_queue_blocks",
            self.runtime.audio_queue_blocks as u64,
            1,
            16_384,
        )?;
        within(
            "store.batch_max_rows",
            self.store.batch_max_rows as u64,
            1,
            100_000,
        )?;
        within("store.batch_max_ms", self.store.batch_max_ms, 1, 60_000)?;
        within(
            "store.busy_timeout_ms",
            self.store.busy_timeout_ms,
            0,
            600_000,
        )?;
        within("store.max_db_mib", self.store.max_db_mib, 0, 1 << 30)?;
        within("fusion.retrieve_k", self.fusion.retrieve_k as u64, 0, 20)?;
        for p in &self.fusion.predictors {
            if p.ends_with(".onnx") {
                if !Path::new(p).is_file() {
                    return Err(invalid(
                        "fusion.predictors",
                        format!("no fusion model file at {p}"),
                    ));
                }
            } else if p.trim().is_empty() {
                return Err(invalid(
                    "fusion.predictors",
                    format!(
                        "an empty predictor name (known: {}, a fusion model of models/MODELS.toml, or the path of one, *.onnx)",
                        crate::fusion::BUILTIN.join(", ")
                    ),
                ));
            }
            // Other names are fusion models of the manifest, resolved (and refused when
            // unknown, listing what is known) when the models are loaded.
        }
        if let Some(lib) = &self.models.onnxruntime_library {
            if !lib.is_file() {
                return Err(invalid(
                    "models.onnxruntime_library",
                    format!("no such file: {}", lib.display()),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    /// The field names serde accepts for `T` (its `deserialize_struct` field list), read by a
    /// deserializer that records them and stops.
    fn fields_of<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
        use serde::de::{Error, Visitor};
        struct Introspect<'a>(&'a mut Vec<&'static str>);
        impl<'de> serde::Deserializer<'de> for Introspect<'_> {
            type Error = serde::de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(Self::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                self.0.extend_from_slice(fields);
                Err(Self::Error::custom("introspected"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut fields = Vec::new();
        let _ = T::deserialize(Introspect(&mut fields));
        fields
    }

    #[test]
    fn the_shipped_station_toml_names_every_field_the_config_accepts() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("firmware-config/station.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let doc: toml::Table = text.parse().unwrap();
        // Every section of the config with the fields of its type. A new section fails
        // here until it is added, so a new field cannot be missed in any section.
        let sections: Vec<(&str, Vec<&str>)> = vec![
            ("station", fields_of::<StationConfig>()),
            ("video", fields_of::<VideoConfig>()),
            ("audio", fields_of::<AudioConfig>()),
            ("windows", fields_of::<WindowConfig>()),
            ("text", fields_of::<TextConfig>()),
            ("quality", fields_of::<QualityConfig>()),
            ("runtime", fields_of::<RuntimeConfig>()),
            ("store", fields_of::<StoreConfig>()),
            ("models", fields_of::<ModelsConfig>()),
            ("face", fields_of::<FaceConfig>()),
            ("fusion", fields_of::<FusionConfig>()),
            ("report", fields_of::<ReportConfig>()),
            ("sync", fields_of::<SyncConfig>()),
            ("live", fields_of::<LiveConfig>()),
            ("recording", fields_of::<RecordingConfig>()),
        ];
        let top = fields_of::<Config>();
        assert_eq!(
            top,
            sections.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            "a config section is missing from this test"
        );
        let mut missing = Vec::new();
        for (section, fields) in &sections {
            // A field counts as named when set, or shown commented out (`# field = ...`).
            let table = doc.get(*section).and_then(|v| v.as_table());
            let block = text
                .split_once(&format!("\n[{section}]\n"))
                .map(|(_, rest)| rest.split("\n[").next().unwrap_or(""))
                .unwrap_or("");
            for f in fields {
                let set = table.is_some_and(|t| t.contains_key(*f));
                let shown = block.lines().any(|l| {
                    l.trim_start_matches(['#', ' '])
                        .starts_with(&format!("{f} ="))
                });
                if !set && !shown {
                    missing.push(format!("[{section}] {f}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "{} does not name: {missing:?}",
            path.display()
        );
        // And what it sets is what the config accepts.
        Config::load(&path).unwrap();
    }
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn station_example_parses() {
        let text = include_str!("../firmware-config/station.toml");
        let config = parse(text).unwrap();
        assert_eq!(config.windows.length_frames, 120);
        assert_eq!(config.windows.hop_frames, 15);
    }

    #[test]
    fn unknown_field_is_rejected_with_its_name_and_file() {
        let err = parse("[windows]\nlength_frame = 10\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("length_frame"), "{err}");
        assert!(err.contains("test.toml"), "{err}");
    }

    #[test]
    fn invalid_value_names_field_and_file() {
        let err = parse("[windows]\nlength_frames = 10\nhop_frames = 20\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("windows.hop_frames"), "{err}");
        assert!(err.contains("test.toml"), "{err}");
    }

    #[test]
    fn wrong_type_is_rejected() {
        let err = parse("[audio]\nsample_rate_hz = \"fast\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sample_rate_hz"), "{err}");
    }

    #[test]
    fn face_appearance_needs_the_facial_stage_and_intrinsics_are_positive() {
        let err = parse("[face]\nenabled = false\n").unwrap_err().to_string();
        assert!(err.contains("models.appearance_input"), "{err}");
        assert!(parse("[face]\nenabled = false\n[models]\nappearance_input = \"frame\"\n").is_ok());
        let err = parse("[face]\nfx = -3.0\n").unwrap_err().to_string();
        assert!(err.contains("face.fx"), "{err}");
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]
            // Any TOML made of the config's own keys with any numbers parses into a config
            // whose sizes are bounded, or into an error naming the file; never a panic or
            // an abort (a window of 4e9 frames once tried to allocate 32 GB).
            #[test]
            fn arbitrary_configs_are_bounded_or_refused(
                entries in proptest::collection::vec(
                    (prop_oneof![
                        Just(("windows", "length_frames")), Just(("windows", "hop_frames")),
                        Just(("runtime", "video_queue_frames")), Just(("runtime", "audio_queue_blocks")),
                        Just(("store", "batch_max_rows")), Just(("store", "batch_max_ms")),
                        Just(("store", "busy_timeout_ms")), Just(("store", "max_db_mib")),
                        Just(("audio", "sample_rate_hz")), Just(("audio", "block_ms")),
                        Just(("video", "nominal_fps")), Just(("face", "fx")), Just(("face", "cy")),
                        Just(("text", "horizon_ms")), Just(("quality", "clipping_level")),
                    ], prop_oneof![
                        any::<i64>().prop_map(|v| v.to_string()),
                        any::<f64>().prop_map(|v| format!("{v:?}")),
                        Just("4000000000".to_string()),
                        Just("\"x\"".to_string()),
                    ]),
                    0..5,
                ),
            ) {
                let mut text = String::new();
                for ((section, key), value) in entries {
                    text.push_str(&format!("[{section}]\n{key} = {value}\n"));
                }
                match parse(&text) {
                    Ok(c) => {
                        prop_assert!((1..=36_000).contains(&c.windows.length_frames));
                        prop_assert!((1..=1024).contains(&c.runtime.video_queue_frames));
                        prop_assert!((1..=16_384).contains(&c.runtime.audio_queue_blocks));
                        prop_assert!(c.store.busy_timeout_ms <= 600_000);
                    }
                    Err(e) => prop_assert!(e.to_string().contains("test.toml"), "{e}"),
                }
            }
        }
    }
}
