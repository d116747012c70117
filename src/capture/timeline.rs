//! Puts captured frames on the nominal frame grid and counts what went wrong.
//!
//! Contract: the first frame defines slot 0; every later frame goes to slot
//! `round((t - t_first) / period)`. A frame landing on a slot already filled is a duplicate
//! (dropped from the pipeline, counted); slots skipped over are missing frames (a gap,
//! counted; the window assembler fills them with frames marked absent, so a window always
//! spans the same time). Frames whose pixels equal the previous frame's are counted as
//! repeated (a frozen camera or a writer repeating buffers) but kept. Audio is checked for
//! continuity of its sample stamps.

use serde::{Deserialize, Serialize};

use super::BgrImage;
use crate::Nanos;

/// The grid slot of a frame stamped `t_ns` when the first frame was stamped `first_ns`:
/// `round((t - first) / period)`. The timeline and the live recorder both place frames
/// with it, so a recording's chunks line up with the live run's slots.
pub fn slot_of(t_ns: Nanos, first_ns: Nanos, period_ns: f64) -> u64 {
    (t_ns.saturating_sub(first_ns) as f64 / period_ns).round() as u64
}

/// What to do with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotDecision {
    /// Use the frame for `slot`; `missing_before` slots were skipped just before it.
    Take { slot: u64, missing_before: u64 },
    /// The frame's slot is already filled: drop it.
    Duplicate,
}

/// Counts of the video timeline, stored with the session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VideoTimelineStats {
    pub frames_decoded: u64,
    /// Slots filled by a decoded frame.
    pub frames_used: u64,
    /// Times the stamps jumped by more than one frame period.
    pub gaps: u64,
    /// Slots no frame arrived for (dropped frames).
    pub missing_frames: u64,
    /// Frames that landed on an already filled slot (dropped).
    pub duplicated_frames: u64,
    /// Frames pixel-identical to the previous frame (kept).
    pub repeated_frames: u64,
    pub first_t_ns: Option<Nanos>,
    pub last_t_ns: Option<Nanos>,
}

/// Assigns frames to slots of the nominal grid.
#[derive(Debug, Clone)]
pub struct VideoTimeline {
    period_ns: f64,
    last_slot: Option<u64>,
    last_hash: Option<u64>,
    stats: VideoTimelineStats,
}

impl VideoTimeline {
    pub fn new(nominal_fps: f64) -> Self {
        Self {
            period_ns: 1e9 / nominal_fps,
            last_slot: None,
            last_hash: None,
            stats: VideoTimelineStats::default(),
        }
    }

    /// Nominal frame period in nanoseconds.
    pub fn period_ns(&self) -> f64 {
        self.period_ns
    }

    /// The nominal time of `slot` (the first frame's stamp plus whole periods).
    pub fn slot_time_ns(&self, slot: u64) -> Nanos {
        let first = self.stats.first_t_ns.unwrap_or(0);
        first + (slot as f64 * self.period_ns).round() as Nanos
    }

    /// Places one decoded frame.
    pub fn observe(&mut self, t_ns: Nanos, image: &BgrImage) -> SlotDecision {
        self.stats.frames_decoded += 1;
        let hash = content_hash(image);
        if self.last_hash == Some(hash) {
            self.stats.repeated_frames += 1;
        }
        self.last_hash = Some(hash);
        let first = *self.stats.first_t_ns.get_or_insert(t_ns);
        let slot = slot_of(t_ns, first, self.period_ns);
        let decision = match self.last_slot {
            Some(last) if slot <= last => SlotDecision::Duplicate,
            Some(last) => SlotDecision::Take {
                slot,
                missing_before: slot - last - 1,
            },
            None => SlotDecision::Take {
                slot,
                missing_before: 0,
            },
        };
        match decision {
            SlotDecision::Duplicate => self.stats.duplicated_frames += 1,
            SlotDecision::Take {
                slot,
                missing_before,
            } => {
                if missing_before > 0 {
                    self.stats.gaps += 1;
                    self.stats.missing_frames += missing_before;
                }
                self.stats.frames_used += 1;
                self.last_slot = Some(slot);
                self.stats.last_t_ns = Some(t_ns);
            }
        }
        decision
    }

    pub fn stats(&self) -> &VideoTimelineStats {
        &self.stats
    }
}

