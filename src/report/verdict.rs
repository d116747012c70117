//! Plain verdicts on a session's data quality, with the thresholds shown beside them.
//!
//! Contract: [`quality_rows`] turns a stored `QualityReport` into rows of (measure, value,
//! verdict, threshold) in the fixed order of [`MEASURES`]. The thresholds are first
//! principles for a 15 fps webcam and a boundary microphone in a home, not fitted to any
//! data: a frame in a hundred missing is noticeable in the windows, one in twenty spoils
//! them; time that only one of camera and microphone covers (one started late, or ended
//! early) leaves windows without a modality: a second or a fiftieth of the session is the
//! warm-up any device takes, a tenth of it is a recording that lost a stream (a start
//! offset alone is not a sync error: the stamps place both streams on one timeline, so it
//! is judged as coverage, not as lip sync); speech that clips at all distorts pitch
//! measures; a session that is silent nine tenths of the time suggests a muted or distant
//! microphone; a face missing on more than a tenth of frames leaves the facial modality
//! patchy. Staff read them as "good: nothing to do, check: look before the next session,
//! bad: the station probably needs a visit".

use super::QualityReport;

/// How a measure looks. Ordered: the worst of a session is its `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Good,
    Check,
    Bad,
}

impl Verdict {
    /// The CSS class and the word shown.
    pub fn class(self) -> &'static str {
        match self {
            Verdict::Good => "good",
            Verdict::Check => "check",
            Verdict::Bad => "bad",
        }
    }
}

/// One row of the data quality table.
pub struct Row {
    pub measure: &'static str,
    pub value: String,
    pub verdict: Verdict,
    pub threshold: &'static str,
}

/// The measures, in the order of [`quality_rows`].
pub const MEASURES: [&str; 11] = [
    "media captured",
    "missing frames",
    "duplicated frames",
    "dropped frames (live queue)",
    "audio-video coverage",
    "audio clipping",
    "silence",
    "brightness",
    "sharpness",
    "face presence",
    "bystanders in view",
];

/// Mean brightness (0-1) the report calls good, and outside which it calls it bad; the
/// live `quality` messages say `too_dark` below the bad bound and `light_ok` back within
/// the good one.
pub const BRIGHTNESS_GOOD: (f64, f64) = (0.25, 0.8);
pub const BRIGHTNESS_BAD_OUTSIDE: (f64, f64) = (0.15, 0.9);
/// Fraction of clipped samples the report calls good (at or below) and bad (above); the
/// live `clipping` and `clipping_stopped` messages use the same bounds.
pub const CLIPPING_GOOD: f64 = 0.0001;
pub const CLIPPING_BAD_ABOVE: f64 = 0.01;

/// A session's overall verdict: the worst of its rows, and at least `check` when it was not
/// stored `complete` (a replay stopped by Ctrl-C, a service killed mid-session), since its
/// rows judge only the part that was stored. Returns the verdict and what earned it, worst
/// first ("the session is incomplete (11.6 s stored)", "sharpness 12.0").
pub fn overall(rows: &[Row], status: &str, stored_secs: f64) -> (Verdict, Vec<String>) {
    let unfinished = unfinished(status, stored_secs);
    let rows_worst = rows
        .iter()
        .map(|r| r.verdict)
        .max()
        .unwrap_or(Verdict::Good);
    let worst = if unfinished.is_some() {
        rows_worst.max(Verdict::Check)
    } else {
        rows_worst
    };
    let mut why: Vec<String> = unfinished.into_iter().collect();
    why.extend(
        rows.iter()
            .filter(|r| r.verdict == worst && worst != Verdict::Good)
            .map(|r| format!("{} {}", r.measure, r.value)),
    );
    (worst, why)
}

/// What [`overall`] says first of a session not stored `complete`; `None` for one that was.
pub fn unfinished(status: &str, stored_secs: f64) -> Option<String> {
    (status != "complete").then(|| {
        format!("the session is {status} ({stored_secs:.1} s stored; the rows judge that part)")
    })
}

