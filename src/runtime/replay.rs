//! Replay of a recorded session through the live pipeline.
//!
//! Contract: [`replay`] opens the store (recovering abandoned sessions), reads the session
//! folder, writes the session row with its events, runs the pipeline, and closes the
//! session `complete`, or `incomplete` when stopped, or `failed` with the reason when its
//! input turns out bad (partial frames and windows are then removed, the reason kept).
//! Replays never drop data: every queue blocks when full, so two replays of one session
//! store identical frames and windows whatever the machine's load.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::ScopedJoinHandle;
use std::time::Instant;

use crossbeam_channel::{never, select};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::queues::{policy_queue, Overflow, PolicyReceiver, PolicySender};
use super::RunError;
use crate::capture::audio_file::WavAudioSource;
use crate::capture::timeline::{
    AudioTimelineStats, SlotDecision, VideoTimeline, VideoTimelineStats,
};
use crate::capture::video_file::FileVideoSource;
use crate::capture::{AudioBlock, AudioSource, VideoFrame, VideoSource};
use crate::clock::{Clock, Pacer, Speed};
use crate::config::Config;
use crate::features::acoustic::LldExtractor;
use crate::features::appearance::AppearanceEncoder;
use crate::features::face::pose::IntrinsicsArgs;
use crate::features::face::{FaceAnalyzer, FaceStage, Mode};
use crate::features::signal::{
    AudioSignalStage, AudioSignalTotals, VideoSignalStage, VideoSignalTotals,
};
use crate::features::text::{SentenceEncoder, TextTrack};
use crate::features::{AudioRow, AudioStage, FrameContext, FrameStage, ModalitySpec, PoolFn};
use crate::models::manifest::Manifest;
use crate::report::{ModalityPresence, QualityInputs, QualityReport, ReplaySummary};
use crate::session::events::{phase_at, phase_spans, PhaseSpan};
use crate::session::RecordedSession;
use crate::store::rows::{EndStatus, SessionEnd, SessionStart, WindowRow};
use crate::store::{Store, StoreWriter};
use crate::windows::{
    FrameAligner, FrameRecord, ModalityLayout, Stream, VideoSlot, WindowAssembler,
};
use crate::Nanos;

/// Slots the aligner may hold while waiting for audio before it stops taking video.
const MAX_PENDING_SLOTS: usize = 64;
/// Per-block audio stage output on its way to the aligner.
const AUDIO_OUT_QUEUE: usize = 64;
/// Video slots on their way to the aligner.
const VIDEO_OUT_QUEUE: usize = 32;

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub session_dir: PathBuf,
    pub db_path: PathBuf,
    pub config: Config,
    pub speed: Speed,
    /// Replace a session already stored complete under the same id.
    pub replace: bool,
    /// Draw a progress bar on stderr (only drawn when stderr is a terminal).
    pub progress: bool,
}

