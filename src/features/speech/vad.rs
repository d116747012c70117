//! Voice activity from a learned model (Silero VAD v6) and the speech segments it gives.
//!
//! Contract:
//! - [`SileroVad`] takes 16 kHz mono audio in any block sizes and gives one speech
//!   probability per 512-sample chunk (32 ms), each computed from the chunk and the 64
//!   samples before it with the model's recurrent state carried over, as the model expects
//!   (inputs `input` [1, 576], `state` [2, 1, 128], `sr`; outputs `output`, `stateN`). The
//!   probabilities do not depend on how the audio was split into blocks.
//! - [`Segmenter`] turns the probabilities into speech segments the usual way for this model:
//!   speech starts at a chunk at or above `on` (0.5), ends after `min_silence_ms` (200 ms)
//!   below `off` (0.35), a segment shorter than `min_speech_ms` (250 ms) is dropped, each
//!   keeps `pre_roll_ms` (200 ms) before its detected start and `pad_ms` (100 ms) after its
//!   end (never reaching into its neighbour), and unbroken speech is cut every
//!   `max_speech_ms` (10 s) so no utterance grows without bound. A forced cut falls where
//!   the voice is quietest (lowest loudness over about 100 ms) in the last 4 s before the
//!   limit, so a monologue is cut between words, not mid-word, whenever a pause-like dip
//!   exists; the speech goes on in the next segment from exactly there (nothing lost).

use std::path::Path;

use ort::session::Session;
use ort::value::Tensor;

use crate::models::{onnx, ModelError};

/// Samples of one chunk at 16 kHz, and of the context before it.
pub const CHUNK: usize = 512;
const CONTEXT: usize = 64;
/// The only rate the model is run at here.
pub const RATE_HZ: u32 = 16_000;

/// Silero VAD, streaming.
pub struct SileroVad {
    name: String,
    session: Session,
    state: Vec<f32>,
    /// The 64 samples before the next chunk, then the chunk as it fills.
    window: Vec<f32>,
}

impl SileroVad {
    pub fn open(
        name: &str,
        path: &Path,
        onnxruntime_library: Option<&Path>,
    ) -> Result<Self, ModelError> {
        Ok(Self {
            name: name.to_string(),
            session: onnx::open_session(name, path, 1, onnxruntime_library)?,
            state: vec![0.0; 2 * 128],
            window: vec![0.0; CONTEXT],
        })
    }

    /// Back to the start of a stream.
    pub fn reset(&mut self) {
        self.state.iter_mut().for_each(|v| *v = 0.0);
        self.window.clear();
        self.window.resize(CONTEXT, 0.0);
    }

    /// Feeds `samples`; returns the probability of every chunk completed by them.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>, ModelError> {
        Ok(self
            .push_chunks(samples)?
            .into_iter()
            .map(|c| c.probability)
            .collect())
    }

    /// Feeds `samples`; returns every chunk completed by them, with its loudness.
    pub fn push_chunks(&mut self, samples: &[f32]) -> Result<Vec<Chunk>, ModelError> {
        let mut out = Vec::new();
        for &s in samples {
            self.window.push(s);
            if self.window.len() == CONTEXT + CHUNK {
                let probability = self.run()?;
                let energy: f64 = self.window[CONTEXT..]
                    .iter()
                    .map(|&v| f64::from(v) * f64::from(v))
                    .sum();
                out.push(Chunk {
                    probability,
                    rms: (energy / CHUNK as f64).sqrt() as f32,
                });
                self.window.drain(..CHUNK);
            }
        }
        Ok(out)
    }

    fn run(&mut self) -> Result<f32, ModelError> {
        let fail = |message: String| ModelError::Inference {
            name: self.name.clone(),
            message,
        };
        let input = Tensor::from_array(([1usize, CONTEXT + CHUNK], self.window.clone()))
            .map_err(|e| fail(e.to_string()))?;
        let state = Tensor::from_array(([2usize, 1, 128], self.state.clone()))
            .map_err(|e| fail(e.to_string()))?;
        let sr =
            Tensor::from_array(((), vec![i64::from(RATE_HZ)])).map_err(|e| fail(e.to_string()))?;
        let outputs = self
            .session
            .run(ort::inputs!["input" => input, "state" => state, "sr" => sr])
            .map_err(|e| fail(e.to_string()))?;
        let (_, p) = outputs["output"]
            .try_extract_tensor::<f32>()
            .map_err(|e| fail(e.to_string()))?;
        let p = *p.first().ok_or_else(|| fail("empty output".into()))?;
        let (_, state) = outputs["stateN"]
            .try_extract_tensor::<f32>()
            .map_err(|e| fail(e.to_string()))?;
        if state.len() != self.state.len() {
            return Err(fail(format!("stateN has {} values", state.len())));
        }
        self.state.copy_from_slice(state);
        Ok(p)
    }
}

