//! The session page's sections of the participant's face, posture and voice: the per-frame
//! facial behaviour, the body's nearness and lean, and the voice's signals drawn over
//! session time from the stored frame vectors (`frames.rs` reads them), each under the
//! page's phases.

use super::*;

use super::frames::*;
use super::section::Section;
use super::summary::*;

/// The session page's Facial behaviour section.
pub(super) fn face_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section {
        duration,
        phase_bands,
        frame_source,
        ..
    } = *cx;
    let behind = cx.behind();
    section(out, SESSION_SECTIONS[4]);
    let is_face_col = |c: &str| {
        (c.starts_with("AU") && c.ends_with("_r"))
            || matches!(
                c,
                "pose_Rx" | "pose_Ry" | "pose_Rz" | "gaze_angle_x" | "gaze_angle_y"
            )
    };
    match read_frames(frame_source, "face", &is_face_col)? {
        None => note(out, "The facial stage did not run for this session (`[face] enabled = false`, or the session stopped before it stored anything)."),
        Some(face) => {
            if face.from_windows {
                note(out, FROM_WINDOWS);
            }
            let aus: Vec<(String, Vec<(f64, f64)>)> = face
                .columns
                .iter()
                .zip(&face.values)
                .filter(|(c, _)| c.starts_with("AU"))
                .map(|(c, v)| (au_label(c.trim_end_matches("_r")), v.clone()))
                .collect();
            out.push_str("<h3>Action unit intensity (0-5; grey: no face)</h3>\n");
            out.push_str("<p class=\"note\">Approximations: these AUs are read from MediaPipe's face mesh and blendshapes, not from OpenFace's AU models (research-licensed, not used). Against OpenFace 2.0 on the project's reference clips they correlate at a mean Pearson r of 0.23-0.37 (docs/features.md): read their course over the session, not their values.</p>\n");
            plot(
                out,
                plots::heat_strip(&aus, phase_bands, duration, 5.0),
            )?;
            out.push_str(&plots::heat_scale_html(5.0, "intensity"));
            let deg = |v: &Vec<(f64, f64)>| -> Vec<(f64, f64)> {
                v.iter().map(|(t, x)| (*t, x.to_degrees())).collect()
            };
            let lines = |names: &[(&str, &str)]| -> Vec<Series> {
                names
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (col, label))| {
                        face.column(col).map(|v| Series {
                            label: (*label).into(),
                            points: deg(v),
                            color: PALETTE[i],
                            dots: false,
                            dashed: false,
                        })
                    })
                    .collect()
            };
            out.push_str("<h3>Head pose</h3>\n");
            let pose = lines(&[
                ("pose_Rx", "pitch (Rx)"),
                ("pose_Ry", "yaw (Ry)"),
                ("pose_Rz", "roll (Rz)"),
            ]);
            plot(
                out,
                plots::line_chart("rotation (degrees)", (-60.0, 60.0), duration, &pose, &behind),
            )?;
            out.push_str(&plots::legend_html(&pose));
            out.push_str("<h3>Eye gaze</h3>\n");
            let gaze = lines(&[("gaze_angle_x", "left-right"), ("gaze_angle_y", "up-down")]);
            plot(
                out,
                plots::line_chart("gaze angle (degrees)", (-45.0, 45.0), duration, &gaze, &behind),
            )?;
            out.push_str(&plots::legend_html(&gaze));
            out.push_str("<h3>Face presence</h3>\n");
            plot(
                out,
                plots::line_chart(
                    "face found (share of frames)",
                    (0.0, 1.05),
                    duration,
                    &[Series {
                        label: "face found".into(),
                        points: face.present.clone(),
                        color: PALETTE[2],
                        dots: false,
                        dashed: false,
                    }],
                    &behind,
                ),
            )?;
        }
    }

    posture(out, cx)
}

