//! The source-agnostic pipeline driven directly, as a front end other than replay would:
//! an extra window consumer sees exactly the windows the store keeps, and a drop-oldest
//! video queue counts what it evicts into the stored quality report.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::common::store::column;
use crate::common::*;
use empathic::capture::audio_file::WavAudioSource;
use empathic::capture::events::RecordedEvents;
use empathic::capture::video_file::FileVideoSource;
use empathic::clock::{ManualClock, Pacer, Speed};
use empathic::config::Config;
use empathic::core::Window;
use empathic::runtime::pipeline::{self, Outcome, PipelineOptions, Sinks, Sources, WindowConsumer};
use empathic::runtime::queues::Overflow;
use empathic::runtime::stages::Stages;
use empathic::runtime::{RunError, WriterThread};
use empathic::session::RecordedSession;
use empathic::store::rows::{EndStatus, SessionEnd, SessionSource, SessionStart};
use empathic::store::Store;

/// Records what it is given: (first frame index, frames, phase) per window.
struct Recorder(Arc<Mutex<Vec<(u64, usize, String)>>>);

impl WindowConsumer for Recorder {
    fn thread_name(&self) -> String {
        "recorder-windows".into()
    }

    fn consume(&mut self, window: &Window) -> Result<(), RunError> {
        let first = window.frames.first().map_or(0, |f| f.index);
        let phase = window
            .phase
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        self.0
            .lock()
            .unwrap()
            .push((first, window.frames.len(), phase));
        Ok(())
    }
}

/// Runs the demo session through the pipeline with `overflow` on the video queue and
/// `consumers` beside the store, the way a front end does, and closes the session.
fn run_demo(
    db: &std::path::Path,
    config: &Config,
    overflow: Overflow,
    consumers: Vec<Box<dyn WindowConsumer>>,
) -> Outcome {
    drop(Store::open(db).unwrap());
    let session = RecordedSession::open(&demo_session(), "st-test", 15.0).unwrap();
    let m = &session.manifest;
    let stages = Stages::load(config, m.nominal_fps, m.camera).unwrap();
    let writer_thread = WriterThread::spawn(db, &config.store).unwrap();
    let writer = writer_thread.writer().unwrap().clone();
    writer
        .begin(SessionStart {
            id: m.session_id.clone(),
            station_id: m.station_id.clone(),
            participant_id: m.participant_id.clone(),
            source: SessionSource::Live,
            source_path: None,
            format_version: Some(m.format_version),
            start_time: m.start_time.clone(),
            nominal_fps: m.nominal_fps,
            layout: stages.layout.clone(),
            replace: false,
            recovers_recording: false,
            text_source: Default::default(),
        })
        .unwrap();
    let sources = Sources {
        video: Box::new(FileVideoSource::open(session.video_path.as_ref().unwrap()).unwrap()),
        audio: Box::new(
            WavAudioSource::open(
                session.audio_path.as_ref().unwrap(),
                config.audio.sample_rate_hz,
                config.audio.block_ms,
                m.audio_offset_ms,
            )
            .unwrap(),
        ),
        events: Box::new(RecordedEvents::new(session.events.clone())),
    };
    let clock = Arc::new(ManualClock::new(0));
    let outcome = pipeline::run(
        stages,
        sources,
        Sinks {
            writer: writer.clone(),
            window_consumers: consumers,
            observer: None,
            latest_window: None,
        },
        config,
        PipelineOptions {
            video_overflow: overflow,
            pacer: Pacer {
                start_clock_ns: 0,
                speed: Speed::Max,
            },
            progress: std::sync::Arc::new(empathic::runtime::pipeline::NoProgress),
            realtime_priority: 0,
            live_events_lag_ns: None,
            failures: empathic::runtime::pipeline::StageFailures::new(),
            words_reach_ns: None,
        },
        clock,
        &AtomicBool::new(false),
    )
    .unwrap();
    writer
        .finish(SessionEnd {
            status: EndStatus::Complete,
            reason: None,
            frames: outcome.frames,
            windows: outcome.windows,
            duration_ns: outcome.duration_ns,
            quality_json: serde_json::to_string(&outcome.quality).unwrap(),
        })
        .unwrap();
    drop(writer);
    writer_thread.close().unwrap();
    outcome
}

#[test]
fn an_added_window_consumer_sees_every_stored_window() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("t.db");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let config = Config::default();
    let outcome = run_demo(
        &db,
        &config,
        Overflow::Block,
        vec![Box::new(Recorder(seen.clone()))],
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(outcome.windows, 21);
    assert_eq!(seen.len(), 21);
    assert!(seen.iter().all(|(_, n, _)| *n == 120));
    // The recorder ran on its own named thread, counted like every other.
    assert!(outcome
        .threads
        .iter()
        .any(|t| t.thread == "recorder-windows" && t.items == 21));
    // Same windows, same order, same phases as the store kept.
    let conn = crate::common::store::open_db(&db);
    let starts: Vec<i64> = column(
        &conn,
        "SELECT start_frame FROM windows ORDER BY window_index",
    );
    let phases: Vec<String> = column(
        &conn,
        "SELECT COALESCE(phase, '') FROM windows ORDER BY window_index",
    );
    let stored: Vec<(u64, String)> = starts.into_iter().map(|s| s as u64).zip(phases).collect();
    let recorded: Vec<(u64, String)> = seen.into_iter().map(|(s, _, p)| (s, p)).collect();
    assert_eq!(recorded, stored);
}

#[test]
fn a_drop_oldest_video_queue_counts_its_evictions_into_the_stored_report() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("t.db");
    // A one-frame queue in front of the facial models at full decoding speed: decoding a
    // frame takes a fraction of what the face and appearance models take, so the queue
    // must evict.
    let mut config = Config::default();
    config.runtime.video_queue_frames = 1;
    let outcome = run_demo(&db, &config, Overflow::DropOldest, Vec::new());
    let q = &outcome.quality;
    assert!(q.video_queue_drops > 0, "nothing was dropped");
    // Every frame of the file was either decoded into a stored frame or evicted.
    assert_eq!(q.video.frames_decoded + q.video_queue_drops, 420, "{q:?}");
    let conn = crate::common::store::open_db(&db);
    let decoded: Vec<i64> = column(&conn, "SELECT COUNT(*) FROM frames WHERE decoded = 1");
    assert_eq!(decoded[0] as u64, q.video.frames_decoded);
    let stored: Vec<String> = column(&conn, "SELECT quality_json FROM sessions");
    let stored: serde_json::Value = serde_json::from_str(&stored[0]).unwrap();
    assert_eq!(stored["video_queue_drops"], q.video_queue_drops);
}