/// Replays one session. On error the session row (when one could be written) says
/// `failed` and why.
pub fn replay(
    opts: &ReplayOptions,
    clock: Arc<dyn Clock>,
    stop: Arc<AtomicBool>,
) -> Result<ReplaySummary, RunError> {
    let started = Instant::now();
    let config = &opts.config;
    // Opening migrates and marks sessions abandoned by a killed process as incomplete.
    drop(Store::open(&opts.db_path)?);
    let writer = StoreWriter::spawn(
        &opts.db_path,
        config.store.batch_max_rows,
        config.store.batch_max_ms,
    )?;
    let session = match RecordedSession::open(
        &opts.session_dir,
        &config.station.id,
        config.video.nominal_fps,
    ) {
        Ok(s) => s,
        Err(e) => {
            let id = RecordedSession::fallback_id(&opts.session_dir);
            record_failure(&writer, &id, &config.station.id, &e.to_string());
            return Err(e.into());
        }
    };
    let m = &session.manifest;
    let pipeline = match Pipeline::new(config, m.nominal_fps, &session) {
        Ok(p) => p,
        Err(e) => {
            record_failure(&writer, &m.session_id, &m.station_id, &e.to_string());
            return Err(e);
        }
    };
    writer.begin(SessionStart {
        id: m.session_id.clone(),
        station_id: m.station_id.clone(),
        participant_id: m.participant_id.clone(),
        source: "replay",
        source_path: Some(display_path(&opts.session_dir)),
        format_version: Some(m.format_version),
        start_time: m.start_time.clone(),
        nominal_fps: m.nominal_fps,
        events: session.events.clone(),
        // The last phase's end is the session end, known when the run is over.
        phases: phase_spans(&session.events, Nanos::MAX),
        layout: pipeline.layout.clone(),
        replace: opts.replace,
    })?;
    tracing::info!(session = %m.session_id, dir = %opts.session_dir.display(), "replay started");

    let outcome = run(&session, config, pipeline, &writer, opts, clock, &stop);
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            record_failure(&writer, &m.session_id, &m.station_id, &e.to_string());
            return Err(e);
        }
    };
    let (status, reason) = if outcome.stopped {
        (
            EndStatus::Incomplete,
            Some(format!(
                "stopped by a signal after {:.1} s of the session; everything computed until then is stored",
                outcome.duration_ns as f64 / 1e9
            )),
        )
    } else {
        (EndStatus::Complete, None)
    };
    let quality_json = serde_json::to_string(&outcome.quality).map_err(|e| RunError::Thread {
        thread: "main",
        message: format!("cannot encode the quality report: {e}"),
    })?;
    writer.finish(SessionEnd {
        status,
        reason: reason.clone(),
        frames: outcome.frames,
        windows: outcome.windows,
        duration_ns: outcome.duration_ns,
        quality_json,
    })?;
    writer.close()?;
    tracing::info!(session = %m.session_id, frames = outcome.frames, windows = outcome.windows, "replay finished");
    Ok(ReplaySummary {
        session_id: m.session_id.clone(),
        status: status.as_str().to_string(),
        status_reason: reason,
        db_path: display_path(&opts.db_path),
        frames: outcome.frames,
        windows: outcome.windows,
        duration_secs: outcome.duration_ns as f64 / 1e9,
        elapsed_secs: started.elapsed().as_secs_f64(),
        speed: opts.speed.to_string(),
        quality: outcome.quality,
    })
}

