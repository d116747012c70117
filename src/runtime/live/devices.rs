//! The camera and microphone threads (each owns its device, retried with backoff when
//! absent or lost) and the live sources the pipeline reads: decoded camera frames,
//! microphone blocks and the control socket's events, recorded as they pass.

use crate::features::face::bystanders::BystanderScreen;
use crate::runtime::screen::screen_buffer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::capture::camera::{decode_jpeg, Grab};
use crate::capture::events::{EventBatch, EventSource};
use crate::capture::microphone::MicStream;
use crate::capture::record::Recording;
use crate::capture::resample::StreamResampler;
use crate::capture::{
    samples_to_ns, AudioBlock, AudioInfo, AudioSource, CaptureError, VideoFrame, VideoInfo,
    VideoSource,
};
use crate::clock::Clock;
use crate::runtime::queues::{PolicyReceiver, PolicySender};
use crate::session::Event;
use crate::Nanos;

use super::{Counters, Service};

/// How often the control events' source says how far the events are known: frames wait
/// for it (with no transcript wait, up to this long).
pub(super) const EVENTS_TICK: Duration = Duration::from_millis(20);
/// A microphone that delivers nothing for this long is treated as unplugged (reopened).
pub(super) const MIC_SILENT_AFTER: Duration = Duration::from_secs(1);
/// How long a freshly opened microphone may take to deliver its first samples.
pub(super) const MIC_FIRST_SAMPLES_WITHIN: Duration = Duration::from_secs(5);
/// Backoff between attempts to open a device.
pub(super) const BACKOFF_MIN_MS: u64 = 250;
pub(super) const BACKOFF_MAX_MS: u64 = 5_000;

/// Sleeps up to `ms`, in steps, returning early when `end` is set.
pub(super) fn pause(end: &AtomicBool, ms: u64) {
    let mut left = ms;
    while left > 0 && !end.load(Ordering::SeqCst) {
        let step = left.min(50);
        std::thread::sleep(Duration::from_millis(step));
        left -= step;
    }
}

