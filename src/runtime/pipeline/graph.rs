//! The pipeline's wiring: its queues ([`Queues`], one named field each), starting every
//! thread on them ([`start`]) and joining them into named results ([`join_all`]).
//!
//! Contract: [`start`] starts the graph of `mod.rs`'s diagram in pipeline order inside the
//! run's scope and returns a handle per thread ([`Handles`]); [`join_all`] joins every
//! handle before it looks at any result, so no thread outlives the run, and returns the
//! first error in pipeline order that is not [`RunError::NextStopped`] (a thread whose
//! downstream stopped reports only that; the downstream's own error is the cause).

use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use super::consumers::WindowConsumer;
use super::messages::{
    AlignDone, AudioFeaturesDone, AudioOut, PendingSlot, TextUpdate, VideoFeaturesDone,
};
use super::observe::{FrameWatch, QualityWatch};
use super::shared::Shared;
use super::text::{speech_recognition, text_features, TextInputs};
use super::threads::{
    align_windows, audio_features, capture, consume_windows, forward_slots, frame_stage,
    session_events, video_features, AlignInputs, AudioTells, CaptureContext,
};
use super::{Sources, MAX_PENDING_SLOTS};
use crate::capture::events::EventBatch;
use crate::capture::{AudioBlock, VideoFrame};
use crate::config::Config;
use crate::core::Window;
use crate::features::signal::EnergyTurns;
use crate::features::speech::stream::{Heard, SpeechStream};
use crate::features::text::TextTrack;
use crate::report::ModalityPresence;
use crate::runtime::queues::{policy_queue, Overflow, PolicyReceiver, PolicySender};
use crate::runtime::stages::{
    AudioSignalSlot, AudioStageSlot, FrameStageSlot, TextSlot, VideoSignalSlot,
};
use crate::runtime::RunError;
use crate::session::Event;
use crate::windows::align::AudioPool;
use crate::windows::{FrameAligner, VideoSlot};

/// Per-block audio stage output on its way to the aligner.
const AUDIO_OUT_QUEUE: usize = 64;
/// Video slots (features only, no image) on their way to the aligner.
pub(super) const VIDEO_OUT_QUEUE: usize = 32;
/// Pending slots between video-features and each frame stage: each carries its frame's
/// image (0.9 MB at 640x480), so this bound is what the stage chain can hold in images
/// (with four stages, 5 x 8 frames beside the capture queue). It was 32 like the
/// slots' queue, and replays held 13-21 MiB more at their peak: demo 323 against 310 MiB,
/// `grid` 409/388, `still` 422/404, `selfie` 401/385 (`scripts/replay_throughput.sh`,
/// 2026-11-30, one sitting, interleaved, medians of three; time 0.93-1.04x, within
/// noise). A bound of 4 saved no more. 8 keeps half a second of slack per stage for a
/// live stage that stalls (the capture queue drops the oldest frame behind a full chain).
const FRAME_STAGE_QUEUE: usize = 8;
/// Text updates on their way to the aligner, and event batches to the text stage.
const TEXT_QUEUE: usize = 64;
/// Windows waiting for each window consumer.
const WINDOW_QUEUE: usize = 16;

type Queue<T> = (PolicySender<T>, PolicyReceiver<T>);

/// Every queue of the graph, bounded, each with its overflow policy.
pub(super) struct Queues {
    /// video-capture -> video-features: the run's policy (live drops the oldest).
    frames: Queue<VideoFrame>,
    /// audio-capture -> audio-features.
    blocks: Queue<AudioBlock>,
    /// video-features -> the first frame stage (or video-forward).
    pending: Queue<PendingSlot>,
    /// video-forward -> align-windows.
    slots: Queue<VideoSlot>,
    /// audio-features -> align-windows.
    rows: Queue<AudioOut>,
    /// session-events -> text-features.
    batches: Queue<EventBatch>,
    /// text-features -> align-windows.
    text: Queue<TextUpdate>,
    /// audio-features -> speech-recognition (when the recogniser runs).
    speech: Option<Queue<AudioBlock>>,
    /// speech-recognition -> text-features.
    heard: Queue<Heard>,
    /// align-windows -> each window consumer, in consumer order.
    windows: Vec<Queue<Arc<Window>>>,
}

