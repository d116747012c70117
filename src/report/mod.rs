//! The session quality report, the one-screen summary at the end of a run, and the HTML
//! pages of `empathic report` (`page`, drawn by `plots`, judged by `verdict`).
//!
//! Contract: [`QualityReport`] is computed once at the end of a run from the timeline
//! counters and the signal stages' totals, stored as JSON in `sessions.quality_json`
//! (field names are part of the store format), and shown by `replay`, `sessions show` and
//! `sessions list --json`. Signed offsets are audio minus video.

pub mod page;
pub mod plot_data;
pub mod plots;
pub mod study;
pub mod verdict;
pub mod why;

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::capture::timeline::{AudioTimelineStats, VideoTimelineStats};
use crate::core::Phase;
use crate::features::signal::{AudioSignalTotals, VideoSignalTotals};
use crate::session::events::PhaseSpan;
use crate::Nanos;

/// Time spent in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    pub phase: String,
    pub secs: f64,
}

/// On how many decoded frames a frame stage's modality was present (a face found, say).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModalityPresence {
    pub modality: String,
    pub present_frames: u64,
    pub decoded_frames: u64,
}

/// What went right and wrong with a session's media.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QualityReport {
    pub video: VideoTimelineStats,
    pub audio: AudioTimelineStats,
    /// Frame slots on the nominal grid times the frame period.
    pub video_duration_secs: f64,
    pub audio_duration_secs: f64,
    /// First audio sample minus first video frame, on the session timeline.
    pub av_offset_ms: f64,
    /// Audio duration minus video duration.
    pub av_duration_mismatch_ms: f64,
    /// Clipped samples over all samples.
    pub audio_clipping_ratio: f64,
    /// 10 ms audio rows without voice activity, over all rows.
    pub silence_ratio: f64,
    pub mean_brightness: f64,
    pub mean_sharpness: f64,
    /// Frames the live video queues evicted: camera buffers before decoding (and
    /// undecodable ones) plus decoded frames before the stages (always 0 in replay).
    pub video_queue_drops: u64,
    pub phases: Vec<PhaseTime>,
    /// Presence of the frame stages' modalities (face, appearance). Absent in reports
    /// stored before the facial stage existed.
    #[serde(default)]
    pub modality_presence: Vec<ModalityPresence>,
    /// Stages that failed during the session; it went on without them from `at_ms`
    /// (`runtime::pipeline::StageFailures`). Absent in reports stored before issue 42.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stage_failures: Vec<StageFailure>,
    /// Lines of `events.jsonl` a replay left out as bad (`replay --skip-bad-events`), each
    /// with why. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_events: Vec<crate::session::events::SkippedLine>,
    /// What the bystander screen found (`[privacy] bystanders = "mask"`): present whenever
    /// the frames were screened, with zero counts when it saw no one else; absent when they
    /// were not (`"keep"`), and in reports stored before issue 58 or, for sessions where it
    /// saw no one, before 2026-11-30.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bystanders: Option<BystanderCounts>,
}

/// Bystanders in a session's frames, as the screen counted them (docs/station.md,
/// "Bystanders").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BystanderCounts {
    pub screened_frames: u64,
    /// Frames with a face other than the participant's, and their time.
    pub frames_with_bystanders: u64,
    pub bystander_secs: f64,
    /// Frames where a region was masked (a bystander, or one seen in the last frames).
    pub frames_masked: u64,
    /// Screened frames where the participant's face was not found.
    pub frames_without_participant: u64,
}

/// One stage that failed during a session, as stored in its quality report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageFailure {
    /// The stage: its modality (`face`, `appearance`, `speech_activity`, `text`) or its
    /// thread (`speech-recognition`, `fusion-windows`).
    pub stage: String,
    /// Session time of the data it failed on (milliseconds from the session's start).
    pub at_ms: u64,
    /// The error, as the stage gave it.
    pub error: String,
}

