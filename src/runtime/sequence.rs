//! One session's sequence, the same for replay and live: set the stages up from what the
//! store knows, start the writer, begin the row, run, decide the status, close or fail.
//!
//! Contract: a front end ([`super::replay`], [`super::live`]) opens its sources and calls
//! [`prepare_session`], [`SessionWriter::start`], [`SessionWriter::begin`],
//! [`super::pipeline::run`], then [`SessionWriter::end`] with the run's result and, when
//! the run was stopped, why. `end` stores the session `complete`, `incomplete` with that
//! reason, or `failed` with the error; [`SessionWriter::record_failure`] retries, so a
//! lock held elsewhere or a disk that frees up does not leave the row `running`. A front
//! end never calls the store writer's begin, finish or fail itself.

use std::path::Path;

use super::pipeline::Outcome;
use super::stages::Stages;
use super::{RunError, WriterThread};
use crate::config::{Config, StoreConfig};
use crate::store::rows::{EndStatus, SessionEnd, SessionSource, SessionStart};
use crate::store::{Store, StoreWriter};
use crate::stories;

/// Tries to record a failure (each waits up to the store's busy timeout).
const FAILURE_ATTEMPTS: u64 = 3;

/// Sets up what a session's stages need from the store: the stories the bank offers while
/// the participant shares (leaving out those they saw before), and each predictor's
/// per-participant calibration from their earlier sessions only.
pub fn prepare_session(
    stages: &mut Stages,
    store: &Store,
    config: &Config,
    participant: Option<&str>,
    session_id: &str,
    start_time: Option<&str>,
) -> Result<(), RunError> {
    // The bank, read once: the zero-shot map is relative to it (fusion::zero_shot::BankRelative)
    // and retrieval draws from it.
    let bank = stages
        .fusion
        .is_some()
        .then(|| stories::load_index(store, &config.models.sentence_encoder));
    if let (Some(fusion), Some(Ok(index))) = (stages.fusion.as_mut(), &bank) {
        let (vectors, dims) = index.vectors();
        fusion.set_story_bank(vectors, dims);
    }
    if let Some(bank) = bank.filter(|_| config.fusion.retrieve_k > 0) {
        match bank {
            Ok(index) => {
                let seen = match participant {
                    Some(p) => store.stories_seen_before(p, session_id, start_time)?,
                    None => Vec::new(),
                };
                stages
                    .text
                    .stage
                    .set_retrieval(index, config.fusion.retrieve_k, seen);
            }
            Err(e) => tracing::info!("no retrieval while the participant shares: {e}"),
        }
    }
    if let (Some(fusion), Some(participant)) = (stages.fusion.as_mut(), participant) {
        for id in fusion.predictor_ids() {
            let pairs = store.calibration_pairs(participant, &id, session_id, start_time)?;
            if let Some(label) = fusion.calibrate(&id, &pairs) {
                tracing::info!(predictor = %id, participant = %participant, "calibrated on {} earlier rated stories ({label})", pairs.len());
            }
        }
    }
    Ok(())
}

/// How a session ended, as stored.
pub struct Ended {
    pub outcome: Outcome,
    pub status: EndStatus,
    pub reason: Option<String>,
}

/// The store writer of one front end's sessions, from its start to its close.
pub struct SessionWriter {
    thread: WriterThread,
    source: SessionSource,
    /// The participant and source path of the session being run, as far as known: a
    /// session that fails before its row is written keeps them.
    origin: std::sync::Mutex<(Option<String>, Option<String>)>,
}

/// Seconds of video or of audio a session must have captured to be `complete` (below it in
/// both: `incomplete`, with the reason).
pub const MIN_CAPTURE_SECS: f64 = 1.0;

impl SessionWriter {
    /// Starts the writer thread on the store at `db_path` (already opened and migrated).
    pub fn start(
        db_path: &Path,
        config: &StoreConfig,
        source: SessionSource,
    ) -> Result<Self, RunError> {
        Ok(Self {
            thread: WriterThread::spawn(db_path, config)?,
            source,
            origin: Default::default(),
        })
    }

    /// What is known of the session about to run (its participant, where it comes from),
    /// kept on its row if it fails before it begins.
    pub fn set_origin(&self, participant_id: Option<String>, source_path: Option<String>) {
        if let Ok(mut o) = self.origin.lock() {
            *o = (participant_id, source_path);
        }
    }

    /// The handle the pipeline's threads write through.
    pub fn writer(&self) -> Result<&StoreWriter, RunError> {
        Ok(self.thread.writer()?)
    }

    /// Writes the session's row (`running`, owned by this process; see
    /// `StoreWriter::begin` for who may take an id).
    pub fn begin(&self, start: SessionStart) -> Result<(), RunError> {
        Ok(self.writer()?.begin(start)?)
    }

    /// Marks session `id` failed with `reason`, retrying with a growing pause; a failure to
    /// do so is logged (the original error is what the user needs to see, and the caller
    /// returns it).
    pub fn record_failure(&self, id: &str, station_id: &str, reason: &str) {
        self.record(id, station_id, reason, false);
    }

    /// Records how session `id` ended after `run`'s error: a failure of the store itself
    /// (the disk or the database full, an I/O error) keeps what it committed before,
    /// `incomplete` with the reason; any other error fails the session.
    fn record_run_error(&self, id: &str, station_id: &str, error: &RunError) {
        match error {
            RunError::Store(e) => {
                let why = match e {
                    crate::store::StoreError::Poisoned { reason } => reason.clone(),
                    e => e.to_string(),
                };
                self.record(
                    id,
                    station_id,
                    &format!("the session database failed mid-session and capture stopped ({why})"),
                    true,
                )
            }
            e => self.record(id, station_id, &e.to_string(), false),
        }
    }