impl Queues {
    pub(super) fn new(
        config: &Config,
        video_overflow: Overflow,
        hears: bool,
        consumers: usize,
    ) -> Self {
        let audio_blocks = config.runtime.audio_queue_blocks;
        Self {
            frames: policy_queue(config.runtime.video_queue_frames, video_overflow),
            blocks: policy_queue(audio_blocks, Overflow::Block),
            pending: policy_queue(FRAME_STAGE_QUEUE, Overflow::Block),
            slots: policy_queue(VIDEO_OUT_QUEUE, Overflow::Block),
            rows: policy_queue(AUDIO_OUT_QUEUE, Overflow::Block),
            batches: policy_queue(TEXT_QUEUE, Overflow::Block),
            text: policy_queue(TEXT_QUEUE, Overflow::Block),
            speech: hears.then(|| policy_queue(audio_blocks, Overflow::Block)),
            heard: policy_queue(TEXT_QUEUE, Overflow::Block),
            windows: (0..consumers)
                .map(|_| policy_queue(WINDOW_QUEUE, Overflow::Block))
                .collect(),
        }
    }
}

/// The stages a run's threads take over, one field per thread (or chain of threads).
pub(super) struct Work {
    pub(super) sources: Sources,
    pub(super) video_signal: VideoSignalSlot,
    pub(super) frame_stages: Vec<FrameStageSlot>,
    pub(super) audio_signal: AudioSignalSlot,
    pub(super) audio_stages: Vec<AudioStageSlot>,
    pub(super) pools: Vec<AudioPool>,
    pub(super) text: TextSlot,
    pub(super) speech: Option<SpeechStream>,
    /// Every window consumer, the store first.
    pub(super) consumers: Vec<Box<dyn WindowConsumer>>,
}

type Handle<'s, T> = ScopedJoinHandle<'s, Result<T, RunError>>;
/// A thread's handle with its name.
type Named<'s, T> = (String, Handle<'s, T>);

/// One handle per thread of the graph.
pub(super) struct Handles<'s> {
    video_capture: Handle<'s, u64>,
    video_features: Handle<'s, VideoFeaturesDone>,
    /// The frame stages' threads, then video-forward (which reports no presence).
    frame_stages: Vec<Named<'s, Option<ModalityPresence>>>,
    audio_capture: Handle<'s, u64>,
    audio_features: Handle<'s, AudioFeaturesDone>,
    speech: Option<Handle<'s, ()>>,
    session_events: Handle<'s, Vec<Event>>,
    text_features: Handle<'s, Vec<Event>>,
    consumers: Vec<Named<'s, ()>>,
    align: Handle<'s, AlignDone>,
}

/// What the joined graph produced.
pub(super) struct Joined {
    /// Frames the live video queue evicted.
    pub(super) video_queue_drops: u64,
    /// Every event of the session (the recogniser's utterances among them), time-sorted.
    pub(super) events: Vec<Event>,
    pub(super) video: VideoFeaturesDone,
    pub(super) audio: AudioFeaturesDone,
    pub(super) align: AlignDone,
    pub(super) presence: Vec<ModalityPresence>,
}

/// Starts a pipeline thread: named, in `scope`, its error logged where it happened (a
/// stopped downstream is not logged: its own thread says why).
fn spawn<'s, T: Send + 's>(
    scope: &'s Scope<'s, '_>,
    name: &str,
    f: impl FnOnce() -> Result<T, RunError> + Send + 's,
) -> Result<Handle<'s, T>, RunError> {
    crate::runtime::spawn_in(scope, name, move || {
        let out = f();
        if let Err(e) = &out {
            if !matches!(e, RunError::NextStopped { .. }) {
                tracing::error!("{e}");
            }
        }
        out
    })
}

