//! The facial stage: parity with MediaPipe's own Python output, pose and gaze geometry on
//! synthetic data, hard frames, the OpenFace CSV, and accuracy against OpenFace 2.0 on the
//! shared sessions.

use std::path::Path;

use crate::common::csv::read_csv;
use crate::common::*;
use empathic::capture::video_file::FileVideoSource;
use empathic::capture::{BgrImage, VideoSource};
use empathic::features::face::crop::mat_of;
use empathic::features::face::pose::{euler_xyz, rotation_xyz, Intrinsics, IntrinsicsArgs};
use empathic::features::face::{on_eyeball, FaceAnalyzer, HeadModel, Mode, EYEBALL_RADIUS_MM};
use empathic::models::manifest::Manifest;
use nalgebra::Vector3;
use opencv::core::{Mat, Point2f, Scalar, Size, BORDER_CONSTANT};
use opencv::imgproc;
use opencv::prelude::*;

fn analyzer(mode: Mode) -> FaceAnalyzer {
    let dir = root().join("models");
    let manifest = Manifest::load(&dir).unwrap();
    FaceAnalyzer::open(&dir, &manifest, None, IntrinsicsArgs::default(), mode).unwrap()
}

fn demo_frames() -> Vec<BgrImage> {
    let mut src = FileVideoSource::open(&demo_session().join("video.avi")).unwrap();
    let mut out = Vec::new();
    while let Some(f) = src.next_frame().unwrap() {
        out.push(f.image);
    }
    out
}

fn from_mat(m: &Mat) -> BgrImage {
    BgrImage {
        width: m.cols() as u32,
        height: m.rows() as u32,
        data: m.data_bytes().unwrap().to_vec(),
    }
}

/// The reference tool's transform: rotation about the centre and scaling, black border.
fn transformed(img: &BgrImage, rotate_deg: f64, scale: f64) -> BgrImage {
    let src = mat_of(img).unwrap();
    let centre = Point2f::new(img.width as f32 / 2.0, img.height as f32 / 2.0);
    let m = imgproc::get_rotation_matrix_2d(centre, rotate_deg, scale).unwrap();
    let mut out = Mat::default();
    imgproc::warp_affine(
        &src,
        &mut out,
        &m,
        Size::new(img.width as i32, img.height as i32),
        imgproc::INTER_LINEAR,
        BORDER_CONSTANT,
        Scalar::all(0.0),
    )
    .unwrap();
    from_mat(&out)
}

#[test]
fn mesh_matches_mediapipe_python_on_real_faces() {
    // tests/data/face/mediapipe_reference.json: mediapipe 0.10.14's own Python solutions
    // (tools/mediapipe_face_reference.py) on demo frames, some turned and shrunk.
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/data/face/mediapipe_reference.json")).unwrap(),
    )
    .unwrap();
    let frames = demo_frames();
    let mut face = analyzer(Mode::StillImages);
    let mut compared = 0;
    for case in reference["cases"].as_array().unwrap() {
        let k = case["frame"].as_u64().unwrap() as usize;
        let img = transformed(
            &frames[k],
            case["rotate_deg"].as_f64().unwrap(),
            case["scale"].as_f64().unwrap(),
        );
        let (w, h) = (img.width as f64, img.height as f64);
        let obs = face.analyze(&img).unwrap();
        let ref_dets = case["detections"].as_array().unwrap();
        assert_eq!(
            obs.faces_seen as usize,
            ref_dets.len(),
            "faces in case {case}"
        );
        let Some(mesh_ref) = case["mesh"].as_array() else {
            assert!(!obs.success(), "MediaPipe finds no face in frame {k}");
            continue;
        };
        let ours = obs.face.expect("a face where MediaPipe finds one");
        let pt = |i: usize| {
            let p = mesh_ref[i].as_array().unwrap();
            (p[0].as_f64().unwrap() * w, p[1].as_f64().unwrap() * h)
        };
        let iod = ((pt(33).0 - pt(263).0).powi(2) + (pt(33).1 - pt(263).1).powi(2)).sqrt();
        let err: f64 = (0..468)
            .map(|i| {
                let q = ours.mesh.points[i];
                ((q[0] as f64 - pt(i).0).powi(2) + (q[1] as f64 - pt(i).1).powi(2)).sqrt()
            })
            .sum::<f64>()
            / 468.0
            / iod;
        eprintln!(
            "frame {k} rotated {} scale {}: mean mesh error {:.3} % of IOD",
            case["rotate_deg"],
            case["scale"],
            100.0 * err
        );
        // Same models; the crops differ only in interpolation details.
        assert!(
            err < 0.02,
            "frame {k}: mean mesh error {:.2} % of IOD",
            100.0 * err
        );
        compared += 1;
    }
    assert!(compared >= 8, "{compared}");
}