/// One 512-sample chunk as the segmenter sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Chunk {
    /// Silero's speech probability.
    pub probability: f32,
    /// Root mean square of the chunk's samples (where to cut unbroken speech).
    pub rms: f32,
}

impl Chunk {
    /// A chunk whose loudness follows its probability (tests of the rules alone).
    pub fn of_probability(probability: f32) -> Self {
        Self {
            probability,
            rms: probability,
        }
    }
}

/// How far back from the limit a forced cut looks for the quietest moment.
const CUT_SEARCH_MS: u32 = 4_000;
/// Chunks averaged around each candidate (a stop consonant's silence is shorter than
/// three chunks, 96 ms; a breath between words is not).
const CUT_SMOOTH_CHUNKS: usize = 3;

/// How probabilities become segments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentRules {
    pub on: f32,
    pub off: f32,
    pub min_silence_ms: u32,
    pub min_speech_ms: u32,
    pub pad_ms: u32,
    /// Audio kept before the chunk where speech was detected (never reaching back into the
    /// previous segment): the model's probability rises a few chunks after a word's onset,
    /// and a soft onset ("printing", "he") lost to it is a word lost.
    pub pre_roll_ms: u32,
    pub max_speech_ms: u32,
}

impl Default for SegmentRules {
    fn default() -> Self {
        Self {
            on: 0.5,
            off: 0.35,
            min_silence_ms: 200,
            min_speech_ms: 250,
            pad_ms: 100,
            pre_roll_ms: 200,
            // The recogniser's encoder attends over the whole segment, so its memory grows
            // with the square of the length: `transcribe` of 225-235 s of unbroken LJ
            // Speech (three orders of the fixture clips, 2026-11-30) peaked at 345-352 MiB
            // with 20 s, 264-277 with 15 s and 223-225 with 10 s, with no loss of words
            // (WER 7.6 / 2.0 / 2.0 % at 20 s, 1.7 / 1.8 / 4.3 % at 10 s) and 20 % less CPU.
            // Segments of at most 10 s also carry their words on every frame of a live
            // run, whose transcript wait is 10 s (docs/station.md).
            max_speech_ms: 10_000,
        }
    }
}

/// A speech segment, in samples from the stream's start (end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
}

/// Speech segments from chunk probabilities, streaming: a segment is given once it has
/// ended (its padding after it is known by then, the one before it is clamped to the end
/// of the previous segment).
pub struct Segmenter {
    rules: SegmentRules,
    /// Samples seen (chunks x 512).
    at: u64,
    start: Option<u64>,
    silence_from: Option<u64>,
    /// The end of the last segment given (padding never reaches back past it).
    last_end: u64,
    /// Loudness of the open segment's recent chunks (`CUT_SEARCH_MS` of them), by the
    /// sample each starts at, to place a forced cut where the voice is quietest.
    levels: std::collections::VecDeque<(u64, f32)>,
}

fn samples(ms: u32) -> u64 {
    u64::from(ms) * u64::from(RATE_HZ) / 1000
}

impl Segmenter {
    pub fn new(rules: SegmentRules) -> Self {
        Self {
            rules,
            at: 0,
            start: None,
            silence_from: None,
            last_end: 0,
            levels: std::collections::VecDeque::new(),
        }
    }

    /// The next chunk; returns a segment when one ended with it.
    pub fn push(&mut self, chunk: Chunk) -> Option<Segment> {
        let p = chunk.probability;
        let here = self.at;
        self.at += CHUNK as u64;
        let r = self.rules;
        if self.start.is_some() || p >= r.on {
            self.levels.push_back((here, chunk.rms));
            let search = samples(CUT_SEARCH_MS.min(r.max_speech_ms / 2));
            while self
                .levels
                .front()
                .is_some_and(|&(at, _)| at + search < self.at)
            {
                self.levels.pop_front();
            }
        }
        match self.start {
            None => {
                if p >= r.on {
                    self.start = Some(here);
                    self.silence_from = None;
                } else {
                    self.levels.clear();
                }
                None
            }
            Some(start) => {
                if p >= r.on {
                    self.silence_from = None;
                } else if p < r.off && self.silence_from.is_none() {
                    self.silence_from = Some(here);
                }
                if let Some(from) = self.silence_from {
                    if self.at - from >= samples(r.min_silence_ms) {
                        self.start = None;
                        self.silence_from = None;
                        self.levels.clear();
                        return self.close(start, from);
                    }
                }
                if self.at - start >= samples(r.max_speech_ms) {
                    // A forced cut where the voice is quietest in the last seconds: the
                    // speech goes on in a new segment from there.
                    let cut = self.quietest_point(start);
                    self.start = Some(cut);
                    self.silence_from = None;
                    while self.levels.front().is_some_and(|&(at, _)| at < cut) {
                        self.levels.pop_front();
                    }
                    return self.close_unpadded(start, cut);
                }
                None
            }
        }
    }

