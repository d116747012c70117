//! The words of a session: the station's recogniser on its own thread
//! (`speech-recognition`) and the text stage (`text-features`), which merges what the
//! recogniser heard with the session's events, stores the recogniser's utterances, tells the
//! robot's voice apart, and tells the aligner how far the text is known. [`super::run`]
//! wires them.

use super::failures::StageFailures;
use super::figures::{Figures, LatencySummary, Meter};
use super::messages::TextUpdate;
use super::observe::{tell_voice, Observer, Topic};
use super::{failures, next_stopped};
use crate::capture::events::EventBatch;
use crate::capture::AudioBlock;
use crate::clock::Clock;
use crate::core::StoryInPlay;
use crate::features::signal::VoiceChange;
use crate::features::speech::stream::{Heard, SpeechStream};
use crate::features::text::{EmbeddedUtterance, RetrievalSet, TextStage};
use crate::runtime::queues::{PolicyReceiver, PolicySender};
use crate::runtime::RunError;
use crate::session::{Event, EventKind, PhaseSpan};
use crate::store::StoreWriter;
use crate::Nanos;
use crossbeam_channel::{never, select};

/// The station's recogniser on its own thread: hears the audio blocks and hands on what it
/// heard, whenever an utterance ended or it got at least [`HEARD_STEP_NS`] further.
pub(super) fn speech_recognition(
    rx: PolicyReceiver<AudioBlock>,
    tx: PolicySender<Heard>,
    mut stream: SpeechStream,
    observer: Option<&dyn Observer>,
    figures: &Figures,
    failures: &StageFailures,
) -> Result<(), RunError> {
    let mut meter = Meter::new("speech-recognition");
    let mut sent_until: Nanos = 0;
    let mut sent_through: Nanos = 0;
    // Voice changes go to the subscribers before the block's ended segments are recognised
    // (hundreds of milliseconds): a robot waiting for its turn hears the silence at once.
    let tell = |voice: &[VoiceChange], handed_ns: Option<Nanos>| {
        if let Some(o) = observer {
            tell_voice(o, "silero-vad-v6", voice, handed_ns);
        }
    };
    let send = |heard: Heard| {
        tx.send(heard)
            .map_err(|_| next_stopped("speech-recognition", "the text stage"))
    };
    // A failure ends the recogniser for the rest of the session (the text stage then knows
    // the words are complete); the audio goes on without it.
    let failed = |at_ns: Nanos, e: &dyn std::fmt::Display| {
        failures.fail("speech-recognition", at_ns, e);
        Ok(())
    };
    for block in &rx {
        if let Some(e) = failures::injected("speech-recognition", block.t_ns) {
            return failed(block.t_ns, &e);
        }
        let voice = match meter.time(|| stream.hear(block.t_ns, &block.samples)) {
            Ok(v) => v,
            Err(e) => return failed(block.t_ns, &e),
        };
        tell(&voice, block.handed_ns);
        let heard = match meter.time(|| stream.recognise_heard()) {
            Ok(h) => h,
            Err(e) => return failed(block.t_ns, &e),
        };
        // An utterance or a voice change goes on at once; otherwise only a step further.
        if !heard.utterances.is_empty()
            || !voice.is_empty()
            || heard.until_ns >= sent_until + HEARD_STEP_NS
            || heard.through_ns >= sent_through + HEARD_STEP_NS
        {
            sent_until = heard.until_ns;
            sent_through = heard.through_ns;
            send(heard)?;
        }
    }
    let heard = match meter.time(|| stream.finish()) {
        Ok(h) => h,
        Err(e) => return failed(Nanos::MAX, &e),
    };
    tell(&heard.voice, None);
    send(heard)?;
    meter.done(figures, Some(&tx));
    Ok(())
}

/// How far the recogniser must get before it says so with no new utterance.
const HEARD_STEP_NS: Nanos = 100_000_000;