/// Inputs of [`QualityReport::build`].
pub struct QualityInputs<'a> {
    pub video: &'a VideoTimelineStats,
    pub audio: &'a AudioTimelineStats,
    pub video_signal: &'a VideoSignalTotals,
    pub audio_signal: &'a AudioSignalTotals,
    /// Slots on the frame grid (decoded plus missing frames).
    pub frame_slots: u64,
    pub frame_period_ns: f64,
    pub phases: &'a [PhaseSpan],
    pub modality_presence: Vec<ModalityPresence>,
    pub video_queue_drops: u64,
}

impl QualityReport {
    pub fn build(i: QualityInputs<'_>) -> Self {
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let video_duration_secs = i.frame_slots as f64 * i.frame_period_ns / 1e9;
        let audio_duration_secs = if i.audio.sample_rate_hz == 0 {
            0.0
        } else {
            i.audio.samples as f64 / f64::from(i.audio.sample_rate_hz)
        };
        let av_offset_ms = match (i.audio.first_t_ns, i.video.first_t_ns) {
            (Some(a), Some(v)) => (a as f64 - v as f64) / 1e6,
            _ => 0.0,
        };
        let phases = Phase::ALL
            .iter()
            .filter_map(|&p| {
                let ns: Nanos = i
                    .phases
                    .iter()
                    .filter(|s| s.phase == p)
                    .map(|s| s.end_ns.saturating_sub(s.start_ns))
                    .sum();
                i.phases.iter().any(|s| s.phase == p).then(|| PhaseTime {
                    phase: p.as_str().to_string(),
                    secs: ns as f64 / 1e9,
                })
            })
            .collect();
        let frames = i.video_signal.frames.max(1) as f64;
        QualityReport {
            video: i.video.clone(),
            audio: i.audio.clone(),
            video_duration_secs,
            audio_duration_secs,
            av_offset_ms,
            av_duration_mismatch_ms: (audio_duration_secs - video_duration_secs) * 1e3,
            audio_clipping_ratio: ratio(i.audio_signal.clipped_samples, i.audio_signal.samples),
            silence_ratio: 1.0 - ratio(i.audio_signal.voiced_rows, i.audio_signal.rows),
            mean_brightness: i.video_signal.brightness_sum / frames,
            mean_sharpness: i.video_signal.sharpness_sum / frames,
            video_queue_drops: i.video_queue_drops,
            phases,
            modality_presence: i.modality_presence,
            stage_failures: Vec::new(),
            skipped_events: Vec::new(),
            bystanders: (i.video_signal.screened_frames > 0).then(|| {
                let t = i.video_signal;
                BystanderCounts {
                    screened_frames: t.screened_frames,
                    frames_with_bystanders: t.frames_with_bystanders,
                    bystander_secs: t.frames_with_bystanders as f64 * i.frame_period_ns / 1e9,
                    frames_masked: t.frames_masked,
                    frames_without_participant: t.frames_without_participant,
                }
            }),
        }
    }
}

/// What `empathic replay` prints at the end.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySummary {
    pub session_id: String,
    pub status: String,
    pub status_reason: Option<String>,
    /// A `--replace` run that did not finish and left the complete stored session as it
    /// was: says so (this run was not stored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// An input ended on bad data part of the way (what decoded before it is stored).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub input_cut: bool,
    pub db_path: String,
    pub frames: u64,
    pub windows: u64,
    pub duration_secs: f64,
    /// Wall time of the whole replay, set-up included.
    pub elapsed_secs: f64,
    /// Of it, the set-up before the sources open: the store, the session folder and every
    /// model. A fixed cost per session (docs/performance.md gives the measured figures):
    /// it weighs on a 30 s clip's replay, not on an hour-long session's.
    pub setup_secs: f64,
    pub speed: String,
    pub quality: QualityReport,
    /// Session-level predicted empathy toward each story, beside the self-ratings.
    pub predictions: Vec<crate::store::StoryPrediction>,
    /// The store has no story bank (nothing was retrieved while the participant shared,
    /// and only stories the session's events showed were predicted toward), or one too
    /// small for the zero-shot map (`text-zero-shot` scored on its absolute map). Says so
    /// with the command that imports one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_story_bank: Option<String>,
}

