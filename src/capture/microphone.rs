//! The microphone, through cpal (ALSA, or PulseAudio through its ALSA plugin).
//!
//! Contract: [`MicStream::open`] opens the configured input device (`default` or a device
//! name as cpal lists it), asking for mono 16-bit at the pipeline rate and falling back to
//! the device's own configuration. The device's callback only copies samples (as f32,
//! interleaved) into a ring buffer allocated at open and returns: no lock, no allocation,
//! no I/O on the audio thread. Samples the ring had no room for are counted as lost. The
//! first callback records when its first sample was captured, on the run's clock, from
//! the device's own timestamps (capture time vs callback time). A device error (unplug)
//! is kept and reported by the next [`MicStream::take`]; the caller reopens.
//! Not `Send`: a stream lives on the thread that opened it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};

use super::CaptureError;
use crate::clock::Clock;
use crate::Nanos;

/// Seconds of audio the ring buffer holds.
const RING_SECONDS: u32 = 10;

/// What the callback shares with the reader.
struct Shared {
    /// Run-clock time of the first sample (u64::MAX until the first callback).
    first_clock_ns: AtomicU64,
    /// Frames the ring had no room for.
    lost_frames: AtomicU64,
    failed: AtomicBool,
    error: Mutex<Option<String>>,
}

/// An open input stream.
pub struct MicStream {
    _stream: cpal::Stream,
    ring: rtrb::Consumer<f32>,
    shared: Arc<Shared>,
    channels: u16,
    rate_hz: u32,
    device: String,
}

