#!/usr/bin/env python3
"""Builds a synthetic training set, in the `empathic-windows` format, from real recorded
sessions exported by `empathic export windows`. NOT empathy data: the ratings are planted.

Why: no labelled empathy data can be had here, yet the toolkit, the ONNX contract, the
runtime's predictions and per-participant calibration all need an end-to-end check on data
where the right answer is known. The features are real (face, appearance and acoustic frames
of real recordings; text and stories embedded by the runtime's own sentence encoder); only the
ratings are made up, by the relation below.

Synthetic participant p (of --participants), session k (of --sessions):
- a source recording, uniformly among those with face, appearance and acoustic frames, and a
  span of --frames consecutive frames of it (uniform start): the session's frames are that
  span, unchanged except for two planted shifts:
- how much louder and how much more smiling than usual this participant is in this session:
  g_a, g_v ~ N(0, 1). The loudness columns (the `loudness` cue group of src/fusion/cues.rs:
  pcm_RMSenergy, audspec(Rasta)_lengthL1norm) are shifted by --shift g_a times each column's
  standard deviation within the source recording, and the smile columns (AU12_r; the
  blendshapes mouthSmileLeft/Right) by --shift g_v times theirs, clipped to each column's
  range (energies >= 0, AU intensity 0-5, blendshapes 0-1);
- a "told" story tau from the bank: the text modality is E(tau) on every frame from 2 s on
  (absent before: nothing said yet);
- three other stories S_1..S_3 shown at 0 s; every window is in phase `reflection`.

Planted relation, per window w: a_w = g_a + --natural z_a,w and v_w = g_v + --natural z_v,w,
with z_a,w, z_v,w the window means of --acoustic-column (pcm_RMSenergy_sma) and --face-column
(AU12_r) as recorded, standardised within their recording (default --natural 0: the planted
signal is the shifts alone);
    u_w = normalise(E(tau) + 0.5 a_w D_a + 0.5 v_w D_v)
with D_a, D_v the embeddings of the bank's first two stories (by id): speaking louder pulls
toward stories like D_a, smiling toward stories like D_v. Latent empathy toward S_i:
c_i = mean over the session's windows of cos(u_w, E(S_i)); population rating
r*_i = 1 + 4 sigmoid((c_i - mean c) / sd c) over the whole set. Per participant, planted scale
use: an offset o_p ~ N(0, 0.6) and a slope k_p ~ U(0.5, 1.5):
    rating = clip(round(3 + o_p + k_p (r*_i - 3) + e), 1, 5),  e ~ N(0, 0.3).
Why shifts, and not the recordings' own loudness and smiling: with a handful of short
source recordings, a signal read from them is mostly *which recording* and *which frames* a
window comes from, which appearance, face shape and the spectrum identify as well as loudness
does, and models trained on it learned those shortcuts (attributions showed it: 2026-11-28
with the signal standardised over all recordings, 2026-11-29 within each). Drawn shifts are
independent of who and which frames: only the loudness and smile columns can tell them, so
an honest attribution of a model that learned them must point there.
Everything is drawn from --seed. `synthetic.json` in the output records the parameters, each
participant's o_p and k_p, and each rating's r*_i, so that what a model recovers can be
compared with what was planted.

Usage: synth.py --source EXPORT_DIR --out DIR [--participants 40 --sessions 5 --frames 180]
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain import groups_of  # noqa: E402  (the cue groups of src/fusion/cues.rs)

FPS = 15
WINDOW, HOP = 120, 15


def standardise(x):
    return (x - x.mean()) / max(x.std(), 1e-9)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--participants", type=int, default=40)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--frames", type=int, default=180)
    ap.add_argument("--acoustic-column", default="pcm_RMSenergy_sma")
    ap.add_argument("--face-column", default="AU12_r")
    ap.add_argument("--shift", type=float, default=2.0,
                    help="planted shift per unit of g, in the column's within-recording standard deviations")
    ap.add_argument("--natural", type=float, default=0.0,
                    help="weight of the recording's own (standardised) loudness and smiling in the planted signal")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)

    src = json.loads((args.source / "manifest.json").read_text())
    encoder = src["story_encoders"][0]
    bank = np.load(args.source / "stories" / f"{encoder}.npy")
    bank_lines = (args.source / "stories" / f"{encoder}.jsonl").read_text().splitlines()
    bank_ids = [json.loads(l)["story_id"] for l in bank_lines]
    if len(bank_ids) < 6:
        raise SystemExit("the source export's story bank has fewer than 6 stories")

    # The modality descriptions (dims, producer, columns) and the usable source recordings.
    # Every modality the usable recordings all have is carried (a new one, such as
    # blendshapes, needs no change here); face and acoustic_compare carry the planted signal.
    described, usable = {}, []
    for s in src["sessions"]:
        names = {m["name"]: m for m in s["modalities"]}
        for n, m in names.items():
            described.setdefault(n, m)
        if all(n in names for n in ("face", "appearance", "acoustic_compare")) and s["frames"] >= args.frames:
            usable.append((s["session_id"], set(names) - {"text"}))
    carried = sorted(set.intersection(*(names for _, names in usable))) if usable else []
    sources = []
    for sid, _ in usable:
        arrays = {n: (np.load(args.source / sid / f"{n}.npy"),
                      np.load(args.source / sid / f"{n}_mask.npy"))
                  for n in carried}
        sources.append((sid, arrays))
    if not sources or "text" not in described:
        raise SystemExit("the source export needs sessions with face, appearance and acoustic_compare "
                         f"of at least {args.frames} frames, and one with text")
    a_col = described["acoustic_compare"]["columns"].index(args.acoustic_column)
    v_col = described["face"]["columns"].index(args.face_column)
    # Standardise the planted columns within each source recording (see the module doc).
    def column(arrays, name, col):
        vals = arrays[name][0][arrays[name][1] > 0, col]
        return vals.mean(), max(vals.std(), 1e-9)
    stats = {sid: (column(a, "acoustic_compare", a_col), column(a, "face", v_col)) for sid, a in sources}
    # The planted shifts' columns: (modality, column index, lower bound, upper bound).
    groups = {n: dict(groups_of(n, described[n]["columns"])) for n in ("acoustic_compare", "face", "blendshapes")
              if n in described}
    shifted = {
        "a": [("acoustic_compare", i, 0.0, np.inf) for i in groups["acoustic_compare"]["loudness"]],
        "v": [("face", v_col, 0.0, 5.0)] + [
            ("blendshapes", i, 0.0, 1.0) for i in groups.get("blendshapes", {}).get("smile", [])
            if described["blendshapes"]["columns"][i].startswith("mouthSmile") and "blendshapes" in carried],
    }
    col_sd = {sid: {(n, i): column(a, n, i)[1] for cols in shifted.values() for n, i, _, _ in cols}
              for sid, a in sources}
    print("planted shifts on:", {k: [described[n]["columns"][i] for n, i, _, _ in v] for k, v in shifted.items()})

    d_a, d_v = bank[0] / np.linalg.norm(bank[0]), bank[1] / np.linalg.norm(bank[1])
    candidates = np.arange(2, len(bank_ids))
    args.out.mkdir(parents=True, exist_ok=False)
    shutil.copytree(args.source / "stories", args.out / "stories")

    sessions, plans = [], []
    for p in range(args.participants):
        pid = f"synth-p{p:03d}"
        offset, slope = rng.normal(0, 0.6), rng.uniform(0.5, 1.5)
        for k in range(args.sessions):
            sid = f"{pid}-s{k}"
            source_id, arrays = sources[rng.integers(len(sources))]
            a_stats, v_stats = stats[source_id]
            frames_total = arrays["face"][0].shape[0]
            start = int(rng.integers(0, frames_total - args.frames + 1))
            picks = rng.choice(candidates, size=4, replace=False)
            told, shown = int(picks[0]), [int(x) for x in picks[1:]]
            d = args.out / sid
            d.mkdir()
            recorded = {n: arrays[n][0][start:start + args.frames] for n in ("acoustic_compare", "face")}
            span = {n: (v[start:start + args.frames].copy(), m[start:start + args.frames]) for n, (v, m) in arrays.items()}
            gains = {"a": float(rng.normal()), "v": float(rng.normal())}
            for key, cols in shifted.items():
                for n, i, lo, hi in cols:
                    v = span[n][0]
                    v[:, i] = np.clip(v[:, i] + args.shift * gains[key] * col_sd[source_id][(n, i)], lo, hi)
            text_mask = np.zeros(args.frames, np.uint8)
            text_mask[2 * FPS:] = 1
            text = np.where(text_mask[:, None] > 0, bank[told][None, :], 0).astype(np.float32)
            span["text"] = (text, text_mask)
            for n, (v, m) in span.items():
                np.save(d / f"{n}.npy", np.ascontiguousarray(v, dtype=np.float32))
                np.save(d / f"{n}_mask.npy", np.ascontiguousarray(m, dtype=np.uint8))
            windows = []
            for i, ws in enumerate(range(0, args.frames - WINDOW + 1, HOP)):
                sl = slice(ws, ws + WINDOW)
                def mean_of(name, col, stats):
                    present = span[name][1][sl] > 0
                    return 0.0 if not present.any() else (recorded[name][sl][present, col].mean() - stats[0]) / stats[1]
                a_w = gains["a"] + args.natural * mean_of("acoustic_compare", a_col, a_stats)
                v_w = gains["v"] + args.natural * mean_of("face", v_col, v_stats)
                u = bank[told] + 0.5 * a_w * d_a + 0.5 * v_w * d_v
                u = u / np.linalg.norm(u)
                cos = [float(u @ bank[j] / np.linalg.norm(bank[j])) for j in shown]
                windows.append((i, ws, cos))
            plans.append((pid, sid, offset, slope, shown, windows, source_id, start, told, gains))
            sessions.append({
                "session_id": sid, "participant_id": pid, "frames": args.frames, "windows": len(windows),
                "modalities": [described[n] for n in carried + ["text"]],
            })

    latent = np.array([np.mean([w[2][i] for w in plan[5]]) for plan in plans for i in range(3)])
    mu, sd = latent.mean(), latent.std()
    truth = []
    with (args.out / "windows.jsonl").open("w") as out:
        for n, (pid, sid, offset, slope, shown, windows, source_id, start, told, gains) in enumerate(plans):
            stories = []
            for i, j in enumerate(shown):
                c = latent[3 * n + i]
                r_star = 1 + 4 / (1 + np.exp(-(c - mu) / sd))
                rating = int(np.clip(np.rint(3 + offset + slope * (r_star - 3) + rng.normal(0, 0.3)), 1, 5))
                stories.append({"story_id": bank_ids[j], "shown_secs": 0.0, "rating": rating})
                truth.append({"session_id": sid, "participant_id": pid, "story_id": bank_ids[j],
                              "shifts": {"loudness": round(gains["a"], 4), "smile": round(gains["v"], 4)},
                              "latent_cosine": round(float(c), 6), "population_rating": round(float(r_star), 4),
                              "rating": rating})
            for i, ws, _ in windows:
                out.write(json.dumps({
                    "session_id": sid, "participant_id": pid, "window_index": i,
                    "start_frame": ws, "end_frame": ws + WINDOW,
                    "start_secs": ws / FPS, "end_secs": (ws + WINDOW) / FPS,
                    "phase": "reflection", "stories": stories}) + "\n")
    (args.out / "manifest.json").write_text(json.dumps({
        "format": "empathic-windows", "version": 2, "phase": None, "sessions": sessions,
        "story_encoders": [encoder]}, indent=1))
    (args.out / "synthetic.json").write_text(json.dumps({
        "note": "synthetic: not empathy data; ratings planted by tools/fusion/synth.py",
        "seed": args.seed, "source": str(args.source), "sources": [s for s, _ in sources],
        "acoustic_column": args.acoustic_column, "face_column": args.face_column,
        "shift": args.shift, "natural": args.natural,
        "directions": {"acoustic": bank_ids[0], "face": bank_ids[1]},
        "participants": {p[0]: {"offset": round(float(p[2]), 4), "slope": round(float(p[3]), 4)} for p in plans[::args.sessions]},
        "ratings": truth}, indent=1))
    counts = np.bincount([t["rating"] for t in truth], minlength=6)[1:]
    print(f"synthetic set: {args.participants} participants x {args.sessions} sessions from "
          f"{len(sources)} recordings; ratings 1-5: {counts.tolist()}; written to {args.out}")


if __name__ == "__main__":
    main()
