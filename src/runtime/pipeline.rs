//! One source-agnostic pipeline: the thread graph every run (replay or live) goes through.
//!
//! Contract: [`run`] takes the sources as trait objects ([`Sources`]: video, audio, session
//! events), the stages and their modality layout ([`Stages`]), where results go
//! ([`Sinks`]: the store writer and any extra window consumers) and how to run
//! ([`PipelineOptions`]: the video queue's overflow policy, pacing, progress). It runs the
//! graph below on named threads joined by bounded queues and returns when every thread has
//! ended, with the counts, the quality report and per-thread figures. It writes frames,
//! windows and events through the writer; opening and closing the session row is the
//! front end's job (`replay`, later `live`).
//!
//! ```text
//! video-capture -> video-features -> <stage>-features ... -> video-forward -+
//! audio-capture -> audio-features ----------------------------------------+-> align-windows
//! session-events -> text-features -----------------------------------------+     |
//!        \-> (events to the store writer)         frames to the store writer <-+     |
//!                                    windows fan out: store-windows, <consumer>-windows
//! ```
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
use crate::features::signal::{
    AudioSignalStage, AudioSignalTotals, VideoSignalStage, VideoSignalTotals,
};
use crate::features::text::{EmbeddedUtterance, TextStage, TextTrack};
use crate::features::{AudioRow, FrameContext, FrameStage};
use crate::report::{ModalityPresence, QualityInputs, QualityReport};
use crate::session::events::{phase_at, phase_spans, PhaseSpan};
use crate::session::{Event, EventKind};
use crate::store::rows::{PredictionRow, WindowRow};
use crate::store::StoreWriter;
use crate::windows::align::AudioPool;
use crate::windows::quality::QualitySources;
use crate::windows::StoryInPlay;
use crate::windows::{
    FrameAligner, FrameRecord, ModalityId, ModalityLayout, VideoSlot, Window, WindowAssembler,
};
use crate::Nanos;

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