/// A 64-bit hash of the pixels, to spot repeated frames.
///
/// Four independent multiply-rotate lanes over 8-byte words: it only has to tell a frame
/// from the one before it, and SipHash (the standard library's, built to resist chosen
/// inputs) took 1.0 % of a grid replay's CPU samples (perf), about 0.2 ms a 640x480 frame
/// of the 19 ms of CPU a frame that build's replay used (its per-thread table); this one,
/// 0.3 % with the rest of `VideoTimeline::observe` (issue 18).
fn content_hash(image: &BgrImage) -> u64 {
    const K: [u64; 4] = [
        0x9e37_79b9_7f4a_7c15,
        0xc2b2_ae3d_27d4_eb4f,
        0x1656_67b1_9e37_79f9,
        0x27d4_eb2f_1656_67c5,
    ];
    let mut lanes = [
        u64::from(image.width),
        u64::from(image.height),
        image.data.len() as u64,
        0,
    ];
    let words = image.data.chunks_exact(32);
    let tail = words.remainder();
    for block in words {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(&block[k * 8..k * 8 + 8]);
            *lane = (*lane ^ u64::from_le_bytes(word))
                .wrapping_mul(K[k])
                .rotate_left(29);
        }
    }
    for (j, &b) in tail.iter().enumerate() {
        lanes[j % 4] = (lanes[j % 4] ^ u64::from(b)).wrapping_mul(K[j % 4]);
    }
    lanes.iter().zip(K).fold(0u64, |h, (&lane, k)| {
        (h ^ lane).wrapping_mul(k).rotate_left(31)
    })
}

/// Counts of the audio timeline, stored with the session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AudioTimelineStats {
    pub blocks: u64,
    pub samples: u64,
    pub sample_rate_hz: u32,
    pub first_t_ns: Option<Nanos>,
    /// End of the last block on the timeline.
    pub end_t_ns: Option<Nanos>,
    /// Blocks whose stamp did not follow on from the previous block (device over/underruns).
    pub discontinuities: u64,
}

impl AudioTimelineStats {
    /// Records one block (its first-sample stamp and length).
    pub fn observe(&mut self, t_ns: Nanos, len: usize, rate_hz: u32) {
        let duration = super::samples_to_ns(len as u64, rate_hz);
        if let Some(expected) = self.end_t_ns {
            // Sample stamps are exact: allow 1 µs for rounding.
            if t_ns.abs_diff(expected) > 1_000 {
                self.discontinuities += 1;
            }
        }
        self.first_t_ns.get_or_insert(t_ns);
        self.end_t_ns = Some(t_ns + duration);
        self.blocks += 1;
        self.samples += len as u64;
        self.sample_rate_hz = rate_hz;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(v: u8) -> BgrImage {
        BgrImage {
            width: 2,
            height: 1,
            data: vec![v; 6],
        }
    }

    #[test]
    fn regular_stamps_fill_consecutive_slots() {
        let mut tl = VideoTimeline::new(15.0);
        for i in 0..5u64 {
            let t = (i as f64 * 1e9 / 15.0).round() as u64;
            assert_eq!(
                tl.observe(t, &img(i as u8)),
                SlotDecision::Take {
                    slot: i,
                    missing_before: 0
                }
            );
        }
        assert_eq!(tl.stats().missing_frames, 0);
        assert_eq!(tl.stats().repeated_frames, 0);
    }

    #[test]
    fn gaps_duplicates_and_repeats_are_counted() {
        let mut tl = VideoTimeline::new(10.0);
        tl.observe(0, &img(1));
        tl.observe(100_000_000, &img(2));
        // Two frames lost.
        assert_eq!(
            tl.observe(400_000_000, &img(3)),
            SlotDecision::Take {
                slot: 4,
                missing_before: 2
            }
        );
        // Same stamp again, same pixels.
        assert_eq!(tl.observe(400_000_000, &img(3)), SlotDecision::Duplicate);
        // Jitter within half a period still lands on the next slot.
        assert_eq!(
            tl.observe(540_000_000, &img(4)),
            SlotDecision::Take {
                slot: 5,
                missing_before: 0
            }
        );
        let s = tl.stats();
        assert_eq!(
            (
                s.gaps,
                s.missing_frames,
                s.duplicated_frames,
                s.repeated_frames
            ),
            (1, 2, 1, 1)
        );
        assert_eq!(s.frames_decoded, 5);
        assert_eq!(s.frames_used, 4);
        assert_eq!(tl.slot_time_ns(3), 300_000_000);
    }

    #[test]
    fn audio_discontinuity_is_counted() {
        let mut a = AudioTimelineStats::default();
        a.observe(0, 320, 16_000);
        a.observe(20_000_000, 320, 16_000);
        a.observe(60_000_000, 320, 16_000);
        assert_eq!(a.discontinuities, 1);
        assert_eq!(a.samples, 960);
        assert_eq!(a.end_t_ns, Some(80_000_000));
    }
}