/// Starts every thread of the graph on `queues`.
pub(super) fn start<'s, 'a: 's>(
    scope: &'s Scope<'s, '_>,
    work: Work,
    queues: Queues,
    sh: &'s Shared<'a>,
) -> Result<Handles<'s>, RunError> {
    let Queues {
        frames,
        blocks,
        pending,
        slots,
        rows,
        batches,
        text,
        speech,
        heard,
        windows,
    } = queues;
    let Sources {
        mut video,
        audio,
        events,
    } = work.sources;
    let cx = CaptureContext {
        pacer: sh.pacer,
        realtime_priority: sh.realtime_priority,
        clock: sh.clock,
        stop: sh.stop,
        stopped: sh.stopped,
        figures: sh.figures,
        cut: sh.cut,
    };
    let (frame_tx, frame_rx) = frames;
    let video_capture = spawn(scope, "video-capture", move || {
        let next = || video.next_frame().map_err(RunError::from);
        capture("video-capture", next, |f: &VideoFrame| f.t_ns, frame_tx, cx)
    })?;
    let (pending_tx, pending_rx) = pending;
    let video_signal = work.video_signal;
    let video_features = spawn(scope, "video-features", move || {
        video_features(
            frame_rx,
            pending_tx,
            video_signal,
            sh.layout,
            sh.period_ns,
            sh.figures,
        )
    })?;
    let frame_stages = start_frame_stages(scope, work.frame_stages, pending_rx, slots.0, sh)?;
    let audio_work = AudioWork {
        source: audio,
        signal: work.audio_signal,
        stages: work.audio_stages,
        speech: work.speech,
        blocks,
        rows: rows.0,
        to_speech: speech,
        heard: heard.0,
    };
    let (audio_capture, audio_features, speech) = start_audio(scope, audio_work, cx, sh)?;
    let heard_rx = heard.1;
    let (batch_tx, batch_rx) = batches;
    let session_events = spawn(scope, "session-events", move || {
        session_events(events, batch_tx, sh.writer, sh.stop)
    })?;
    let hearing = speech.is_some();
    let (text_modality, text_stage, text_tx) = (work.text.modality, work.text.stage, text.0);
    let text_features = spawn(scope, "text-features", move || {
        let inputs = TextInputs {
            batches: batch_rx,
            heard: hearing.then_some(heard_rx),
            live: sh.live_text,
            speaker: &sh.config.text.speaker,
            latency_from: sh.latency_from(),
            observer: sh.observer,
            failures: sh.failures,
            words_reach_ns: sh.words_reach_ns,
        };
        text_features(inputs, text_tx, text_stage, sh.writer, sh.figures)
    })?;
    let (window_txs, window_rxs): (Vec<_>, Vec<_>) = windows.into_iter().unzip();
    let consumers = start_consumers(scope, work.consumers, window_rxs, sh)?;
    let inputs = AlignInputs {
        // Live events are known only `events_lag_ns` behind now: hold that many slots on
        // top, so waiting for them never stalls the camera.
        max_pending: MAX_PENDING_SLOTS + (sh.events_lag_ns as f64 / sh.period_ns).ceil() as usize,
        slots: slots.1,
        rows: rows.1,
        text: text.1,
    };
    let pools = work.pools;
    let align = spawn(scope, "align-windows", move || {
        let track = TextTrack::new(sh.config.text.horizon_ms.saturating_mul(1_000_000));
        let aligner = FrameAligner::new(pools, Some((text_modality, track)));
        // Live: frames are stored before their words are known (the transcript wait), so
        // a killed service loses only what audio had not reached.
        let aligner = if sh.live_text {
            aligner.storing_before_words()
        } else {
            aligner
        };
        align_windows(inputs, aligner, sh, window_txs)
    })?;
    Ok(Handles {
        video_capture,
        video_features,
        frame_stages,
        audio_capture,
        audio_features,
        speech,
        session_events,
        text_features,
        consumers,
        align,
    })
}

