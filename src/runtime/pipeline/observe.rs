//! What a run tells those who listen while it runs: the live service's subscribers
//! (`runtime::live::subscribe`).
//!
//! Contract: the pipeline's threads call [`Observer::observe`] with a [`Topic`], the session
//! time the message describes (`at_ms`) and its fields (a JSON object); the call never
//! blocks, so an observer that cannot keep up drops messages and never slows the pipeline.
//! What each topic's messages carry is the control protocol's (docs/station.md,
//! "Subscriptions"). [`FaceWatch`] turns the stored `face` vectors into `face` messages:
//! found and lost, looking toward the camera or not (each after [`DEBOUNCE_FRAMES`] frames
//! agree), and a summary every second of frames with a face. [`QualityWatch`] turns the
//! `video_signal` and `audio_signal` vectors into `quality` messages: too dark and light
//! again, clipping and stopped, by the session report's bounds over each second.
//! [`BystanderWatch`] turns the bystander screen's verdicts into `quality` messages: someone
//! else in view, and gone again.
//! [`FrameWatch`] is the face and the camera's quality, told by `video-forward` as soon as
//! a frame's stages are done; the microphone's quality is told by `audio-features` from
//! its rows. Neither waits for the aligner (which holds frames for the transcript wait).

use std::collections::BTreeMap;

pub use crate::capture::control_protocol::Topic;
use crate::capture::screening::Screening;
use crate::core::{FrameRecord, ModalityId, ModalityLayout};
use crate::features::signal::VoiceChange;

/// Whoever listens to a run.
pub trait Observer: Send + Sync {
    /// One message about session time `at_ms`; must not block.
    fn observe(&self, topic: Topic, at_ms: u64, fields: serde_json::Value);
}

/// One stream message: `topic`, `t_ms` (when it was sent), `at_ms` (the time it
/// describes), then the topic's fields (never overriding those three).
pub fn message(
    topic: Topic,
    t_ms: u64,
    at_ms: u64,
    fields: serde_json::Value,
) -> serde_json::Value {
    let mut m = serde_json::json!({ "topic": topic.as_str(), "t_ms": t_ms, "at_ms": at_ms });
    if let (Some(o), serde_json::Value::Object(f)) = (m.as_object_mut(), fields) {
        for (k, v) in f {
            o.entry(k).or_insert(v);
        }
    }
    m
}

/// Tells `observer` of voice changes heard by `source` (`silero-vad-v6` or `energy`) in a
/// block handed on at `handed_ns` (live).
pub fn tell_voice(
    observer: &dyn Observer,
    source: &str,
    voice: &[VoiceChange],
    handed_ns: Option<crate::Nanos>,
) {
    for v in voice {
        let mut fields = serde_json::json!({
            "event": if v.speaking { "started" } else { "stopped" },
            "source": source,
            "decided_ms": v.decided_ns / 1_000_000,
        });
        if let Some(h) = handed_ns {
            fields["handed_ms"] = (h / 1_000_000).into();
        }
        observer.observe(Topic::Voice, v.at_ns / 1_000_000, fields);
    }
}

/// What a replay's subscriber would have received (`replay --emit`): every message kept,
/// then written in order of the time it describes (messages of one time in the order they
/// came). In a replay `t_ms` is that time too: nothing is sent while it runs.
#[derive(Default)]
pub struct Recorded(std::sync::Mutex<Vec<(u64, Topic, String)>>);

impl Recorded {
    /// The messages as JSON lines, in order of time, then topic (each topic's messages
    /// come from one thread, in their order; topics of one time from several threads are
    /// put in a fixed order so a replay's stream is the same every time).
    pub fn lines(&self) -> Vec<String> {
        let mut v = self.0.lock().map(|v| v.clone()).unwrap_or_default();
        v.sort_by_key(|(at, topic, _)| (*at, *topic));
        v.into_iter().map(|(_, _, l)| l).collect()
    }
}

impl Observer for Recorded {
    fn observe(&self, topic: Topic, at_ms: u64, fields: serde_json::Value) {
        let line = message(topic, at_ms, at_ms, fields).to_string();
        if let Ok(mut v) = self.0.lock() {
            v.push((at_ms, topic, line));
        }
    }
}