/// What the text stage listens to.
pub(super) struct TextInputs<'a> {
    pub(super) batches: PolicyReceiver<EventBatch>,
    /// The recogniser's utterances, when it runs.
    pub(super) heard: Option<PolicyReceiver<Heard>>,
    /// Live: text is known as far as the events are (the transcript wait behind now), the
    /// recogniser's words counting when they came in time; replay: as far as both got.
    pub(super) live: bool,
    /// The participant's speaker name (`text.speaker`).
    pub(super) speaker: &'a str,
    /// Paced runs: the clock and the session's start on it, to measure how long an
    /// utterance took from its end to the store writer.
    pub(super) latency_from: Option<(&'a dyn Clock, Nanos)>,
    /// Told each utterance as it is stored.
    pub(super) observer: Option<&'a dyn Observer>,
    /// Live runs and replays of live recordings: how far before the moment the recogniser
    /// decided an utterance had ended its words may reach back into frames (the transcript
    /// wait). `None`: a recording's words cover all of their utterance.
    pub(super) words_reach_ns: Option<Nanos>,
    pub(super) failures: &'a StageFailures,
}

/// Embeds the participant's utterances as their events arrive (and the recogniser's, as
/// it hears them), stores the recogniser's, and tells the aligner what is known:
/// utterances, phases and how far. Returns the recogniser's utterances as events.
pub(super) fn text_features(
    inputs: TextInputs<'_>,
    tx: PolicySender<TextUpdate>,
    mut stage: TextStage,
    writer: &StoreWriter,
    figures: &Figures,
) -> Result<Vec<Event>, RunError> {
    let failures = inputs.failures;
    let mut meter = Meter::new("text-features");
    let mut events_known: Nanos = 0;
    // How far the recogniser's utterances are known, and how far it has heard (nothing
    // to wait for when it does not run).
    let heard_from: Nanos = if inputs.heard.is_some() {
        0
    } else {
        Nanos::MAX
    };
    let (mut heard_known, mut heard_through) = (heard_from, heard_from);
    // The robot's own utterances (the dialogue app's), to tell its voice from the
    // participant's in what the microphone heard.
    let mut robot: Vec<(u64, u64)> = Vec::new();
    let mut heard_events: Vec<Event> = Vec::new();
    let mut latencies_us: Vec<u32> = Vec::new();
    let mut text_failed = false;
    // Where each of the recogniser's utterances' words start to count (`words_reach_ns`),
    // by (start_ms, end_ms).
    let mut words_from: Vec<((u64, u64), Nanos)> = Vec::new();
    let (mut batches_done, mut heard_done) = (false, inputs.heard.is_none());
    let none_batches = never::<EventBatch>();
    let none_heard = never::<Heard>();
    while !(batches_done && heard_done) {
        let batch_rx = if batches_done {
            &none_batches
        } else {
            inputs.batches.receiver()
        };
        let heard_rx = match (&inputs.heard, heard_done) {
            (Some(h), false) => h.receiver(),
            _ => &none_heard,
        };
        let events: Vec<Event> = select! {
            recv(batch_rx) -> msg => match msg {
                Ok(batch) => {
                    events_known = batch.known_until_ns;
                    robot.extend(robot_utterances(&batch.events));
                    batch.events
                }
                Err(_) => {
                    batches_done = true;
                    events_known = Nanos::MAX;
                    Vec::new()
                }
            },
            recv(heard_rx) -> msg => match msg {
                Ok(heard) => {
                    heard_known = heard.until_ns;
                    heard_through = heard.through_ns;
                    if let Some(reach) = inputs.words_reach_ns {
                        for u in &heard.utterances {
                            let from = (u.decided_ms * 1_000_000).saturating_sub(reach);
                            words_from.push(((u.start_ms, u.end_ms), from));
                        }
                    }
                    store_heard(heard.utterances, &robot, &inputs, writer, &mut latencies_us, &mut heard_events)?
                }
                Err(_) => {
                    heard_done = true;
                    heard_known = Nanos::MAX;
                    heard_through = Nanos::MAX;
                    Vec::new()
                }
            },
        };
        if let Some(o) = inputs.observer {
            tell_utterances(o, &events, writer)?;
        }
        // One item of work per message: utterances, stories shown and retrievals embedded.
        // Once the text encoder fails, the text modality and retrieval stop; phases and
        // how far the events are known still reach the aligner.
        let (utterances, stories, retrievals) = if text_failed {
            (Vec::new(), Vec::new(), Vec::new())
        } else {
            let known_ns = events_known.min(heard_known);
            embed_events(
                &mut stage,
                &events,
                known_ns,
                &mut meter,
                failures,
                &mut text_failed,
            )
        };
        // The recogniser's words reach frames only from `words_reach_ns` before it decided
        // the utterance had ended: what a live run can know, the same in its replay.
        let (utterances, retrievals) = reach_words(utterances, retrievals, &mut words_from);
        let phases = phases_entered(&events);
        let update = TextUpdate {
            utterances,
            stories,
            retrievals,
            phases,
            known_until_ns: known_until(&inputs, events_known, heard_known, heard_through),
        };
        if tx.send(update).is_err() {
            return Err(next_stopped("text-features", "the aligner"));
        }
    }
    meter.done(figures, Some(&tx));
    log_heard_latency(latencies_us);
    Ok(heard_events)
}