/// The posture part of the section: how near the camera the participant sits (shoulder
/// width against its session median: above 1 is nearer, leaning in) and how the shoulders
/// lean from the hips (the world points' depth, cm: negative leans toward the camera),
/// and when a body was found.
fn posture(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let (duration, frame_source) = (cx.duration, cx.frame_source);
    let behind = cx.behind();
    let wanted = |c: &str| matches!(c, "x_11" | "y_11" | "x_12" | "y_12" | "Z_11" | "Z_12");
    let Some(body) = read_frames(frame_source, "body", &wanted)? else {
        note(out, "No body was stored for this session (`[body] enabled = false`, or a build before the body modality).");
        return Ok(());
    };
    let (Some(x11), Some(y11), Some(x12), Some(y12), Some(z11), Some(z12)) = (
        body.column("x_11"),
        body.column("y_11"),
        body.column("x_12"),
        body.column("y_12"),
        body.column("Z_11"),
        body.column("Z_12"),
    ) else {
        return Ok(());
    };
    let width: Vec<(f64, f64)> = x11
        .iter()
        .zip(y11)
        .zip(x12.iter().zip(y12))
        .map(|((a, b), (c, d))| (a.0, ((a.1 - c.1).powi(2) + (b.1 - d.1).powi(2)).sqrt()))
        .collect();
    let mut sorted: Vec<f64> = width.iter().map(|p| p.1).filter(|w| *w > 0.0).collect();
    sorted.sort_by(f64::total_cmp);
    let median = sorted
        .get(sorted.len() / 2)
        .copied()
        .unwrap_or(1.0)
        .max(1e-6);
    let nearness = Series {
        label: "shoulder width / session median".into(),
        points: width.iter().map(|(t, w)| (*t, w / median)).collect(),
        color: PALETTE[0],
        dots: false,
        dashed: false,
    };
    let lean = Series {
        label: "shoulders' depth from the hips (cm)".into(),
        points: z11
            .iter()
            .zip(z12)
            .map(|(a, b)| (a.0, 100.0 * (a.1 + b.1) / 2.0))
            .collect(),
        color: PALETTE[1],
        dots: false,
        dashed: false,
    };
    out.push_str("<h3>Posture: nearness to the camera</h3>\n");
    if body.from_windows {
        note(out, FROM_WINDOWS);
    }
    note(out, "The distance between the shoulders in the image against its median over the session: above 1, the participant sits nearer the camera (or leans in).");
    plot(
        out,
        plots::line_chart(
            "relative shoulder width",
            (0.5, 1.5),
            duration,
            std::slice::from_ref(&nearness),
            &behind,
        ),
    )?;
    out.push_str("<h3>Posture: lean toward the camera</h3>\n");
    note(out, "How far in front of the hips the shoulders are (BlazePose's world points, the mean of both shoulders): below 0 the shoulders are nearer the camera than the hips. With the hips out of the frame the model places them itself, so read changes over the session rather than the level.");
    plot(
        out,
        plots::line_chart(
            "shoulder depth (cm)",
            (-40.0, 40.0),
            duration,
            std::slice::from_ref(&lean),
            &behind,
        ),
    )?;
    out.push_str("<h3>Body presence</h3>\n");
    plot(
        out,
        plots::line_chart(
            "body found (share of frames)",
            (0.0, 1.05),
            duration,
            &[Series {
                label: "body found".into(),
                points: body.present.clone(),
                color: PALETTE[2],
                dots: false,
                dashed: false,
            }],
            &behind,
        ),
    )?;
    Ok(())
}

/// The session page's Voice section.
pub(super) fn voice_section(out: &mut String, cx: &Section<'_>) -> Result<(), PageError> {
    let Section {
        duration,
        frame_source,
        ..
    } = *cx;
    let behind = cx.behind();
    section(out, SESSION_SECTIONS[5]);
    let voice_cols = |c: &str| {
        matches!(
            c,
            "F0final_sma" | "voicingFinalUnclipped_sma" | "F0semitoneFrom27.5Hz_sma3nz"
        )
    };
    let acoustic = match read_frames(frame_source, "acoustic_compare", &voice_cols)? {
        Some(f) => Some(f),
        None => read_frames(frame_source, "acoustic_egemaps", &voice_cols)?,
    };
    let level = read_frames(frame_source, "audio_signal", &|c: &str| {
        matches!(c, "level_dbfs" | "voice_activity")
    })?;
    if acoustic.iter().chain(level.iter()).any(|f| f.from_windows) {
        note(out, FROM_WINDOWS);
    }
    if acoustic.is_none() && level.is_none() {
        note(out, "No acoustic features were stored for this session.");
    }
    if let Some(a) = &acoustic {
        if let Some(f0) = a.column("F0final_sma") {
            // Unvoiced frames carry F0 = 0: gaps, not a dive to zero.
            let voiced: Vec<(f64, f64)> = f0
                .iter()
                .map(|(t, v)| (*t, if *v > 0.0 { *v } else { f64::NAN }))
                .collect();
            out.push_str("<h3>Pitch (F0)</h3>\n");
            plot(
                out,
                plots::line_chart(
                    "F0 (Hz), voiced frames",
                    (50.0, 400.0),
                    duration,
                    &[Series {
                        label: "F0".into(),
                        points: voiced,
                        color: PALETTE[0],
                        dots: false,
                        dashed: false,
                    }],
                    &behind,
                ),
            )?;
        }
    }
    if let Some(l) = &level {
        if let Some(db) = l.column("level_dbfs") {
            out.push_str("<h3>Loudness</h3>\n");
            plot(
                out,
                plots::line_chart(
                    "level (dBFS)",
                    (-80.0, 0.0),
                    duration,
                    &[Series {
                        label: "level".into(),
                        points: db.clone(),
                        color: PALETTE[5],
                        dots: false,
                        dashed: false,
                    }],
                    &behind,
                ),
            )?;
        }
    }
    let mut voicing = Vec::new();
    if let Some(v) = acoustic
        .as_ref()
        .and_then(|a| a.column("voicingFinalUnclipped_sma"))
    {
        voicing.push(Series {
            label: "voicing probability".into(),
            points: v.clone(),
            color: PALETTE[2],
            dots: false,
            dashed: false,
        });
    }
    if let Some(v) = level.as_ref().and_then(|l| l.column("voice_activity")) {
        voicing.push(Series {
            label: "voice activity (share of 10 ms rows)".into(),
            points: v.clone(),
            color: PALETTE[4],
            dots: false,
            dashed: false,
        });
    }
    if !voicing.is_empty() {
        out.push_str(
            "<h3>Voicing and voice activity (participant speech in the timeline above)</h3>\n",
        );
        plot(
            out,
            plots::line_chart("share (0-1)", (0.0, 1.05), duration, &voicing, &behind),
        )?;
        out.push_str(&plots::legend_html(&voicing));
    }

    Ok(())
}