/// The overall verdict ([`verdict::overall`]: the worst row, at least `check` for a session
/// not stored complete) and every row not good ("bad: sharpness 12.0 (bad)"), as the
/// replay summary and `sessions show` print it.
pub fn verdict_line(q: &QualityReport, status: &str, stored_secs: f64) -> String {
    let rows = verdict::quality_rows(q);
    let (worst, _) = verdict::overall(&rows, status, stored_secs);
    let mut flagged: Vec<String> = verdict::unfinished(status, stored_secs)
        .into_iter()
        .collect();
    flagged.extend(
        rows.iter()
            .filter(|r| r.verdict != verdict::Verdict::Good)
            .map(|r| format!("{} {} ({})", r.measure, r.value, r.verdict.class())),
    );
    if flagged.is_empty() {
        worst.class().to_string()
    } else {
        format!("{}: {}", worst.class(), flagged.join("; "))
    }
}

/// The predictions section shared by the replay summary and `sessions show`.
pub fn render_predictions(s: &mut String, predictions: &[crate::store::StoryPrediction]) {
    if predictions.is_empty() {
        let _ = writeln!(
            s,
            "empathy   no predictions (no window of the configured phases had a story in play and the participant's words)"
        );
        return;
    }
    let mut last: Option<(&str, bool)> = None;
    for p in predictions {
        if last != Some((p.predictor.as_str(), p.retrieved)) {
            let _ = writeln!(
                s,
                "empathy   predicted by {} [{}] (1-5, mean over {}){}:",
                p.predictor,
                crate::fusion::calibration_label(&p.predictor, &p.calibration, p.synthetic),
                if p.retrieved {
                    "windows while the participant shared, toward the stories retrieved for it"
                } else {
                    "windows after the story was shown"
                },
                if p.retrieved { "" } else { " vs self-rating" }
            );
            last = Some((p.predictor.as_str(), p.retrieved));
        }
        let _ = writeln!(
            s,
            "          {:<16} {:<34} predicted {:.2} (cosine {:+.3}, {} window{})   rated {}",
            p.story_id,
            format!("\"{}\"", p.title.as_deref().unwrap_or("?")),
            p.score,
            p.raw_cosine,
            p.windows,
            if p.windows == 1 { "" } else { "s" },
            p.rating.map_or("-".into(), |r| r.to_string())
        );
    }
}

