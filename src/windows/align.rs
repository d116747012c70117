//! Joins video slots with the audio rows and the text of their time interval.
//!
//! Contract: video slots arrive in slot order (dropped frames included, marked not
//! decoded), each with one feature entry per modality of the layout (the video stages'
//! filled in, the others absent); each audio modality's rows arrive in time order. A slot
//! covering `[start_ns, end_ns)` is released when every audio modality has shown a row at
//! or after `end_ns` (so no later row can still fall inside it) or audio has ended, and the
//! session's utterances are known up to `start_ns` (or their stream has ended). Its audio
//! modalities are each stage's pooling of the rows inside the interval, absent when there
//! are none; its text modality is the text track at `start_ns`. Rows before the first
//! slot are discarded.

use std::collections::VecDeque;

use crate::core::{FrameRecord, ModalityId};
use crate::features::text::TextTrack;
use crate::features::{AudioRow, PoolFn};
use crate::Nanos;

/// One slot's video-side output.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoSlot {
    pub index: u64,
    pub start_ns: Nanos,
    pub end_ns: Nanos,
    pub decoded: bool,
    /// One entry per modality of the layout; the video stages fill theirs.
    pub features: Vec<Option<Vec<f32>>>,
}

/// An audio modality and how its rows become a frame's vector.
#[derive(Clone, Copy)]
pub struct AudioPool {
    pub modality: ModalityId,
    pub pool: PoolFn,
}

/// Rows waiting for slots, per audio modality.
struct AudioQueue {
    pool: AudioPool,
    rows: VecDeque<AudioRow>,
    /// Latest row stamp seen.
    latest: Option<Nanos>,
}

pub struct FrameAligner {
    audio: Vec<AudioQueue>,
    audio_ended: bool,
    /// The text modality and its track, filled as utterances arrive.
    text: Option<(ModalityId, TextTrack)>,
    pending: VecDeque<VideoSlot>,
}

impl FrameAligner {
    /// `text`: the text modality and an (empty or prefilled) track; `None` when the run
    /// has no text modality.
    pub fn new(pools: Vec<AudioPool>, text: Option<(ModalityId, TextTrack)>) -> Self {
        Self {
            audio: pools
                .into_iter()
                .map(|pool| AudioQueue {
                    pool,
                    rows: VecDeque::new(),
                    latest: None,
                })
                .collect(),
            audio_ended: false,
            text,
            pending: VecDeque::new(),
        }
    }

    pub fn push_video(&mut self, slot: VideoSlot) {
        self.pending.push_back(slot);
    }

    /// Rows of audio modality `m` (a modality not given to [`FrameAligner::new`] is a
    /// set-up error and its rows are ignored).
    pub fn push_audio(&mut self, m: ModalityId, rows: Vec<AudioRow>) {
        let Some(q) = self.audio.iter_mut().find(|q| q.pool.modality == m) else {
            debug_assert!(
                false,
                "rows for an audio modality the aligner was not given"
            );
            return;
        };
        if let Some(last) = rows.last() {
            q.latest = Some(last.t_ns);
        }
        q.rows.extend(rows);
    }

    /// Audio modality `m` will have no more rows (its stage failed): slots no longer wait
    /// for it, and it is absent from every slot after the rows it had.
    pub fn retire_audio(&mut self, m: ModalityId) {
        if let Some(q) = self.audio.iter_mut().find(|q| q.pool.modality == m) {
            q.latest = Some(Nanos::MAX);
        }
    }

    /// The text track, to add utterances and move its known-until time.
    pub fn text_track(&mut self) -> Option<&mut TextTrack> {
        self.text.as_mut().map(|(_, t)| t)
    }

    /// No more audio will come: slots are released without waiting for it.
    pub fn end_audio(&mut self) {
        self.audio_ended = true;
    }

    /// Slots waiting for audio or text.
    pub fn pending_slots(&self) -> usize {
        self.pending.len()
    }

