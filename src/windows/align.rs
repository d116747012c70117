//! Joins video slots with the audio rows of their time interval.
//!
//! Contract: video slots arrive in slot order (dropped frames included, marked not
//! decoded); each audio stage's rows arrive in time order. A slot covering
//! `[start_ns, end_ns)` is released when every audio stage has shown a row at or after
//! `end_ns` (so no later row can still fall inside it) or audio has ended. Its audio
//! modalities are the stages' pooling of the rows inside the interval, absent when there
//! are none. Rows before the first slot are discarded.

use std::collections::VecDeque;

use super::FrameRecord;
use crate::features::{AudioRow, PoolFn};
use crate::Nanos;

/// One slot's video-side output.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoSlot {
    pub index: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub decoded: bool,
    /// One entry per video modality.
    pub features: Vec<Option<Vec<f32>>>,
}

pub struct FrameAligner {
    /// Pooling of each audio stage.
    pools: Vec<PoolFn>,
    /// Rows waiting per audio stage.
    rows: Vec<VecDeque<AudioRow>>,
    /// Latest row stamp seen per audio stage.
    latest: Vec<Option<Nanos>>,
    audio_ended: bool,
    pending: VecDeque<VideoSlot>,
}

impl FrameAligner {
    pub fn new(pools: Vec<PoolFn>) -> Self {
        let n = pools.len();
        Self {
            pools,
            rows: vec![VecDeque::new(); n],
            latest: vec![None; n],
            audio_ended: false,
            pending: VecDeque::new(),
        }
    }

    pub fn push_video(&mut self, slot: VideoSlot) {
        self.pending.push_back(slot);
    }

    pub fn push_audio(&mut self, stage: usize, rows: Vec<AudioRow>) {
        if let Some(last) = rows.last() {
            self.latest[stage] = Some(last.t_ns);
        }
        self.rows[stage].extend(rows);
    }

    /// No more audio will come: slots are released without waiting for it.
    pub fn end_audio(&mut self) {
        self.audio_ended = true;
    }

    /// Slots waiting for audio.
    pub fn pending_slots(&self) -> usize {
        self.pending.len()
    }

    /// Releases every slot whose audio is complete.
    pub fn drain_ready(&mut self) -> Vec<FrameRecord> {
        let mut out = Vec::new();
        while let Some(slot) = self.pending.front() {
            let ready = self.audio_ended
                || self
                    .latest
                    .iter()
                    .all(|l| l.is_some_and(|t| t >= slot.end_ns));
            if !ready {
                break;
            }
            let Some(slot) = self.pending.pop_front() else {
                break;
            };
            let mut features = slot.features;
            for (queue, pool) in self.rows.iter_mut().zip(&self.pools) {
                // Rows before this slot can belong to no later slot.
                while queue.front().is_some_and(|r| r.t_ns < slot.start_ns) {
                    queue.pop_front();
                }
                let inside: Vec<&AudioRow> =
                    queue.iter().take_while(|r| r.t_ns < slot.end_ns).collect();
                features.push(pool(&inside));
            }
            out.push(FrameRecord {
                index: slot.index,
                t_ns: slot.start_ns,
                decoded: slot.decoded,
                features,
            });
        }
        out
    }

    /// Releases everything (end of stream).
    pub fn finish(&mut self) -> Vec<FrameRecord> {
        self.audio_ended = true;
        self.drain_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::signal::pool_signal_rows;

    fn slot(i: u64) -> VideoSlot {
        VideoSlot {
            index: i,
            start_ns: i * 100_000_000,
            end_ns: (i + 1) * 100_000_000,
            decoded: true,
            features: vec![Some(vec![i as f32])],
        }
    }

    fn row(t_ms: u64, level: f32) -> AudioRow {
        AudioRow {
            t_ns: t_ms * 1_000_000,
            values: vec![level, 0.0, 1.0],
        }
    }

    #[test]
    fn slots_wait_for_audio_past_their_end() {
        let mut a = FrameAligner::new(vec![pool_signal_rows]);
        a.push_video(slot(0));
        a.push_video(slot(1));
        a.push_audio(0, (0..10).map(|k| row(k * 10, -20.0)).collect());
        assert!(a.drain_ready().is_empty(), "row at 90 ms < end 100 ms");
        a.push_audio(0, vec![row(100, -20.0)]);
        let out = a.drain_ready();
        assert_eq!(out.len(), 1);
        assert!((out[0].features[1].as_ref().unwrap()[0] + 20.0).abs() < 1e-4);
        assert_eq!(a.pending_slots(), 1);
        // Audio ends: slot 1 gets only the one row it has.
        let out = a.finish();
        assert_eq!(out.len(), 1);
        assert!(out[0].features[1].is_some());
    }

    #[test]
    fn slot_without_rows_has_audio_absent() {
        let mut a = FrameAligner::new(vec![pool_signal_rows]);
        a.push_video(slot(0));
        a.push_video(slot(1));
        a.push_audio(0, vec![row(150, -30.0)]);
        a.end_audio();
        let out = a.drain_ready();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].features[1], None);
        assert!(out[1].features[1].is_some());
    }
}
