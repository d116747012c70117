//! One source-agnostic pipeline: the thread graph every run (replay or live) goes through.
//!
//! Contract: [`run`] takes the sources as trait objects ([`Sources`]: video, audio, session
//! events), the stages and their modality layout ([`Stages`]), where results go
//! ([`Sinks`]: the store writer and any extra window consumers) and how to run
//! ([`PipelineOptions`]: the video queue's overflow policy, pacing, progress). It runs the
//! graph below on named threads joined by bounded queues and returns when every thread has
//! ended, with the counts, the quality report and per-thread figures. It writes frames,
//! windows and events through the writer; opening and closing the session row is the
//! front end's job, through `runtime::sequence` (`replay` and `live`). The queues, starting
//! and joining the threads are `graph.rs`, the messages on the queues `messages.rs`, the
//! thread bodies `threads.rs` (and `text.rs`: the recogniser and the text stage), the window
//! consumers `consumers.rs`.
//!
//! ```text
//! video-capture -> video-features -> <stage>-features ... -> video-forward -+
//! audio-capture -> audio-features ----------------------------------------+-> align-windows
//!                       \-> speech-recognition -+                           |     |
//! session-events ----------------------------> text-features -------------+     |
//!        \-> (events to the store writer)         frames to the store writer <-+     |
//!                                    windows fan out: store-windows, <consumer>-windows
//! ```
//!
//! With the station's recogniser on (`runtime::transcripts`), `audio-features` hands a copy
//! of each block to `speech-recognition`, whose utterances `text-features` stores (with
//! `source: asr`, the robot's voice told apart by its own utterances) and embeds like the
//! dialogue app's. A replay's text is known up to where both the events and the
//! recogniser have got; a live run's, as for the dialogue app's transcripts, up to the
//! transcript wait behind now.
//!
//! A frame slot leaves the aligner when its audio is complete and the session events are
//! known up to its start; a window's phase is decided when it is emitted. End of stream is
//! a dropped sender, stop is a flag; on error a thread returns it and drops its queues, and
//! the run reports the first error in pipeline order that is not [`RunError::NextStopped`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::queues::Overflow;
use super::stages::Stages;
use super::RunError;
use crate::capture::events::EventSource;
use crate::capture::timeline::AudioTimelineStats;
use crate::capture::{AudioSource, VideoSource};
use crate::clock::{Clock, Pacer};
use crate::config::Config;
use crate::features::AudioStage;
use crate::report::{QualityInputs, QualityReport};
use crate::session::events::{phase_spans, PhaseSpan};
use crate::session::Event;
use crate::store::StoreWriter;
use crate::windows::align::AudioPool;
use crate::Nanos;

mod consumers;
mod failures;
mod figures;
mod graph;
mod messages;
mod observe;
mod shared;
mod text;
mod threads;

pub use consumers::{LatestSlot, PredictWindows, StoreWindows, WindowConsumer};
pub use failures::{StageFailure, StageFailures};
pub use figures::{LatencySummary, ThreadFigures};
use graph::{Queues, Work};
pub use observe::{message, tell_voice, FrameWatch, Observer, QualityWatch, Recorded, Topic};
use shared::Shared;

/// Slots the aligner may hold while waiting for audio or text before it stops taking video.
const MAX_PENDING_SLOTS: usize = 64;
/// Consecutive windows the fusion stage predicts in one model call at `--speed max`.
const FUSION_BATCH: usize = 16;

/// Where a run's data comes from.
pub struct Sources {
    pub video: Box<dyn VideoSource>,
    pub audio: Box<dyn AudioSource>,
    pub events: Box<dyn EventSource>,
}

/// How a run reports how far it got: the frames it stored, and their total when the
/// source declares one. The commands draw it (a progress bar on a terminal, `cli/`); the
/// runtime only counts.
pub trait Progress: Send + Sync {
    /// The number of frames the run will store, when known.
    fn set_total(&self, _frames: u64) {}
    /// `frames` more stored.
    fn advance(&self, _frames: u64) {}
    /// The run ended (whatever its outcome).
    fn finish(&self) {}
}

/// Reports nothing (live sessions, tests).
pub struct NoProgress;

impl Progress for NoProgress {}