/// Stores the recogniser's `utterances` as events (the robot's voice told apart by the
/// dialogue app's own utterances, `robot`), measures (paced runs) how long each took from
/// its end to the writer, and keeps them for the session's events.
fn store_heard(
    utterances: Vec<crate::features::speech::Utterance>,
    robot: &[(u64, u64)],
    inputs: &TextInputs<'_>,
    writer: &StoreWriter,
    latencies_us: &mut Vec<u32>,
    heard_events: &mut Vec<Event>,
) -> Result<Vec<Event>, RunError> {
    let events: Vec<Event> = utterances
        .into_iter()
        .map(|u| heard_event(u, robot, inputs.speaker))
        .collect();
    if !events.is_empty() {
        writer.events(events.clone())?;
        if let Some((clock, start)) = inputs.latency_from {
            let now = clock.now_ns();
            for e in &events {
                if let EventKind::Utterance { end_ms, .. } = e.kind {
                    let age = now.saturating_sub(start + end_ms * 1_000_000);
                    latencies_us.push(u32::try_from(age / 1_000).unwrap_or(u32::MAX));
                }
            }
        }
        heard_events.extend(events.iter().cloned());
    }
    Ok(events)
}

/// Logs how long the recogniser's utterances took from their end to the store writer.
fn log_heard_latency(latencies_us: Vec<u32>) {
    if let Some(l) = LatencySummary::of(latencies_us) {
        tracing::info!(
            utterances = l.frames,
            p50_ms = format_args!("{:.0}", l.p50_ms),
            p95_ms = format_args!("{:.0}", l.p95_ms),
            max_ms = format_args!("{:.0}", l.max_ms),
            "speech recognition latency, from an utterance's end to the store writer"
        );
    }
}

/// How far the text is known, for the aligner. Live, frames never wait past the transcript
/// wait (the events' watermark) for the recogniser, except at the end, when its last words
/// are worth waiting for; the recogniser's words are known for a frame once it has heard
/// past the frame by the reach (every utterance that may reach back to it is in). A
/// replay's text is known as far as both the events and the recogniser have got.
fn known_until(
    inputs: &TextInputs<'_>,
    events_known: Nanos,
    heard_known: Nanos,
    heard_through: Nanos,
) -> Nanos {
    if inputs.live && events_known != Nanos::MAX {
        match inputs.words_reach_ns {
            Some(reach) => events_known.min(heard_through.saturating_sub(reach)),
            None => events_known,
        }
    } else {
        events_known.min(heard_known)
    }
}

/// The (start_ms, end_ms) of the robot's own utterances among `events`.
fn robot_utterances(events: &[Event]) -> impl Iterator<Item = (u64, u64)> + '_ {
    events.iter().filter_map(|e| match &e.kind {
        EventKind::Utterance {
            speaker,
            start_ms,
            end_ms,
            ..
        } if speaker == "robot" => Some((*start_ms, *end_ms)),
        _ => None,
    })
}

/// Tells the observer each utterance of `events`, as stored: a robot told of an utterance
/// may ask at once for what rests on it (`recommend` reads the store), so it is committed
/// first.
fn tell_utterances(
    o: &dyn Observer,
    events: &[Event],
    writer: &StoreWriter,
) -> Result<(), RunError> {
    if events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Utterance { .. }))
    {
        writer.flush()?;
    }
    for e in events {
        if let EventKind::Utterance {
            speaker,
            start_ms,
            end_ms,
            text,
            source,
            ..
        } = &e.kind
        {
            o.observe(
                Topic::Utterance,
                *start_ms,
                serde_json::json!({
                    "speaker": speaker,
                    "start_ms": start_ms,
                    "end_ms": end_ms,
                    "text": text,
                    "source": source.as_str(),
                }),
            );
        }
    }
    Ok(())
}