/// Frames that must agree before `face` says found or lost (200 ms at 15 fps).
pub const DEBOUNCE_FRAMES: u32 = 3;
/// Frames that must agree before `face` says looking or looking away (400 ms at 15 fps):
/// gaze estimates jitter from frame to frame more than presence does.
pub const LOOKING_DEBOUNCE_FRAMES: u32 = 6;
/// Head turned and eyes within this (radians, about 20 degrees) starts looking toward the
/// camera...
const LOOKING_WITHIN_RAD: f32 = 0.35;
/// ...and only beyond this (about 29 degrees) stops it: a steady gaze whose estimate
/// jitters around one bound does not flap.
const LOOKING_AWAY_BEYOND_RAD: f32 = 0.5;

/// A debounced boolean: changes after `frames` frames say the other value.
struct Debounced {
    state: Option<bool>,
    against: u32,
    frames: u32,
}

impl Debounced {
    fn new(frames: u32) -> Self {
        Self {
            state: None,
            against: 0,
            frames,
        }
    }

    /// The new state, when it changed with this frame.
    fn push(&mut self, v: bool) -> Option<bool> {
        if self.state == Some(v) {
            self.against = 0;
            return None;
        }
        self.against += 1;
        if self.against >= self.frames || self.state.is_none() && self.against >= 1 {
            self.state = Some(v);
            self.against = 0;
            return Some(v);
        }
        None
    }
}

/// `face` messages from the frames as the aligner emits them.
pub struct FaceWatch {
    face: ModalityId,
    pose: [usize; 3],
    gaze: [usize; 2],
    /// `(column name, index)` of every AU intensity (`AU12_r` is the smile).
    intensities: Vec<(String, usize)>,
    present: Debounced,
    looking: Debounced,
    /// Sums over the second being summarised: frames with a face, pose, intensities.
    summed: u32,
    frames: u32,
    sums: Vec<f64>,
    period_frames: u32,
}

