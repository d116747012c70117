//! One source-agnostic pipeline: the thread graph every run (replay or live) goes through.
//!
//! Contract: [`run`] takes the sources as trait objects ([`Sources`]: video, audio, session
//! events), the stages and their modality layout ([`Stages`]), where results go
//! ([`Sinks`]: the store writer and any extra window consumers) and how to run
//! ([`PipelineOptions`]: the video queue's overflow policy, pacing, progress). It runs the
//! graph below on named threads joined by bounded queues and returns when every thread has
//! ended, with the counts, the quality report and per-thread figures. It writes frames,
//! windows and events through the writer; opening and closing the session row is the
//! front end's job, through `runtime::sequence` (`replay` and `live`). The thread bodies are
//! in `threads.rs`, the window consumers in `consumers.rs`.
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
use std::sync::{Arc, Mutex};
use std::thread::ScopedJoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{never, select};

use super::queues::{policy_queue, Overflow, PolicyReceiver, PolicySender};
use super::stages::{AudioStageSlot, FrameStageSlot, Stages};
use super::RunError;
use crate::capture::events::{EventBatch, EventSource};
use crate::capture::timeline::{
    AudioTimelineStats, SlotDecision, VideoTimeline, VideoTimelineStats,
};
use crate::capture::{AudioBlock, AudioSource, VideoFrame, VideoSource};
use crate::clock::{Clock, Pacer, Speed};
use crate::config::Config;
use crate::core::QualitySources;
use crate::core::StoryInPlay;
use crate::core::{FrameRecord, ModalityId, ModalityLayout, Window};
use crate::features::signal::{
    AudioSignalStage, AudioSignalTotals, EnergyTurns, VideoSignalStage, VideoSignalTotals,
    VoiceChange,
};
use crate::features::speech::stream::{Heard, SpeechStream};
use crate::features::text::{EmbeddedUtterance, TextStage, TextTrack};
use crate::features::{AudioRow, FrameContext, FrameStage};
use crate::report::{ModalityPresence, QualityInputs, QualityReport};
use crate::session::events::{phase_at, phase_spans, PhaseSpan};
use crate::session::{Event, EventKind};
use crate::store::rows::{PredictionRow, WindowRow};
use crate::store::StoreWriter;
use crate::windows::align::AudioPool;
use crate::windows::{FrameAligner, VideoSlot, WindowAssembler};
use crate::Nanos;

mod consumers;
mod failures;
mod figures;
mod observe;
mod text;
mod threads;

pub use consumers::{LatestSlot, PredictWindows, StoreWindows, WindowConsumer};
pub use failures::{StageFailure, StageFailures};
use figures::*;
pub use figures::{LatencySummary, ThreadFigures};
pub use observe::{message, tell_voice, FrameWatch, Observer, QualityWatch, Recorded, Topic};
use text::*;
use threads::*;

/// Slots the aligner may hold while waiting for audio or text before it stops taking video.
const MAX_PENDING_SLOTS: usize = 64;
/// Per-block audio stage output on its way to the aligner.
const AUDIO_OUT_QUEUE: usize = 64;
/// Video slots between frame-stage threads and on their way to the aligner.
const VIDEO_OUT_QUEUE: usize = 32;
/// Text updates on their way to the aligner, and event batches to the text stage.
const TEXT_QUEUE: usize = 64;
/// Windows waiting for each window consumer.
const WINDOW_QUEUE: usize = 16;
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
    pub quality: QualityReport,
    /// Every event of the session, time-sorted.
    pub events: Vec<Event>,
    pub threads: Vec<ThreadFigures>,
    /// Paced runs: how long frames took from capture to the store writer.
    pub latency: Option<LatencySummary>,
}

struct VideoFeaturesDone {
    timeline: VideoTimelineStats,
    totals: VideoSignalTotals,
}

struct AudioFeaturesDone {
    timeline: AudioTimelineStats,
    totals: AudioSignalTotals,
}

/// What the audio thread hands the aligner per block: rows per modality, and the audio
/// modalities whose stage failed with this block (no more rows will come for them).
struct AudioOut {
    rows: Vec<(ModalityId, Vec<AudioRow>)>,
    retired: Vec<ModalityId>,
}

struct AlignDone {
    frames: u64,
    windows: u64,
    latency: Option<LatencySummary>,
}