fn display_path(p: &Path) -> String {
    p.canonicalize()
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Marks a session failed; a failure to do so is logged (the original error is what the
/// user needs to see, and is returned by the caller).
fn record_failure(writer: &StoreWriter, id: &str, station_id: &str, reason: &str) {
    if let Err(e) = writer.fail(id, station_id, reason) {
        tracing::error!(session = id, "could not mark the session failed: {e}");
    }
}

/// The stages of one run and the modality layout they make.
struct Pipeline {
    video_signal: VideoSignalStage,
    /// Frame stages after the signal stage, in layout order: face, then appearance.
    frame_stages: Vec<Box<dyn FrameStage>>,
    text: TextTrack,
    audio_signal: AudioSignalStage,
    acoustic: LldExtractor,
    layout: ModalityLayout,
    period_ns: f64,
}

impl Pipeline {
    /// Sets up the stages; embeds the session's utterances with the configured sentence
    /// encoder (a missing or broken model fails the run here, naming the file).
    fn new(config: &Config, nominal_fps: f64, session: &RecordedSession) -> Result<Self, RunError> {
        let video_signal = VideoSignalStage::new();
        let audio_signal = AudioSignalStage::new(&config.quality, config.audio.sample_rate_hz);
        let acoustic = LldExtractor::new(config.audio.lld_set, config.audio.sample_rate_hz);
        let models = &config.models;
        let manifest = Manifest::load(&models.dir)?;
        let entry = manifest.get(&models.sentence_encoder, &models.dir)?;
        let mut encoder =
            SentenceEncoder::open(&models.dir, entry, models.onnxruntime_library.as_deref())?;
        let text = TextTrack::build(
            &session.events,
            &config.text.speaker,
            config.text.horizon_ms * 1_000_000,
            &mut encoder,
        )?;
        let mut frame_stages: Vec<Box<dyn FrameStage>> = Vec::new();
        if config.face.enabled {
            // The session's own calibration wins over the station's config.
            let intrinsics = match session.manifest.camera {
                Some(k) => IntrinsicsArgs::from(k),
                None => IntrinsicsArgs {
                    fx: config.face.fx,
                    fy: config.face.fy,
                    cx: config.face.cx,
                    cy: config.face.cy,
                },
            };
            let analyzer = FaceAnalyzer::open(
                &models.dir,
                &manifest,
                models.onnxruntime_library.as_deref(),
                intrinsics,
                Mode::Video,
            )?;
            frame_stages.push(Box::new(FaceStage::new(analyzer)));
        }
        if !models.appearance_encoder.is_empty() {
            let entry = manifest.get(&models.appearance_encoder, &models.dir)?;
            frame_stages.push(Box::new(
                AppearanceEncoder::open(&models.dir, entry, models.onnxruntime_library.as_deref())?
                    .with_input(models.appearance_input),
            ));
        }
        let text_spec = ModalitySpec {
            name: "text",
            columns: (0..encoder.dim()).map(|i| format!("text_{i}")).collect(),
        };
        // Slot modalities first, then audio ones in the order `audio_features` sends rows.
        let mut modalities = vec![(Stream::Video, video_signal.spec().clone())];
        for stage in &frame_stages {
            modalities.push((Stream::Video, stage.spec().clone()));
        }
        modalities.extend([
            (Stream::Text, text_spec),
            (Stream::Audio, audio_signal.spec().clone()),
            (Stream::Audio, acoustic.spec().clone()),
        ]);
        let layout = ModalityLayout { modalities };
        Ok(Self {
            video_signal,
            frame_stages,
            text,
            audio_signal,
            acoustic,
            layout,
            period_ns: 1e9 / nominal_fps,
        })
    }
}

/// What the pipeline threads report back.
struct Outcome {
    frames: u64,
    windows: u64,
    duration_ns: Nanos,
    stopped: bool,
    quality: QualityReport,
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
}

/// Runs the threads of one replay and joins them.
fn run(
    session: &RecordedSession,
    config: &Config,
    pipeline: Pipeline,
    writer: &StoreWriter,
    opts: &ReplayOptions,
    clock: Arc<dyn Clock>,
    stop: &AtomicBool,
) -> Result<Outcome, RunError> {
    let mut video = FileVideoSource::open(&session.video_path)?;
    let audio = WavAudioSource::open(
        &session.audio_path,
        config.audio.sample_rate_hz,
        config.audio.block_ms,
        session.manifest.audio_offset_ms,
    )?;
    // Decode the first frame now, so an undecodable file fails before any thread starts.
    let first_frame = video.next_frame()?;

    let Pipeline {
        video_signal,
        frame_stages,
        text,
        audio_signal,
        acoustic,
        layout,
        period_ns,
    } = pipeline;
    let pools: Vec<PoolFn> = vec![audio_signal.pooling(), acoustic.pooling()];
    let spans = phase_spans(&session.events, Nanos::MAX);
    let pacer = Pacer {
        start_clock_ns: clock.now_ns(),
        speed: opts.speed,
    };
    let progress = progress_bar(opts.progress, video.info().declared_frames);
    // Replay never drops: every queue blocks (see `queues`).
    let (frame_tx, frame_rx) =
        policy_queue::<VideoFrame>(config.runtime.video_queue_frames, Overflow::Block);
    let (block_tx, block_rx) =
        policy_queue::<AudioBlock>(config.runtime.audio_queue_blocks, Overflow::Block);
    let (slot_tx, slot_rx) = policy_queue::<VideoSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
    let (pending_tx, pending_rx) = policy_queue::<PendingSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
    let (rows_tx, rows_rx) = policy_queue::<Vec<Vec<AudioRow>>>(AUDIO_OUT_QUEUE, Overflow::Block);
    let stopped_early = AtomicBool::new(false);

    let result = std::thread::scope(|scope| -> Result<_, RunError> {
        let clock_v = clock.clone();
        let stopped_v = &stopped_early;
        let video_capture = spawn(scope, "video-capture", move || {
            capture_video(
                video,
                first_frame,
                frame_tx,
                &pacer,
                clock_v.as_ref(),
                stop,
                stopped_v,
            )
        })?;
        let text_ref = &text;
        let video_features = spawn(scope, "video-features", move || {
            video_features(frame_rx, pending_tx, video_signal, text_ref, period_ns)
        })?;
        // One thread per frame stage, chained: video-features -> face -> appearance ->
        // video-forward -> align (video-forward turns pending slots into aligner slots).
        let mut stage_threads = Vec::new();
        let mut input = pending_rx;
        for stage in frame_stages {
            let name = stage_thread_name(stage.spec().name);
            let (tx, rx) = policy_queue::<PendingSlot>(VIDEO_OUT_QUEUE, Overflow::Block);
            let from = std::mem::replace(&mut input, rx);
            let handle = spawn(scope, name, move || {
                frame_stage(name, stage, from, tx).map(Some)
            })?;
            stage_threads.push((name, handle));
        }
        let forward = spawn(scope, "video-forward", move || {
            forward_slots(input, slot_tx).map(|()| None)
        })?;
        stage_threads.push(("video-forward", forward));
        let clock_a = clock.clone();
        let stopped_a = &stopped_early;
        let audio_capture = spawn(scope, "audio-capture", move || {
            capture_audio(audio, block_tx, &pacer, clock_a.as_ref(), stop, stopped_a)
        })?;
        let audio_features = spawn(scope, "audio-features", move || {
            audio_features(block_rx, rows_tx, audio_signal, acoustic)
        })?;
        let layout_ref = &layout;
        let spans_ref = &spans;
        let progress_ref = &progress;
        let align = spawn(scope, "align-windows", move || {
            align_windows(
                slot_rx,
                rows_rx,
                pools,
                layout_ref,
                spans_ref,
                &config.windows,
                period_ns,
                writer,
                progress_ref,
            )
        })?;
        // Join everything before looking at errors, so no thread outlives the run. The
        // first error in pipeline order is the cause; later ones are its consequences.
        let video_capture = join(video_capture, "video-capture");
        let audio_capture = join(audio_capture, "audio-capture");
        let video_features = join(video_features, "video-features");
        let stages: Vec<Result<Option<ModalityPresence>, RunError>> = stage_threads
            .into_iter()
            .map(|(name, h)| join(h, name))
            .collect();
        let audio_features = join(audio_features, "audio-features");
        let align = join(align, "align-windows");
        // A thread whose downstream stopped reports only that: prefer the downstream
        // thread's own error, which is the cause.
        let mut errors: Vec<RunError> = [video_capture, audio_capture]
            .into_iter()
            .filter_map(Result::err)
            .collect();
        let video_features = video_features.map_err(|e| errors.push(e)).ok();
        let mut presence = Vec::new();
        for r in stages {
            match r {
                Ok(p) => presence.extend(p),
                Err(e) => errors.push(e),
            }
        }
        let audio_features = audio_features.map_err(|e| errors.push(e)).ok();
        let align = align.map_err(|e| errors.push(e)).ok();
        if let (Some(v), Some(a), Some(w)) = (video_features, audio_features, align) {
            if errors.is_empty() {
                return Ok((v, a, w, presence));
            }
        }
        let cause = errors
            .iter()
            .position(|e| !matches!(e, RunError::NextStopped { .. }))
            .unwrap_or(0);
        Err(errors.swap_remove(cause))
    });
    progress.finish_and_clear();
    let (video_done, audio_done, align_done, modality_presence) = result?;

    let frame_slots = align_done.frames;
    let video_end_ns = video_done.timeline.first_t_ns.map_or(0, |first| {
        first + (frame_slots as f64 * period_ns).round() as Nanos
    });
    let duration_ns = video_end_ns.max(audio_done.timeline.end_t_ns.unwrap_or(0));
    let spans: Vec<PhaseSpan> = phase_spans(&session.events, duration_ns);
    let quality = QualityReport::build(QualityInputs {
        video: &video_done.timeline,
        audio: &audio_done.timeline,
        video_signal: &video_done.totals,
        audio_signal: &audio_done.totals,
        frame_slots,
        frame_period_ns: period_ns,
        phases: &spans,
        // Replay queues block instead of dropping (see `queues`).
        video_queue_drops: 0,
        modality_presence,
    });
    Ok(Outcome {
        frames: align_done.frames,
        windows: align_done.windows,
        duration_ns,
        stopped: stopped_early.load(Ordering::SeqCst),
        quality,
    })
}

fn spawn<'scope, 'env, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    name: &'static str,
    f: impl FnOnce() -> Result<T, RunError> + Send + 'scope,
) -> Result<ScopedJoinHandle<'scope, Result<T, RunError>>, RunError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, f)
        .map_err(|e| RunError::Thread {
            thread: name,
            message: format!("cannot start: {e}"),
        })
}

