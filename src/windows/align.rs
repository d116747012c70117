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
//!
//! Live runs release in two steps ([`FrameAligner::storing_before_words`]): a slot whose
//! audio is complete is *heard* at once (its record with the text modality not yet known,
//! for the store: a killed service loses only what audio had not reached), and *complete*
//! once its words are known (the same record with its text, for the windows). Replays
//! release in one step, so their stored rows are those of the complete records.

use std::collections::VecDeque;
use std::sync::Arc;

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
    /// Two-step release: slots whose audio is complete, waiting for their words (the
    /// record as heard, and the slot's end).
    heard: Option<VecDeque<(Arc<FrameRecord>, Nanos)>>,
}

/// What one release gave.
#[derive(Debug, Default)]
pub struct Released {
    /// Two-step release only: records whose audio is complete, the text modality not yet
    /// known (absent in the record); each comes again in `complete` once it is.
    pub heard: Vec<Arc<FrameRecord>>,
    /// Records whose audio and words are complete, in slot order.
    pub complete: Vec<FrameRecord>,
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
            heard: None,
        }
    }

    /// Releases in two steps (live runs): records are [`Released::heard`] once their audio
    /// is complete, before their words are known. Without a text modality there is
    /// nothing to wait for and one step remains.
    pub fn storing_before_words(mut self) -> Self {
        if self.text.is_some() {
            self.heard = Some(VecDeque::new());
        }
        self
    }

    /// The modality released after its record (two-step release): the text modality.
    pub fn words_later(&self) -> Option<ModalityId> {
        self.heard.as_ref().and(self.text.as_ref()).map(|(m, _)| *m)
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
    /// Slots held (waiting for audio, or heard and waiting for their words).
    pub fn pending_slots(&self) -> usize {
        self.pending.len() + self.heard.as_ref().map_or(0, VecDeque::len)
    }

    /// Releases every slot whose audio is complete (as heard, in two-step release) and
    /// every one whose words are complete too.
    pub fn drain_ready(&mut self) -> Released {
        let mut out = Released::default();
        while let Some(slot) = self.pending.front() {
            let audio_ready = self.audio_ended
                || self
                    .audio
                    .iter()
                    .all(|q| q.latest.is_some_and(|t| t >= slot.end_ns));
            let text_ready = self.heard.is_some() || self.words_known(slot.end_ns);
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
            let record = FrameRecord {
                index: slot.index,
                t_ns: slot.start_ns,
                decoded: slot.decoded,
                features,
            };
            match &mut self.heard {
                Some(heard) => {
                    let record = Arc::new(record);
                    out.heard.push(record.clone());
                    heard.push_back((record, slot.end_ns));
                }
                None => out.complete.push(self.with_words(record)),
            }
        }
        while let Some((_, end_ns)) = self.heard.as_ref().and_then(VecDeque::front) {
            if !self.words_known(*end_ns) {
                break;
            }
            let Some((record, _)) = self.heard.as_mut().and_then(VecDeque::pop_front) else {
                break;
            };
            let record = Arc::unwrap_or_clone(record);
            out.complete.push(self.with_words(record));
        }
        out
    }

    /// Whether the words are known through `end_ns`: through the slot's end, not only its
    /// start, as the window this slot may complete takes the stories in play before its
    /// end (shown or retrieved then), which must be as known live as in a replay.
    fn words_known(&self, end_ns: Nanos) -> bool {
        self.text
            .as_ref()
            .is_none_or(|(_, t)| t.is_known_at(end_ns))
    }

    /// `record` with its text modality: the track at the slot's start (the transcript
    /// covers a dropped frame's time too).
    fn with_words(&self, mut record: FrameRecord) -> FrameRecord {
        if let Some((m, track)) = &self.text {
            if let Some(f) = record.features.get_mut(m.index()) {
                *f = track.at(record.t_ns).map(<[f32]>::to_vec);
            }
        }
        record
    }

    /// Releases everything (end of stream).
    pub fn finish(&mut self) -> Released {
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
        assert!(
            a.drain_ready().complete.is_empty(),
            "row at 90 ms < end 100 ms"
        );
        a.push_audio(m, vec![row(100, -20.0)]);
        let out = a.drain_ready().complete;
        assert_eq!(out.len(), 1);
        assert!((out[0].get(m).unwrap()[0] + 20.0).abs() < 1e-4);
        assert_eq!(a.pending_slots(), 1);
        // Audio ends: slot 1 gets only the one row it has.
        let out = a.finish().complete;
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
        let out = a.drain_ready().complete;
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
            a.drain_ready().complete.is_empty(),
            "slot 0 ends after what is known"
        );
        a.text_track().unwrap().known_until(100_000_000);
        let out = a.drain_ready().complete;
        assert_eq!(out.len(), 1, "slot 1 ends after what is known");
        assert_eq!(
            out[0].get(t),
            None,
            "the utterance starts after slot 0's start"
        );
        let out = a.finish().complete;
        assert_eq!(out[0].get(t), Some(&[7.0f32][..]));
    }

    #[test]
    fn live_slots_are_heard_before_their_words_and_complete_after() {
        let mut l = ModalityLayout::new();
        let t = l
            .add(
                Stream::Text,
                ModalitySpec::by_algorithm("t", vec!["t".into()], "test", 1),
            )
            .unwrap();
        let mut a = FrameAligner::new(vec![], Some((t, TextTrack::new(0)))).storing_before_words();
        for i in 0..3u64 {
            let mut s = slot(i);
            s.features = vec![None];
            a.push_video(s);
        }
        let track = a.text_track().unwrap();
        track.push(50_000_000, 150_000_000, std::sync::Arc::new(vec![7.0]));
        track.known_until(60_000_000);
        // No audio to wait for: every slot is heard at once, none complete.
        let out = a.drain_ready();
        assert_eq!(
            out.heard.iter().map(|r| r.index).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(out.heard.iter().all(|r| r.get(t).is_none()));
        assert!(out.complete.is_empty());
        assert_eq!(a.pending_slots(), 3, "heard slots are still held");
        a.text_track().unwrap().known_until(200_000_000);
        let out = a.drain_ready();
        assert!(out.heard.is_empty(), "each is heard once");
        assert_eq!(
            out.complete.iter().map(|r| r.index).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(out.complete[1].get(t), Some(&[7.0f32][..]));
        let out = a.finish();
        assert_eq!(out.complete.len(), 1);
        assert_eq!(a.pending_slots(), 0);
    }
}
