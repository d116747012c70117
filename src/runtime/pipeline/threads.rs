//! The bodies of the pipeline's threads, in graph order: capture, the video and audio
//! feature threads, the frame stages, the session events (the recogniser and the text stage
//! are `text.rs`), the aligner and window
//! assembler, and the window consumers' loop. Each takes its queues and returns when its
//! input ends or the run stops; [`super::run`] wires them.

use super::consumers::WindowConsumer;
use super::failures::StageFailures;
use super::figures::{Figures, LatencySummary, Meter};
use super::messages::{
    AlignDone, AudioFeaturesDone, AudioOut, PendingSlot, TextUpdate, VideoFeaturesDone,
};
use super::observe::{tell_voice, FrameWatch, Observer, QualityWatch};
use super::shared::Shared;
use super::{failures, next_stopped};
use crate::capture::events::{EventBatch, EventSource};
use crate::capture::timeline::{AudioTimelineStats, SlotDecision, VideoTimeline};
use crate::capture::{AudioBlock, VideoFrame};
use crate::clock::{Clock, Pacer};
use crate::core::{FrameRecord, ModalityLayout, StoryInPlay, Window};
use crate::features::signal::EnergyTurns;
use crate::features::{AudioStage, FrameContext, FrameStage};
use crate::report::ModalityPresence;
use crate::runtime::queues::{PolicyReceiver, PolicySender};
use crate::runtime::stages::{
    AudioSignalSlot, AudioStageSlot, FrameStageSlot, StageSlot, VideoSignalSlot,
};
use crate::runtime::RunError;
use crate::session::events::phase_at;
use crate::session::{Event, PhaseSpan};
use crate::store::StoreWriter;
use crate::windows::align::Released;
use crate::windows::{FrameAligner, VideoSlot, WindowAssembler};
use crate::Nanos;
use crossbeam_channel::{never, select};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a capture thread shares with the run: pacing, the clock and the stop flags.
#[derive(Clone, Copy)]
pub(super) struct CaptureContext<'a> {
    pub(super) pacer: &'a Pacer,
    pub(super) realtime_priority: u8,
    pub(super) clock: &'a dyn Clock,
    pub(super) stop: &'a AtomicBool,
    /// Set when `stop` ended the capture before the end of its input.
    pub(super) stopped: &'a AtomicBool,
    pub(super) figures: &'a Figures,
    /// Where an input that ends on bad data is recorded (see [`Shared::cut`]).
    pub(super) cut: &'a std::sync::Mutex<Vec<(String, String)>>,
}