/// What one message's events give the text modality: utterances, stories shown and
/// retrievals embedded. Once the text encoder fails (`failed`), the text modality and
/// retrieval stop; phases and how far the events are known still reach the aligner.
fn embed_events(
    stage: &mut TextStage,
    events: &[Event],
    known_ns: Nanos,
    meter: &mut Meter,
    failures: &StageFailures,
    failed: &mut bool,
) -> Embedded {
    // A fail point (tests only) cuts the message at the first event it hits.
    let cut = events
        .iter()
        .position(|e| failures::injected("text", e.t_ns).is_some());
    let usable = &events[..cut.unwrap_or(events.len())];
    let embedded = meter.time(|| {
        Ok::<_, crate::models::ModelError>((
            stage.embed_utterances(usable)?,
            stage.embed_stories(usable)?,
            stage.retrieve(usable)?,
        ))
    });
    let at_ns = |k: usize| events.get(k).map_or(known_ns, |e| e.t_ns);
    match (embedded, cut) {
        (Ok(done), None) => done,
        (Ok(done), Some(k)) => {
            *failed = true;
            failures.fail(
                "text",
                at_ns(k),
                &"injected failure (fail point stage-text)",
            );
            done
        }
        (Err(e), _) => {
            *failed = true;
            failures.fail("text", at_ns(0), &e);
            (Vec::new(), Vec::new(), Vec::new())
        }
    }
}

/// Utterances, stories and retrievals embedded from one message.
type Embedded = (Vec<EmbeddedUtterance>, Vec<StoryInPlay>, Vec<RetrievalSet>);

/// The recogniser's words reach frames only from `words_reach_ns` before it decided the
/// utterance had ended (`words_from`, by (start_ms, end_ms)): what a live run can know, the
/// same in its replay. So do the retrievals made from them (stamped at the utterance's
/// start). Empties `words_from`.
fn reach_words(
    utterances: Vec<EmbeddedUtterance>,
    retrievals: Vec<RetrievalSet>,
    words_from: &mut Vec<((u64, u64), Nanos)>,
) -> (Vec<EmbeddedUtterance>, Vec<RetrievalSet>) {
    let mut words_used: Vec<((u64, u64), Nanos)> = Vec::new();
    let utterances: Vec<EmbeddedUtterance> = utterances
        .into_iter()
        .map(|(start, end, v)| {
            let key = (start / 1_000_000, end / 1_000_000);
            match words_from.iter().position(|(k, _)| *k == key) {
                Some(i) => {
                    let used = words_from.swap_remove(i);
                    let from = used.1;
                    words_used.push(used);
                    (start.max(from), end, v)
                }
                None => (start, end, v),
            }
        })
        .collect();
    // So do the retrievals made from them (stamped at the utterance's start).
    let retrievals: Vec<RetrievalSet> = retrievals
        .into_iter()
        .map(|(t, mut set)| {
            let from = words_from
                .iter()
                .chain(&words_used)
                .find(|((start_ms, _), _)| start_ms * 1_000_000 == t)
                .map_or(t, |(_, from)| t.max(*from));
            for s in &mut set {
                s.shown_ns = s.shown_ns.max(from);
            }
            (from, set)
        })
        .collect();
    words_from.clear();
    words_used.clear();
    (utterances, retrievals)
}

/// The phases `events` enter, each open-ended (the aligner ends one at the next).
fn phases_entered(events: &[Event]) -> Vec<PhaseSpan> {
    events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Phase { phase } => Some(PhaseSpan {
                phase,
                start_ns: e.t_ns,
                end_ns: Nanos::MAX,
            }),
            _ => None,
        })
        .collect()
}

/// A recognised utterance as a session event: the robot's when it lies mostly under the
/// robot's own utterances, else `speaker`'s; stamped at its start, like the dialogue app's.
fn heard_event(
    u: crate::features::speech::Utterance,
    robot: &[(u64, u64)],
    speaker: &str,
) -> Event {
    let robot_voice = crate::features::speech::is_robot(&u, robot);
    Event {
        t_ns: u.start_ms.saturating_mul(1_000_000),
        line: 0,
        kind: EventKind::Utterance {
            speaker: if robot_voice { "robot" } else { speaker }.to_string(),
            start_ms: u.start_ms,
            end_ms: u.end_ms,
            text: u.text,
            source: crate::core::TranscriptSource::Asr,
            model: Some(u.model.to_string()),
            confidence: Some(u.confidence),
        },
    }
}