/// What the text stage tells the aligner: utterances embedded, phases entered, and how far
/// the session's events are known.
struct TextUpdate {
    utterances: Vec<EmbeddedUtterance>,
    stories: Vec<StoryInPlay>,
    retrievals: Vec<crate::features::text::RetrievalSet>,
    phases: Vec<PhaseSpan>,
    known_until_ns: Nanos,
}

/// A slot on its way through the frame-stage threads: the frame it was decoded from (none
/// for a dropped frame) and what earlier stages found on it.
struct PendingSlot {
    slot: VideoSlot,
    frame: Option<VideoFrame>,
    ctx: FrameContext,
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
    let Sources {
        video,
        audio,
        events,
    } = sources;
    let pools: Vec<AudioPool> = std::iter::once(AudioPool {
        modality: audio_signal.0,
        pool: crate::features::AudioStage::pooling(&audio_signal.1),
    })
    .chain(audio_stages.iter().map(|s| AudioPool {
        modality: s.modality,
        pool: s.stage.pooling(),
    }))
    .collect();
    let text_modality = text.0;
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
    let writer = &sinks.writer;
    let observer: Option<&dyn Observer> = sinks.observer.as_deref();
    // Perception messages are told where their data are first complete, never behind the
    // aligner's transcript wait: the face and brightness after the frame stages, clipping
    // from the audio rows.
    let frame_watch = observer.map(|o| (o, FrameWatch::new(&layout, 1e9 / period_ns)));
    let audio_watch = observer.map(|o| (o, QualityWatch::audio_only(&layout)));
    // The `voice` topic by the energy rule when the learned voice activity does not run.
    let energy_voice = observer
        .filter(|_| speech.is_none())
        .map(|o| (EnergyTurns::new(config.asr.min_silence_ms), o));

