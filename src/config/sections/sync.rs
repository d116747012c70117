//! Where sessions go: `[store]`, `[sync]`, `[study]`, `[collect]` and `[report]`.

use super::*;

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
