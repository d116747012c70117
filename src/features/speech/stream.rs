//! The recogniser as a stream: audio blocks of a session in, utterances on the session
//! timeline out, as soon as each has ended.
//!
//! Contract: [`SpeechStream::push`] takes the pipeline's audio blocks (16 kHz mono, stamped
//! on the session timeline) in order and returns what it [`Heard`]: the utterances that
//! ended with them, stamped in session milliseconds, and `until_ns`, a time before which no
//! utterance will be reported any more (every later one starts at or after it).
//! [`SpeechStream::finish`] ends the stream (`until_ns` is then `Nanos::MAX`).
//!
//! The recogniser hears what the live recorder keeps, so a replay of a live recording hears
//! the same samples as the live run did ([`Placement`]): a block is placed on the stream by
//! its stamp (a gap is filled with zeros, an overlap is skipped, as `capture::record` writes
//! `audio.wav`) and each sample is rounded to 16 bits. The samples of the open utterance (at most
//! `max_speech_ms`) and the padding before it are all that is held.

use super::vad::{self, Segment, Segmenter, RATE_HZ};
use super::{Recogniser, Utterance, MODEL_ID};
pub use crate::features::signal::VoiceChange;
use crate::models::ModelError;
use crate::Nanos;

/// Nanoseconds per sample at 16 kHz.
const NS_PER_SAMPLE: u64 = 1_000_000_000 / RATE_HZ as u64;

/// What the stream heard since the last call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Heard {
    /// Utterances that ended, in order, in milliseconds on the session timeline.
    pub utterances: Vec<Utterance>,
    /// No utterance reported later starts before this.
    pub until_ns: Nanos,
    /// The voice activity's changes, as the segmenter sees them.
    pub voice: Vec<VoiceChange>,
    /// Every utterance the segmenter decided by this time has been reported (the audio
    /// heard so far).
    pub through_ns: Nanos,
}

/// Audio blocks placed on one stream of samples as the live recorder writes `audio.wav`:
/// by their stamps, a gap filled with zeros (at most a minute at once), an overlap skipped,
/// each sample rounded to 16 bits. Used by every stage that must hear in a live run what
/// the replay of its recording hears.
#[derive(Debug, Default)]
pub struct Placement {
    /// The session time of the stream's first sample.
    first_ns: Option<Nanos>,
    /// Samples placed so far (inserted zeros included).
    written: u64,
}

impl Placement {
    /// The samples `samples` (16 kHz, from `t_ns`) add to the stream.
    pub fn place(&mut self, t_ns: Nanos, samples: &[f32]) -> Vec<f32> {
        let first = *self.first_ns.get_or_insert(t_ns);
        let at = ((t_ns.saturating_sub(first)) as f64 * f64::from(RATE_HZ) / 1e9).round() as u64;
        let mut fresh: Vec<f32> = Vec::with_capacity(samples.len());
        let mut skip = 0usize;
        if at > self.written {
            let gap = (at - self.written).min(60 * u64::from(RATE_HZ));
            fresh.resize(gap as usize, 0.0);
        } else if at < self.written {
            skip = usize::try_from(self.written - at).unwrap_or(usize::MAX);
        }
        fresh.extend(samples.iter().skip(skip).map(|&s| as_recorded(s)));
        self.written += fresh.len() as u64;
        fresh
    }

    /// Samples placed so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The session time of sample `sample` of the stream.
    pub fn time_ns(&self, sample: u64) -> Nanos {
        self.first_ns
            .unwrap_or(0)
            .saturating_add(sample.saturating_mul(NS_PER_SAMPLE))
    }
}

pub struct SpeechStream {
    recogniser: Recogniser,
    segmenter: Segmenter,
    placement: Placement,
    /// Samples `[held_from, placement.written())`.
    held: Vec<f32>,
    held_from: u64,
    /// Segments that ended, with the sample at which each was decided, waiting for
    /// [`SpeechStream::recognise_heard`].
    ended: Vec<(Segment, u64)>,
}

impl SpeechStream {
    /// A new stream (the recogniser's voice-activity state starts afresh).
    pub fn new(mut recogniser: Recogniser) -> Self {
        recogniser.vad.reset();
        let segmenter = Segmenter::new(recogniser.rules);
        Self {
            recogniser,
            segmenter,
            placement: Placement::default(),
            held: Vec::new(),
            held_from: 0,
            ended: Vec::new(),
        }
    }

    /// Feeds one block: `samples` at 16 kHz from `t_ns` on the session timeline. Returns
    /// what was heard, utterances recognised (`hear`, then `recognise_heard`).
    pub fn push(&mut self, t_ns: Nanos, samples: &[f32]) -> Result<Heard, ModelError> {
        let voice = self.hear(t_ns, samples)?;
        let mut heard = self.recognise_heard()?;
        heard.voice = voice;
        Ok(heard)
    }