impl FaceWatch {
    /// Watches the `face` modality of `layout`, when it has one (at `fps` frames a second).
    pub fn new(layout: &ModalityLayout, fps: f64) -> Option<Self> {
        let (id, m) = layout.iter().find(|(_, m)| m.spec.name == "face")?;
        let col = |name: &str| m.spec.columns.iter().position(|c| c == name);
        let intensities: Vec<(String, usize)> = m
            .spec
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.starts_with("AU") && c.ends_with("_r"))
            .map(|(i, c)| (c.clone(), i))
            .collect();
        let n = 3 + intensities.len();
        Some(Self {
            face: id,
            pose: [col("pose_Rx")?, col("pose_Ry")?, col("pose_Rz")?],
            gaze: [col("gaze_angle_x")?, col("gaze_angle_y")?],
            intensities,
            present: Debounced::new(DEBOUNCE_FRAMES),
            looking: Debounced::new(LOOKING_DEBOUNCE_FRAMES),
            summed: 0,
            frames: 0,
            sums: vec![0.0; n],
            period_frames: fps.round().max(1.0) as u32,
        })
    }

    /// One emitted frame (decoded or not).
    pub fn frame(&mut self, record: &FrameRecord, observer: &dyn Observer) {
        let at_ms = record.t_ns / 1_000_000;
        let face = if record.decoded {
            record.get(self.face)
        } else {
            None
        };
        if record.decoded {
            if let Some(found) = self.present.push(face.is_some()) {
                let event = if found { "found" } else { "lost" };
                observer.observe(Topic::Face, at_ms, serde_json::json!({ "event": event }));
            }
        }
        if let Some(v) = face {
            // Hysteresis: the bound depends on the state said last.
            let bound = if self.looking.state == Some(true) {
                LOOKING_AWAY_BEYOND_RAD
            } else {
                LOOKING_WITHIN_RAD
            };
            let looking = self.pose[..2]
                .iter()
                .chain(&self.gaze)
                .all(|&i| v.get(i).is_some_and(|a| a.abs() <= bound));
            if let Some(l) = self.looking.push(looking) {
                observer.observe(
                    Topic::Face,
                    at_ms,
                    serde_json::json!({ "event": if l { "looking" } else { "looking_away" } }),
                );
            }
            let values = self
                .pose
                .iter()
                .chain(self.intensities.iter().map(|(_, i)| i))
                .map(|&i| f64::from(v.get(i).copied().unwrap_or(0.0)));
            for (s, x) in self.sums.iter_mut().zip(values) {
                *s += x;
            }
            self.summed += 1;
        }
        self.frames += 1;
        if self.frames >= self.period_frames {
            if self.summed > 0 {
                let n = f64::from(self.summed);
                let mean = |k: usize| self.sums[k] / n;
                let intensities: BTreeMap<&str, f64> = self
                    .intensities
                    .iter()
                    .enumerate()
                    .map(|(k, (name, _))| (name.as_str(), round3(mean(3 + k))))
                    .collect();
                observer.observe(
                    Topic::Face,
                    at_ms,
                    serde_json::json!({
                        "event": "summary",
                        "face_frames": self.summed,
                        "frames": self.frames,
                        "head_pose_rad": [round3(mean(0)), round3(mean(1)), round3(mean(2))],
                        "smile": intensities.get("AU12_r").copied(),
                        "intensities": intensities,
                    }),
                );
            } else {
                observer.observe(
                    Topic::Face,
                    at_ms,
                    serde_json::json!({ "event": "summary", "face_frames": 0, "frames": self.frames }),
                );
            }
            self.sums.iter_mut().for_each(|s| *s = 0.0);
            self.summed = 0;
            self.frames = 0;
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `quality` messages from the signal vectors of the emitted frames: each second's mean
/// brightness and clipped fraction against the session report's bounds
/// (`report::verdict`), with hysteresis (bad to say it, good to say it is over).
pub struct QualityWatch {
    video: Option<ModalityId>,
    audio: Option<ModalityId>,
    dark: bool,
    clipping: bool,
    brightness: (f64, u32),
    clipped: (f64, u32),
    frames: u32,
    period_frames: u32,
}

impl QualityWatch {
    pub fn new(layout: &ModalityLayout, fps: f64) -> Self {
        let find = |name: &str| {
            layout
                .iter()
                .find(|(_, m)| m.spec.name == name)
                .map(|(id, _)| id)
        };
        Self {
            video: find("video_signal"),
            audio: find("audio_signal"),
            dark: false,
            clipping: false,
            brightness: (0.0, 0),
            clipped: (0.0, 0),
            frames: 0,
            period_frames: fps.round().max(1.0) as u32,
        }
    }

    /// The camera's side only (brightness), fed with frames as their stages finish.
    pub fn video_only(layout: &ModalityLayout, fps: f64) -> Self {
        Self {
            audio: None,
            ..Self::new(layout, fps)
        }
    }

    /// The microphone's side only (clipping), fed with `audio_signal` rows as the audio
    /// thread makes them (a second is 100 rows of 10 ms).
    pub fn audio_only(layout: &ModalityLayout) -> Self {
        Self {
            video: None,
            period_frames: 1_000 / crate::features::signal::ROW_MS,
            ..Self::new(layout, 1.0)
        }
    }

    /// `audio_signal` rows, in order (an `audio_only` watch).
    pub fn rows(&mut self, rows: &[crate::features::AudioRow], observer: &dyn Observer) {
        use crate::core::quality::audio_columns::CLIPPED_FRACTION;
        for r in rows {
            if let Some(&c) = r.values.get(CLIPPED_FRACTION) {
                self.clipped.0 += f64::from(c);
                self.clipped.1 += 1;
            }
            self.frames += 1;
            if self.frames >= self.period_frames {
                self.judge(r.t_ns / 1_000_000, observer);
            }
        }
    }

    /// One emitted frame (decoded or not).
    pub fn frame(&mut self, record: &FrameRecord, observer: &dyn Observer) {
        use crate::core::quality::video_columns::BRIGHTNESS;
        let add = |sum: &mut (f64, u32), v: Option<f32>| {
            if let Some(v) = v {
                sum.0 += f64::from(v);
                sum.1 += 1;
            }
        };
        if record.decoded {
            let v = self
                .video
                .and_then(|id| record.get(id)?.get(BRIGHTNESS).copied());
            add(&mut self.brightness, v);
        }
        let a = self.audio.and_then(|id| record.get(id)?.get(1).copied());
        add(&mut self.clipped, a);
        self.frames += 1;
        if self.frames >= self.period_frames {
            self.judge(record.t_ns / 1_000_000, observer);
        }
    }

    /// The period ended at `at_ms`: says what changed, starts the next.
    fn judge(&mut self, at_ms: u64, observer: &dyn Observer) {
        use crate::report::verdict::{
            BRIGHTNESS_BAD_OUTSIDE, BRIGHTNESS_GOOD, CLIPPING_BAD_ABOVE, CLIPPING_GOOD,
        };
        let mean = |s: (f64, u32)| (s.1 > 0).then(|| s.0 / f64::from(s.1));
        if let Some(b) = mean(self.brightness) {
            let now_dark = if self.dark {
                !(BRIGHTNESS_GOOD.0..=BRIGHTNESS_GOOD.1).contains(&b)
            } else {
                b < BRIGHTNESS_BAD_OUTSIDE.0
            };
            if now_dark != self.dark {
                self.dark = now_dark;
                let event = if now_dark { "too_dark" } else { "light_ok" };
                observer.observe(
                    Topic::Quality,
                    at_ms,
                    serde_json::json!({ "event": event, "brightness": round3(b) }),
                );
            }
        }
        if let Some(c) = mean(self.clipped) {
            let now = if self.clipping {
                c > CLIPPING_GOOD
            } else {
                c > CLIPPING_BAD_ABOVE
            };
            if now != self.clipping {
                self.clipping = now;
                let event = if now { "clipping" } else { "clipping_stopped" };
                observer.observe(
                    Topic::Quality,
                    at_ms,
                    serde_json::json!({ "event": event, "clipped_fraction": c }),
                );
            }
        }
        self.brightness = (0.0, 0);
        self.clipped = (0.0, 0);
        self.frames = 0;
    }
}

/// `quality` messages from the bystander screen's verdicts (`[privacy] bystanders =
/// "mask"`): `bystander_in_view` when a second holds a frame with someone other than the
/// participant in view, `bystanders_gone` after a whole second with no one else. Frames
/// that were not screened (dropped, or `"keep"`) say nothing.
pub struct BystanderWatch {
    in_view: bool,
    /// Frames with a bystander in this second, and the most bystanders on one of them.
    seen: (u32, u16),
    screened: u32,
    frames: u32,
    period_frames: u32,
}

impl BystanderWatch {
    pub fn new(fps: f64) -> Self {
        Self {
            in_view: false,
            seen: (0, 0),
            screened: 0,
            frames: 0,
            period_frames: fps.round().max(1.0) as u32,
        }
    }

    /// One emitted frame's slot, with the screening of its frame when it was screened.
    pub fn frame(
        &mut self,
        t_ns: crate::Nanos,
        screening: Option<Screening>,
        observer: &dyn Observer,
    ) {
        if let Some(s) = screening {
            self.screened += 1;
            if s.bystanders > 0 {
                self.seen.0 += 1;
                self.seen.1 = self.seen.1.max(s.bystanders);
            }
        }
        self.frames += 1;
        if self.frames < self.period_frames {
            return;
        }
        let at_ms = t_ns / 1_000_000;
        if !self.in_view && self.seen.0 > 0 {
            self.in_view = true;
            observer.observe(
                Topic::Quality,
                at_ms,
                serde_json::json!({
                    "event": "bystander_in_view",
                    "bystanders": self.seen.1,
                    "frames": self.seen.0,
                }),
            );
        } else if self.in_view && self.seen.0 == 0 && self.screened > 0 {
            self.in_view = false;
            observer.observe(
                Topic::Quality,
                at_ms,
                serde_json::json!({ "event": "bystanders_gone" }),
            );
        }
        self.seen = (0, 0);
        self.screened = 0;
        self.frames = 0;
    }
}

/// What the frames tell as soon as their stages are done (the `video-forward` thread, never
/// behind the transcript wait): `face`, and the camera's `quality` (brightness, and
/// bystanders in view).
pub struct FrameWatch {
    face: Option<FaceWatch>,
    quality: QualityWatch,
    bystanders: BystanderWatch,
}

impl FrameWatch {
    pub fn new(layout: &ModalityLayout, fps: f64) -> Self {
        Self {
            face: FaceWatch::new(layout, fps),
            quality: QualityWatch::video_only(layout, fps),
            bystanders: BystanderWatch::new(fps),
        }
    }

    /// One emitted frame's record, with its frame's screening when it was screened.
    pub fn frame(
        &mut self,
        record: &FrameRecord,
        screening: Option<Screening>,
        observer: &dyn Observer,
    ) {
        if let Some(f) = self.face.as_mut() {
            f.frame(record, observer);
        }
        self.quality.frame(record, observer);
        self.bystanders.frame(record.t_ns, screening, observer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ModalitySpec;
    use crate::core::Stream;

    #[test]
    fn quality_says_dark_and_clipping_once_each_way_by_the_reports_bounds() {
        let mut layout = ModalityLayout::new();
        let cols = |n: usize| (0..n).map(|i| format!("c{i}")).collect::<Vec<_>>();
        layout
            .add(
                Stream::Video,
                ModalitySpec::by_algorithm("video_signal", cols(3), "test", 1),
            )
            .unwrap();
        layout
            .add(
                Stream::Audio,
                ModalitySpec::by_algorithm("audio_signal", cols(3), "test", 1),
            )
            .unwrap();
        let mut watch = QualityWatch::new(&layout, 15.0);
        let told = Recorded::default();
        // Seconds of (brightness, clipped fraction): fine, dark and clipping, still dark
        // but brighter than the bad bound (no change: hysteresis), light, clean.
        let seconds = [
            (0.5, 0.0),
            (0.05, 0.2),
            (0.2, 0.005),
            (0.5, 0.005),
            (0.5, 0.0),
        ];
        for (s, (b, c)) in seconds.iter().enumerate() {
            for f in 0..15u64 {
                let index = s as u64 * 15 + f;
                let record = FrameRecord {
                    index,
                    t_ns: index * 66_666_667,
                    decoded: true,
                    features: vec![Some(vec![*b, 0.1, 10.0]), Some(vec![-20.0, *c, 1.0])],
                };
                watch.frame(&record, &told);
            }
        }
        let events: Vec<String> = told
            .lines()
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                format!("{}@{}", v["event"].as_str().unwrap(), v["at_ms"])
            })
            .collect();
        assert_eq!(
            events,
            [
                "too_dark@1933",
                "clipping@1933",
                "light_ok@3933",
                "clipping_stopped@4933"
            ]
        );
    }

    #[test]
    fn bystanders_are_told_in_view_and_gone_once_each_by_the_second() {
        let mut watch = BystanderWatch::new(15.0);
        let told = Recorded::default();
        // Seconds of bystanders per frame: none; one on 3 frames; two on one frame; none;
        // not screened (no word either way); none.
        let seconds: [Option<&[u16]>; 6] = [
            Some(&[]),
            Some(&[1, 1, 1]),
            Some(&[2]),
            Some(&[]),
            None,
            Some(&[]),
        ];
        for (s, seen) in seconds.iter().enumerate() {
            for f in 0..15u64 {
                let index = s as u64 * 15 + f;
                let screening = seen.map(|b| Screening {
                    faces: 1 + b.get(f as usize).copied().unwrap_or(0),
                    bystanders: b.get(f as usize).copied().unwrap_or(0),
                    masked: b.get(f as usize).copied().unwrap_or(0),
                    participant: true,
                    participant_box: None,
                });
                watch.frame(index * 66_666_667, screening, &told);
            }
        }
        let events: Vec<String> = told
            .lines()
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                format!(
                    "{}@{}:{}",
                    v["event"].as_str().unwrap(),
                    v["at_ms"],
                    v["bystanders"]
                )
            })
            .collect();
        assert_eq!(
            events,
            ["bystander_in_view@1933:1", "bystanders_gone@3933:null"]
        );
    }
}