/// The capture loop of one source: reads an item, stops early when the stop flag is set,
/// paces the item to its stamp, hands it on. An input that turns out corrupt or cut short
/// after its first item ends there as if at its end, the error recorded in `cx.cut`: what
/// decoded before it is the session's (issue 55: a truncated video kept nothing). Returns
/// how many items the queue evicted (live video only; every other queue blocks).
pub(super) fn capture<T>(
    thread: &str,
    mut next: impl FnMut() -> Result<Option<T>, RunError>,
    stamp: impl Fn(&T) -> Nanos,
    tx: PolicySender<T>,
    cx: CaptureContext<'_>,
) -> Result<u64, RunError> {
    crate::runtime::realtime_priority(cx.realtime_priority);
    let mut meter = Meter::new(thread);
    let mut items = 0u64;
    loop {
        let item = match meter.time(&mut next) {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) if items > 0 && e.is_cut_input() => {
                tracing::warn!("{thread}: the input ends on bad data after {items} item(s), which are kept: {e}");
                if let Ok(mut cut) = cx.cut.lock() {
                    cut.push((thread.to_string(), e.to_string()));
                }
                break;
            }
            Err(e) => return Err(e),
        };
        items += 1;
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
pub(super) fn video_features(
    rx: PolicyReceiver<VideoFrame>,
    tx: PolicySender<PendingSlot>,
    signal: VideoSignalSlot,
    layout: &ModalityLayout,
    period_ns: f64,
    figures: &Figures,
) -> Result<VideoFeaturesDone, RunError> {
    let StageSlot {
        modality,
        stage: mut signal,
    } = signal;
    let mut meter = Meter::new("video-features");
    let mut timeline = VideoTimeline::new(1e9 / period_ns);
    for mut frame in &rx {
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
        // The stages see the frame at its slot's time: a live capture stamp jitters by
        // milliseconds (and after a camera comes back, by up to half a period) where its
        // recording, replayed, sits on the grid; a stage that reads the time (the body's
        // filter) must get the same from both.
        frame.t_ns = taken.start_ns;
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
pub(super) fn frame_stage(
    thread: &str,
    slot: FrameStageSlot,
    rx: PolicyReceiver<PendingSlot>,
    tx: PolicySender<PendingSlot>,
    figures: &Figures,
    cx_failures: &StageFailures,
) -> Result<ModalityPresence, RunError> {
    let FrameStageSlot {
        modality,
        mut stage,
    } = slot;
    let mut meter = Meter::new(thread);
    let name = stage.spec().name.to_string();
    let mut presence = ModalityPresence {
        modality: name.clone(),
        present_frames: 0,
        decoded_frames: 0,
    };
    // Once the stage fails, its modality is absent from every later frame.
    let mut failed = false;
    for mut p in &rx {
        let v = match &p.frame {
            Some(frame) if !failed => {
                presence.decoded_frames += 1;
                let out = match failures::injected(&name, p.slot.start_ns) {
                    Some(e) => Err(e),
                    None => meter
                        .time(|| stage.process(frame, &mut p.ctx))
                        .map_err(|e| e.to_string()),
                };
                out.unwrap_or_else(|e| {
                    failed = true;
                    cx_failures.fail(&name, p.slot.start_ns, &e);
                    None
                })
            }
            Some(_) => {
                presence.decoded_frames += 1;
                None
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

/// Hands the slots, all frame stages done, to the aligner (dropping the frames), telling
/// the observer of each frame's face and brightness first.
pub(super) fn forward_slots(
    rx: PolicyReceiver<PendingSlot>,
    tx: PolicySender<VideoSlot>,
    mut watch: Option<(&dyn Observer, FrameWatch)>,
) -> Result<(), RunError> {
    for mut p in &rx {
        if let Some((observer, w)) = watch.as_mut() {
            // The watch reads a frame record; the slot's features are lent to it.
            let record = FrameRecord {
                index: p.slot.index,
                t_ns: p.slot.start_ns,
                decoded: p.slot.decoded,
                features: std::mem::take(&mut p.slot.features),
            };
            let screening = p.frame.as_ref().and_then(|f| f.screening);
            w.frame(&record, screening, *observer);
            p.slot.features = record.features;
        }
        if tx.send(p.slot).is_err() {
            return Err(next_stopped("video-forward", "the aligner"));
        }
    }
    Ok(())
}

/// Whom the audio thread tells what it finds, besides the aligner.
pub(super) struct AudioTells<'a> {
    /// The energy rule's `voice` messages, when the learned voice activity does not run.
    pub(super) energy_voice: Option<(EnergyTurns, &'a dyn Observer)>,
    /// The microphone's `quality` messages (clipping).
    pub(super) quality: Option<(&'a dyn Observer, QualityWatch)>,
    /// Where a failing audio stage is recorded.
    pub(super) failures: &'a StageFailures,
}

/// Runs the audio stages on each block (and hands a copy to the recogniser, when on).
pub(super) fn audio_features(
    rx: PolicyReceiver<AudioBlock>,
    tx: PolicySender<AudioOut>,
    speech: Option<PolicySender<AudioBlock>>,
    signal: AudioSignalSlot,
    mut stages: Vec<AudioStageSlot>,
    tells: AudioTells<'_>,
    figures: &Figures,
) -> Result<AudioFeaturesDone, RunError> {
    let AudioTells {
        mut energy_voice,
        quality: mut watch,
        failures,
    } = tells;
    let StageSlot {
        modality: signal_id,
        stage: mut signal,
    } = signal;
    let mut meter = Meter::new("audio-features");
    let mut timeline = AudioTimelineStats::default();
    let send = |rows| {
        tx.send(rows)
            .map_err(|_| next_stopped("audio-features", "the aligner"))
    };
    // The recogniser's copy stops when the recogniser has failed (it drains what it has).
    let mut speech = speech;
    // Stages that failed: their modality is retired from the aligner and never run again.
    let mut failed: Vec<bool> = vec![false; stages.len()];
    for block in &rx {
        timeline.observe(block.t_ns, block.samples.len(), block.sample_rate_hz);
        if let Some(to_speech) = &speech {
            if to_speech.send(block.clone()).is_err() {
                // Ended after its failure, which it recorded: the session goes on.
                speech = None;
            }
        }
        let rows = meter.time(|| -> Result<_, RunError> {
            let signal_rows = signal.process(&block)?;
            // Without the learned voice activity, the energy rule's turns go to the
            // subscribers as soon as the block's rows show them.
            if let Some((turns, observer)) = energy_voice.as_mut() {
                let voice: Vec<_> = signal_rows.iter().filter_map(|r| turns.push(r)).collect();
                tell_voice(*observer, "energy", &voice, block.handed_ns);
            }
            if let Some((observer, w)) = watch.as_mut() {
                w.rows(&signal_rows, *observer);
            }
            let mut rows = AudioOut {
                rows: vec![(signal_id, signal_rows)],
                retired: Vec::new(),
            };
            for (s, failed) in stages.iter_mut().zip(failed.iter_mut()) {
                if *failed {
                    continue;
                }
                let name = s.stage.spec().name;
                let out = match failures::injected(name, block.t_ns) {
                    Some(e) => Err(e),
                    None => s.stage.process(&block).map_err(|e| e.to_string()),
                };
                match out {
                    Ok(r) => rows.rows.push((s.modality, r)),
                    Err(e) => {
                        *failed = true;
                        failures.fail(name, block.t_ns, &e);
                        rows.retired.push(s.modality);
                    }
                }
            }
            Ok(rows)
        })?;
        send(rows)?;
    }
    let signal_rows = signal.finish()?;
    if let Some((turns, observer)) = energy_voice.as_mut() {
        let mut voice: Vec<_> = signal_rows.iter().filter_map(|r| turns.push(r)).collect();
        voice.extend(turns.finish());
        tell_voice(*observer, "energy", &voice, None);
    }
    if let Some((observer, w)) = watch.as_mut() {
        w.rows(&signal_rows, *observer);
    }
    let mut rows = AudioOut {
        rows: vec![(signal_id, signal_rows)],
        retired: Vec::new(),
    };
    let end_ns = timeline.end_t_ns.unwrap_or(0);
    for (s, failed) in stages.iter_mut().zip(failed) {
        if failed {
            continue;
        }
        match s.stage.finish() {
            Ok(r) => rows.rows.push((s.modality, r)),
            Err(e) => {
                failures.fail(s.stage.spec().name, end_ns, &e);
                rows.retired.push(s.modality);
            }
        }
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
pub(super) fn session_events(
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

/// The stories known to the aligner: shown ones and retrieval sets, in time order.
#[derive(Default)]
pub(super) struct InPlay {
    pub(super) shown: Vec<Arc<StoryInPlay>>,
    pub(super) retrievals: Vec<(Nanos, Vec<Arc<StoryInPlay>>)>,
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

pub(super) struct AlignInputs {
    /// Slots the aligner may hold before it stops taking video.
    pub(super) max_pending: usize,
    pub(super) slots: PolicyReceiver<VideoSlot>,
    pub(super) rows: PolicyReceiver<AudioOut>,
    pub(super) text: PolicyReceiver<TextUpdate>,
}

/// What the text stage told the aligner: phases entered, stories shown or retrieved, and
/// the utterances' vectors with how far the events are known.
fn take_text(
    update: TextUpdate,
    phases: &mut Vec<PhaseSpan>,
    stories: &mut InPlay,
    aligner: &mut FrameAligner,
) {
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

/// Joins video slots with audio rows and text, assembles windows, hands frames to the
/// writer and windows to every consumer.
pub(super) fn align_windows(
    inputs: AlignInputs,
    mut aligner: FrameAligner,
    sh: &Shared<'_>,
    consumers: Vec<PolicySender<Arc<Window>>>,
) -> Result<AlignDone, RunError> {
    let windows = &sh.config.windows;
    let mut meter = Meter::new("align-windows");
    let mut phases: Vec<PhaseSpan> = Vec::new();
    let mut stories = InPlay::default();
    let mut out = FramesOut {
        sh,
        // Live: frames are stored once heard (their words follow), so a killed service
        // keeps them; replays store each frame whole.
        words_later: aligner.words_later(),
        latency_from: sh.latency_from(),
        latencies_us: Vec::new(),
        frames: 0,
        assembler: WindowAssembler::new(windows.length_frames, windows.hop_frames, sh.period_ns),
        consumers,
    };
    let (mut video_done, mut audio_done, mut text_done) = (false, false, false);
    let none_slots = never::<VideoSlot>();
    let none_rows = never::<AudioOut>();
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
                Ok(out) => {
                    for (m, r) in out.rows {
                        aligner.push_audio(m, r);
                    }
                    for m in out.retired {
                        aligner.retire_audio(m);
                    }
                }
                Err(_) => {
                    audio_done = true;
                    aligner.end_audio();
                }
            },
            recv(text_rx) -> msg => match msg {
                Ok(update) => take_text(update, &mut phases, &mut stories, &mut aligner),
                Err(_) => {
                    text_done = true;
                    if let Some(track) = aligner.text_track() {
                        track.end();
                    }
                }
            },
        }
        let released = meter.time(|| aligner.drain_ready());
        out.emit(released, &phases, &stories)?;
    }
    out.emit(aligner.finish(), &phases, &stories)?;
    meter.done(sh.figures, out.consumers.first());
    Ok(AlignDone {
        frames: out.frames,
        windows: out.assembler.windows_emitted(),
        latency: LatencySummary::of(out.latencies_us),
    })
}

/// Where the aligner's released frames go: the store writer (live: each frame once heard,
/// its words when known), and the window assembler (complete frames only).
struct FramesOut<'a, 's> {
    sh: &'a Shared<'s>,
    words_later: Option<crate::core::ModalityId>,
    latency_from: Option<(&'s dyn Clock, Nanos)>,
    latencies_us: Vec<u32>,
    frames: u64,
    assembler: WindowAssembler,
    consumers: Vec<PolicySender<Arc<Window>>>,
}

impl FramesOut<'_, '_> {
    fn emit(
        &mut self,
        released: Released,
        phases: &[PhaseSpan],
        stories: &InPlay,
    ) -> Result<(), RunError> {
        for record in &released.heard {
            self.store(record)?;
        }
        for record in released.complete {
            let record = Arc::new(record);
            match self.words_later {
                Some(m) => self.sh.writer.frame_later(record.clone(), m)?,
                None => self.store(&record)?,
            }
            self.assemble(record, phases, stories)?;
        }
        Ok(())
    }

    /// Hands a frame to the store writer (without its words when they come later).
    fn store(&mut self, record: &Arc<FrameRecord>) -> Result<(), RunError> {
        if let (Some((clock, start)), true) = (self.latency_from, record.decoded) {
            // Capture (the slot's time on the session clock) to handed to the writer.
            let age = clock.now_ns().saturating_sub(start + record.t_ns);
            self.latencies_us
                .push(u32::try_from(age / 1_000).unwrap_or(u32::MAX));
        }
        match self.words_later {
            Some(m) => self.sh.writer.frame_before(record.clone(), m)?,
            None => self.sh.writer.frame(record.clone())?,
        }
        self.frames += 1;
        self.sh.progress.advance(1);
        Ok(())
    }

    /// Pushes a complete frame into the assembler and hands each window it completes to
    /// every consumer.
    fn assemble(
        &mut self,
        record: Arc<FrameRecord>,
        phases: &[PhaseSpan],
        stories: &InPlay,
    ) -> Result<(), RunError> {
        if let Some(mut w) = self.assembler.push(record) {
            // Decided now, from the phase events known (all up to the last frame's start).
            w.phase = phase_at(phases, w.mid_ns());
            w.stories = stories.at(w.end_ns);
            let w = Arc::new(w);
            for c in &self.consumers {
                if c.send(w.clone()).is_err() {
                    return Err(next_stopped("align-windows", "a window consumer"));
                }
            }
        }
        Ok(())
    }
}

/// One window consumer on its own thread.
pub(super) fn consume_windows(
    thread: &str,
    mut consumer: Box<dyn WindowConsumer>,
    rx: PolicyReceiver<Arc<Window>>,
    figures: &Figures,
    failures: &StageFailures,
) -> Result<(), RunError> {
    let mut meter = Meter::new(thread);
    // A consumer that fails (fusion's models) is told no more windows; the store's own
    // errors end the run (the store is the session).
    let mut failed = false;
    let fail = |e: RunError, at_ns: Nanos, failed: &mut bool| match e {
        RunError::Store(_) => Err(e),
        e => {
            *failed = true;
            failures.fail(thread, at_ns, &e);
            Ok(())
        }
    };
    let mut last_ns = 0;
    for w in &rx {
        if failed {
            continue;
        }
        last_ns = w.end_ns;
        let out = match failures::injected(thread, w.end_ns) {
            Some(e) => Err(RunError::Injected {
                thread: thread.into(),
                message: e,
            }),
            None => meter.time(|| consumer.consume(&w)),
        };
        if let Err(e) = out {
            fail(e, w.end_ns, &mut failed)?;
            // Windows it took before the failure and holds for a batch are still worth
            // its flush (a model that fails again loses only them).
            if let Err(e) = consumer.finish() {
                tracing::warn!("{thread}: windows held before the failure are lost: {e}");
            }
        }
    }
    // Not an item of its own: a flush of windows already counted.
    if !failed {
        if let Err(e) = consumer.finish() {
            fail(e, last_ns, &mut failed)?;
        }
    }
    meter.done::<()>(figures, None);
    Ok(())
}