fn join<T>(
    handle: ScopedJoinHandle<'_, Result<T, RunError>>,
    name: &'static str,
) -> Result<T, RunError> {
    handle.join().unwrap_or_else(|_| {
        Err(RunError::Thread {
            thread: name,
            message: "panicked".into(),
        })
    })
}

fn progress_bar(enabled: bool, frames: Option<u64>) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(frames, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{spinner} replay [{bar:40}] {pos}/{len} frames  {per_sec}  eta {eta}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Reads frames, paces them, hands them on. Stops early when `stop` is set.
fn capture_video(
    mut source: FileVideoSource,
    first: Option<VideoFrame>,
    tx: PolicySender<VideoFrame>,
    pacer: &Pacer,
    clock: &dyn Clock,
    stop: &AtomicBool,
    stopped: &AtomicBool,
) -> Result<(), RunError> {
    let mut next = first;
    while let Some(frame) = next {
        if stop.load(Ordering::SeqCst) {
            stopped.store(true, Ordering::SeqCst);
            return Ok(());
        }
        pacer.wait(clock, frame.t_ns);
        if tx.send(frame).is_err() {
            // The consumer ended (its error is reported by its own thread).
            return Ok(());
        }
        next = source.next_frame()?;
    }
    Ok(())
}

fn capture_audio(
    mut source: WavAudioSource,
    tx: PolicySender<AudioBlock>,
    pacer: &Pacer,
    clock: &dyn Clock,
    stop: &AtomicBool,
    stopped: &AtomicBool,
) -> Result<(), RunError> {
    while let Some(block) = source.next_block()? {
        if stop.load(Ordering::SeqCst) {
            stopped.store(true, Ordering::SeqCst);
            return Ok(());
        }
        pacer.wait(clock, block.t_ns);
        if tx.send(block).is_err() {
            return Ok(());
        }
    }
    Ok(())
}

/// A slot on its way through the frame-stage threads: the frame it was decoded from (none
/// for a dropped frame) and what earlier stages found on it.
struct PendingSlot {
    slot: VideoSlot,
    frame: Option<VideoFrame>,
    ctx: FrameContext,
}

/// Puts frames on the slot grid, fills gaps with absent slots, runs the signal stage and
/// looks up the text vector of each slot's time. Slots leave with features
/// `[video_signal, text]`; each frame-stage thread then inserts its vector before `text`,
/// so the aligner gets the layout's order `[video_signal, face, appearance, text]`.
fn video_features(
    rx: PolicyReceiver<VideoFrame>,
    tx: PolicySender<PendingSlot>,
    mut signal: VideoSignalStage,
    text: &TextTrack,
    period_ns: f64,
) -> Result<VideoFeaturesDone, RunError> {
    let mut timeline = VideoTimeline::new(1e9 / period_ns);
    for frame in &rx {
        let SlotDecision::Take {
            slot,
            missing_before,
        } = timeline.observe(frame.t_ns, &frame.image)
        else {
            continue;
        };
        let text_at = |s: u64| text.at(timeline.slot_time_ns(s)).map(<[f32]>::to_vec);
        let mut slots: Vec<PendingSlot> = (slot - missing_before..slot)
            .map(|s| PendingSlot {
                slot: VideoSlot {
                    index: s,
                    start_ns: timeline.slot_time_ns(s),
                    end_ns: timeline.slot_time_ns(s + 1),
                    decoded: false,
                    // A dropped frame has no video, but the transcript still covers its time.
                    features: vec![None, text_at(s)],
                },
                frame: None,
                ctx: FrameContext::default(),
            })
            .collect();
        let mut ctx = FrameContext::default();
        let features = vec![signal.process(&frame, &mut ctx)?, text_at(slot)];
        slots.push(PendingSlot {
            slot: VideoSlot {
                index: slot,
                start_ns: timeline.slot_time_ns(slot),
                end_ns: timeline.slot_time_ns(slot + 1),
                decoded: true,
                features,
            },
            frame: Some(frame),
            ctx,
        });
        for s in slots {
            if tx.send(s).is_err() {
                return Err(RunError::NextStopped {
                    thread: "video-features",
                    next: "the next frame stage",
                });
            }
        }
    }
    Ok(VideoFeaturesDone {
        timeline: timeline.stats().clone(),
        totals: signal.totals().clone(),
    })
}

/// One frame stage on its own thread (stages are pipelined, so at `--speed max` the facial
/// stage and the CNN use both cores; a frame waits at most one stage's time per stage).
/// Inserts the stage's vector before the text vector and hands the slot on.
fn frame_stage(
    name: &'static str,
    mut stage: Box<dyn FrameStage>,
    rx: PolicyReceiver<PendingSlot>,
    tx: PolicySender<PendingSlot>,
) -> Result<ModalityPresence, RunError> {
    let mut presence = ModalityPresence {
        modality: stage.spec().name.to_string(),
        present_frames: 0,
        decoded_frames: 0,
    };
    for mut p in &rx {
        let v = match &p.frame {
            Some(frame) => {
                presence.decoded_frames += 1;
                stage.process(frame, &mut p.ctx)?
            }
            None => None,
        };
        presence.present_frames += u64::from(v.is_some());
        let text_at = p.slot.features.len() - 1;
        p.slot.features.insert(text_at, v);
        if tx.send(p).is_err() {
            return Err(RunError::NextStopped {
                thread: name,
                next: "the next frame stage",
            });
        }
    }
    Ok(presence)
}

/// Hands the slots, all frame stages done, to the aligner (dropping the frames).
fn forward_slots(
    rx: PolicyReceiver<PendingSlot>,
    tx: PolicySender<VideoSlot>,
) -> Result<(), RunError> {
    for p in &rx {
        if tx.send(p.slot).is_err() {
            return Err(RunError::NextStopped {
                thread: "video-forward",
                next: "the aligner",
            });
        }
    }
    Ok(())
}

/// The thread name of a frame stage.
fn stage_thread_name(modality: &str) -> &'static str {
    match modality {
        "face" => "face-features",
        "appearance" => "appearance-features",
        _ => "frame-stage",
    }
}