/// The audio branch's work and its queues.
struct AudioWork {
    source: Box<dyn crate::capture::AudioSource>,
    signal: AudioSignalSlot,
    stages: Vec<AudioStageSlot>,
    speech: Option<SpeechStream>,
    blocks: Queue<AudioBlock>,
    rows: PolicySender<AudioOut>,
    to_speech: Option<Queue<AudioBlock>>,
    heard: PolicySender<Heard>,
}

/// What the audio branch's threads return.
type AudioHandles<'s> = (
    Handle<'s, u64>,
    Handle<'s, AudioFeaturesDone>,
    Option<Handle<'s, ()>>,
);

/// audio-capture -> audio-features (-> speech-recognition, when the recogniser runs).
fn start_audio<'s, 'a: 's>(
    scope: &'s Scope<'s, '_>,
    work: AudioWork,
    cx: CaptureContext<'s>,
    sh: &'s Shared<'a>,
) -> Result<AudioHandles<'s>, RunError> {
    let AudioWork {
        mut source,
        signal,
        stages,
        speech,
        blocks: (block_tx, block_rx),
        rows,
        to_speech,
        heard,
    } = work;
    let audio_capture = spawn(scope, "audio-capture", move || {
        let next = || source.next_block().map_err(RunError::from);
        capture("audio-capture", next, |b: &AudioBlock| b.t_ns, block_tx, cx)
    })?;
    let (speech_tx, speech_rx) = to_speech.unzip();
    // Without the learned voice activity, the `voice` topic by the energy rule; clipping
    // is told from the audio rows, where it is first complete.
    let tells = AudioTells {
        energy_voice: sh
            .observer
            .filter(|_| speech.is_none())
            .map(|o| (EnergyTurns::new(sh.config.asr.min_silence_ms), o)),
        quality: sh
            .observer
            .map(|o| (o, QualityWatch::audio_only(sh.layout))),
        failures: sh.failures,
    };
    let audio_features = spawn(scope, "audio-features", move || {
        audio_features(block_rx, rows, speech_tx, signal, stages, tells, sh.figures)
    })?;
    let speech = match (speech, speech_rx) {
        (Some(stream), Some(rx)) => Some(spawn(scope, "speech-recognition", move || {
            speech_recognition(rx, heard, stream, sh.observer, sh.figures, sh.failures)
        })?),
        _ => None,
    };
    Ok((audio_capture, audio_features, speech))
}

/// One thread per frame stage, chained: video-features -> face -> appearance -> ... ->
/// video-forward -> align (video-forward turns pending slots into aligner slots and tells
/// the observer what the frame stages found).
fn start_frame_stages<'s, 'a: 's>(
    scope: &'s Scope<'s, '_>,
    stages: Vec<FrameStageSlot>,
    mut input: PolicyReceiver<PendingSlot>,
    to_aligner: PolicySender<VideoSlot>,
    sh: &'s Shared<'a>,
) -> Result<Vec<Named<'s, Option<ModalityPresence>>>, RunError> {
    let mut threads = Vec::new();
    for slot in stages {
        let name = format!("{}-features", slot.stage.spec().name);
        let (tx, rx) = policy_queue::<PendingSlot>(FRAME_STAGE_QUEUE, Overflow::Block);
        let from = std::mem::replace(&mut input, rx);
        let thread = name.clone();
        let handle = spawn(scope, &name, move || {
            frame_stage(&thread, slot, from, tx, sh.figures, sh.failures).map(Some)
        })?;
        threads.push((name, handle));
    }
    // Perception messages are told where their data are first complete, never behind the
    // aligner's transcript wait: the face and brightness here, after the frame stages.
    let watch = sh
        .observer
        .map(|o| (o, FrameWatch::new(sh.layout, 1e9 / sh.period_ns)));
    let forward = spawn(scope, "video-forward", move || {
        forward_slots(input, to_aligner, watch).map(|()| None)
    })?;
    threads.push(("video-forward".into(), forward));
    Ok(threads)
}