    /// Where to cut unbroken speech that began at `start`: the middle of the quietest
    /// stretch of `CUT_SMOOTH_CHUNKS` chunks among the recent ones (ties: the latest, so the
    /// segment is as long as it may be), never less than `min_speech_ms` after `start`;
    /// the latest chunk's end when no chunk qualifies.
    fn quietest_point(&self, start: u64) -> u64 {
        let earliest = start + samples(self.rules.min_speech_ms);
        let levels: Vec<(u64, f32)> = self.levels.iter().copied().collect();
        let mut best: Option<(u64, f32)> = None;
        for i in 0..levels.len() {
            let cut = levels[i].0 + CHUNK as u64 / 2;
            if cut < earliest {
                continue;
            }
            let lo = i.saturating_sub(CUT_SMOOTH_CHUNKS / 2);
            let hi = (i + CUT_SMOOTH_CHUNKS / 2 + 1).min(levels.len());
            let mean = levels[lo..hi].iter().map(|&(_, l)| l).sum::<f32>() / (hi - lo) as f32;
            if best.is_none_or(|(_, b)| mean <= b) {
                best = Some((cut, mean));
            }
        }
        best.map_or(self.at, |(cut, _)| cut)
    }

    /// Samples seen so far (whole chunks).
    pub fn at(&self) -> u64 {
        self.at
    }

    /// Where the segment being spoken began, when one is open.
    pub fn open_start(&self) -> Option<u64> {
        self.start
    }

    /// Every segment given from now on starts at or after this sample (its padding
    /// included): the open segment's start, or the next chunk's, less the padding.
    pub fn settled_until(&self) -> u64 {
        self.start
            .unwrap_or(self.at)
            .saturating_sub(samples(self.rules.pre_roll_ms))
            .max(self.last_end)
    }

    /// The end of the stream: the open segment, if any.
    pub fn finish(&mut self) -> Option<Segment> {
        let start = self.start.take()?;
        let end = self.silence_from.take().unwrap_or(self.at);
        self.levels.clear();
        self.close(start, end)
    }

    fn close(&mut self, start: u64, end: u64) -> Option<Segment> {
        if end - start < samples(self.rules.min_speech_ms) {
            return None;
        }
        let seg = Segment {
            start: start
                .saturating_sub(samples(self.rules.pre_roll_ms))
                .max(self.last_end),
            end: (end + samples(self.rules.pad_ms)).min(self.at.max(end)),
        };
        self.last_end = seg.end;
        Some(seg)
    }

