//! What the benchmarks share: the bundled demo session's frames.

use std::path::Path;

use empathic::capture::video_file::FileVideoSource;
use empathic::capture::{VideoFrame, VideoSource};

/// The first `n` frames (640x480 BGR) of `demo/session/video.avi`.
pub fn demo_frames(n: usize) -> Vec<VideoFrame> {
    let video = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/demo/session/video.avi"
    ));
    let mut source = FileVideoSource::open(video).expect("demo video");
    let mut frames = Vec::with_capacity(n);
    while frames.len() < n {
        match source.next_frame().expect("decode") {
            Some(f) => frames.push(f),
            None => break,
        }
    }
    assert!(!frames.is_empty(), "the demo video has no frame");
    frames
}