/// Where a run's results go.
pub struct Sinks {
    pub writer: StoreWriter,
    /// Window consumers besides the store.
    pub window_consumers: Vec<Box<dyn WindowConsumer>>,
    /// Told what the run perceives as it goes (the live service's subscribers).
    pub observer: Option<Arc<dyn Observer>>,
    /// Given the latest window's representation by the fusion consumer (live `recommend`).
    pub latest_window: Option<LatestSlot>,
}

/// How to run.
pub struct PipelineOptions {
    /// What a full captured-video queue does: replay blocks, live drops the oldest.
    pub video_overflow: Overflow,
    pub pacer: Pacer,
    /// Advanced by one per stored frame.
    pub progress: std::sync::Arc<dyn Progress>,
    /// SCHED_FIFO priority asked for the capture threads (live; 0: normal priority).
    pub realtime_priority: u8,
    /// Live: how far behind the capture the event source may be known (the transcript
    /// wait, 0 included); `None` for a replay, whose events are all known. Live, frames
    /// never wait for the recogniser past it.
    pub live_events_lag_ns: Option<Nanos>,
    /// Where stages that fail mid-run are recorded (the run goes on without them); the
    /// front end keeps a clone to show them while the run goes on (`failures`).
    pub failures: Arc<StageFailures>,
    /// Live runs and replays of live recordings: the transcript wait, how far before the
    /// recogniser decided an utterance had ended its words reach into frames, so the live
    /// run and its replay store the same text (`text.rs`). `None`: whole utterances.
    pub words_reach_ns: Option<Nanos>,
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    pub frames: u64,
    pub windows: u64,
    pub duration_ns: Nanos,
    /// Stopped by the stop flag before the end of its input.
    pub stopped: bool,
    /// Inputs that ended on bad data after what they decoded (`(thread, error)`), which
    /// is kept: the session is then `incomplete` with the reason.
    pub cut_inputs: Vec<(String, String)>,
    /// The video ended this many seconds before the audio (a camera that stopped, a
    /// video cut short): the audio after it reached no frame and no window.
    pub video_short_by_secs: Option<f64>,
    pub quality: QualityReport,
    /// Every event of the session, time-sorted.
    pub events: Vec<Event>,
    pub threads: Vec<ThreadFigures>,
    /// Paced runs: how long frames took from capture to the store writer.
    pub latency: Option<LatencySummary>,
}

/// Runs the pipeline over `sources` until they end (or `stop` is set) and joins every thread.
pub fn run(
    stages: Stages,
    sources: Sources,
    sinks: Sinks,
    config: &Config,
    opts: PipelineOptions,
    clock: Arc<dyn Clock>,
    stop: &AtomicBool,
) -> Result<Outcome, RunError> {
    let Stages {
        video_signal,
        frame_stages,
        text,
        audio_signal,
        audio_stages,
        layout,
        period_ns,
        fusion,
        speech,
    } = stages;
    // The aligner pools each audio modality's rows per frame: the signal stage's first.
    let pools: Vec<AudioPool> = std::iter::once(AudioPool {
        modality: audio_signal.modality,
        pool: audio_signal.stage.pooling(),
    })
    .chain(audio_stages.iter().map(|s| AudioPool {
        modality: s.modality,
        pool: s.stage.pooling(),
    }))
    .collect();
    // Every window consumer, the store first. Adding one is one line here (or in `sinks`).
    let mut consumers: Vec<Box<dyn WindowConsumer>> =
        vec![Box::new(StoreWindows::new(sinks.writer.clone(), &layout))];
    if let Some(stage) = fusion {
        consumers.push(Box::new(
            PredictWindows::new(stage, sinks.writer.clone(), opts.pacer.speed)
                .with_observer(sinks.observer.clone())
                .with_latest(sinks.latest_window.clone()),
        ));
    }
    consumers.extend(sinks.window_consumers);
    let queues = Queues::new(
        config,
        opts.video_overflow,
        speech.is_some(),
        consumers.len(),
    );
    let work = Work {
        sources,
        video_signal,
        frame_stages,
        audio_signal,
        audio_stages,
        pools,
        text,
        speech,
        consumers,
    };
    opts.failures.tell(sinks.observer.clone());
    let stopped_early = AtomicBool::new(false);
    let cut = std::sync::Mutex::new(Vec::new());
    let figures = figures::Figures::default();
    let shared = Shared {
        config,
        clock: clock.as_ref(),
        pacer: &opts.pacer,
        realtime_priority: opts.realtime_priority,
        stop,
        stopped: &stopped_early,
        cut: &cut,
        figures: &figures,
        failures: &opts.failures,
        progress: opts.progress.as_ref(),
        observer: sinks.observer.as_deref(),
        writer: &sinks.writer,
        layout: &layout,
        period_ns,
        events_lag_ns: opts.live_events_lag_ns.unwrap_or(0),
        live_text: opts.live_events_lag_ns.is_some(),
        words_reach_ns: opts.words_reach_ns,
    };
    let joined =
        std::thread::scope(|scope| graph::join_all(graph::start(scope, work, queues, &shared)?));
    opts.progress.finish();
    let joined = joined?;

    let frame_slots = joined.align.frames;
    let stopped = stopped_early.load(Ordering::SeqCst);
    let (audio, duration_ns, video_short_by_secs) = stored_extent(&joined, period_ns, stopped);
    let spans: Vec<PhaseSpan> = phase_spans(&joined.events, duration_ns);
    let mut quality = QualityReport::build(QualityInputs {
        video: &joined.video.timeline,
        audio: &audio,
        video_signal: &joined.video.totals,
        audio_signal: &joined.audio.totals,
        frame_slots,
        frame_period_ns: period_ns,
        phases: &spans,
        video_queue_drops: joined.video_queue_drops,
        modality_presence: joined.presence,
    });
    quality.stage_failures = opts.failures.list();
    let threads = figures.0.into_inner().unwrap_or_default();
    figures::log_figures(&threads);
    Ok(Outcome {
        frames: joined.align.frames,
        windows: joined.align.windows,
        duration_ns,
        stopped,
        cut_inputs: cut.into_inner().unwrap_or_default(),
        video_short_by_secs,
        quality,
        events: joined.events,
        threads,
        latency: joined.align.latency,
    })
}