    fn close_unpadded(&mut self, start: u64, end: u64) -> Option<Segment> {
        let seg = Segment {
            start: start
                .saturating_sub(samples(self.rules.pre_roll_ms))
                .max(self.last_end),
            end,
        };
        self.last_end = seg.end;
        Some(seg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(probs: &[f32], rules: SegmentRules) -> Vec<Segment> {
        let mut s = Segmenter::new(rules);
        let mut out: Vec<Segment> = probs
            .iter()
            .filter_map(|&p| s.push(Chunk::of_probability(p)))
            .collect();
        out.extend(s.finish());
        out
    }

    #[test]
    fn segments_follow_hysteresis_silence_padding_and_the_forced_cut() {
        let chunk_ms = 32.0;
        let at = |ms: f64| (ms / chunk_ms) as usize;
        // Speech 1.0-2.0 s, a dip to 0.4 (between off and on) that does not end it,
        // a 150 ms gap that is too short to end it (200 ms does), then silence; speech
        // again 4.0-4.1 s (too short).
        let mut p = vec![0.0f32; at(6000.0)];
        p[at(1000.0)..at(2000.0)].fill(0.9);
        p[at(1300.0)..at(1400.0)].fill(0.4);
        p[at(2000.0)..at(2150.0)].fill(0.1);
        p[at(2150.0)..at(2500.0)].fill(0.9);
        p[at(4000.0)..at(4100.0)].fill(0.9);
        let segs = run(&p, SegmentRules::default());
        assert_eq!(segs.len(), 1, "{segs:?}");
        let ms = |s: u64| s as f64 / 16.0;
        // 200 ms kept before the detected start, 100 ms after the end.
        assert!((ms(segs[0].start) - 800.0).abs() < 40.0, "{segs:?}");
        assert!((ms(segs[0].end) - 2600.0).abs() < 40.0, "{segs:?}");
        // A 250 ms gap ends it: two segments, the second's lead-in never reaching back
        // into the first.
        p[at(2000.0)..at(2250.0)].fill(0.1);
        p[at(2250.0)..at(2500.0)].fill(0.9);
        let segs = run(&p, SegmentRules::default());
        assert_eq!(segs.len(), 2, "{segs:?}");
        assert!(segs[1].start >= segs[0].end, "{segs:?}");

        // Unbroken speech for 50 s under a 20 s limit: cut at 20 s and 40 s, nothing lost
        // between cuts.
        let twenty = SegmentRules {
            max_speech_ms: 20_000,
            ..SegmentRules::default()
        };
        let p = vec![0.9f32; at(50_000.0)];
        let segs = run(&p, twenty);
        assert_eq!(segs.len(), 3, "{segs:?}");
        assert_eq!(segs[0].end, segs[1].start);
        assert_eq!(segs[1].end, segs[2].start);
        assert!(run(&vec![0.0; 1000], SegmentRules::default()).is_empty());
    }

    #[test]
    fn a_forced_cut_falls_where_the_voice_is_quietest_and_loses_nothing() {
        // Under a 20 s limit (the rule is the same at any limit; the breaths below are
        // placed for this one).
        let rules = SegmentRules {
            max_speech_ms: 20_000,
            ..SegmentRules::default()
        };
        let chunk_ms = 32.0;
        let at = |ms: f64| (ms / chunk_ms) as usize;
        // 45 s of speech that never pauses long enough to end; loud, with a quieter
        // breath (still speech by the model) at 17.5 s and one at 35 s.
        let mut chunks = vec![
            Chunk {
                probability: 0.95,
                rms: 0.2
            };
            at(45_000.0)
        ];
        for c in &mut chunks[at(17_500.0)..at(17_600.0)] {
            c.rms = 0.01;
        }
        for c in &mut chunks[at(35_000.0)..at(35_150.0)] {
            c.rms = 0.02;
        }
        let mut s = Segmenter::new(rules);
        let mut segs: Vec<Segment> = chunks.iter().filter_map(|&c| s.push(c)).collect();
        segs.extend(s.finish());
        assert_eq!(segs.len(), 3, "{segs:?}");
        let ms = |s: u64| s as f64 / 16.0;
        assert!((ms(segs[0].end) - 17_550.0).abs() < 80.0, "{segs:?}");
        assert!((ms(segs[1].end) - 35_075.0).abs() < 100.0, "{segs:?}");
        assert_eq!(segs[0].end, segs[1].start);
        assert_eq!(segs[1].end, segs[2].start);
        for w in &segs {
            assert!(ms(w.end - w.start) <= 20_000.0 + 100.0, "{segs:?}");
        }
    }

    #[test]
    fn any_pattern_of_speech_gives_bounded_ordered_segments() {
        // A property over many made-up streams: every segment is within the limit (plus its
        // padding), they are ordered and disjoint, and unbroken speech is covered without gaps.
        let rules = SegmentRules::default();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let mut chunks = Vec::new();
            while chunks.len() < 3_000 {
                let run = (next() % 900) as usize + 1;
                let speech = next() % 3 != 0;
                for _ in 0..run {
                    let rms = (next() % 1000) as f32 / 1000.0;
                    chunks.push(if speech {
                        Chunk {
                            probability: 0.9,
                            rms,
                        }
                    } else {
                        Chunk {
                            probability: 0.05,
                            rms: rms / 50.0,
                        }
                    });
                }
            }
            let mut s = Segmenter::new(rules);
            let mut segs: Vec<Segment> = chunks.iter().filter_map(|&c| s.push(c)).collect();
            segs.extend(s.finish());
            let limit = samples(rules.max_speech_ms + 2 * rules.pad_ms);
            for w in segs.windows(2) {
                assert!(w[0].end <= w[1].start, "{segs:?}");
            }
            for g in &segs {
                assert!(g.start < g.end && g.end - g.start <= limit, "{g:?}");
            }
        }
    }
}