    /// The cheap half of [`SpeechStream::push`]: places the block and runs the voice
    /// activity and the segmenter; returns the voice changes at once (turn-taking wants
    /// them before the recogniser's hundreds of milliseconds) and keeps ended segments for
    /// [`SpeechStream::recognise_heard`].
    pub fn hear(&mut self, t_ns: Nanos, samples: &[f32]) -> Result<Vec<VoiceChange>, ModelError> {
        let fresh = self.placement.place(t_ns, samples);
        self.held.extend_from_slice(&fresh);
        let mut voice = Vec::new();
        let pad = u64::from(self.recogniser.rules.pad_ms) * u64::from(RATE_HZ) / 1000;
        for chunk in self.recogniser.vad.push_chunks(&fresh)? {
            let was_open = self.segmenter.open_start().is_some();
            let ended = self.segmenter.push(chunk);
            let open = self.segmenter.open_start();
            let decided_ns = self.placement.time_ns(self.segmenter.at());
            match (was_open, open, ended) {
                (false, Some(start), _) => voice.push(VoiceChange {
                    speaking: true,
                    at_ns: self.placement.time_ns(start.saturating_sub(pad)),
                    decided_ns,
                }),
                (true, None, end) => {
                    let at = end.map_or(self.segmenter.at(), |s| s.end);
                    voice.push(VoiceChange {
                        speaking: false,
                        at_ns: self.placement.time_ns(at),
                        decided_ns,
                    });
                }
                _ => {}
            }
            self.ended
                .extend(ended.map(|seg| (seg, self.segmenter.at())));
        }
        Ok(voice)
    }

    /// Recognises the segments that ended since the last call.
    pub fn recognise_heard(&mut self) -> Result<Heard, ModelError> {
        let segments = std::mem::take(&mut self.ended);
        let utterances = self.recognise(segments)?;
        self.trim();
        Ok(Heard {
            utterances,
            until_ns: self.placement.time_ns(self.segmenter.settled_until()),
            voice: Vec::new(),
            through_ns: self.placement.time_ns(self.segmenter.at()),
        })
    }

    /// The end of the stream: the utterance still open, if any.
    pub fn finish(&mut self) -> Result<Heard, ModelError> {
        let open = self.segmenter.open_start().is_some();
        let mut segments = std::mem::take(&mut self.ended);
        let at = self.segmenter.at();
        segments.extend(self.segmenter.finish().map(|seg| (seg, at)));
        let voice = if open {
            let end = self.placement.time_ns(self.placement.written());
            vec![VoiceChange {
                speaking: false,
                at_ns: end,
                decided_ns: end,
            }]
        } else {
            Vec::new()
        };
        let utterances = self.recognise(segments)?;
        self.held.clear();
        Ok(Heard {
            utterances,
            until_ns: Nanos::MAX,
            voice,
            through_ns: Nanos::MAX,
        })
    }

    fn recognise(&mut self, segments: Vec<(Segment, u64)>) -> Result<Vec<Utterance>, ModelError> {
        let mut out = Vec::new();
        for (seg, decided) in segments {
            let written = self.placement.written();
            let a = seg.start.clamp(self.held_from, written);
            let b = seg.end.clamp(a, written);
            let slice = &self.held[(a - self.held_from) as usize..(b - self.held_from) as usize];
            let start_ms = self.placement.time_ns(a) / 1_000_000;
            let Some(r) = self
                .recogniser
                .recognise_segment(slice, start_ms)?
                .filter(|r| !r.text.is_empty())
            else {
                continue;
            };
            out.push(Utterance {
                start_ms,
                end_ms: self.placement.time_ns(b) / 1_000_000,
                text: r.text,
                confidence: r.mean_logprob,
                model: MODEL_ID,
                decided_ms: self.placement.time_ns(decided) / 1_000_000,
            });
        }
        Ok(out)
    }

    /// Drops the samples no later segment can reach.
    fn trim(&mut self) {
        let keep_from = self.segmenter.settled_until().min(self.placement.written());
        if keep_from > self.held_from {
            self.held.drain(..(keep_from - self.held_from) as usize);
            self.held_from = keep_from;
        }
    }
}

/// A sample as `audio.wav` keeps it (16-bit).
fn as_recorded(s: f32) -> f32 {
    ((f64::from(s) * 32768.0).round().clamp(-32768.0, 32767.0) / 32768.0) as f32
}

/// The segment rules of `[asr]`.
pub fn rules_of(asr: &crate::config::AsrConfig) -> vad::SegmentRules {
    let d = vad::SegmentRules::default();
    vad::SegmentRules {
        on: asr.threshold,
        off: (asr.threshold - (d.on - d.off)).max(0.01),
        min_silence_ms: asr.min_silence_ms,
        pad_ms: asr.pad_ms,
        pre_roll_ms: asr.pre_roll_ms,
        max_speech_ms: asr.max_utterance_ms,
        ..d
    }
}
