#!/usr/bin/env python3
"""The station's body stage against MediaPipe's own Python pose solution (development tool).

For each video: `empathic extract body VIDEO --out CSV` (the station), and MediaPipe's
`solutions.pose.Pose` (model_complexity=1, i.e. the same BlazePose GHUM 3D full landmark
model; video mode, smoothing off, as the station does not smooth; segmentation off) on the
same frames decoded by OpenCV. Reports per clip:

  presence agreement   frames where both find a person or both find none
  image error          mean distance of the 33 landmarks, % of the image width (and pixels),
                       on frames both find a person; also over landmarks the reference
                       rates visible (visibility >= 0.5)
  world error          mean distance of the 33 world points (cm)
  head and shoulders   landmarks 0-12 the reference rates visible: mean and 95th percentile
                       distance as % of the image diagonal (issue 60's 3 % bar)
  visibility           mean |difference| of the visibility scores
  time                 ms a frame of each (the station's stage time as `extract body`
                       reports it; MediaPipe's `process` wall time, XNNPACK, one process)

Needs a virtual environment with `mediapipe==0.10.14 opencv-python-headless numpy`.

`--reference-out FILE --frames N` instead writes MediaPipe's landmarks of the first N frames
of the one VIDEO given (JSON: image x, y in pixels, visibility, world x, y, z in metres per
frame, null where it finds no person), the reference `tests/it/body.rs` holds the station to.

`--every N` passes the body's rate to `extract body` (default: the station's, `[body] every`);
held rows are compared with MediaPipe's frame as they are (the pose a held row carries is
older than the frame).

Usage: tools/bench_body_vs_mediapipe.py [--binary target/release/empathic] [--every N] VIDEO...
       tools/bench_body_vs_mediapipe.py --reference-out FILE --frames N VIDEO
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time

import cv2
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def station(binary, video, out, every):
    cmd = [binary, "extract", "body", video, "--out", out]
    if every:
        cmd += ["--every", str(every)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"extract body {video} failed: {r.stderr.strip()}")
    ms = float(re.search(r"([0-9.]+) ms a frame", r.stderr).group(1))
    rows = []
    with open(out) as f:
        for row in csv.DictReader(f):
            if row["success"] != "1":
                rows.append(None)
                continue
            g = lambda name: np.array([float(row[f"{name}_{i}"]) for i in range(33)])
            rows.append({"xy": np.stack([g("x"), g("y")], 1), "vis": g("visibility"),
                         "world": np.stack([g("X"), g("Y"), g("Z")], 1)})
    return rows, ms


def mediapipe(video):
    import mediapipe as mp

    pose = mp.solutions.pose.Pose(static_image_mode=False, model_complexity=1,
                                  smooth_landmarks=False, enable_segmentation=False,
                                  min_detection_confidence=0.5, min_tracking_confidence=0.5)
    cap = cv2.VideoCapture(video)
    rows, busy = [], 0.0
    w = h = None
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        h, w = frame.shape[:2]
        rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        t = time.perf_counter()
        res = pose.process(rgb)
        busy += time.perf_counter() - t
        if res.pose_landmarks is None:
            rows.append(None)
            continue
        lm = res.pose_landmarks.landmark
        wl = res.pose_world_landmarks.landmark
        rows.append({"xy": np.array([[p.x * w, p.y * h] for p in lm]),
                     "vis": np.array([p.visibility for p in lm]),
                     "world": np.array([[p.x, p.y, p.z] for p in wl])})
    return rows, 1e3 * busy / max(len(rows), 1), w, h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "target/release/empathic"))
    ap.add_argument("--reference-out")
    ap.add_argument("--frames", type=int, default=30)
    ap.add_argument("--every", type=int)
    ap.add_argument("videos", nargs="+")
    args = ap.parse_args()
    if args.reference_out:
        import json
        import mediapipe as mp

        ref, _, width, _ = mediapipe(args.videos[0])
        rnd = lambda a, d: [round(float(v), d) for v in np.asarray(a).ravel()]
        frames = [None if r is None else {"xy": rnd(r["xy"], 2), "visibility": rnd(r["vis"], 4),
                                          "world": rnd(r["world"], 5)}
                  for r in ref[:args.frames]]
        with open(args.reference_out, "w") as f:
            json.dump({"source": f"MediaPipe {mp.__version__} solutions.pose (model_complexity=1, "
                                 "video mode, smooth_landmarks=False, segmentation off) via "
                                 "tools/bench_body_vs_mediapipe.py",
                       "video": os.path.relpath(os.path.abspath(args.videos[0]), ROOT),
                       "frames": frames}, f)
        print(f"{args.reference_out}: {len(frames)} frames")
        return
    print("| clip | frames | person (station / MediaPipe) | presence agreement | image error, % width (px) | visible landmarks, % width | head and shoulders, % diagonal (mean / p95) | world error (cm) | visibility diff | ms a frame (station / MediaPipe) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for video in args.videos:
        with tempfile.TemporaryDirectory() as tmp:
            ours, our_ms = station(args.binary, video, os.path.join(tmp, "body.csv"), args.every)
        ref, ref_ms, width, height = mediapipe(video)
        n = min(len(ours), len(ref))
        agree = sum((ours[i] is None) == (ref[i] is None) for i in range(n))
        both = [i for i in range(n) if ours[i] is not None and ref[i] is not None]
        name = os.path.basename(os.path.dirname(os.path.abspath(video))) + "/" + os.path.basename(video)
        if not both:
            print(f"| {name} | {n} | {sum(o is not None for o in ours)} / {sum(r is not None for r in ref)} | {100 * agree / n:.1f} % | - | - | - | - | - | {our_ms:.1f} / {ref_ms:.1f} |")
            continue
        d = np.concatenate([np.linalg.norm(ours[i]["xy"] - ref[i]["xy"], axis=1) for i in both])
        vis_mask = np.concatenate([ref[i]["vis"] >= 0.5 for i in both])
        dw = np.concatenate([np.linalg.norm(ours[i]["world"] - ref[i]["world"], axis=1) for i in both])
        dv = np.concatenate([np.abs(ours[i]["vis"] - ref[i]["vis"]) for i in both])
        vis_err = 100 * d[vis_mask].mean() / width if vis_mask.any() else float("nan")
        diagonal = float(np.hypot(width, height))
        hs = np.concatenate([np.linalg.norm(ours[i]["xy"][:13] - ref[i]["xy"][:13], axis=1)
                             [ref[i]["vis"][:13] >= 0.5] for i in both])
        hs_err = (f"{100 * hs.mean() / diagonal:.2f} / {100 * np.percentile(hs, 95) / diagonal:.2f}"
                  if hs.size else "-")
        print(f"| {name} | {n} | {sum(o is not None for o in ours)} / {sum(r is not None for r in ref)} "
              f"| {100 * agree / n:.1f} % | {100 * d.mean() / width:.2f} ({d.mean():.1f}) "
              f"| {vis_err:.2f} | {hs_err} | {100 * dw.mean():.1f} | {dv.mean():.3f} | {our_ms:.1f} / {ref_ms:.1f} |")


if __name__ == "__main__":
    main()