    /// Releases every slot whose audio and text are complete.
    pub fn drain_ready(&mut self) -> Vec<FrameRecord> {
        let mut out = Vec::new();
        while let Some(slot) = self.pending.front() {
            let audio_ready = self.audio_ended
                || self
                    .audio
                    .iter()
                    .all(|q| q.latest.is_some_and(|t| t >= slot.end_ns));
            // Known through the slot's end, not only its start: the window this slot may
            // complete takes the stories in play before its end (shown or retrieved then),
            // which must be as known live as in a replay.
            let text_ready = self
                .text
                .as_ref()
                .is_none_or(|(_, t)| t.is_known_at(slot.end_ns));
            if !(audio_ready && text_ready) {
                break;
            }
            let Some(slot) = self.pending.pop_front() else {
                break;
            };
            let mut features = slot.features;
            for q in &mut self.audio {
                // Rows before this slot can belong to no later slot.
                while q.rows.front().is_some_and(|r| r.t_ns < slot.start_ns) {
                    q.rows.pop_front();
                }
                let inside: Vec<&AudioRow> =
                    q.rows.iter().take_while(|r| r.t_ns < slot.end_ns).collect();
                if let Some(f) = features.get_mut(q.pool.modality.index()) {
                    *f = (q.pool.pool)(&inside);
                }
            }
            if let Some((m, track)) = &self.text {
                if let Some(f) = features.get_mut(m.index()) {
                    // The transcript covers a dropped frame's time too.
                    *f = track.at(slot.start_ns).map(<[f32]>::to_vec);
                }
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
        if let Some((_, t)) = &mut self.text {
            t.end();
        }
        self.drain_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ModalitySpec;
    use crate::core::{ModalityLayout, Stream};
    use crate::features::signal::pool_signal_rows;

    fn layout() -> (ModalityId, ModalityId) {
        let mut l = ModalityLayout::new();
        let v = l
            .add(
                Stream::Video,
                ModalitySpec::by_algorithm("v", vec!["v".into()], "test", 1),
            )
            .unwrap();
        let a = l
            .add(
                Stream::Audio,
                ModalitySpec::by_algorithm(
                    "a",
                    vec!["l".into(), "c".into(), "v".into()],
                    "test",
                    1,
                ),
            )
            .unwrap();
        (v, a)
    }

    fn slot(i: u64) -> VideoSlot {
        VideoSlot {
            index: i,
            start_ns: i * 100_000_000,
            end_ns: (i + 1) * 100_000_000,
            decoded: true,
            features: vec![Some(vec![i as f32]), None],
        }
    }

    fn row(t_ms: u64, level: f32) -> AudioRow {
        AudioRow {
            t_ns: t_ms * 1_000_000,
            values: vec![level, 0.0, 1.0],
        }
    }

    fn aligner(a: ModalityId) -> FrameAligner {
        FrameAligner::new(
            vec![AudioPool {
                modality: a,
                pool: pool_signal_rows,
            }],
            None,
        )
    }

    #[test]
    fn slots_wait_for_audio_past_their_end() {
        let (_, m) = layout();
        let mut a = aligner(m);
        a.push_video(slot(0));
        a.push_video(slot(1));
        a.push_audio(m, (0..10).map(|k| row(k * 10, -20.0)).collect());
        assert!(a.drain_ready().is_empty(), "row at 90 ms < end 100 ms");
        a.push_audio(m, vec![row(100, -20.0)]);
        let out = a.drain_ready();
        assert_eq!(out.len(), 1);
        assert!((out[0].get(m).unwrap()[0] + 20.0).abs() < 1e-4);
        assert_eq!(a.pending_slots(), 1);
        // Audio ends: slot 1 gets only the one row it has.
        let out = a.finish();
        assert_eq!(out.len(), 1);
        assert!(out[0].get(m).is_some());
    }

    #[test]
    fn slot_without_rows_has_audio_absent() {
        let (_, m) = layout();
        let mut a = aligner(m);
        a.push_video(slot(0));
        a.push_video(slot(1));
        a.push_audio(m, vec![row(150, -30.0)]);
        a.end_audio();
        let out = a.drain_ready();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].get(m), None);
        assert!(out[1].get(m).is_some());
    }

    #[test]
    fn slots_wait_for_the_transcript_to_be_known_up_to_their_end() {
        let mut l = ModalityLayout::new();
        let t = l
            .add(
                Stream::Text,
                ModalitySpec::by_algorithm("t", vec!["t".into()], "test", 1),
            )
            .unwrap();
        let mut a = FrameAligner::new(vec![], Some((t, TextTrack::new(0))));
        let mut s = slot(0);
        s.features = vec![None];
        a.push_video(s.clone());
        s.index = 1;
        s.start_ns = 100_000_000;
        s.end_ns = 200_000_000;
        a.push_video(s);
        let track = a.text_track().unwrap();
        track.push(50_000_000, 150_000_000, std::sync::Arc::new(vec![7.0]));
        track.known_until(60_000_000);
        assert!(
            a.drain_ready().is_empty(),
            "slot 0 ends after what is known"
        );
        a.text_track().unwrap().known_until(100_000_000);
        let out = a.drain_ready();
        assert_eq!(out.len(), 1, "slot 1 ends after what is known");
        assert_eq!(
            out[0].get(t),
            None,
            "the utterance starts after slot 0's start"
        );
        let out = a.finish();
        assert_eq!(out[0].get(t), Some(&[7.0f32][..]));
    }
}