/// Lower is better: good at or below `good`, check at or below `check`.
fn at_most(v: f64, good: f64, check: f64) -> Verdict {
    if v <= good {
        Verdict::Good
    } else if v <= check {
        Verdict::Check
    } else {
        Verdict::Bad
    }
}

/// Higher is better: good at or above `good`, check at or above `check`.
fn at_least(v: f64, good: f64, check: f64) -> Verdict {
    if v >= good {
        Verdict::Good
    } else if v >= check {
        Verdict::Check
    } else {
        Verdict::Bad
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

pub fn quality_rows(q: &QualityReport) -> Vec<Row> {
    let slots = (q.video.frames_used + q.video.missing_frames).max(1) as f64;
    let missing = q.video.missing_frames as f64 / slots;
    let duplicated = q.video.duplicated_frames as f64 / slots;
    let dropped = q.video_queue_drops as f64 / slots;
    let face = q
        .modality_presence
        .iter()
        .find(|m| m.modality == "face")
        .map(|m| m.present_frames as f64 / m.decoded_frames.max(1) as f64);
    let within = |(lo, hi): (f64, f64)| (lo..=hi).contains(&q.mean_brightness);
    let brightness = if within(BRIGHTNESS_GOOD) {
        Verdict::Good
    } else if within(BRIGHTNESS_BAD_OUTSIDE) {
        Verdict::Check
    } else {
        Verdict::Bad
    };
    // A device that delivered nothing all session: its measures are not measured (a
    // silent 100 % beside a perfect offset would say the microphone worked).
    let has_video = q.video.frames_used > 0;
    let has_audio = q.audio_duration_secs > 0.0;
    let captured = Row {
        measure: MEASURES[0],
        value: match (has_video, has_audio) {
            (true, true) => "video and audio".into(),
            (true, false) => "video only: no audio (the microphone delivered nothing)".into(),
            (false, true) => "audio only: no video (the camera delivered nothing)".into(),
            (false, false) => "nothing (neither camera nor microphone delivered)".into(),
        },
        verdict: if has_video && has_audio {
            Verdict::Good
        } else {
            Verdict::Bad
        },
        threshold: "both / -",
    };
    // Time only one stream covers: the start offset plus the end offset (audio end minus
    // video end = offset + duration mismatch), against the longer of the two.
    let one_stream_secs =
        (q.av_offset_ms.abs() + (q.av_offset_ms + q.av_duration_mismatch_ms).abs()) / 1e3;
    let span_secs = q
        .audio_duration_secs
        .max(q.audio_duration_secs - q.av_duration_mismatch_ms / 1e3)
        .max(1e-9);
    let one_stream_share = one_stream_secs / span_secs;
    let mut rows = vec![
        captured,
        Row {
            measure: MEASURES[1],
            value: format!("{} ({})", q.video.missing_frames, pct(missing)),
            verdict: at_most(missing, 0.01, 0.05),
            threshold: "<= 1 % / <= 5 % of frame slots",
        },
        Row {
            measure: MEASURES[2],
            value: format!("{} ({})", q.video.duplicated_frames, pct(duplicated)),
            verdict: at_most(duplicated, 0.01, 0.05),
            threshold: "<= 1 % / <= 5 % of frame slots",
        },
        Row {
            measure: MEASURES[3],
            value: format!("{} ({})", q.video_queue_drops, pct(dropped)),
            verdict: at_most(dropped, 0.01, 0.05),
            threshold: "<= 1 % / <= 5 % of frame slots",
        },
        Row {
            measure: MEASURES[4],
            value: format!(
                "{:.1} s with one stream only ({}; audio starts {:+.0} ms after video)",
                one_stream_secs,
                pct(one_stream_share),
                q.av_offset_ms
            ),
            verdict: if one_stream_secs <= 1.0 {
                Verdict::Good
            } else {
                at_most(one_stream_share, 0.02, 0.10)
            },
            threshold: "<= 1 s or <= 2 % / <= 10 % of the session",
        },
        Row {
            measure: MEASURES[5],
            value: pct(q.audio_clipping_ratio),
            verdict: at_most(q.audio_clipping_ratio, CLIPPING_GOOD, CLIPPING_BAD_ABOVE),
            threshold: "<= 0.01 % / <= 1 % of samples",
        },
        Row {
            measure: MEASURES[6],
            value: pct(q.silence_ratio),
            verdict: at_most(q.silence_ratio, 0.8, 0.95),
            threshold: "<= 80 % / <= 95 % of 10 ms rows without voice",
        },
        Row {
            measure: MEASURES[7],
            value: format!("{:.2}", q.mean_brightness),
            verdict: brightness,
            threshold: "0.25-0.80 / 0.15-0.90 (mean luma, 0-1)",
        },
        Row {
            measure: MEASURES[8],
            value: format!("{:.1}", q.mean_sharpness),
            verdict: at_least(q.mean_sharpness, 40.0, 15.0),
            threshold: ">= 40 / >= 15 (variance of the Laplacian)",
        },
    ];
    rows.push(match face {
        Some(f) => Row {
            measure: MEASURES[9],
            value: pct(f),
            verdict: at_least(f, 0.9, 0.6),
            threshold: ">= 90 % / >= 60 % of decoded frames",
        },
        None => Row {
            measure: MEASURES[9],
            value: "not measured (facial stage off)".into(),
            verdict: Verdict::Check,
            threshold: ">= 90 % / >= 60 % of decoded frames",
        },
    });
    // Someone other than the participant was in view: masked in the video, but their voice
    // is in the audio (not separated), which staff should know.
    rows.push(match &q.bystanders {
        Some(b) if b.frames_with_bystanders == 0 => Row {
            measure: MEASURES[10],
            value: format!(
                "none seen on {} screened frames; the participant not found on {}",
                b.screened_frames, b.frames_without_participant
            ),
            verdict: Verdict::Good,
            threshold: "none / any: faces masked, voices not separated",
        },
        Some(b) => Row {
            measure: MEASURES[10],
            value: format!(
                "{:.1} s ({} frames), masked on {} frames (a region stays masked {} frames after its face was last seen); the participant not found on {}",
                b.bystander_secs,
                b.frames_with_bystanders,
                b.frames_masked,
                crate::capture::screening::HOLD_FRAMES,
                b.frames_without_participant
            ),
            verdict: Verdict::Check,
            threshold: "none / any: faces masked, voices not separated",
        },
        // Under `keep` everyone in view is recorded and measured, as the study's consent
        // allows: said, not flagged on every session of such a study.
        None => Row {
            measure: MEASURES[10],
            value: "not screened ([privacy] bystanders = \"keep\": everyone in view recorded; or a report stored before the screen's counts were kept)".into(),
            verdict: Verdict::Good,
            threshold: "keep: the study's consent covers everyone in view",
        },
    });
    let not_measured = |row: &mut Row, why: &str| {
        row.value = format!("not measured ({why})");
        row.verdict = Verdict::Check;
    };
    for row in rows.iter_mut() {
        let needs_audio = [MEASURES[4], MEASURES[5], MEASURES[6]].contains(&row.measure);
        let needs_video = [
            MEASURES[1],
            MEASURES[2],
            MEASURES[3],
            MEASURES[4],
            MEASURES[7],
            MEASURES[8],
            MEASURES[9],
            MEASURES[10],
        ]
        .contains(&row.measure);
        if needs_audio && !has_audio {
            not_measured(row, "no audio");
        } else if needs_video && !has_video {
            not_measured(row, "no video");
        }
    }
    rows
}
