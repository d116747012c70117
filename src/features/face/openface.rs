//! OpenFace 2.0's per-frame CSV: exactly its 714 columns, names and order, with its
//! `, ` separator, so study scripts written for OpenFace read our files unchanged.
//!
//! Contract: one row per video frame; `frame` is 1-based, `timestamp` the frame's time in
//! seconds, `face_id` 0. A frame without a face writes confidence and success 0 and leaves
//! every measurement empty. Columns no model here measures are always empty (never numbers
//! that mean nothing): the pupil edge `eye_lmk_*_20..27` and `..48..55`, and the non-rigid
//! shape coefficients `p_0..p_33` (OpenFace's own point distribution model, which is
//! research-licensed and not reproduced). With `--blendshapes`, MediaPipe's 52 blendshape
//! coefficients follow under their ARKit names (`_neutral`, `browDownLeft`, ...), 4
//! decimals, empty without a face.

use std::io::Write;

use super::au::{AU_C, AU_R};
use super::models::BLENDSHAPE_NAMES;
use super::{Face, FaceObservation};

/// The 714 column names in OpenFace 2.0's order.
pub fn columns() -> Vec<String> {
    let mut c: Vec<String> = ["frame", "face_id", "timestamp", "confidence", "success"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for e in 0..2 {
        for a in ["x", "y", "z"] {
            c.push(format!("gaze_{e}_{a}"));
        }
    }
    c.push("gaze_angle_x".into());
    c.push("gaze_angle_y".into());
    for a in ["x", "y", "X", "Y", "Z"] {
        c.extend((0..56).map(|i| format!("eye_lmk_{a}_{i}")));
    }
    for a in ["Tx", "Ty", "Tz", "Rx", "Ry", "Rz"] {
        c.push(format!("pose_{a}"));
    }
    for a in ["x", "y", "X", "Y", "Z"] {
        c.extend((0..68).map(|i| format!("{a}_{i}")));
    }
    for a in ["scale", "rx", "ry", "rz", "tx", "ty"] {
        c.push(format!("p_{a}"));
    }
    c.extend((0..34).map(|i| format!("p_{i}")));
    c.extend(AU_R.iter().map(|a| format!("{a}_r")));
    c.extend(AU_C.iter().map(|a| format!("{a}_c")));
    c
}

/// The 714 columns, then (with `blendshapes`) MediaPipe's 52 blendshape names.
pub fn columns_with(blendshapes: bool) -> Vec<String> {
    let mut c = columns();
    if blendshapes {
        c.extend(BLENDSHAPE_NAMES.iter().map(|n| n.to_string()));
    }
    c
}

/// Writes the header line (see [`columns_with`]).
pub fn write_header(out: &mut impl Write, blendshapes: bool) -> std::io::Result<()> {
    writeln!(out, "{}", columns_with(blendshapes).join(", "))
}

/// Writes one frame's row (with `blendshapes`, the 52 coefficients after the 714).
pub fn write_row(
    out: &mut impl Write,
    frame_number: u64,
    timestamp_s: f64,
    obs: &FaceObservation,
    blendshapes: bool,
) -> std::io::Result<()> {
    let mut cells: Vec<String> = Vec::with_capacity(714 + 52);
    cells.push(frame_number.to_string());
    cells.push("0".into());
    cells.push(format!("{timestamp_s:.3}"));
    cells.push(format!("{:.3}", obs.confidence));
    cells.push(if obs.success() { "1" } else { "0" }.into());
    match &obs.face {
        Some(f) => measurement_cells(f, &mut cells),
        None => cells.extend(std::iter::repeat_n(String::new(), 714 - 5)),
    }
    if blendshapes {
        match &obs.face {
            Some(f) => cells.extend(f.blendshapes.iter().map(|&v| format!("{v:.4}"))),
            None => cells.extend(std::iter::repeat_n(String::new(), 52)),
        }
    }
    writeln!(out, "{}", cells.join(", "))
}

fn measurement_cells(f: &Face, cells: &mut Vec<String>) {
    let num = |v: f64, d: usize| format!("{v:.d$}");
    for g in &f.gaze {
        cells.extend([num(g.x, 6), num(g.y, 6), num(g.z, 6)]);
    }
    cells.extend([num(f.gaze_angle.0, 3), num(f.gaze_angle.1, 3)]);
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| num(v, 1));
    cells.extend(f.eye_2d.iter().map(|p| opt(p.map(|p| p.0))));
    cells.extend(f.eye_2d.iter().map(|p| opt(p.map(|p| p.1))));
    for axis in 0..3 {
        cells.extend(f.eye_3d.iter().map(|p| opt(p.map(|p| p[axis]))));
    }
    let t = f.pose.translation;
    cells.extend([num(t.x, 1), num(t.y, 1), num(t.z, 1)]);
    cells.extend([num(f.euler.0, 3), num(f.euler.1, 3), num(f.euler.2, 3)]);
    cells.extend(f.landmarks_2d.iter().map(|p| num(p.0, 1)));
    cells.extend(f.landmarks_2d.iter().map(|p| num(p.1, 1)));
    for axis in 0..3 {
        cells.extend(f.landmarks_3d.iter().map(|p| num(p[axis], 1)));
    }
    cells.push(num(f.rigid[0], 3));
    cells.extend(f.rigid[1..4].iter().map(|&v| num(v, 3)));
    cells.extend(f.rigid[4..6].iter().map(|&v| num(v, 3)));
    // p_0..p_33: OpenFace's non-rigid shape model is not reproduced.
    cells.extend(std::iter::repeat_n(String::new(), 34));
    cells.extend(f.aus.intensity.iter().map(|&v| num(v as f64, 2)));
    cells.extend(f.aus.presence.iter().map(|&v| num(v as f64, 0)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_714_columns_in_openface_order() {
        let c = columns();
        assert_eq!(c.len(), 714);
        assert_eq!(
            &c[..6],
            [
                "frame",
                "face_id",
                "timestamp",
                "confidence",
                "success",
                "gaze_0_x"
            ]
        );
        assert_eq!(c[13], "eye_lmk_x_0");
        assert_eq!(c[293], "pose_Tx");
        assert_eq!(c[299], "x_0");
        assert_eq!(c[639], "p_scale");
        assert_eq!(c[645], "p_0");
        assert_eq!(c[679], "AU01_r");
        assert_eq!(c[713], "AU45_c");
    }

    #[test]
    fn a_frame_without_a_face_has_empty_measurements() {
        let obs = FaceObservation {
            faces_seen: 0,
            confidence: 0.0,
            face: None,
        };
        let mut out = Vec::new();
        write_row(&mut out, 3, 0.133, &obs, false).expect("write");
        let line = String::from_utf8(out).expect("utf8");
        let cells: Vec<&str> = line.trim_end_matches('\n').split(", ").collect();
        assert_eq!(cells.len(), 714);
        assert_eq!(&cells[..5], ["3", "0", "0.133", "0.000", "0"]);
        assert!(cells[5..].iter().all(|c| c.is_empty()));
    }
}
