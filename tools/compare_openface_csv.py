#!/usr/bin/env python3
"""Compares an `empathic extract face` CSV with OpenFace 2.0's on the same video.

Prints the issue's targets: head rotation MAE per axis (degrees), 2D landmark error on the
51 inner points as % of the inter-ocular distance (outer eye corners 36-45), gaze angle
error (rad), Pearson r of AU intensities, and detection agreement. Only frames where
OpenFace succeeded are compared. Standard library + numpy only.

    python3 tools/compare_openface_csv.py ours.csv ../shared/fixtures/references/openface/grid.csv
"""
import csv
import sys

import numpy as np


def load(path):
    with open(path) as f:
        r = csv.reader(f, skipinitialspace=True)
        head = [h.strip() for h in next(r)]
        rows = [[c.strip() for c in row] for row in r]
    def col(name):
        i = head.index(name)
        return np.array([float(row[i]) if row[i] != "" else np.nan for row in rows])
    return col


def main():
    ours, ref = load(sys.argv[1]), load(sys.argv[2])
    ok_ref = ref("success") == 1
    ok_ours = ours("success") == 1
    both = ok_ref & ok_ours
    print(f"frames: {len(ok_ref)}; OpenFace face {ok_ref.sum()}, ours {ok_ours.sum()}, "
          f"ours on OpenFace's frames {100 * both.sum() / max(ok_ref.sum(), 1):.1f} %")
    for a in ["Rx", "Ry", "Rz"]:
        d = ours(f"pose_{a}")[both] - ref(f"pose_{a}")[both]
        print(f"pose_{a}: MAE {np.degrees(np.abs(d)).mean():.2f} deg, mean diff {np.degrees(d.mean()):+.2f} deg, "
              f"r {np.corrcoef(ours(f'pose_{a}')[both], ref(f'pose_{a}')[both])[0, 1]:.3f}")
    for a in ["Tx", "Ty", "Tz"]:
        d = ours(f"pose_{a}")[both] - ref(f"pose_{a}")[both]
        print(f"pose_{a}: mean diff {d.mean():+.1f} mm, MAE {np.abs(d).mean():.1f} mm")
    iod = np.hypot(ref("x_36") - ref("x_45"), ref("y_36") - ref("y_45"))[both]
    errs = []
    per_point = []
    for i in range(17, 68):
        e = np.hypot(ours(f"x_{i}") - ref(f"x_{i}"), ours(f"y_{i}") - ref(f"y_{i}"))[both] / iod
        errs.append(e)
        per_point.append(e.mean())
    errs = np.array(errs)
    print(f"2D landmarks 17-67: mean error {100 * errs.mean():.2f} % IOD (median frame "
          f"{100 * np.median(errs.mean(0)):.2f} %)")
    worst = np.argsort(per_point)[::-1][:6]
    print("  worst points:", ", ".join(f"{17 + i}: {100 * per_point[i]:.1f} %" for i in worst))
    jaw = np.array([np.hypot(ours(f"x_{i}") - ref(f"x_{i}"), ours(f"y_{i}") - ref(f"y_{i}"))[both] / iod
                    for i in range(17)])
    print(f"  jaw 0-16 (not a target): {100 * jaw.mean():.2f} % IOD")
    for a in ["x", "y"]:
        d = ours(f"gaze_angle_{a}")[both] - ref(f"gaze_angle_{a}")[both]
        print(f"gaze_angle_{a}: MAE {np.abs(d).mean():.3f} rad, mean diff {d.mean():+.3f}, "
              f"r {np.corrcoef(ours(f'gaze_angle_{a}')[both], ref(f'gaze_angle_{a}')[both])[0, 1]:.3f}")
    # Where the eyes would look to look into the lens (from each tool's own 3D eye-region
    # landmarks 36-47): for people who face the camera (grid's readers, still's portrait)
    # the mean gaze should sit near it; the gap shows a tool's own bias.
    for name, src in (("ours", ours), ("OpenFace", ref)):
        eye = [np.mean([src(f"{c}_{i}") for i in range(36, 48)], axis=0) for c in "XYZ"]
        to_cam = (np.arctan2(-eye[0], eye[2])[both], np.arctan2(-eye[1], eye[2])[both])
        print(f"{name}: mean gaze angle x {src('gaze_angle_x')[both].mean():+.3f}"
              f" y {src('gaze_angle_y')[both].mean():+.3f} rad; looking into the lens would be"
              f" x {to_cam[0].mean():+.3f} y {to_cam[1].mean():+.3f}")
    rs = []
    for au in ["01", "02", "04", "06", "12", "25", "26", "45"]:
        o, r = ours(f"AU{au}_r")[both], ref(f"AU{au}_r")[both]
        c = np.corrcoef(o, r)[0, 1] if o.std() > 0 and r.std() > 0 else float("nan")
        rs.append(c)
        print(f"AU{au}_r: r {c:+.3f} (ours mean {o.mean():.2f}, OpenFace mean {r.mean():.2f})")
    print(f"mean AU r over the 8 AUs: {np.nanmean(rs):.3f}")


if __name__ == "__main__":
    main()
