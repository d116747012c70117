//! Sliding-window assembly over frame records.
//!
//! Contract: frames are pushed in slot order with no slot skipped (the aligner fills dropped
//! frames with absent records). After the push of frame `i * hop + length - 1`, window `i` is
//! returned. Frames are shared (`Arc`) between overlapping windows, never copied; only the
//! last `length` frames are held.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::core::{FrameRecord, Window};

pub struct WindowAssembler {
    length: usize,
    hop: usize,
    period_ns: f64,
    recent: VecDeque<Arc<FrameRecord>>,
    next_window: u64,
    /// Frames pushed so far.
    pushed: u64,
}

impl WindowAssembler {
    /// `length` and `hop` in frames (1 <= hop <= length); `period_ns` is the frame period,
    /// used for the end time of a window's last frame.
    pub fn new(length: usize, hop: usize, period_ns: f64) -> Self {
        assert!(
            length >= 1 && hop >= 1 && hop <= length,
            "validated by config"
        );
        Self {
            length,
            hop,
            period_ns,
            recent: VecDeque::with_capacity(length + 1),
            next_window: 0,
            pushed: 0,
        }
    }

    /// Adds the next frame; returns the window it completes, if any.
    pub fn push(&mut self, frame: Arc<FrameRecord>) -> Option<Window> {
        debug_assert_eq!(frame.index, self.pushed, "frames must arrive in slot order");
        self.recent.push_back(frame);
        if self.recent.len() > self.length {
            self.recent.pop_front();
        }
        self.pushed += 1;
        let start = self.next_window * self.hop as u64;
        let end = start + self.length as u64;
        if self.pushed != end {
            return None;
        }
        let frames: Vec<Arc<FrameRecord>> = self.recent.iter().cloned().collect();
        let first = frames.first()?;
        let last = frames.last()?;
        let window = Window {
            index: self.next_window,
            start_frame: start,
            end_frame: end,
            start_ns: first.t_ns,
            end_ns: last.t_ns + self.period_ns.round() as u64,
            phase: None,
            frames,
            stories: Vec::new(),
        };
        self.next_window += 1;
        Some(window)
    }

    /// Windows emitted so far.
    pub fn windows_emitted(&self) -> u64 {
        self.next_window
    }
}

/// Number of complete windows over `frames` frames.
pub fn window_count(frames: u64, length: usize, hop: usize) -> u64 {
    let (length, hop) = (length as u64, hop as u64);
    if frames < length {
        0
    } else {
        (frames - length) / hop + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: u64, present: bool) -> Arc<FrameRecord> {
        Arc::new(FrameRecord {
            index: i,
            t_ns: i * 100,
            decoded: present,
            features: vec![present.then(|| vec![i as f32])],
        })
    }

    #[test]
    fn grid_session_gives_26_windows() {
        // 495 frames, 120-frame windows, hop 15: the shared `grid` session's expectation.
        let mut asm = WindowAssembler::new(120, 15, 100.0);
        let windows: Vec<Window> = (0..495).filter_map(|i| asm.push(record(i, true))).collect();
        assert_eq!(windows.len(), 26);
        assert_eq!(window_count(495, 120, 15), 26);
        assert_eq!(windows[0].start_frame, 0);
        assert_eq!(windows[0].end_frame, 120);
        assert_eq!(windows[25].start_frame, 375);
        assert_eq!(windows[25].end_frame, 495);
        assert!(windows.iter().all(|w| w.frames.len() == 120));
        assert_eq!(windows[1].frames[0].index, 15);
        assert_eq!(windows[1].start_ns, 1500);
        assert_eq!(windows[1].end_ns, 13_500);
    }

    #[test]
    fn short_stream_gives_no_window() {
        let mut asm = WindowAssembler::new(10, 5, 1.0);
        assert!((0..9).all(|i| asm.push(record(i, true)).is_none()));
        assert_eq!(window_count(9, 10, 5), 0);
    }

    #[test]
    fn presence_and_mean_skip_absent_frames() {
        let mut layout = crate::core::ModalityLayout::new();
        let m = layout
            .add(
                crate::core::Stream::Video,
                crate::core::ModalitySpec::by_algorithm("x", vec!["x".into()], "test", 1),
            )
            .unwrap();
        let mut asm = WindowAssembler::new(4, 4, 1.0);
        let mut out = None;
        for i in 0..4 {
            out = asm.push(record(i, i != 1));
        }
        let w = out.unwrap();
        assert_eq!(w.presence(m), vec![true, false, true, true]);
        assert_eq!(w.mean(m), Some(vec![(0.0 + 2.0 + 3.0) / 3.0]));
    }

    #[test]
    fn count_matches_assembler_for_many_shapes() {
        for length in 1..12 {
            for hop in 1..=length {
                let mut asm = WindowAssembler::new(length, hop, 1.0);
                let n = (0..40).filter_map(|i| asm.push(record(i, true))).count() as u64;
                assert_eq!(n, window_count(40, length, hop), "{length} {hop}");
            }
        }
    }
}