    let (frame_tx, frame_rx) =
        policy_queue::<VideoFrame>(config.runtime.video_queue_frames, opts.video_overflow);
    let (block_tx, block_rx) =
        policy_queue::<AudioBlock>(config.runtime.audio_queue_blocks, Overflow::Block);
    let (slot_tx, slot_rx) = policy_queue::<VideoSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
    let (pending_tx, pending_rx) = policy_queue::<PendingSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
    let (rows_tx, rows_rx) = policy_queue::<AudioOut>(AUDIO_OUT_QUEUE, Overflow::Block);
    let (batch_tx, batch_rx) = policy_queue::<EventBatch>(TEXT_QUEUE, Overflow::Block);
    let (text_tx, text_rx) = policy_queue::<TextUpdate>(TEXT_QUEUE, Overflow::Block);
    // The recogniser's copy of the audio, and what it heard.
    let (speech_tx, speech_rx) = match speech {
        Some(_) => {
            let (tx, rx) =
                policy_queue::<AudioBlock>(config.runtime.audio_queue_blocks, Overflow::Block);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let (heard_tx, heard_rx) = policy_queue::<Heard>(TEXT_QUEUE, Overflow::Block);
    let live_text = opts.live_events_lag_ns.is_some();
    let mut window_txs = Vec::new();
    let mut window_rxs = Vec::new();
    for c in consumers {
        let (tx, rx) = policy_queue::<Arc<Window>>(WINDOW_QUEUE, Overflow::Block);
        window_txs.push(tx);
        window_rxs.push((c, rx));
    }
    let stopped_early = AtomicBool::new(false);
    let figures = Figures::default();
    let pacer = opts.pacer;
    let progress = opts.progress.as_ref();
    let opts_events_lag_ns = opts.live_events_lag_ns.unwrap_or(0);
    let failures = opts.failures.clone();
    let opts_words_reach_ns = opts.words_reach_ns;
    failures.tell(sinks.observer.clone());
    let failures_ref: &StageFailures = &failures;

    let result = std::thread::scope(|scope| -> Result<_, RunError> {
        let (stopped, figures_ref, layout_ref) = (&stopped_early, &figures, &layout);
        let clock_ref: &dyn Clock = clock.as_ref();
        let cx = CaptureContext {
            pacer: &pacer,
            realtime_priority: opts.realtime_priority,
            clock: clock_ref,
            stop,
            stopped,
            figures: figures_ref,
        };
        let mut video = video;
        let video_capture = spawn(scope, "video-capture", move || {
            let next = || video.next_frame().map_err(RunError::from);
            capture("video-capture", next, |f: &VideoFrame| f.t_ns, frame_tx, cx)
        })?;
        let video_features = spawn(scope, "video-features", move || {
            video_features(
                frame_rx,
                pending_tx,
                video_signal,
                layout_ref,
                period_ns,
                figures_ref,
            )
        })?;
        // One thread per frame stage, chained: video-features -> face -> appearance ->
        // video-forward -> align (video-forward turns pending slots into aligner slots).
        let mut stage_threads = Vec::new();
        let mut input = pending_rx;
        for slot in frame_stages {
            let name = format!("{}-features", slot.stage.spec().name);
            let (tx, rx) = policy_queue::<PendingSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
            let from = std::mem::replace(&mut input, rx);
            let thread = name.clone();
            let handle = spawn(scope, &name, move || {
                frame_stage(&thread, slot, from, tx, figures_ref, failures_ref).map(Some)
            })?;
            stage_threads.push((name, handle));
        }
        let forward = spawn(scope, "video-forward", move || {
            forward_slots(input, slot_tx, frame_watch).map(|()| None)
        })?;
        stage_threads.push(("video-forward".into(), forward));
        let mut audio = audio;
        let audio_capture = spawn(scope, "audio-capture", move || {
            let next = || audio.next_block().map_err(RunError::from);
            capture("audio-capture", next, |b: &AudioBlock| b.t_ns, block_tx, cx)
        })?;
        let audio_features = spawn(scope, "audio-features", move || {
            audio_features(
                block_rx,
                rows_tx,
                speech_tx,
                audio_signal,
                audio_stages,
                AudioTells {
                    energy_voice,
                    quality: audio_watch,
                    failures: failures_ref,
                },
                figures_ref,
            )
        })?;
        let speech_thread = match (speech, speech_rx) {
            (Some(stream), Some(rx)) => Some(spawn(scope, "speech-recognition", move || {
                speech_recognition(rx, heard_tx, stream, observer, figures_ref, failures_ref)
            })?),
            _ => {
                drop(heard_tx);
                None
            }
        };
        let session_events = spawn(scope, "session-events", move || {
            session_events(events, batch_tx, writer, stop)
        })?;
        let hearing = speech_thread.is_some();
        let text_features = spawn(scope, "text-features", move || {
            text_features(
                TextInputs {
                    batches: batch_rx,
                    heard: hearing.then_some(heard_rx),
                    live: live_text,
                    speaker: &config.text.speaker,
                    latency_from: (pacer.speed == Speed::Realtime)
                        .then_some((clock_ref, pacer.start_clock_ns)),
                    observer,
                    failures: failures_ref,
                    words_reach_ns: opts_words_reach_ns,
                },
                text_tx,
                text.1,
                writer,
                figures_ref,
            )
        })?;
        let mut consumer_threads = Vec::new();
        for (consumer, rx) in window_rxs {
            let name = consumer.thread_name();
            let thread = name.clone();
            let handle = spawn(scope, &name, move || {
                consume_windows(&thread, consumer, rx, figures_ref, failures_ref)
            })?;
            consumer_threads.push((name, handle));
        }
        let align = spawn(scope, "align-windows", move || {
            let track = TextTrack::new(config.text.horizon_ms.saturating_mul(1_000_000));
            let aligner = FrameAligner::new(pools, Some((text_modality, track)));
            align_windows(
                AlignInputs {
                    // Live events are known only `events_lag_ns` behind now: hold that
                    // many slots on top, so waiting for them never stalls the camera.
                    max_pending: MAX_PENDING_SLOTS
                        + (opts_events_lag_ns as f64 / period_ns).ceil() as usize,
                    slots: slot_rx,
                    rows: rows_rx,
                    text: text_rx,
                },
                aligner,
                &config.windows,
                period_ns,
                writer,
                window_txs,
                progress,
                figures_ref,
                (pacer.speed == Speed::Realtime).then_some((clock_ref, pacer.start_clock_ns)),
            )
        })?;
        // Join everything before looking at errors, so no thread outlives the run. The
        // first error in pipeline order is the cause; later ones are its consequences.
        let video_capture = join(video_capture, "video-capture");
        let audio_capture = join(audio_capture, "audio-capture");
        let session_events = join(session_events, "session-events");
        let video_features = join(video_features, "video-features");
        let stages: Vec<Result<Option<ModalityPresence>, RunError>> = stage_threads
            .into_iter()
            .map(|(name, h)| join(h, &name))
            .collect();
        let audio_features = join(audio_features, "audio-features");
        let speech = speech_thread.map(|h| join(h, "speech-recognition"));
        let text_features = join(text_features, "text-features");
        let align = join(align, "align-windows");
        let consumed: Vec<Result<(), RunError>> = consumer_threads
            .into_iter()
            .map(|(name, h)| join(h, &name))
            .collect();
        let mut errors: Vec<RunError> = Vec::new();
        let video_drops = video_capture.map_err(|e| errors.push(e)).ok();
        let _ = audio_capture.map_err(|e| errors.push(e));
        let events = session_events.map_err(|e| errors.push(e)).ok();
        let video_features = video_features.map_err(|e| errors.push(e)).ok();
        let mut presence = Vec::new();
        for r in stages {
            match r {
                Ok(p) => presence.extend(p),
                Err(e) => errors.push(e),
            }
        }
        let audio_features = audio_features.map_err(|e| errors.push(e)).ok();
        if let Some(Err(e)) = speech {
            errors.push(e);
        }
        let heard_events = text_features.map_err(|e| errors.push(e)).ok();
        let align = align.map_err(|e| errors.push(e)).ok();
        for r in consumed {
            let _ = r.map_err(|e| errors.push(e));
        }
        if let (Some(d), Some(mut ev), Some(heard), Some(v), Some(a), Some(w)) = (
            video_drops,
            events,
            heard_events,
            video_features,
            audio_features,
            align,
        ) {
            if errors.is_empty() {
                // The recogniser's utterances among the session's events, in time order.
                ev.extend(heard);
                ev.sort_by_key(|e| e.t_ns);
                return Ok((d, ev, v, a, w, presence));
            }
        }
        // A thread whose downstream stopped reports only that: prefer the downstream
        // thread's own error, which is the cause.
        let cause = errors
            .iter()
            .position(|e| !matches!(e, RunError::NextStopped { .. }))
            .unwrap_or(0);
        Err(errors.swap_remove(cause))
    });
    progress.finish();
    let (video_queue_drops, events, video_done, audio_done, align_done, modality_presence) =
        result?;

    let frame_slots = align_done.frames;
    let video_end_ns = video_done.timeline.first_t_ns.map_or(0, |first| {
        first + (frame_slots as f64 * period_ns).round() as Nanos
    });
    let duration_ns = video_end_ns.max(audio_done.timeline.end_t_ns.unwrap_or(0));
    let spans: Vec<PhaseSpan> = phase_spans(&events, duration_ns);
    let mut quality = QualityReport::build(QualityInputs {
        video: &video_done.timeline,
        audio: &audio_done.timeline,
        video_signal: &video_done.totals,
        audio_signal: &audio_done.totals,
        frame_slots,
        frame_period_ns: period_ns,
        phases: &spans,
        video_queue_drops,
        modality_presence,
    });
    quality.stage_failures = failures.list();
    let threads = figures.0.into_inner().unwrap_or_default();
    log_figures(&threads);
    Ok(Outcome {
        frames: align_done.frames,
        windows: align_done.windows,
        duration_ns,
        stopped: stopped_early.load(Ordering::SeqCst),
        quality,
        events,
        threads,
        latency: align_done.latency,
    })
}

fn spawn<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &str,
    f: impl FnOnce() -> Result<T, RunError> + Send + 'scope,
) -> Result<ScopedJoinHandle<'scope, Result<T, RunError>>, RunError> {
    let span_name = name.to_string();
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, move || {
            // Every event of the thread carries its name (journald shows which stage).
            let _span = tracing::info_span!("thread", name = %span_name).entered();
            let out = f();
            if let Err(e) = &out {
                if !matches!(e, RunError::NextStopped { .. }) {
                    tracing::error!("{e}");
                }
            }
            out
        })
        .map_err(|e| RunError::Thread {
            thread: name.into(),
            message: format!("cannot start: {e}"),
        })
}

fn join<T>(handle: ScopedJoinHandle<'_, Result<T, RunError>>, name: &str) -> Result<T, RunError> {
    handle.join().unwrap_or_else(|_| {
        Err(RunError::Thread {
            thread: name.into(),
            message: "panicked".into(),
        })
    })
}

fn next_stopped(thread: &str, next: &str) -> RunError {
    RunError::NextStopped {
        thread: thread.into(),
        next: next.into(),
    }
}
