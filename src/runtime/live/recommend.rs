//! `recommend` on the control socket: stories for the running session's participant, chosen
//! on the station from the bank, never shown to them before, logged as a `recommendation`
//! event of the session (so a study can analyse its selection).
//!
//! Contract: answers `{"stories":[{story_id, title, text, similarity, predicted,
//! calibration, predicted_rank, candidates}], "policy", "from", "left_out"}` or a reason: no session, an
//! empty bank, nothing shared yet (and no `text` given), every story already shown (an
//! empty list, not an error). Deterministic for the same store, words and latest window
//! (`fusion::recommend`). Predicted empathy is the configured predictor's (the first that
//! is not synthetic) against the latest window it represented in this session, under its
//! calibration there (`predicted_from`: `latest_window`); before any window was
//! represented, the text-zero-shot predictor's against the words (`words`).
//!
//! Cost is bounded (eight clients asking with 210 kB texts once starved the pipeline): the
//! requests go to one `recommend` thread at a low priority ([`RECOMMEND_NICE`]: capture and
//! features always come first) through a queue of [`QUEUE`] places (a request past it is
//! refused as busy, at once); the encoder is opened once and kept; the text is cut to the
//! encoder's window before any work (`features::text::within_window`).

use std::sync::atomic::Ordering;

use crate::fusion::recommend::{recommend_against, Recommended};

use crate::core::Policy;
use crate::session::{Event, EventKind};

use super::Service;

/// The niceness of the `recommend` thread (capture and features run at 0, or real-time).
pub const RECOMMEND_NICE: i32 = 10;
/// Requests waiting for the `recommend` thread at most; more are refused as busy.
pub const QUEUE: usize = 2;

type Job = (
    usize,
    Option<String>,
    Policy,
    std::sync::mpsc::SyncSender<Result<serde_json::Value, String>>,
);

/// The way to the `recommend` thread.
pub(super) struct Recommender {
    tx: std::sync::mpsc::SyncSender<Job>,
    rx: std::sync::Mutex<Option<std::sync::mpsc::Receiver<Job>>>,
}

impl Default for Recommender {
    fn default() -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        Self {
            tx,
            rx: std::sync::Mutex::new(Some(rx)),
        }
    }
}

impl Recommender {
    /// Asks the `recommend` thread and waits for its answer; refused at once when
    /// [`QUEUE`] requests already wait.
    pub(super) fn ask(
        &self,
        k: usize,
        text: Option<String>,
        policy: Policy,
    ) -> Result<serde_json::Value, String> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.tx
            .try_send((k, text, policy, reply))
            .map_err(|e| match e {
                std::sync::mpsc::TrySendError::Full(_) => format!(
                "{}recommend: {QUEUE} requests already wait (one is answered at a time): ask again",
                super::BUSY
            ),
                std::sync::mpsc::TrySendError::Disconnected(_) => {
                    "recommend: the service is stopping".to_string()
                }
            })?;
        answer
            .recv()
            .map_err(|_| "recommend: the service is stopping".to_string())?
    }
}

/// The `recommend` thread: answers the queued requests one at a time, at a low priority,
/// with the encoder opened once, until the service stops.
pub(super) fn serve(service: &Service<'_>) {
    let Some(rx) = service
        .recommender
        .rx
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    else {
        return;
    };
    if let Err(e) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), RECOMMEND_NICE)
    {
        tracing::warn!("the recommend thread keeps its priority: {e}");
    }
    while !service.stop.load(Ordering::SeqCst) {
        let Ok((k, text, policy, reply)) = rx.recv_timeout(std::time::Duration::from_millis(200))
        else {
            continue;
        };
        let _ = reply.send(recommend_now(service, k, text, policy));
    }
}