impl ReplaySummary {
    /// The one-screen text summary.
    pub fn render(&self) -> String {
        let q = &self.quality;
        let mut s = String::new();
        let _ = writeln!(s, "session   {}  ({})", self.session_id, self.status);
        if let Some(r) = &self.status_reason {
            let _ = writeln!(s, "          {r}");
        }
        if let Some(k) = &self.kept {
            let _ = writeln!(s, "          {k}");
        }
        let _ = writeln!(s, "stored in {}", self.db_path);
        let _ = writeln!(
            s,
            "duration  {:.2} s of media in {:.2} s ({:.1}x real time, --speed {}; set-up {:.2} s of it)",
            self.duration_secs,
            self.elapsed_secs,
            if self.elapsed_secs > 0.0 {
                self.duration_secs / self.elapsed_secs
            } else {
                0.0
            },
            self.speed,
            self.setup_secs
        );
        let _ = writeln!(
            s,
            "frames    {} slots, {} decoded; missing {} in {} gap(s), duplicated {}, repeated {}",
            self.frames,
            q.video.frames_decoded,
            q.video.missing_frames,
            q.video.gaps,
            q.video.duplicated_frames,
            q.video.repeated_frames
        );
        let _ = writeln!(s, "windows   {}", self.windows);
        if q.audio_duration_secs > 0.0 {
            let _ = writeln!(
                s,
                "a/v       offset {:+.1} ms, audio minus video duration {:+.1} ms",
                q.av_offset_ms, q.av_duration_mismatch_ms
            );
            let _ = writeln!(
                s,
                "audio     {:.2} s, clipping {:.4} %, silence {:.1} %, {} discontinuities",
                q.audio_duration_secs,
                q.audio_clipping_ratio * 100.0,
                q.silence_ratio * 100.0,
                q.audio.discontinuities
            );
        } else {
            let _ = writeln!(
                s,
                "audio     none captured (no audio stored for this session)"
            );
        }
        let _ = writeln!(
            s,
            "video     brightness {:.2}, sharpness {:.1}",
            q.mean_brightness, q.mean_sharpness
        );
        for m in &q.modality_presence {
            let _ = writeln!(
                s,
                "{:<9} present on {}/{} decoded frames ({:.1} %)",
                m.modality,
                m.present_frames,
                m.decoded_frames,
                100.0 * m.present_frames as f64 / m.decoded_frames.max(1) as f64
            );
        }
        if let Some(b) = q
            .bystanders
            .as_ref()
            .filter(|b| b.frames_with_bystanders > 0)
        {
            let _ = writeln!(
                s,
                "bystanders in view on {} of {} screened frames ({:.1} s), masked on {}; participant not found on {}",
                b.frames_with_bystanders,
                b.screened_frames,
                b.bystander_secs,
                b.frames_masked,
                b.frames_without_participant
            );
        }
        if q.phases.is_empty() {
            let _ = writeln!(s, "phases    none (no phase events)");
        } else {
            let list: Vec<String> = q
                .phases
                .iter()
                .map(|p| format!("{} {:.1} s", p.phase, p.secs))
                .collect();
            let _ = writeln!(s, "phases    {}", list.join(", "));
        }
        let _ = writeln!(
            s,
            "verdict   {}",
            verdict_line(q, &self.status, self.duration_secs)
        );
        if let Some(why) = &self.no_story_bank {
            let _ = writeln!(s, "stories   {why}");
        }
        match (&self.no_story_bank, self.predictions.is_empty()) {
            (Some(_), true) => {
                let _ = writeln!(
                    s,
                    "empathy   no predictions: no story was shown while frames were stored, and none was retrieved"
                );
            }
            _ => render_predictions(&mut s, &self.predictions),
        }
        s
    }
}

/// The text table of `empathic sessions list`.
pub fn render_session_list(sessions: &[crate::store::SessionSummary]) -> String {
    if sessions.is_empty() {
        return "no sessions stored\n".into();
    }
    // Columns as wide as their longest value (a live id is 29 characters).
    let width = |f: &dyn Fn(&crate::store::SessionSummary) -> usize, header: &str| {
        sessions.iter().map(f).max().unwrap_or(0).max(header.len())
    };
    let wi = width(&|x| x.id.chars().count(), "id");
    let ws = width(&|x| x.station_id.chars().count(), "station");
    let wp = width(
        &|x| x.participant_id.as_deref().map_or(1, |p| p.chars().count()),
        "participant",
    );
    let mut s = format!(
        "{:<wi$} {:<ws$} {:<wp$} {:<10} {:>7} {:>7} {:>9} {:>8} {:>8}  {}\n",
        "id",
        "station",
        "participant",
        "status",
        "frames",
        "windows",
        "duration",
        "clip %",
        "silence",
        "created"
    );
    for x in sessions {
        let figure = |name: &str| {
            x.quality
                .as_ref()
                .and_then(|q| q.get(name))
                .and_then(serde_json::Value::as_f64)
        };
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}", v * 100.0));
        let _ = writeln!(
            s,
            "{:<wi$} {:<ws$} {:<wp$} {:<10} {:>7} {:>7} {:>8.1}s {:>8} {:>8}  {}",
            x.id,
            x.station_id,
            x.participant_id.as_deref().unwrap_or("-"),
            x.status,
            x.frames,
            x.windows,
            x.duration_secs,
            pct(figure("audio_clipping_ratio")),
            pct(figure("silence_ratio")),
            x.created_at
        );
    }
    s
}

/// One line on what a central database holds of a session: what its record carried and
/// what never leaves the station.
pub fn synced_summary(c: &crate::config::SyncContent) -> String {
    let mut carried =
        vec!["session, phases, stories, ratings, surveys, windows, predictions".to_string()];
    let mut not = vec!["the raw event log".to_string()];
    for (on, what, switch) in [
        (c.window_features, "window features", "window_features"),
        (c.transcripts, "utterances", "transcripts"),
        (c.frame_features, "per-frame features", "frame_features"),
    ] {
        if on {
            carried.push(what.into());
        } else {
            not.push(format!("{what} (`[sync] {switch} = false` on the station)"));
        }
    }
    format!(
        "a central database: the station's record carried {}; not synced here: {}; raw media never leave the station",
        carried.join(", "),
        not.join(", ")
    )
}