    fn record(&self, id: &str, station_id: &str, reason: &str, keep_stored: bool) {
        let mut last = None;
        let (participant_id, source_path) =
            self.origin.lock().map(|o| o.clone()).unwrap_or_default();
        for attempt in 0..FAILURE_ATTEMPTS {
            let failure = crate::store::writer::Failure {
                id: id.to_string(),
                station_id: station_id.to_string(),
                source: self.source,
                reason: reason.to_string(),
                participant_id: participant_id.clone(),
                source_path: source_path.clone(),
                keep_stored,
            };
            let result = self.writer().and_then(|w| Ok(w.fail(failure)?));
            match result {
                Ok(()) => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(200 * (attempt + 1)));
        }
        if let Some(e) = last {
            tracing::error!(session = id, "could not mark the session failed: {e}");
        }
    }

    /// Ends session `id` after its run: `failed` with the error when the run failed;
    /// otherwise its counts and quality report with `complete`, or `incomplete` with
    /// `stopped(outcome)` when that says why it stopped early; stages that failed during
    /// the run are added to the reason (the status stays what the capture earned). A close that cannot be
    /// written is recorded as the failure it is.
    pub fn end(
        &self,
        id: &str,
        station_id: &str,
        run: Result<Outcome, RunError>,
        stopped: impl FnOnce(&Outcome) -> Option<String>,
    ) -> Result<Ended, RunError> {
        let outcome = match run {
            Ok(o) => o,
            Err(e) => {
                self.record_run_error(id, station_id, &e);
                return Err(e);
            }
        };
        // Why the session holds less than its inputs: stopped, an input cut short, the
        // video ending early; each said, and the status is `incomplete`.
        let mut short: Vec<String> = stopped(&outcome).into_iter().collect();
        for (thread, error) in &outcome.cut_inputs {
            let what = if thread.starts_with("video") {
                "video"
            } else {
                "audio"
            };
            // What this stream kept, in its own seconds: the other stream may go on (a
            // trial read "253 frames, 28.0 s" of a video cut at 16.9 s, the audio's span).
            let kept = if what == "video" {
                format!(
                    "{} frames, {:.1} s of video",
                    outcome.frames, outcome.quality.video_duration_secs
                )
            } else {
                format!("{:.1} s of audio", outcome.quality.audio_duration_secs)
            };
            short.push(format!(
                "the {what} ends on bad data ({error}); everything before it is stored ({kept}; the session spans {:.1} s)",
                outcome.duration_ns as f64 / 1e9
            ));
        }
        if let Some(secs) = outcome.video_short_by_secs {
            short.push(format!(
                "the video ended {secs:.1} s before the audio, at {:.1} s: the session's last {secs:.1} s have no frames and no windows",
                outcome.quality.video_duration_secs
            ));
        }
        let stop_reason = (!short.is_empty()).then(|| short.join("; ")).or_else(|| {
            // A session that captured (almost) nothing is not `complete`: it would count
            // toward a participant's plan with nothing a study can use.
            let (v, a) = (
                outcome.quality.video_duration_secs,
                outcome.quality.audio_duration_secs,
            );
            (v < MIN_CAPTURE_SECS && a < MIN_CAPTURE_SECS).then(|| {
                format!(
                    "captured {v:.1} s of video and {a:.1} s of audio, under the {MIN_CAPTURE_SECS:.0} s a complete session needs of at least one"
                )
            })
        });
        let status = if stop_reason.is_some() {
            EndStatus::Incomplete
        } else {
            EndStatus::Complete
        };
        // A stage that failed mid-session cost only its own modality: the session keeps its
        // status, and its reason says what went missing from when (every listing shows it).
        let failed: Vec<String> = outcome
            .quality
            .stage_failures
            .iter()
            .map(|f| {
                format!(
                    "stage {} failed at {:.1} s and the session went on without it ({})",
                    f.stage,
                    f.at_ms as f64 / 1e3,
                    f.error
                )
            })
            .collect();
        let mut failed = failed;
        if let Some(first) = outcome.quality.skipped_events.first() {
            failed.push(format!(
                "{} bad line(s) of events.jsonl left out as asked (--skip-bad-events; the first, line {}: {})",
                outcome.quality.skipped_events.len(),
                first.line,
                first.reason
            ));
        }
        let reason = match (stop_reason, failed.is_empty()) {
            (r, true) => r,
            (None, false) => Some(failed.join("; ")),
            (Some(r), false) => Some(format!("{r}; {}", failed.join("; "))),
        };
        let closed = serde_json::to_string(&outcome.quality)
            .map_err(|e| RunError::Encode {
                what: "the quality report",
                message: e.to_string(),
            })
            .and_then(|quality_json| {
                Ok(self.writer()?.finish(SessionEnd {
                    status,
                    reason: reason.clone(),
                    frames: outcome.frames,
                    windows: outcome.windows,
                    duration_ns: outcome.duration_ns,
                    quality_json,
                })?)
            });
        if let Err(e) = closed {
            self.record_run_error(id, station_id, &e);
            return Err(e);
        }
        Ok(Ended {
            outcome,
            status,
            reason,
        })
    }

    /// Commits what is queued and joins the writer thread (every clone of the handle must
    /// be gone, as they are once the pipeline's threads have ended).
    pub fn close(self) -> Result<(), RunError> {
        self.thread.close()
    }
}