#[test]
fn pose_is_recovered_from_synthetic_projections_of_the_head_model() {
    let head = HeadModel::new();
    let k = Intrinsics::default_for(640, 480);
    for (rx, ry, rz, t) in [
        (0.0, 0.0, 0.0, Vector3::new(0.0, 0.0, 500.0)),
        (0.3, -0.2, 0.1, Vector3::new(30.0, -20.0, 600.0)),
        (-0.25, 0.5, -0.2, Vector3::new(-60.0, 40.0, 450.0)),
        (0.1, -0.6, 0.3, Vector3::new(10.0, 10.0, 800.0)),
    ] {
        let r = rotation_xyz(rx, ry, rz);
        // The mesh's view of the head: projected x, y; relative depth at the image scale.
        let scale = k.fx / t.z;
        let points: Vec<[f32; 3]> = head
            .vertices
            .iter()
            .map(|v| {
                let c = r * v + t;
                let (u, w) = k.project(&c);
                [u as f32, w as f32, ((c.z - t.z) * scale) as f32]
            })
            .collect();
        let (pose, _) = head.fit(&points, &k).expect("fit");
        let (x, y, z) = euler_xyz(&pose.rotation);
        let deg = |a: f64| a.to_degrees();
        assert!(
            (deg(x - rx)).abs() < 0.5 && (deg(y - ry)).abs() < 0.5 && (deg(z - rz)).abs() < 0.5,
            "want ({rx}, {ry}, {rz}), got ({x}, {y}, {z})"
        );
        assert!(
            (pose.translation - t).norm() < 0.01 * t.z,
            "{:?}",
            pose.translation
        );
    }
}

#[test]
fn gaze_is_recovered_on_synthetic_eyes() {
    let k = Intrinsics::default_for(640, 480);
    let centre = Vector3::new(-32.0, 10.0, 400.0);
    for (ax, ay) in [(0.0f64, 0.0f64), (0.3, 0.0), (-0.2, 0.25), (0.15, -0.3)] {
        // A gaze turned away from the camera axis by (ax, ay): OpenFace's angles.
        let g = Vector3::new(ax.tan(), ay.tan(), -1.0).normalize();
        let pupil = centre + g * EYEBALL_RADIUS_MM;
        let uv = k.project(&pupil);
        let found = on_eyeball(&k, uv, &centre);
        let got = (found - centre).normalize();
        let angle = (got.x.atan2(-got.z), got.y.atan2(-got.z));
        assert!(
            (angle.0 - ax).abs() < 1e-6 && (angle.1 - ay).abs() < 1e-6,
            "want ({ax}, {ay}), got {angle:?}"
        );
    }
}