/// One thread per window consumer, each fed by its own queue.
fn start_consumers<'s, 'a: 's>(
    scope: &'s Scope<'s, '_>,
    consumers: Vec<Box<dyn WindowConsumer>>,
    queues: Vec<PolicyReceiver<Arc<Window>>>,
    sh: &'s Shared<'a>,
) -> Result<Vec<Named<'s, ()>>, RunError> {
    let mut threads = Vec::new();
    for (consumer, rx) in consumers.into_iter().zip(queues) {
        let name = consumer.thread_name();
        let thread = name.clone();
        let handle = spawn(scope, &name, move || {
            consume_windows(&thread, consumer, rx, sh.figures, sh.failures)
        })?;
        threads.push((name, handle));
    }
    Ok(threads)
}

fn join<T>(handle: Handle<'_, T>, name: &str) -> Result<T, RunError> {
    handle.join().unwrap_or_else(|_| {
        Err(RunError::Panicked {
            thread: name.into(),
        })
    })
}

/// Joins every thread, then returns what they produced, or the cause of the failure: the
/// first error in pipeline order that is not a stopped downstream.
pub(super) fn join_all(h: Handles<'_>) -> Result<Joined, RunError> {
    // Join everything before looking at errors, so no thread outlives the run.
    let video_capture = join(h.video_capture, "video-capture");
    let audio_capture = join(h.audio_capture, "audio-capture");
    let session_events = join(h.session_events, "session-events");
    let video_features = join(h.video_features, "video-features");
    let stages: Vec<_> = h
        .frame_stages
        .into_iter()
        .map(|(n, t)| join(t, &n))
        .collect();
    let audio_features = join(h.audio_features, "audio-features");
    let speech = h.speech.map(|t| join(t, "speech-recognition"));
    let text_features = join(h.text_features, "text-features");
    let align = join(h.align, "align-windows");
    let consumed: Vec<_> = h.consumers.into_iter().map(|(n, t)| join(t, &n)).collect();

    let mut errors: Vec<RunError> = Vec::new();
    let e = &mut errors;
    let video_queue_drops = take(e, video_capture);
    let _ = take(e, audio_capture);
    let events = take(e, session_events);
    let video = take(e, video_features);
    let mut presence: Vec<ModalityPresence> = Vec::new();
    for r in stages {
        presence.extend(take(e, r).flatten());
    }
    let audio = take(e, audio_features);
    if let Some(r) = speech {
        let _ = take(e, r);
    }
    let heard = take(e, text_features);
    let align = take(e, align);
    for r in consumed {
        let _ = take(e, r);
    }
    if let (
        Some(video_queue_drops),
        Some(mut events),
        Some(heard),
        Some(video),
        Some(audio),
        Some(align),
    ) = (video_queue_drops, events, heard, video, audio, align)
    {
        if errors.is_empty() {
            // The recogniser's utterances among the session's events, in time order.
            events.extend(heard);
            events.sort_by_key(|e| e.t_ns);
            return Ok(Joined {
                video_queue_drops,
                events,
                video,
                audio,
                align,
                presence,
            });
        }
    }
    let cause = errors
        .iter()
        .position(|e| !matches!(e, RunError::NextStopped { .. }))
        .unwrap_or(0);
    Err(errors.swap_remove(cause))
}

/// The result's value, or `None` with its error kept in `errors`.
fn take<T>(errors: &mut Vec<RunError>, r: Result<T, RunError>) -> Option<T> {
    r.map_err(|e| errors.push(e)).ok()
}
