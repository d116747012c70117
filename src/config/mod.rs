//! Configuration: one TOML file parsed into typed structs.
//!
//! Contract: every table and field is optional and has a documented default; unknown fields
//! are rejected (a typo must not silently fall back to a default); units are in field names;
//! [`Config::load`] parses and then runs one [`Config::validate`] whose errors name the field
//! and the file. `firmware-config/station.toml` is the documented example.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::exit::{Classify, ExitKind};

/// The config the station's package installs and its unit runs with.
pub const INSTALLED_CONFIG: &str = "/etc/empathic/station.toml";
/// The camera's nominal frame rate unless `[video] nominal_fps` says otherwise.
pub const DEFAULT_FPS: f64 = 15.0;
/// Names the config a command reads when `--config` is not given (empty: the defaults).
pub const CONFIG_ENV: &str = "EMPATHIC_CONFIG";

mod sections;
pub use sections::*;

/// A broker address: `mqtt://HOST:PORT` (plain) or `mqtts://HOST:PORT` (TLS).
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerAddress {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

/// Parses `mqtt://HOST:PORT` or `mqtts://HOST:PORT` (`Err` says what is expected): the
/// config refuses a `[sync] broker` that is not one, and `sync` reads it with this.
pub fn broker_address(url: &str) -> Result<BrokerAddress, String> {
    let wrong =
        || format!("broker address `{url}`: expected mqtt://HOST:PORT or mqtts://HOST:PORT");
    let (rest, tls) = match url.strip_prefix("mqtts://") {
        Some(r) => (r, true),
        None => (url.strip_prefix("mqtt://").ok_or_else(wrong)?, false),
    };
    let (host, port) = rest.rsplit_once(':').ok_or_else(wrong)?;
    let port = port.parse().map_err(|_| wrong())?;
    if host.is_empty() {
        return Err(wrong());
    }
    Ok(BrokerAddress {
        host: host.to_string(),
        port,
        tls,
    })
}

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
    pub body: BodyConfig,
    pub privacy: PrivacyConfig,
    pub fusion: FusionConfig,
    pub report: ReportConfig,
    pub sync: SyncConfig,
    pub live: LiveConfig,
    pub recording: RecordingConfig,
    pub asr: AsrConfig,
    pub study: StudyConfig,
    pub collect: CollectConfig,
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

    /// Loads the config [`Config::locate`] finds, else the built-in defaults.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, ConfigError> {
        match Config::locate(path) {
            Some(p) => Config::load(&p),
            None => Ok(Config::default()),
        }
    }

    /// The one rule for which config a command reads (docs/commands.md, "Which config"):
    /// `--config PATH` when given; else `$EMPATHIC_CONFIG` when set (set and empty: the
    /// built-in defaults); else the installed station's [`INSTALLED_CONFIG`] when it exists,
    /// so every command on a station reads the service's config (its database, models and
    /// socket) as the service does; else none (the built-in defaults: `empathic.db` here).
    pub fn locate(path: Option<&Path>) -> Option<PathBuf> {
        if let Some(p) = path {
            return Some(p.to_path_buf());
        }
        if let Some(v) = std::env::var_os(CONFIG_ENV) {
            return (!v.is_empty()).then(|| PathBuf::from(v));
        }
        let installed = Path::new(INSTALLED_CONFIG);
        installed.exists().then(|| installed.to_path_buf())
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
        if !self.sync.broker.is_empty() {
            broker_address(&self.sync.broker).map_err(|e| invalid("sync.broker", e))?;
        }
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
        within("live.app_grace_ms", self.live.app_grace_ms, 1_000, 600_000)?;
        // Up to one computation every 2 s at 15 fps: beyond that the body is stale.
        within("body.every", u64::from(self.body.every), 1, 30)?;
        within("live.max_lease_s", self.live.max_lease_s, 10, 86_400)?;
        // Days as seconds must not overflow (a huge value meaning "keep" once wrapped and
        // deleted two-day-old media); a century is "keep" enough, 0 is keep forever.
        within(
            "recording.retention_days",
            self.recording.retention_days,
            0,
            MAX_RETENTION_DAYS,
        )?;
        within(
            "asr.min_silence_ms",
            u64::from(self.asr.min_silence_ms),
            50,
            10_000,
        )?;
        within("asr.pad_ms", u64::from(self.asr.pad_ms), 0, 1_000)?;
        within("asr.pre_roll_ms", u64::from(self.asr.pre_roll_ms), 0, 2_000)?;
        within(
            "asr.max_utterance_ms",
            u64::from(self.asr.max_utterance_ms),
            1_000,
            30_000,
        )?;
        if self.asr.pad_ms >= self.asr.min_silence_ms {
            return Err(invalid(
                "asr.pad_ms",
                format!(
                    "must be less than asr.min_silence_ms ({}), got {}",
                    self.asr.min_silence_ms, self.asr.pad_ms
                ),
            ));
        }
        if !(self.asr.threshold > 0.0 && self.asr.threshold < 1.0) {
            return Err(invalid(
                "asr.threshold",
                format!("must be in (0, 1), got {}", self.asr.threshold),
            ));
        }
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
        if self.models.appearance_input == AppearanceInput::Face
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
            "collect.alert_interval_min",
            u64::from(self.collect.alert_interval_min),
            1,
            1_440,
        )?;
        within(
            "collect.health_sweep_s",
            u64::from(self.collect.health_sweep_s),
            1,
            86_400,
        )?;
        within(
            "study.bad_sessions_in_a_row",
            u64::from(self.study.bad_sessions_in_a_row),
            1,
            1_000,
        )?;
        within(
            "study.max_days_between_sessions",
            u64::from(self.study.max_days_between_sessions),
            1,
            366,
        )?;
        within(
            "sync.health_interval_min",
            u64::from(self.sync.health_interval_min),
            1,
            1_440,
        )?;
        within(
            "store.busy_timeout_ms",
            self.store.busy_timeout_ms,
            0,
            600_000,
        )?;
        within("store.max_db_mib", self.store.max_db_mib, 0, 1 << 30)?;
        within("fusion.retrieve_k", self.fusion.retrieve_k as u64, 0, 20)?;
        within(
            "fusion.explain_max_coalitions",
            self.fusion.explain_max_coalitions as u64,
            16,
            4096,
        )?;
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
                        crate::core::BUILTIN_PREDICTORS.join(", ")
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
            ("body", fields_of::<BodyConfig>()),
            ("privacy", fields_of::<PrivacyConfig>()),
            ("fusion", fields_of::<FusionConfig>()),
            ("report", fields_of::<ReportConfig>()),
            ("sync", fields_of::<SyncConfig>()),
            ("live", fields_of::<LiveConfig>()),
            ("recording", fields_of::<RecordingConfig>()),
            ("asr", fields_of::<AsrConfig>()),
            ("study", fields_of::<StudyConfig>()),
            ("collect", fields_of::<CollectConfig>()),
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
    fn collector_example_parses() {
        let config = parse(include_str!("../../firmware-config/collect.toml")).unwrap();
        assert_eq!(config.collect.alert_interval_min, 10);
        assert_eq!(config.study.max_days_between_sessions, 3);
    }

    #[test]
    fn station_example_parses() {
        let text = include_str!("../../firmware-config/station.toml");
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
    fn durations_that_would_overflow_are_refused() {
        let err = parse("[recording]\nretention_days = 213503982334602\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("recording.retention_days"), "{err}");
        assert!(parse("[recording]\nretention_days = 36500\n").is_ok());
        assert!(parse("[recording]\nretention_days = 0\n").is_ok());
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