#[test]
fn hard_frames_black_tiny_two_faces_and_cut_off() {
    let frames = demo_frames();
    let mut face = analyzer(Mode::StillImages);
    // Black frame: no face, no error.
    let black = BgrImage {
        width: 640,
        height: 480,
        data: vec![0; 640 * 480 * 3],
    };
    let obs = face.analyze(&black).unwrap();
    assert_eq!((obs.faces_seen, obs.success()), (0, false));
    // Tiny face (a fifth of the size): cleanly absent (MediaPipe's short-range detector
    // does not see faces this small either).
    let tiny = transformed(&frames[0], 0.0, 0.2);
    let obs = face.analyze(&tiny).unwrap();
    assert!(!obs.success());
    // Two faces side by side, one larger: both counted, the larger one is the participant.
    let big = transformed(&frames[0], 0.0, 0.8);
    let small = transformed(&frames[0], 0.0, 0.5);
    let mut both = vec![0u8; 640 * 480 * 3];
    for y in 0..480 {
        for x in 0..320 {
            let dst = (y * 640 + x) * 3;
            let left = (y * 640 + x + 160) * 3;
            both[dst..dst + 3].copy_from_slice(&big.data[left..left + 3]);
            let dst = (y * 640 + x + 320) * 3;
            both[dst..dst + 3].copy_from_slice(&small.data[left..left + 3]);
        }
    }
    let two = BgrImage {
        width: 640,
        height: 480,
        data: both,
    };
    let obs = face.analyze(&two).unwrap();
    assert_eq!(obs.faces_seen, 2);
    let f = obs.face.expect("the participant");
    assert!(
        f.landmarks_2d[30].0 < 320.0,
        "the larger (left) face is chosen"
    );
    // Half the face beyond the frame edge: no panic; whatever is found is finite.
    let mut shifted = vec![0u8; 640 * 480 * 3];
    for y in 0..480 {
        let src = (y * 640 + 200) * 3;
        let dst = y * 640 * 3;
        shifted[dst..dst + 440 * 3].copy_from_slice(&frames[0].data[src..src + 440 * 3]);
    }
    let cut = BgrImage {
        width: 640,
        height: 480,
        data: shifted,
    };
    let obs = face.analyze(&cut).unwrap();
    if let Some(f) = obs.face {
        assert!(f
            .landmarks_3d
            .iter()
            .all(|p| p.iter().all(|v| v.is_finite())));
    }
}