fn audio_features(
    rx: PolicyReceiver<AudioBlock>,
    tx: PolicySender<Vec<Vec<AudioRow>>>,
    mut signal: AudioSignalStage,
    mut acoustic: LldExtractor,
) -> Result<AudioFeaturesDone, RunError> {
    let mut timeline = AudioTimelineStats::default();
    let send = |rows| {
        tx.send(rows).map_err(|_| RunError::NextStopped {
            thread: "audio-features",
            next: "the aligner",
        })
    };
    for block in &rx {
        timeline.observe(block.t_ns, block.samples.len(), block.sample_rate_hz);
        send(vec![signal.process(&block)?, acoustic.process(&block)?])?;
    }
    send(vec![signal.finish()?, acoustic.finish()?])?;
    if acoustic.sanitised_samples() > 0 {
        tracing::warn!(
            samples = acoustic.sanitised_samples(),
            "non-finite audio samples were replaced by 0 for the acoustic features"
        );
    }
    Ok(AudioFeaturesDone {
        timeline,
        totals: signal.totals().clone(),
    })
}

/// Joins video slots with audio rows, assembles windows and hands both to the writer.
#[allow(clippy::too_many_arguments)]
fn align_windows(
    slots: PolicyReceiver<VideoSlot>,
    rows: PolicyReceiver<Vec<Vec<AudioRow>>>,
    pools: Vec<PoolFn>,
    layout: &ModalityLayout,
    spans: &[PhaseSpan],
    windows: &crate::config::WindowConfig,
    period_ns: f64,
    writer: &StoreWriter,
    progress: &ProgressBar,
) -> Result<AlignDone, RunError> {
    let mut aligner = FrameAligner::new(pools);
    let mut assembler = WindowAssembler::new(windows.length_frames, windows.hop_frames, period_ns);
    let mut frames = 0u64;
    let mut emit = |record: FrameRecord| -> Result<(), RunError> {
        let record = Arc::new(record);
        writer.frame(record.clone())?;
        frames += 1;
        progress.inc(1);
        if let Some(w) = assembler.push(record) {
            let phase = phase_at(spans, w.mid_ns());
            writer.window(WindowRow::from_window(&w, layout, phase))?;
        }
        Ok(())
    };
    let (mut video_done, mut audio_done) = (false, false);
    let none_slots = never::<VideoSlot>();
    let none_rows = never::<Vec<Vec<AudioRow>>>();
    while !(video_done && audio_done) {
        // Hold back video while slots wait for audio, so memory stays bounded.
        let take_video = !video_done && (audio_done || aligner.pending_slots() < MAX_PENDING_SLOTS);
        let slot_rx = if take_video {
            slots.receiver()
        } else {
            &none_slots
        };
        let rows_rx = if audio_done {
            &none_rows
        } else {
            rows.receiver()
        };
        select! {
            recv(slot_rx) -> msg => match msg {
                Ok(slot) => aligner.push_video(slot),
                Err(_) => video_done = true,
            },
            recv(rows_rx) -> msg => match msg {
                Ok(per_stage) => {
                    for (k, r) in per_stage.into_iter().enumerate() {
                        aligner.push_audio(k, r);
                    }
                }
                Err(_) => {
                    audio_done = true;
                    aligner.end_audio();
                }
            },
        }
        for record in aligner.drain_ready() {
            emit(record)?;
        }
    }
    for record in aligner.finish() {
        emit(record)?;
    }
    Ok(AlignDone {
        frames,
        windows: assembler.windows_emitted(),
    })
}