fn recommend_now(
    service: &Service<'_>,
    k: usize,
    text: Option<String>,
    policy: Policy,
) -> Result<serde_json::Value, String> {
    let config = service.config;
    let (participant, session_id, latest) = {
        let state = service.state();
        let r = state.running.as_ref().ok_or(
            "no session is running: recommend answers for the running session's participant",
        )?;
        let latest = r
            .latest_window
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        (r.participant.clone(), r.id.clone(), latest)
    };
    let (index, inputs) = {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        let index = crate::stories::load_index(&store, &config.models.sentence_encoder)
            .map_err(|e| e.to_string())?;
        let inputs = crate::stories::recommendation_inputs(
            &store,
            &index,
            &participant,
            text.as_deref(),
            Some(&session_id),
            &config.text.speaker,
        )
        .map_err(|e| match e {
            crate::stories::StoryError::NothingShared { .. } => format!(
                "the participant has said nothing in this session's story share yet (give `text`, or ask after they shared): {e}"
            ),
            other => other.to_string(),
        })?;
        (index, inputs)
    };
    let query = embed_query(service, &inputs.text)?;
    // Predicted empathy against the latest window the configured predictor represented,
    // under its calibration in this session; before any, against the words themselves.
    let (z, scorer, basis) = match &latest {
        Some(l) if l.z.len() == query.len() => (
            l.z.as_slice(),
            &l.scorer,
            serde_json::json!({"basis": "latest_window", "predictor": l.predictor,
                               "synthetic": l.synthetic, "window_index": l.window_index,
                               "end_ms": l.end_ns / 1_000_000}),
        ),
        _ => (
            query.as_slice(),
            &inputs.scorer,
            serde_json::json!({"basis": "words", "predictor": crate::fusion::zero_shot::TextZeroShot::ID}),
        ),
    };
    let chosen = recommend_against(&index, &query, z, &inputs.exclude, k, policy, scorer);
    // Each story's text, so the robot can show it without a second look-up.
    let texts: std::collections::HashMap<String, String> = {
        let store = service.store.lock().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<&str> = chosen.iter().map(|c| c.story_id.as_str()).collect();
        store
            .export_reads()
            .stories()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|(id, _, _)| ids.contains(&id.as_str()))
            .map(|(id, _, text)| (id, text))
            .collect()
    };
    let stories: Vec<serde_json::Value> = chosen
        .iter()
        .map(|c| {
            let mut v = serde_json::to_value(c).unwrap_or_default();
            v["text"] = texts.get(&c.story_id).cloned().unwrap_or_default().into();
            v
        })
        .collect();
    log_recommendation(service, &session_id, policy, &chosen, scorer.label());
    Ok(serde_json::json!({
        "policy": policy.as_str(),
        "from": if inputs.session.is_some() { "story_share" } else { "text" },
        "left_out": inputs.exclude.len(),
        "predicted_from": basis,
        "stories": stories,
    }))
}

/// The sentence embedding of `text` (cut to the encoder's window before any work), with the
/// service's shared encoder (opened once: each request opening its own once starved the
/// pipeline when eight clients asked in a loop).
fn embed_query(service: &Service<'_>, text: &str) -> Result<Vec<f32>, String> {
    let encoder = service.sentence_encoder()?;
    // The text is cut to the encoder's window before any work (`within_window`).
    Ok(encoder.embed(&[text]).map_err(|e| e.to_string())?.remove(0))
}

/// The answer is part of the session: logged as its event (and in its recording), while
/// the session it was asked in still runs.
fn log_recommendation(
    service: &Service<'_>,
    session_id: &str,
    policy: Policy,
    chosen: &[Recommended],
    calibration: &str,
) {
    let mut state = service.state();
    if let Some(r) = state.running.as_mut().filter(|r| r.id == session_id) {
        if !r.end.load(Ordering::SeqCst) {
            let now = service.clock.now_ns().saturating_sub(r.start_clock_ns);
            let event = Event {
                t_ns: now / 1_000_000 * 1_000_000,
                line: 0,
                kind: EventKind::Recommendation {
                    policy: policy.as_str().to_string(),
                    story_ids: chosen.iter().map(|c| c.story_id.clone()).collect(),
                    calibration: calibration.to_string(),
                },
            };
            if let Some(rec) = &r.recording {
                let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = rec.event(&event) {
                    tracing::error!("{e}");
                }
            }
            let _ = r.events.send(event);
        }
    }
}