/// A consumer of every emitted window, on its own thread behind a bounded queue (the store
/// and the fusion stage are two).
///
/// Windows come in emission order; `finish` is called once after the last one (end of
/// stream or stop), so a consumer that holds windows back can flush them.
pub trait WindowConsumer: Send {
    /// The thread's name, e.g. `store-windows`.
    fn thread_name(&self) -> String;
    fn consume(&mut self, window: &Window) -> Result<(), RunError>;
    fn finish(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

/// The fusion stage as a window consumer (`fusion-windows`): predictions for every window
/// go to the store writer.
///
/// Batching: at `--speed max` windows are predicted in blocks of [`FUSION_BATCH`]
/// consecutive windows (one model call per predictor and block; the last block may be
/// shorter), paced runs one window at a time (no added latency). Blocks are fixed by window
/// order, not by timing, so two runs at one speed store identical predictions: ONNX
/// Runtime's result for a window can differ in the last bits with the batch it is in
/// (measured below 1e-6), so batching by what happens to be queued would not.
pub struct PredictWindows {
    stage: crate::fusion::FusionStage,
    writer: StoreWriter,
    block: usize,
    held: Vec<Window>,
}

impl PredictWindows {
    pub fn new(stage: crate::fusion::FusionStage, writer: StoreWriter, speed: Speed) -> Self {
        let block = match speed {
            Speed::Max => FUSION_BATCH,
            Speed::Realtime => 1,
        };
        Self {
            stage,
            writer,
            block,
            held: Vec::with_capacity(block),
        }
    }

    fn flush(&mut self) -> Result<(), RunError> {
        if self.held.is_empty() {
            return Ok(());
        }
        let refs: Vec<&Window> = self.held.iter().collect();
        let rows: Vec<PredictionRow> = self
            .stage
            .predict_batch(&refs)
            .into_iter()
            .map(stored_prediction)
            .collect();
        tracing::trace!(
            windows = refs.len(),
            predictions = rows.len(),
            "windows predicted"
        );
        self.held.clear();
        Ok(self.writer.predictions(rows)?)
    }
}

/// A prediction in its stored form.
fn stored_prediction(p: crate::fusion::Prediction) -> PredictionRow {
    PredictionRow {
        window_index: p.window_index,
        predictor: p.predictor,
        story_id: p.story_id,
        retrieved: p.retrieved,
        raw_cosine: p.raw_cosine,
        score: p.score,
        calibration: p.calibration,
        modalities: p.modalities,
        coverage: p.coverage,
        synthetic: p.synthetic,
    }
}

impl WindowConsumer for PredictWindows {
    fn thread_name(&self) -> String {
        "fusion-windows".into()
    }

    fn consume(&mut self, window: &Window) -> Result<(), RunError> {
        // A window is cheap to clone: its frames and stories are shared.
        self.held.push(window.clone());
        if self.held.len() >= self.block {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), RunError> {
        self.flush()
    }
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
    /// How far behind the capture the event source may be known (live: the transcript
    /// wait; replay: 0).
    pub events_lag_ns: Nanos,
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

/// What one thread did, for the end-of-run summary at `debug`.
#[derive(Debug, Clone)]
pub struct ThreadFigures {
    pub thread: String,
    pub items: u64,
    /// Time spent in the thread's own work (not waiting on its queues).
    pub busy: Duration,
    /// The most items seen waiting in its output queue, and that queue's capacity.
    pub out_queue: Option<(usize, usize)>,
}

/// Collects [`ThreadFigures`] from the threads as they end.
#[derive(Default)]
struct Figures(Mutex<Vec<ThreadFigures>>);

impl Figures {
    fn push(&self, f: ThreadFigures) {
        if let Ok(mut v) = self.0.lock() {
            v.push(f);
        }
    }
}

/// Counts items and busy time of one thread.
struct Meter {
    thread: String,
    items: u64,
    busy: Duration,
}

impl Meter {
    fn new(thread: &str) -> Self {
        Self {
            thread: thread.to_string(),
            items: 0,
            busy: Duration::ZERO,
        }
    }

    /// Times `f` as one item of work.
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.busy += t.elapsed();
        self.items += 1;
        out
    }

    fn done<T>(self, figures: &Figures, out: Option<&PolicySender<T>>) {
        figures.push(ThreadFigures {
            thread: self.thread,
            items: self.items,
            busy: self.busy,
            out_queue: out.map(PolicySender::depth),
        });
    }
}

struct VideoFeaturesDone {
    timeline: VideoTimelineStats,
    totals: VideoSignalTotals,
}

struct AudioFeaturesDone {
    timeline: AudioTimelineStats,
    totals: AudioSignalTotals,
}

struct AlignDone {
    frames: u64,
    windows: u64,
    latency: Option<LatencySummary>,
}

/// Capture-to-store latency of a paced run's decoded frames: from the frame's time on
/// the session clock to the moment its features were handed to the store writer (which
/// commits within `store.batch_max_ms`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LatencySummary {
    pub frames: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    fn of(mut us: Vec<u32>) -> Option<Self> {
        if us.is_empty() {
            return None;
        }
        us.sort_unstable();
        let at = |q: f64| f64::from(us[((us.len() - 1) as f64 * q).round() as usize]) / 1e3;
        Some(Self {
            frames: us.len(),
            p50_ms: at(0.5),
            p95_ms: at(0.95),
            max_ms: at(1.0),
        })
    }
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
        consumers.push(Box::new(PredictWindows::new(
            stage,
            sinks.writer.clone(),
            opts.pacer.speed,
        )));
    }
    consumers.extend(sinks.window_consumers);
    let writer = &sinks.writer;

    let (frame_tx, frame_rx) =
        policy_queue::<VideoFrame>(config.runtime.video_queue_frames, opts.video_overflow);
    let (block_tx, block_rx) =
        policy_queue::<AudioBlock>(config.runtime.audio_queue_blocks, Overflow::Block);
    let (slot_tx, slot_rx) = policy_queue::<VideoSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
    let (pending_tx, pending_rx) = policy_queue::<PendingSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
    let (rows_tx, rows_rx) =
        policy_queue::<Vec<(ModalityId, Vec<AudioRow>)>>(AUDIO_OUT_QUEUE, Overflow::Block);
    let (batch_tx, batch_rx) = policy_queue::<EventBatch>(TEXT_QUEUE, Overflow::Block);
    let (text_tx, text_rx) = policy_queue::<TextUpdate>(TEXT_QUEUE, Overflow::Block);
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
    let opts_events_lag_ns = opts.events_lag_ns;

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
                frame_stage(&thread, slot, from, tx, figures_ref).map(Some)
            })?;
            stage_threads.push((name, handle));
        }
        let forward = spawn(scope, "video-forward", move || {
            forward_slots(input, slot_tx).map(|()| None)
        })?;
        stage_threads.push(("video-forward".into(), forward));
        let mut audio = audio;
        let audio_capture = spawn(scope, "audio-capture", move || {
            let next = || audio.next_block().map_err(RunError::from);
            capture("audio-capture", next, |b: &AudioBlock| b.t_ns, block_tx, cx)
        })?;
        let audio_features = spawn(scope, "audio-features", move || {
            audio_features(block_rx, rows_tx, audio_signal, audio_stages, figures_ref)
        })?;
        let session_events = spawn(scope, "session-events", move || {
            session_events(events, batch_tx, writer, stop)
        })?;
        let text_features = spawn(scope, "text-features", move || {
            text_features(batch_rx, text_tx, text.1, figures_ref)
        })?;
        let mut consumer_threads = Vec::new();
        for (consumer, rx) in window_rxs {
            let name = consumer.thread_name();
            let thread = name.clone();
            let handle = spawn(scope, &name, move || {
                consume_windows(&thread, consumer, rx, figures_ref)
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
        let _ = text_features.map_err(|e| errors.push(e));
        let align = align.map_err(|e| errors.push(e)).ok();
        for r in consumed {
            let _ = r.map_err(|e| errors.push(e));
        }
        if let (Some(d), Some(ev), Some(v), Some(a), Some(w)) =
            (video_drops, events, video_features, audio_features, align)
        {
            if errors.is_empty() {
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
    let quality = QualityReport::build(QualityInputs {
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

/// The per-thread figures at `debug`, one line each: where a slow run spent its time.
fn log_figures(threads: &[ThreadFigures]) {
    for f in threads {
        let per_item_ms = if f.items == 0 {
            0.0
        } else {
            f.busy.as_secs_f64() * 1e3 / f.items as f64
        };
        match f.out_queue {
            Some((depth, capacity)) => tracing::debug!(
                thread = %f.thread,
                items = f.items,
                busy_s = format_args!("{:.3}", f.busy.as_secs_f64()),
                ms_per_item = format_args!("{per_item_ms:.2}"),
                out_queue_max = depth,
                out_queue_capacity = capacity,
                "thread summary"
            ),
            None => tracing::debug!(
                thread = %f.thread,
                items = f.items,
                busy_s = format_args!("{:.3}", f.busy.as_secs_f64()),
                ms_per_item = format_args!("{per_item_ms:.2}"),
                "thread summary"
            ),
        }
    }
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

/// What a capture thread shares with the run: pacing, the clock and the stop flags.
#[derive(Clone, Copy)]
struct CaptureContext<'a> {
    pacer: &'a Pacer,
    realtime_priority: u8,
    clock: &'a dyn Clock,
    stop: &'a AtomicBool,
    /// Set when `stop` ended the capture before the end of its input.
    stopped: &'a AtomicBool,
    figures: &'a Figures,
}

/// The capture loop of one source: reads an item, stops early when the stop flag is set,
/// paces the item to its stamp, hands it on. Returns how many items the queue evicted
/// (live video only; every other queue blocks).
fn capture<T>(
    thread: &str,
    mut next: impl FnMut() -> Result<Option<T>, RunError>,
    stamp: impl Fn(&T) -> Nanos,
    tx: PolicySender<T>,
    cx: CaptureContext<'_>,
) -> Result<u64, RunError> {
    super::realtime_priority(cx.realtime_priority);
    let mut meter = Meter::new(thread);
    while let Some(item) = meter.time(&mut next)? {
        if cx.stop.load(Ordering::SeqCst) {
            cx.stopped.store(true, Ordering::SeqCst);
            break;
        }
        let t_ns = stamp(&item);
        cx.pacer.wait(cx.clock, t_ns);
        tracing::trace!(t_ns, "captured");
        if tx.send(item).is_err() {
            // The consumer ended (its error is reported by its own thread).
            break;
        }
    }
    let drops = tx.dropped();
    meter.done(cx.figures, Some(&tx));
    Ok(drops)
}

/// Puts frames on the slot grid, fills gaps with absent slots and runs the signal stage.
/// Slots leave with one feature entry per modality, the signal stage's filled in.
fn video_features(
    rx: PolicyReceiver<VideoFrame>,
    tx: PolicySender<PendingSlot>,
    (modality, mut signal): (ModalityId, VideoSignalStage),
    layout: &ModalityLayout,
    period_ns: f64,
    figures: &Figures,
) -> Result<VideoFeaturesDone, RunError> {
    let mut meter = Meter::new("video-features");
    let mut timeline = VideoTimeline::new(1e9 / period_ns);
    for frame in &rx {
        let SlotDecision::Take {
            slot,
            missing_before,
        } = timeline.observe(frame.t_ns, &frame.image)
        else {
            continue;
        };
        let make_slot = |s: u64, decoded: bool| VideoSlot {
            index: s,
            start_ns: timeline.slot_time_ns(s),
            end_ns: timeline.slot_time_ns(s + 1),
            decoded,
            features: layout.absent(),
        };
        let mut slots: Vec<PendingSlot> = (slot - missing_before..slot)
            .map(|s| PendingSlot {
                slot: make_slot(s, false),
                frame: None,
                ctx: FrameContext::default(),
            })
            .collect();
        let mut ctx = FrameContext::default();
        let mut taken = make_slot(slot, true);
        taken.features[modality.index()] = meter.time(|| signal.process(&frame, &mut ctx))?;
        slots.push(PendingSlot {
            slot: taken,
            frame: Some(frame),
            ctx,
        });
        for s in slots {
            if tx.send(s).is_err() {
                return Err(next_stopped("video-features", "the next frame stage"));
            }
        }
    }
    meter.done(figures, Some(&tx));
    Ok(VideoFeaturesDone {
        timeline: timeline.stats().clone(),
        totals: signal.totals().clone(),
    })
}

/// One frame stage on its own thread (stages are pipelined, so at `--speed max` the facial
/// stage and the CNN use both cores; a frame waits at most one stage's time per stage).
/// Fills in the stage's modality and hands the slot on.
fn frame_stage(
    thread: &str,
    slot: FrameStageSlot,
    rx: PolicyReceiver<PendingSlot>,
    tx: PolicySender<PendingSlot>,
    figures: &Figures,
) -> Result<ModalityPresence, RunError> {
    let FrameStageSlot {
        modality,
        mut stage,
    } = slot;
    let mut meter = Meter::new(thread);
    let mut presence = ModalityPresence {
        modality: stage.spec().name.to_string(),
        present_frames: 0,
        decoded_frames: 0,
    };
    for mut p in &rx {
        let v = match &p.frame {
            Some(frame) => {
                presence.decoded_frames += 1;
                meter.time(|| stage.process(frame, &mut p.ctx))?
            }
            None => None,
        };
        tracing::trace!(
            slot = p.slot.index,
            present = v.is_some(),
            "frame stage done"
        );
        presence.present_frames += u64::from(v.is_some());
        p.slot.features[modality.index()] = v;
        if tx.send(p).is_err() {
            return Err(next_stopped(thread, "the next frame stage"));
        }
    }
    meter.done(figures, Some(&tx));
    Ok(presence)
}

/// Hands the slots, all frame stages done, to the aligner (dropping the frames).
fn forward_slots(
    rx: PolicyReceiver<PendingSlot>,
    tx: PolicySender<VideoSlot>,
) -> Result<(), RunError> {
    for p in &rx {
        if tx.send(p.slot).is_err() {
            return Err(next_stopped("video-forward", "the aligner"));
        }
    }
    Ok(())
}

fn audio_features(
    rx: PolicyReceiver<AudioBlock>,
    tx: PolicySender<Vec<(ModalityId, Vec<AudioRow>)>>,
    (signal_id, mut signal): (ModalityId, AudioSignalStage),
    mut stages: Vec<AudioStageSlot>,
    figures: &Figures,
) -> Result<AudioFeaturesDone, RunError> {
    use crate::features::AudioStage;
    let mut meter = Meter::new("audio-features");
    let mut timeline = AudioTimelineStats::default();
    let send = |rows| {
        tx.send(rows)
            .map_err(|_| next_stopped("audio-features", "the aligner"))
    };
    for block in &rx {
        timeline.observe(block.t_ns, block.samples.len(), block.sample_rate_hz);
        let rows = meter.time(|| -> Result<_, RunError> {
            let mut rows = vec![(signal_id, signal.process(&block)?)];
            for s in &mut stages {
                rows.push((s.modality, s.stage.process(&block)?));
            }
            Ok(rows)
        })?;
        send(rows)?;
    }
    let mut rows = vec![(signal_id, signal.finish()?)];
    for s in &mut stages {
        rows.push((s.modality, s.stage.finish()?));
        if let Some(w) = s.stage.end_warning() {
            tracing::warn!("{w}");
        }
    }
    send(rows)?;
    meter.done(figures, Some(&tx));
    Ok(AudioFeaturesDone {
        timeline,
        totals: signal.totals().clone(),
    })
}

/// Reads session events as they become known, stores them, and hands them to the text
/// stage. Returns every event of the session.
fn session_events(
    mut source: Box<dyn EventSource>,
    tx: PolicySender<EventBatch>,
    writer: &StoreWriter,
    stop: &AtomicBool,
) -> Result<Vec<Event>, RunError> {
    let mut all = Vec::new();
    while let Some(batch) = source.next_batch()? {
        writer.events(batch.events.clone())?;
        all.extend(batch.events.iter().cloned());
        if tx.send(batch).is_err() {
            return Err(next_stopped("session-events", "the text stage"));
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
    }
    Ok(all)
}

/// Embeds the participant's utterances as their events arrive and tells the aligner what
/// is known: utterances, phases and how far.
fn text_features(
    rx: PolicyReceiver<EventBatch>,
    tx: PolicySender<TextUpdate>,
    mut stage: TextStage,
    figures: &Figures,
) -> Result<(), RunError> {
    let mut meter = Meter::new("text-features");
    for batch in &rx {
        // One item of work per batch: utterances, stories shown and retrievals embedded.
        let (utterances, stories, retrievals) = meter.time(|| {
            Ok::<_, crate::models::ModelError>((
                stage.embed_utterances(&batch.events)?,
                stage.embed_stories(&batch.events)?,
                stage.retrieve(&batch.events)?,
            ))
        })?;
        let phases = batch
            .events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Phase { phase } => Some(PhaseSpan {
                    phase,
                    start_ns: e.t_ns,
                    end_ns: Nanos::MAX,
                }),
                _ => None,
            })
            .collect();
        let update = TextUpdate {
            utterances,
            stories,
            retrievals,
            phases,
            known_until_ns: batch.known_until_ns,
        };
        if tx.send(update).is_err() {
            return Err(next_stopped("text-features", "the aligner"));
        }
    }
    meter.done(figures, Some(&tx));
    Ok(())
}

/// The stories known to the aligner: shown ones and retrieval sets, in time order.
#[derive(Default)]
struct InPlay {
    shown: Vec<Arc<StoryInPlay>>,
    retrievals: Vec<(Nanos, Vec<Arc<StoryInPlay>>)>,
}

impl InPlay {
    /// In play at `t`: the stories shown before it; before any is shown, the latest
    /// retrieval made before it.
    fn at(&self, t: Nanos) -> Vec<Arc<StoryInPlay>> {
        let shown: Vec<Arc<StoryInPlay>> = self
            .shown
            .iter()
            .filter(|s| s.shown_ns < t)
            .cloned()
            .collect();
        if !shown.is_empty() {
            return shown;
        }
        self.retrievals
            .iter()
            .rev()
            .find(|(at, _)| *at < t)
            .map(|(_, set)| set.clone())
            .unwrap_or_default()
    }
}

struct AlignInputs {
    /// Slots the aligner may hold before it stops taking video.
    max_pending: usize,
    slots: PolicyReceiver<VideoSlot>,
    rows: PolicyReceiver<Vec<(ModalityId, Vec<AudioRow>)>>,
    text: PolicyReceiver<TextUpdate>,
}

/// Joins video slots with audio rows and text, assembles windows, hands frames to the
/// writer and windows to every consumer.
#[allow(clippy::too_many_arguments)]
fn align_windows(
    inputs: AlignInputs,
    mut aligner: FrameAligner,
    windows: &crate::config::WindowConfig,
    period_ns: f64,
    writer: &StoreWriter,
    consumers: Vec<PolicySender<Arc<Window>>>,
    progress: &dyn Progress,
    figures: &Figures,
    latency_from: Option<(&dyn Clock, Nanos)>,
) -> Result<AlignDone, RunError> {
    let mut meter = Meter::new("align-windows");
    let mut latencies_us: Vec<u32> = Vec::new();
    let mut assembler = WindowAssembler::new(windows.length_frames, windows.hop_frames, period_ns);
    let mut phases: Vec<PhaseSpan> = Vec::new();
    let mut stories = InPlay::default();
    let mut frames = 0u64;
    let mut emit =
        |record: FrameRecord, phases: &[PhaseSpan], stories: &InPlay| -> Result<(), RunError> {
            let record = Arc::new(record);
            if let (Some((clock, start)), true) = (latency_from, record.decoded) {
                // Capture (the slot's time on the session clock) to handed to the writer.
                let age = clock.now_ns().saturating_sub(start + record.t_ns);
                latencies_us.push(u32::try_from(age / 1_000).unwrap_or(u32::MAX));
            }
            writer.frame(record.clone())?;
            frames += 1;
            progress.advance(1);
            if let Some(mut w) = assembler.push(record) {
                // Decided now, from the phase events known (all up to the last frame's start).
                w.phase = phase_at(phases, w.mid_ns());
                w.stories = stories.at(w.end_ns);
                let w = Arc::new(w);
                for c in &consumers {
                    if c.send(w.clone()).is_err() {
                        return Err(next_stopped("align-windows", "a window consumer"));
                    }
                }
            }
            Ok(())
        };
    let (mut video_done, mut audio_done, mut text_done) = (false, false, false);
    let none_slots = never::<VideoSlot>();
    let none_rows = never::<Vec<(ModalityId, Vec<AudioRow>)>>();
    let none_text = never::<TextUpdate>();
    while !(video_done && audio_done && text_done) {
        // Hold back video while slots wait for audio or text, so memory stays bounded.
        let take_video = !video_done
            && ((audio_done && text_done) || aligner.pending_slots() < inputs.max_pending);
        let slot_rx = if take_video {
            inputs.slots.receiver()
        } else {
            &none_slots
        };
        let rows_rx = if audio_done {
            &none_rows
        } else {
            inputs.rows.receiver()
        };
        let text_rx = if text_done {
            &none_text
        } else {
            inputs.text.receiver()
        };
        select! {
            recv(slot_rx) -> msg => match msg {
                Ok(slot) => aligner.push_video(slot),
                Err(_) => video_done = true,
            },
            recv(rows_rx) -> msg => match msg {
                Ok(per_modality) => {
                    for (m, r) in per_modality {
                        aligner.push_audio(m, r);
                    }
                }
                Err(_) => {
                    audio_done = true;
                    aligner.end_audio();
                }
            },
            recv(text_rx) -> msg => match msg {
                Ok(update) => {
                    phases.extend(update.phases);
                    stories
                        .shown
                        .extend(update.stories.into_iter().map(Arc::new));
                    stories.retrievals.extend(
                        update
                            .retrievals
                            .into_iter()
                            .map(|(t, set)| (t, set.into_iter().map(Arc::new).collect())),
                    );
                    if let Some(track) = aligner.text_track() {
                        for (start, end, v) in update.utterances {
                            track.push(start, end, v);
                        }
                        track.known_until(update.known_until_ns);
                    }
                }
                Err(_) => {
                    text_done = true;
                    if let Some(track) = aligner.text_track() {
                        track.end();
                    }
                }
            },
        }
        for record in meter.time(|| aligner.drain_ready()) {
            emit(record, &phases, &stories)?;
        }
    }
    for record in aligner.finish() {
        emit(record, &phases, &stories)?;
    }
    let windows_emitted = assembler.windows_emitted();
    meter.done(figures, consumers.first());
    Ok(AlignDone {
        frames,
        windows: windows_emitted,
        latency: LatencySummary::of(latencies_us),
    })
}

/// One window consumer on its own thread.
fn consume_windows(
    thread: &str,
    mut consumer: Box<dyn WindowConsumer>,
    rx: PolicyReceiver<Arc<Window>>,
    figures: &Figures,
) -> Result<(), RunError> {
    let mut meter = Meter::new(thread);
    for w in &rx {
        meter.time(|| consumer.consume(&w))?;
    }
    // Not an item of its own: a flush of windows already counted.
    consumer.finish()?;
    meter.done::<()>(figures, None);
    Ok(())
}

/// The store as a window consumer: each window's stored form, through the writer.
pub struct StoreWindows {
    writer: StoreWriter,
    layout: ModalityLayout,
    sources: QualitySources,
}

impl StoreWindows {
    pub fn new(writer: StoreWriter, layout: &ModalityLayout) -> Self {
        Self {
            writer,
            layout: layout.clone(),
            sources: QualitySources::new(layout),
        }
    }
}

impl WindowConsumer for StoreWindows {
    fn thread_name(&self) -> String {
        "store-windows".into()
    }

    fn consume(&mut self, window: &Window) -> Result<(), RunError> {
        self.writer
            .window(WindowRow::from_window(window, &self.layout, &self.sources))?;
        Ok(())
    }
}