impl MicStream {
    /// Opens `device` (`default`: the system's default input) and starts it.
    pub fn open(
        device: &str,
        want_rate_hz: u32,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, CaptureError> {
        let err = |message: String| CaptureError::Device {
            device: format!("microphone `{device}`"),
            message,
        };
        // ALSA caches its configuration for the life of the process, including whether a
        // sound server was running when it was first read: drop the cache, so a sound
        // server or USB microphone that appeared since is seen. No stream is open here.
        if let Err(e) = alsa::config::update_free_global() {
            tracing::debug!("ALSA configuration not refreshed: {e}");
        }
        let host = cpal::default_host();
        let dev = if device == "default" {
            host.default_input_device().ok_or_else(|| {
                err("no default input device (no sound card or sound server)".into())
            })?
        } else {
            let mut found = None;
            let mut names = Vec::new();
            for d in host.input_devices().map_err(|e| err(e.to_string()))? {
                let name = d
                    .description()
                    .map(|x| x.name().to_string())
                    .unwrap_or_default();
                if name == device {
                    found = Some(d);
                    break;
                }
                names.push(name);
            }
            found.ok_or_else(|| {
                err(format!(
                    "no input device has this name; present: {}",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ))
            })?
        };
        // Mono 16-bit at the pipeline rate first: then the recording is exactly what the
        // stages saw. Else the device's own configuration (resampled by the caller).
        // 20 ms periods: through the PulseAudio ALSA plugin (the tests' microphone) cpal's
        // capture thread wakes spuriously until a whole period is there, measured 1.0
        // core busy with the default period and 0.46 with 20 ms (0.41 with 100 ms, at five
        // times the latency); a USB microphone opened directly (`hw:`) wakes per period.
        let wanted = cpal::StreamConfig {
            channels: 1,
            sample_rate: want_rate_hz,
            buffer_size: cpal::BufferSize::Fixed(want_rate_hz / 50),
        };
        let shared = Arc::new(Shared {
            first_clock_ns: AtomicU64::new(u64::MAX),
            lost_frames: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
        });
        let attempt = |config: &cpal::StreamConfig, format: cpal::SampleFormat| {
            let capacity =
                (config.sample_rate * RING_SECONDS) as usize * usize::from(config.channels);
            let (producer, consumer) = rtrb::RingBuffer::<f32>::new(capacity);
            let stream = build(
                &dev,
                config,
                format,
                producer,
                shared.clone(),
                clock.clone(),
            )?;
            Ok::<_, String>((stream, consumer))
        };
        let (stream, ring, config) = match attempt(&wanted, cpal::SampleFormat::I16) {
            Ok((s, c)) => (s, c, wanted),
            Err(first) => {
                let default = dev
                    .default_input_config()
                    .map_err(|e| err(format!("cannot open mono 16-bit at {want_rate_hz} Hz ({first}), and the device has no default configuration: {e}")))?;
                let config = default.config();
                let (s, c) = attempt(&config, default.sample_format()).map_err(err)?;
                (s, c, config)
            }
        };
        stream.play().map_err(|e| err(e.to_string()))?;
        Ok(Self {
            _stream: stream,
            ring,
            shared,
            channels: config.channels,
            rate_hz: config.sample_rate,
            device: device.to_string(),
        })
    }

    /// The rate samples come in at (before any resampling).
    pub fn rate_hz(&self) -> u32 {
        self.rate_hz
    }

    /// Run-clock time of the first sample, once the first callback has come.
    pub fn first_clock_ns(&self) -> Option<Nanos> {
        let t = self.shared.first_clock_ns.load(Ordering::Acquire);
        (t != u64::MAX).then_some(t)
    }

    /// Frames lost so far because the reader fell 10 s behind.
    pub fn lost_frames(&self) -> u64 {
        self.shared.lost_frames.load(Ordering::Relaxed)
    }

    /// Appends every whole frame waiting, mixed to mono, to `out`. Errors once the device
    /// reported an error (unplugged).
    pub fn take(&mut self, out: &mut Vec<f32>) -> Result<usize, CaptureError> {
        if self.shared.failed.load(Ordering::Acquire) {
            let message = self
                .shared
                .error
                .lock()
                .ok()
                .and_then(|e| e.clone())
                .unwrap_or_else(|| "the device stopped".into());
            return Err(CaptureError::Device {
                device: format!("microphone `{}`", self.device),
                message,
            });
        }
        let channels = usize::from(self.channels.max(1));
        let frames = self.ring.slots() / channels;
        let Ok(chunk) = self.ring.read_chunk(frames * channels) else {
            return Ok(0);
        };
        let (a, b) = chunk.as_slices();
        let mut sum = 0.0f32;
        for (i, &s) in a.iter().chain(b.iter()).enumerate() {
            if channels == 1 {
                out.push(s);
            } else {
                sum += s;
                if i % channels == channels - 1 {
                    out.push(sum / channels as f32);
                    sum = 0.0;
                }
            }
        }
        chunk.commit_all();
        Ok(frames)
    }
}

fn build(
    dev: &cpal::Device,
    config: &cpal::StreamConfig,
    format: cpal::SampleFormat,
    mut producer: rtrb::Producer<f32>,
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
) -> Result<cpal::Stream, String> {
    let channels = usize::from(config.channels.max(1));
    let on_error = {
        let shared = shared.clone();
        move |e: cpal::Error| {
            if let Ok(mut slot) = shared.error.lock() {
                *slot = Some(e.to_string());
            }
            shared.failed.store(true, Ordering::Release);
        }
    };
    // The callback: stamp the first buffer, copy into the ring, count what did not fit.
    macro_rules! callback {
        ($t:ty, $conv:expr) => {{
            let shared = shared.clone();
            move |data: &[$t], info: &cpal::InputCallbackInfo| {
                if shared.first_clock_ns.load(Ordering::Relaxed) == u64::MAX {
                    let ts = info.timestamp();
                    let delay = ts.callback.duration_since(ts.capture);
                    let delay = u64::try_from(delay.as_nanos()).unwrap_or(0);
                    shared
                        .first_clock_ns
                        .store(clock.now_ns().saturating_sub(delay), Ordering::Release);
                }
                let whole = data.len() / channels * channels;
                let room = producer.slots() / channels * channels;
                let n = whole.min(room);
                if let Ok(chunk) = producer.write_chunk_uninit(n) {
                    let conv: fn($t) -> f32 = $conv;
                    // Writes and commits all n slots (the chunk has exactly n).
                    chunk.fill_from_iter(data[..n].iter().map(|&s| conv(s)));
                }
                if n < whole {
                    shared
                        .lost_frames
                        .fetch_add(((whole - n) / channels) as u64, Ordering::Relaxed);
                }
            }
        }};
    }
    let stream = match format {
        cpal::SampleFormat::I16 => dev.build_input_stream::<i16, _, _>(
            *config,
            callback!(i16, |s| f32::from(s) / 32768.0),
            on_error,
            None,
        ),
        cpal::SampleFormat::F32 => {
            dev.build_input_stream::<f32, _, _>(*config, callback!(f32, |s| s), on_error, None)
        }
        other => {
            return Err(format!(
                "the device's sample format {other} is not supported (16-bit or float)"
            ))
        }
    };
    stream.map_err(|e| e.to_string())
}