pub(super) fn camera_thread(
    service: &Service<'_>,
    clock: Arc<dyn Clock>,
    end: &AtomicBool,
    tx: PolicySender<Grab>,
    counters: &Counters,
) {
    crate::runtime::realtime_priority(service.config.live.realtime_priority);
    let mut backoff = BACKOFF_MIN_MS;
    while !end.load(Ordering::SeqCst) {
        let mut grabber = match service.camera.open(clock.clone()) {
            Ok(g) => {
                service.device("camera", Ok(()));
                backoff = BACKOFF_MIN_MS;
                g
            }
            Err(e) => {
                service.device("camera", Err(e.to_string()));
                pause(end, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                continue;
            }
        };
        while !end.load(Ordering::SeqCst) {
            match grabber.grab() {
                Ok(g) => {
                    counters.frames.fetch_add(1, Ordering::Relaxed);
                    counters
                        .frame_at_ns
                        .store(clock.now_ns(), Ordering::Relaxed);
                    if tx.send(g).is_err() {
                        return;
                    }
                    counters
                        .frames_dropped
                        .store(tx.dropped(), Ordering::Relaxed);
                }
                Err(e) => {
                    service.device("camera", Err(e.to_string()));
                    break;
                }
            }
        }
    }
}

pub(super) fn microphone_thread(
    service: &Service<'_>,
    clock: Arc<dyn Clock>,
    start_clock_ns: Nanos,
    end: &AtomicBool,
    tx: PolicySender<AudioBlock>,
    counters: &Counters,
) {
    let config = service.config;
    crate::runtime::realtime_priority(config.live.realtime_priority);
    let rate = config.audio.sample_rate_hz;
    let block = (u64::from(rate) * u64::from(config.audio.block_ms) / 1000).max(1) as usize;
    let mut backoff = BACKOFF_MIN_MS;
    let mut seq = 0u64;
    while !end.load(Ordering::SeqCst) {
        // Present once it delivers samples (an open that delivers nothing is not a
        // microphone: through ALSA's plugin a missing sound server can look like that).
        let mut mic = match MicStream::open(&config.audio.device, rate, clock.clone()) {
            Ok(m) => m,
            Err(e) => {
                service.device("microphone", Err(e.to_string()));
                pause(end, backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX_MS);
                continue;
            }
        };
        let resampled = (mic.rate_hz() != rate).then(|| StreamResampler::new(mic.rate_hz(), rate));
        let mut resampler = match resampled.transpose() {
            Ok(r) => r,
            Err(e) => {
                service.device("microphone", Err(e.to_string()));
                pause(end, BACKOFF_MAX_MS);
                continue;
            }
        };
        // One stretch: stamps count samples from its first, placed in whole milliseconds.
        let mut origin: Option<Nanos> = None;
        let mut emitted = 0u64;
        let mut lost_seen = 0u64;
        let mut raw = Vec::new();
        let mut ready = Vec::new();
        let mut last_samples = std::time::Instant::now();
        let mut delivering = false;
        let finished = loop {
            let stopping = end.load(Ordering::SeqCst);
            raw.clear();
            if let Err(e) = mic.take(&mut raw) {
                service.device("microphone", Err(e.to_string()));
                break false;
            }
            // A device that goes silent without an error (a sound server gone, through
            // ALSA's plugin) is lost all the same.
            if !raw.is_empty() {
                if !delivering {
                    delivering = true;
                    backoff = BACKOFF_MIN_MS;
                    service.device("microphone", Ok(()));
                }
                last_samples = std::time::Instant::now();
            } else {
                // A fresh stream may take a while to start (a sound server's first
                // fragment); once delivering, a gap of a second is a loss.
                let limit = if delivering {
                    MIC_SILENT_AFTER
                } else {
                    MIC_FIRST_SAMPLES_WITHIN
                };
                if last_samples.elapsed() > limit && !stopping {
                    service.device("microphone", Err(silent(limit, delivering)));
                    break false;
                }
            }
            match resampler.as_mut() {
                Some(r) => {
                    if let Err(e) = r.push(&raw, &mut ready) {
                        service.set_error(format!("microphone resampling: {e}"));
                        break false;
                    }
                }
                None => ready.extend_from_slice(&raw),
            }
            if origin.is_none() {
                if let Some(first) = mic.first_clock_ns() {
                    let t = first.saturating_sub(start_clock_ns);
                    origin = Some(t / 1_000_000 * 1_000_000);
                }
            }
            emitted += skip_lost(&mic, rate, &mut lost_seen, counters);
            if let Some(origin) = origin {
                let out = Handing {
                    rate,
                    block,
                    clock: clock.as_ref(),
                    start_clock_ns,
                    counters,
                    tx: &tx,
                };
                if !out.hand_on(&mut ready, stopping, origin, &mut emitted, &mut seq) {
                    return;
                }
            }
            if stopping {
                break true;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if finished {
            return;
        }
        // Closed before the next open, which refreshes ALSA's configuration (only safe
        // with no stream open).
        drop(mic);
        pause(end, backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX_MS);
    }
}

/// The samples the microphone's ring dropped since `lost_seen` (at the session's rate):
/// the stamps jump over them (a discontinuity), and the session's counters say so.
fn skip_lost(mic: &MicStream, rate: u32, lost_seen: &mut u64, counters: &Counters) -> u64 {
    let lost = mic.lost_frames();
    if lost <= *lost_seen {
        return 0;
    }
    let at_rate = (lost - *lost_seen) * u64::from(rate) / u64::from(mic.rate_hz());
    counters.samples_lost.fetch_add(at_rate, Ordering::Relaxed);
    *lost_seen = lost;
    at_rate
}

/// Why a microphone that gave no samples for `limit` is lost.
fn silent(limit: Duration, delivering: bool) -> String {
    format!(
        "no samples for {} s: the microphone {}",
        limit.as_secs(),
        if delivering {
            "stopped delivering"
        } else {
            "delivers nothing"
        }
    )
}

/// Where the microphone thread hands its blocks, and how it stamps them.
struct Handing<'a> {
    rate: u32,
    /// Samples per block.
    block: usize,
    clock: &'a dyn Clock,
    start_clock_ns: Nanos,
    counters: &'a Counters,
    tx: &'a PolicySender<AudioBlock>,
}

impl Handing<'_> {
    /// Hands on `ready` in blocks (all that is left when `stopping`), stamped from the
    /// stretch's `origin` by the samples `emitted` before; false when the pipeline ended.
    fn hand_on(
        &self,
        ready: &mut Vec<f32>,
        stopping: bool,
        origin: Nanos,
        emitted: &mut u64,
        seq: &mut u64,
    ) -> bool {
        let (rate, block, clock, start_clock_ns) =
            (self.rate, self.block, self.clock, self.start_clock_ns);
        while ready.len() >= block || (stopping && !ready.is_empty()) {
            let n = block.min(ready.len());
            let samples: Vec<f32> = ready.drain(..n).collect();
            let b = AudioBlock {
                seq: *seq,
                t_ns: origin + samples_to_ns(*emitted, rate),
                sample_rate_hz: rate,
                samples,
                handed_ns: Some(clock.now_ns().saturating_sub(start_clock_ns)),
            };
            if *seq % 250 == 0 {
                let end = start_clock_ns + b.t_ns + samples_to_ns(n as u64, rate);
                tracing::debug!(
                    age_ms = clock.now_ns().saturating_sub(end) / 1_000_000,
                    "microphone block handed on"
                );
            }
            *seq += 1;
            *emitted += n as u64;
            self.counters.samples.fetch_add(n as u64, Ordering::Relaxed);
            self.counters
                .audio_at_ns
                .store(clock.now_ns(), Ordering::Relaxed);
            let sent_at = std::time::Instant::now();
            if self.tx.send(b).is_err() {
                return false;
            }
            if sent_at.elapsed() > Duration::from_millis(200) {
                tracing::debug!(
                    waited_ms = sent_at.elapsed().as_millis() as u64,
                    "microphone block waited for the pipeline"
                );
            }
        }
        true
    }
}

/// Camera buffers as a [`VideoSource`]: stamped in whole milliseconds of session time,
/// decoded, recorded.
pub(super) struct LiveVideo {
    pub(super) rx: PolicyReceiver<Grab>,
    pub(super) start_clock_ns: Nanos,
    pub(super) recording: Option<Arc<Mutex<Recording>>>,
    pub(super) counters: Arc<Counters>,
    pub(super) info: VideoInfo,
    pub(super) seq: u64,
    /// The bystander screen (`[privacy] bystanders = "mask"`), ahead of the recorder.
    pub(super) screen: Option<BystanderScreen>,
}

impl VideoSource for LiveVideo {
    fn info(&self) -> &VideoInfo {
        &self.info
    }

    fn next_frame(&mut self) -> Result<Option<VideoFrame>, CaptureError> {
        // The camera thread ends (dropping its queue) when the session ends.
        while let Some(grab) = self.rx.recv() {
            let t_ns = grab.clock_ns.saturating_sub(self.start_clock_ns) / 1_000_000 * 1_000_000;
            let image = match decode_jpeg(&grab.jpeg) {
                Ok(i) => i,
                Err(e) => {
                    // A torn buffer from the camera: a missing frame, not a failed session.
                    tracing::warn!(t_ns, "camera buffer skipped: {e}");
                    self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            // Screened before anything is kept or measured; a frame the screen fails on
            // is dropped, never passed on unscreened.
            let (jpeg, image, screening) = match self.screen.as_mut() {
                Some(screen) => match screen_buffer(screen, &grab.jpeg, image) {
                    Ok((jpeg, image, s)) => {
                        self.counters.screened(&s);
                        (std::borrow::Cow::Owned(jpeg), image, Some(s))
                    }
                    Err(e) => {
                        tracing::warn!(
                            t_ns,
                            "camera frame dropped: the bystander screen failed: {e}"
                        );
                        self.counters.frames_dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                },
                None => (std::borrow::Cow::Borrowed(&grab.jpeg[..]), image, None),
            };
            if let Some(rec) = &self.recording {
                let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = rec.video_frame(t_ns, &jpeg, image.width, image.height) {
                    tracing::error!("{e}");
                }
            }
            let frame = VideoFrame {
                seq: self.seq,
                t_ns,
                image,
                screening,
            };
            self.seq += 1;
            return Ok(Some(frame));
        }
        Ok(None)
    }
}

/// Microphone blocks as an [`AudioSource`], recorded as they pass.
pub(super) struct LiveAudio {
    pub(super) rx: PolicyReceiver<AudioBlock>,
    pub(super) recording: Option<Arc<Mutex<Recording>>>,
    pub(super) info: AudioInfo,
}

impl AudioSource for LiveAudio {
    fn info(&self) -> &AudioInfo {
        &self.info
    }

    fn next_block(&mut self) -> Result<Option<AudioBlock>, CaptureError> {
        let Some(block) = self.rx.recv() else {
            return Ok(None);
        };
        if let Some(rec) = &self.recording {
            let mut rec = rec.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = rec.audio(block.t_ns, &block.samples) {
                tracing::error!("{e}");
            }
        }
        Ok(Some(block))
    }
}

/// The control socket's events as an [`EventSource`]: a batch every [`EVENTS_TICK`], known up to
/// now minus the transcript wait; everything once the session ends.
pub(super) struct ControlEvents {
    pub(super) rx: PolicyReceiver<Event>,
    /// Set when the session ends: what is queued is the last of it.
    pub(super) end: Arc<AtomicBool>,
    pub(super) done: bool,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) start_clock_ns: Nanos,
    pub(super) wait_ns: Nanos,
}

impl EventSource for ControlEvents {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, CaptureError> {
        use crossbeam_channel::RecvTimeoutError;
        if self.done {
            return Ok(None);
        }
        let mut events = Vec::new();
        // Read the flag first: every event accepted before it was set is already queued.
        let mut ended = self.end.load(Ordering::SeqCst);
        match self.rx.receiver().recv_timeout(EVENTS_TICK) {
            Ok(e) => events.push(e),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => ended = true,
        }
        while let Ok(e) = self.rx.receiver().try_recv() {
            events.push(e);
        }
        self.done = ended;
        events.sort_by_key(|e| e.t_ns);
        let now = self.clock.now_ns().saturating_sub(self.start_clock_ns);
        Ok(Some(EventBatch {
            events,
            known_until_ns: if ended {
                Nanos::MAX
            } else {
                now.saturating_sub(self.wait_ns)
            },
        }))
    }
}