/// The text form of `empathic sessions show`.
pub fn render_session_detail(d: &crate::store::SessionDetail) -> String {
    let x = &d.summary;
    let mut s = String::new();
    let _ = writeln!(s, "session      {}", x.id);
    let _ = writeln!(
        s,
        "status       {}{}",
        x.status,
        x.status_reason
            .as_ref()
            .map_or(String::new(), |r| format!(": {r}"))
    );
    let _ = writeln!(s, "station      {}", x.station_id);
    let _ = writeln!(
        s,
        "participant  {}",
        x.participant_id.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        s,
        "source       {}{}",
        x.source,
        x.source_path
            .as_deref()
            .map_or(String::new(), |p| format!(" {p}"))
    );
    let _ = writeln!(
        s,
        "created      {} (updated {})",
        x.created_at, x.updated_at
    );
    match &d.synced_content {
        None => {
            let _ = writeln!(
                s,
                "content      {} frames, {} windows, {:.2} s, {} events, {} utterances",
                x.frames, x.windows, x.duration_secs, d.events, d.utterances
            );
        }
        Some(c) => {
            let _ = writeln!(s, "synced       {}", synced_summary(c));
            let _ = writeln!(
                s,
                "content      {} frames, {} windows, {:.2} s, events not synced here, {}",
                x.frames,
                x.windows,
                x.duration_secs,
                if c.transcripts {
                    format!("{} utterances", d.utterances)
                } else {
                    "utterances not synced here".into()
                }
            );
        }
    }
    for m in &d.modalities {
        let presence = match &d.synced_content {
            Some(c) if !c.frame_features => "per-frame values not synced here".to_string(),
            _ => format!("present on {} of {} frames", m.present_frames, x.frames),
        };
        let _ = writeln!(
            s,
            "modality     {} ({}, {} dims): {presence}",
            m.name, m.stream, m.dims
        );
    }
    for p in &d.phases {
        let _ = writeln!(
            s,
            "phase        {:<14} {:>7.1} s .. {}",
            p.phase,
            p.start_secs,
            p.end_secs.map_or("-".into(), |e| format!("{e:.1} s"))
        );
    }
    for st in &d.stories {
        // An interrupted replay stores every event of its recording, stories shown after
        // the point where it stopped included: say so beside them.
        let past = if st.shown_secs > x.duration_secs {
            format!(" (after the {:.1} s stored)", x.duration_secs)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "story {}      {} \"{}\" shown at {:.1} s{past}, rated {}",
            st.position,
            st.story_id,
            st.title,
            st.shown_secs,
            st.rating.map_or("-".into(), |r| r.to_string())
        );
    }
    render_predictions(&mut s, &d.predictions);
    if let Some(q) = &x.quality {
        if let Ok(q) = serde_json::from_value::<QualityReport>(q.clone()) {
            let _ = writeln!(
                s,
                "verdict      {}",
                verdict_line(&q, &x.status, x.duration_secs)
            );
            let _ = writeln!(
                s,
                "quality      missing {} / duplicated {} / repeated {} frames; a/v offset {:+.1} ms, mismatch {:+.1} ms; clipping {:.4} %, silence {:.1} %",
                q.video.missing_frames,
                q.video.duplicated_frames,
                q.video.repeated_frames,
                q.av_offset_ms,
                q.av_duration_mismatch_ms,
                q.audio_clipping_ratio * 100.0,
                q.silence_ratio * 100.0
            );
        }
    } else if x.status == "running" {
        let _ = writeln!(
            s,
            "quality      not yet measured: the session is running, or its process was killed (the service's next start stores what it kept)"
        );
    } else {
        let _ = writeln!(
            s,
            "quality      not measured (the session ended before its quality report was made)"
        );
    }
    s
}