#[test]
fn extract_face_writes_the_openface_columns_for_every_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("demo.csv");
    let video = demo_session().join("video.avi");
    let o = empathic(&["extract", "face", path_str(&video), "--out", path_str(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&out).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(", ").collect();
    assert_eq!(header.len(), 714);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(", ").collect()).collect();
    assert_eq!(rows.len(), 420);
    assert!(rows.iter().all(|r| r.len() == 714));
    // The demo face is found on every frame; frame numbers are 1-based.
    assert!(rows.iter().all(|r| r[4] == "1"));
    assert_eq!(rows[0][0], "1");
    // Pupil-edge points and the non-rigid shape are not computed: left empty.
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    assert!(rows[0][col("eye_lmk_x_20")].is_empty() && rows[0][col("p_0")].is_empty());
    assert!(!rows[0][col("AU12_r")].is_empty() && !rows[0][col("gaze_angle_x")].is_empty());

    // --blendshapes appends MediaPipe's 52 coefficients under their ARKit names, after the
    // same 714 columns; the demo portrait smiles throughout.
    let with = tmp.path().join("demo-blendshapes.csv");
    let o = empathic(&[
        "extract",
        "face",
        path_str(&video),
        "--out",
        path_str(&with),
        "--blendshapes",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&with).unwrap();
    let mut lines = text.lines();
    let wide: Vec<&str> = lines.next().unwrap().split(", ").collect();
    assert_eq!(wide.len(), 714 + 52);
    assert_eq!(&wide[..714], &header[..]);
    assert_eq!(
        (wide[714], wide[715], wide[765]),
        ("_neutral", "browDownLeft", "noseSneerRight")
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| {
            l.split(", ")
                .skip(714)
                .map(|c| c.parse().unwrap())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 420);
    let mean = |name: &str| {
        let c = wide.iter().position(|h| *h == name).unwrap() - 714;
        rows.iter().map(|r| r[c]).sum::<f64>() / rows.len() as f64
    };
    assert!(rows
        .iter()
        .all(|r| r.len() == 52 && r.iter().all(|v| (0.0..=1.0).contains(v))));
    assert!(mean("mouthSmileLeft") > 0.5 && mean("jawOpen") < 0.2);

    // Bad input: a missing video is exit 2 naming it; no CSV is left behind.
    let missing = tmp.path().join("nope.avi");
    let bad_out = tmp.path().join("bad.csv");
    let o = empathic(&[
        "extract",
        "face",
        path_str(&missing),
        "--out",
        path_str(&bad_out),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nope.avi"));
    assert!(!bad_out.exists());
}

/// `empathic extract face VIDEO --out CSV --tracked AVI`.
fn extract_tracked(video: &Path, csv: &Path, tracked: &Path) -> std::process::Output {
    empathic(&[
        "extract",
        "face",
        path_str(video),
        "--out",
        path_str(csv),
        "--tracked",
        path_str(tracked),
    ])
}

#[test]
fn extract_face_tracked_video_draws_on_every_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let video = demo_session().join("video.avi");
    let (csv, tracked) = (tmp.path().join("d.csv"), tmp.path().join("d.avi"));
    let o = extract_tracked(&video, &csv, &tracked);
    assert!(o.status.success(), "{}", stderr(&o));
    // Same frame count and size as the input; each frame differs from its source where
    // the landmarks are drawn (bright green dots on the nose tip, which is not green).
    let text = std::fs::read_to_string(&csv).unwrap();
    let header: Vec<&str> = text.lines().next().unwrap().split(", ").collect();
    let (xi, yi) = (
        header.iter().position(|h| *h == "x_30").unwrap(),
        header.iter().position(|h| *h == "y_30").unwrap(),
    );
    let rows: Vec<Vec<f64>> = text
        .lines()
        .skip(1)
        .map(|l| {
            l.split(", ")
                .map(|c| c.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let mut drawn = FileVideoSource::open(&tracked).unwrap();
    let mut source = FileVideoSource::open(&video).unwrap();
    let mut n = 0;
    while let Some(f) = drawn.next_frame().unwrap() {
        let original = source
            .next_frame()
            .unwrap()
            .expect("as many frames as the input");
        assert_eq!((f.image.width, f.image.height), (640, 480));
        let (x, y) = (rows[n][xi].round() as usize, rows[n][yi].round() as usize);
        let at = (y * 640 + x) * 3;
        let (px, was) = (&f.image.data[at..at + 3], &original.image.data[at..at + 3]);
        assert!(
            px[1] > 180 && px[1] as i32 - px[2] as i32 > 60,
            "frame {n}: nose tip drawn green, got BGR {px:?} over {was:?}"
        );
        n += 1;
    }
    assert_eq!(n, 420);
    assert!(source.next_frame().unwrap().is_none());

    // A name that is not *.avi is refused up front, and nothing is written.
    let bad = tmp.path().join("d.mp4");
    let csv2 = tmp.path().join("e.csv");
    let o = extract_tracked(&video, &csv2, &bad);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("d.mp4") && stderr(&o).contains("avi"),
        "{}",
        stderr(&o)
    );
    assert!(!csv2.exists() && !bad.exists());
    // So is a directory that does not exist, named in the error.
    let nowhere = tmp.path().join("missing-dir").join("d.avi");
    let o = extract_tracked(&video, &csv2, &nowhere);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing-dir"), "{}", stderr(&o));
    assert!(!csv2.exists());
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

/// Our CSV against OpenFace's on the frames where OpenFace found a face.
#[derive(Debug)]
struct Agreement {
    detected: f64,
    rotation_mae_deg: [f64; 3],
    landmark_error_iod: f64,
    gaze_mae: [f64; 2],
    au_r: Vec<(String, f64)>,
}

fn agreement(ours: &Path, reference: &Path) -> Agreement {
    let (h_o, o) = read_csv(ours);
    let (h_r, r) = read_csv(reference);
    assert_eq!(h_o, h_r, "same 714 columns in the same order");
    assert_eq!(o.len(), r.len());
    let c = |name: &str| h_o.iter().position(|h| h == name).unwrap();
    let ok_r: Vec<usize> = (0..r.len())
        .filter(|&i| r[i][c("success")] == 1.0)
        .collect();
    let both: Vec<usize> = ok_r
        .iter()
        .copied()
        .filter(|&i| o[i][c("success")] == 1.0)
        .collect();
    let mae = |name: &str| {
        both.iter()
            .map(|&i| (o[i][c(name)] - r[i][c(name)]).abs())
            .sum::<f64>()
            / both.len() as f64
    };
    let mut lm = 0.0;
    for &i in &both {
        let iod = (r[i][c("x_36")] - r[i][c("x_45")]).hypot(r[i][c("y_36")] - r[i][c("y_45")]);
        for p in 17..68 {
            let (x, y) = (format!("x_{p}"), format!("y_{p}"));
            lm += (o[i][c(&x)] - r[i][c(&x)]).hypot(o[i][c(&y)] - r[i][c(&y)]) / iod;
        }
    }
    let au_r = ["01", "02", "04", "06", "12", "25", "26", "45"]
        .iter()
        .map(|au| {
            let name = format!("AU{au}_r");
            let a: Vec<f64> = both.iter().map(|&i| o[i][c(&name)]).collect();
            let b: Vec<f64> = both.iter().map(|&i| r[i][c(&name)]).collect();
            (name, pearson(&a, &b))
        })
        .collect();
    Agreement {
        detected: both.len() as f64 / ok_r.len() as f64,
        rotation_mae_deg: [
            mae("pose_Rx").to_degrees(),
            mae("pose_Ry").to_degrees(),
            mae("pose_Rz").to_degrees(),
        ],
        landmark_error_iod: lm / (both.len() * 51) as f64,
        gaze_mae: [mae("gaze_angle_x"), mae("gaze_angle_y")],
        au_r,
    }
}

/// The targets met on grid and still: a face found on >= 98 % of OpenFace's frames, head
/// rotation MAE <= 5 degrees per axis, 2D landmarks <= 8 % of the inter-ocular distance.
/// Mean Pearson r over the AUs where it is defined (an AU constant in either output, as
/// AU04 on still, has none).
fn mean_au_r(a: &Agreement) -> f64 {
    let defined: Vec<f64> = a
        .au_r
        .iter()
        .map(|(_, r)| *r)
        .filter(|r| r.is_finite())
        .collect();
    defined.iter().sum::<f64>() / defined.len().max(1) as f64
}

fn assert_detection_pose_and_landmarks_met(a: &Agreement) {
    assert!(a.detected >= 0.98);
    assert!(a.rotation_mae_deg.iter().all(|&e| e <= 5.0));
    assert!(a.landmark_error_iod <= 0.08);
}

fn extract(fixtures: &Path, session: &str, dir: &Path) -> std::path::PathBuf {
    extract_video(
        &fixtures.join("sessions").join(session).join("video.avi"),
        dir,
        "openface",
    )
}

fn extract_video(video: &Path, dir: &Path, gaze_model: &str) -> std::path::PathBuf {
    let stem = video
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    let out = dir.join(format!("{stem}.{gaze_model}.csv"));
    // The facial stage against OpenFace, which measures any face: the bystander screen
    // (which on the hand-held, three-person selfie clip masks whom the camera turns to;
    // docs/station.md) is left out here and tested in bystanders.rs.
    let keep = keep_bystanders_config(dir);
    let o = empathic(&[
        "extract",
        "face",
        path_str(video),
        "--out",
        path_str(&out),
        "--gaze-model",
        gaze_model,
        "--config",
        path_str(&keep),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// With the anatomical eyeball: the mean gaze angle minus the mean direction from the eyes
/// into the lens (from our own 3D eye landmarks: the eyes' centroid p, the lens at the
/// origin, so the direction -p), x and y, on frames with a face.
fn gaze_minus_lens(csv: &Path) -> (f64, f64) {
    let (h, rows) = read_csv(csv);
    let c = |name: &str| h.iter().position(|x| x == name).unwrap();
    let (mut dx, mut dy, mut n) = (0.0, 0.0, 0.0);
    for r in rows.iter().filter(|r| r[c("success")] == 1.0) {
        let mean = |axis: &str| {
            let v: Vec<f64> = (0..56)
                .map(|i| r[c(&format!("eye_lmk_{axis}_{i}"))])
                .filter(|v| v.is_finite())
                .collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let (x, y, z) = (mean("X"), mean("Y"), mean("Z"));
        dx += r[c("gaze_angle_x")] - (-x).atan2(z);
        dy += r[c("gaze_angle_y")] - (-y).atan2(z);
        n += 1.0;
    }
    (dx / n, dy / n)
}

#[test]
fn anatomical_gaze_looks_into_the_lens_on_camera_facing_clips() {
    let tmp = tempfile::tempdir().unwrap();
    // The demo portrait looks into the lens; so do grid's readers and still's portrait, on
    // average (the shared sessions, when present).
    let mut videos = vec![demo_session().join("video.avi")];
    if let Some(fixtures) = fixtures_or_skip("anatomical gaze on grid and still") {
        for s in ["grid", "still"] {
            videos.push(fixtures.join("sessions").join(s).join("video.avi"));
        }
    }
    for video in videos {
        let (dx, dy) = gaze_minus_lens(&extract_video(&video, tmp.path(), "anatomical"));
        eprintln!(
            "{}: anatomical gaze minus lens direction x {dx:+.3} y {dy:+.3} rad",
            video.display()
        );
        assert!(
            dx.abs() <= 0.05 && dy.abs() <= 0.05,
            "{}: {dx:+.3} {dy:+.3}",
            video.display()
        );
    }
}

#[test]
fn grid_meets_the_openface_targets() {
    let Some(fixtures) = fixtures_or_skip("grid_meets_the_openface_targets") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ours = extract(&fixtures, "grid", tmp.path());
    let a = agreement(&ours, &fixtures.join("references/openface/grid.csv"));
    eprintln!("grid: {a:?}");
    assert_detection_pose_and_landmarks_met(&a);
    // OpenFace's eyeball geometry (the default gaze model): the target, both axes.
    assert!(a.gaze_mae.iter().all(|&e| e <= 0.12), "{:?}", a.gaze_mae);
    // Not met (see docs/features.md, "Facial behaviour"): the mean AU correlation is below 0.5. A
    // regression floor at the measured level, not the target.
    let mean_r = mean_au_r(&a);
    assert!(mean_r >= 0.35, "AU correlation regressed: {mean_r}");
}

#[test]
fn held_out_sessions_and_expressions() {
    let Some(fixtures) = fixtures_or_skip("held_out_sessions_and_expressions") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // still: one steady (animated) face on all 600 frames.
    let ours = extract(&fixtures, "still", tmp.path());
    let a = agreement(&ours, &fixtures.join("references/openface/still.csv"));
    eprintln!("still: {a:?}");
    assert_detection_pose_and_landmarks_met(&a);
    // Gaze meets the target on both axes; the AUs do not (docs/features.md, "Facial behaviour"): a
    // regression floor near the measured mean r 0.32.
    assert!(
        a.gaze_mae.iter().all(|&e| e <= 0.12),
        "still gaze: {:?}",
        a.gaze_mae
    );
    let mean_r = mean_au_r(&a);
    assert!(mean_r >= 0.28, "still AU correlation regressed: {mean_r}");

    // selfie: laughing people. Where OpenFace sees a smile (AU12 present), ours is higher
    // than where it does not; likewise lips apart (AU25).
    let ours = extract(&fixtures, "selfie", tmp.path());
    // Fast hand-held motion and camera cuts: the track must follow the face the detector
    // sees rather than stay on the background (a stale crop put the mean landmark error
    // at 30 % of the IOD; the remainder is mostly OpenFace's own misfits, checked by eye).
    let a = agreement(&ours, &fixtures.join("references/openface/selfie.csv"));
    eprintln!("selfie: {a:?}");
    assert!(a.landmark_error_iod <= 0.2, "selfie landmarks regressed");
    // Regression floors near the measured levels (detection 92.7 %, rotation MAE up to
    // 6.3 degrees, gaze 0.27 / 0.17 rad, mean AU r 0.23); the targets are not met here.
    assert!(
        a.detected >= 0.9,
        "selfie detection regressed: {}",
        a.detected
    );
    assert!(
        a.rotation_mae_deg.iter().all(|&e| e <= 8.0),
        "selfie rotation regressed: {:?}",
        a.rotation_mae_deg
    );
    assert!(
        a.gaze_mae.iter().all(|&e| e <= 0.35),
        "selfie gaze regressed: {:?}",
        a.gaze_mae
    );
    let mean_r = mean_au_r(&a);
    assert!(mean_r >= 0.2, "selfie AU correlation regressed: {mean_r}");
    let (h, o) = read_csv(&ours);
    let (_, r) = read_csv(&fixtures.join("references/openface/selfie.csv"));
    let c = |name: &str| h.iter().position(|x| x == name).unwrap();
    // A turned face (frame 22: a three-quarter view, OpenFace yaw 30 degrees): found, and
    // turned the same way by more than 10 degrees.
    let k = 21;
    assert_eq!(o[k][c("success")], 1.0);
    let (ours_yaw, their_yaw) = (o[k][c("pose_Ry")], r[k][c("pose_Ry")]);
    eprintln!("selfie frame 22 yaw: ours {ours_yaw:.3}, OpenFace {their_yaw:.3} rad");
    assert!(ours_yaw.signum() == their_yaw.signum() && ours_yaw.abs() > 10f64.to_radians());
    for au in ["AU12", "AU25"] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for i in 0..o.len() {
            if r[i][c("success")] == 1.0 && o[i][c("success")] == 1.0 {
                let v = o[i][c(&format!("{au}_r"))];
                if r[i][c(&format!("{au}_c"))] == 1.0 {
                    on.push(v);
                } else {
                    off.push(v);
                }
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        eprintln!("selfie {au}: ours {:.2} where OpenFace says present ({} frames), {:.2} where absent ({})", mean(&on), on.len(), mean(&off), off.len());
        assert!(!on.is_empty() && mean(&on) > mean(&off), "{au}");
    }
}

#[test]
fn appearance_follows_the_face_crop_and_is_absent_without_a_face() {
    use empathic::features::appearance::{AppearanceEncoder, AppearanceInput};
    use empathic::features::{FrameContext, FrameStage};
    let dir = root().join("models");
    let manifest = Manifest::load(&dir).unwrap();
    let entry = manifest.get("efficientnet-lite0", &dir).unwrap();
    let mut cnn = AppearanceEncoder::open(&dir, entry, None)
        .unwrap()
        .with_input(AppearanceInput::Face);
    let mut face = empathic::features::face::FaceStage::new(analyzer(Mode::Video));
    let frame = FileVideoSource::open(&demo_session().join("video.avi"))
        .unwrap()
        .next_frame()
        .unwrap()
        .unwrap();
    // The facial stage publishes the aligned crop; the CNN embeds it.
    let mut ctx = FrameContext::default();
    assert!(face.process(&frame, &mut ctx).unwrap().is_some());
    let roi = ctx.face_roi.expect("a face crop");
    assert!(roi.w > 100.0 && roi.w < 480.0, "{roi:?}");
    let on_face = cnn.process(&frame, &mut ctx).unwrap().expect("features");
    assert_eq!(on_face.len(), 1280);
    // Without a face the face appearance is absent, never a vector of the background.
    assert!(cnn
        .process(&frame, &mut FrameContext::default())
        .unwrap()
        .is_none());
    // The whole-frame input differs from the face crop's.
    let mut whole = AppearanceEncoder::open(&dir, entry, None).unwrap();
    let on_frame = whole
        .process(&frame, &mut FrameContext::default())
        .unwrap()
        .unwrap();
    let cos = empathic::core::cosine(&on_face, &on_frame).unwrap();
    assert!(cos < 0.95, "{cos}");
}

/// `img` panned left by `dx` pixels, wrapping around (the background scrolls in behind).
fn panned(img: &BgrImage, dx: usize) -> BgrImage {
    let (w, h) = (img.width as usize, img.height as usize);
    let mut data = Vec::with_capacity(img.data.len());
    for y in 0..h {
        let row = &img.data[y * w * 3..(y + 1) * w * 3];
        let dx = dx % w;
        data.extend_from_slice(&row[dx * 3..]);
        data.extend_from_slice(&row[..dx * 3]);
    }
    BgrImage {
        width: img.width,
        height: img.height,
        data,
    }
}

#[test]
fn a_fast_pan_is_followed_on_the_frame_it_happens() {
    // The face jumps 100 px a frame with the background scrolling behind it (a fast pan, or
    // a camera cut). The mesh's own confidence stays near 1 on the stale crop, which then
    // sits on half a face or on background: before the look check this left the nose tip
    // 80-100 px off on 5 of these 7 frames, at confidence 1.00.
    let frames = demo_frames();
    let mut face = analyzer(Mode::Video);
    let start = face
        .analyze(&frames[0])
        .unwrap()
        .face
        .expect("face")
        .landmarks_2d[30]
        .0;
    let mut checked = 0;
    for (i, frame) in frames.iter().enumerate().take(12).skip(1) {
        let dx = 100 * i;
        let expected = (start - dx as f64).rem_euclid(640.0);
        let obs = face.analyze(&panned(frame, dx)).unwrap();
        // Skip frames where the wrap splits the face between both edges.
        if !(100.0..=540.0).contains(&expected) {
            continue;
        }
        let nose = obs.face.expect("face").landmarks_2d[30].0;
        eprintln!("frame {i}: nose tip x {nose:.1}, expected {expected:.1}");
        assert!(
            (nose - expected).abs() < 10.0,
            "frame {i}: the nose tip is {nose:.1}, the face moved to {expected:.1}"
        );
        checked += 1;
    }
    assert!(checked >= 6, "{checked} frames checked");
}