/// The video may end this long before the audio without a word (a camera's last frame
/// and a microphone's last block are a few frames apart); longer, the session's end had no
/// frames and no windows, and it is `incomplete` with the reason.
const VIDEO_SHORT_NS: Nanos = 2_000_000_000;

/// What reached the store decides the session's figures: the audio timeline as stored,
/// the duration, and by how much the video ended before the audio (when more than
/// [`VIDEO_SHORT_NS`]). A stopped run read its audio ahead of its frames: that audio
/// reached no frame, so it is not the session's (an interrupted replay stored 44 s of
/// frames and said 104 s).
fn stored_extent(
    joined: &graph::Joined,
    period_ns: f64,
    stopped: bool,
) -> (AudioTimelineStats, Nanos, Option<f64>) {
    let frame_slots = joined.align.frames;
    let video_end_ns = joined.video.timeline.first_t_ns.map_or(0, |first| {
        first + (frame_slots as f64 * period_ns).round() as Nanos
    });
    let mut audio = joined.audio.timeline.clone();
    if stopped && frame_slots > 0 {
        clip_audio(&mut audio, video_end_ns);
    }
    let audio_end_ns = audio.end_t_ns.unwrap_or(0);
    let short = (frame_slots > 0 && audio_end_ns > video_end_ns + VIDEO_SHORT_NS)
        .then(|| (audio_end_ns - video_end_ns) as f64 / 1e9);
    (audio, video_end_ns.max(audio_end_ns), short)
}

/// The audio timeline as far as `end_ns`: the blocks past it reached no frame.
fn clip_audio(audio: &mut AudioTimelineStats, end_ns: Nanos) {
    let (Some(first), Some(end)) = (audio.first_t_ns, audio.end_t_ns) else {
        return;
    };
    if end <= end_ns {
        return;
    }
    let kept_ns = end_ns.saturating_sub(first);
    let samples = (kept_ns as u128 * u128::from(audio.sample_rate_hz) / 1_000_000_000) as u64;
    audio.samples = audio.samples.min(samples);
    audio.end_t_ns = Some(first.max(end_ns));
}

/// The error of a thread whose downstream (`next`) stopped taking its output.
fn next_stopped(thread: &str, next: &str) -> RunError {
    RunError::NextStopped {
        thread: thread.into(),
        next: next.into(),
    }
}
