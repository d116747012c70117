//! The station's own sections and its capture: `[station]`, `[video]`, `[audio]`,
//! `[runtime]`, `[live]` (the service and its control socket), `[recording]`.

use super::*;

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
            nominal_fps: crate::config::DEFAULT_FPS,
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
