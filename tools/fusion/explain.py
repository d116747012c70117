#!/usr/bin/env python3
"""The station's attributions (docs/prediction.md, "Why a prediction"), computed in Python
from an exported model and an exported window, so the toolkit can explain a model the same
way and the station's numbers can be checked against an independent implementation
(`tests/it/explain.rs` compares this tool's committed output with the station's).

For one window and story: the players are the window's cues, grouped by modality (the
utterances of `text` by their frames; the named column groups of the other modalities when
the model carries `empathic.<m>.baseline`, else the modality whole); a coalition's value is
the model's score (population map, clamped to 1-5) toward the story with only those cues
as they were (a left-out column group at the baseline on present frames, a left-out
utterance absent, a modality with no cue in absent); each cue's value is its exact Owen
value. Written here from the definition, not from the Rust code: the Shapley value of the
cue's modality among the modalities, shared by the Shapley value within it.

Usage: explain.py EXPORT_DIR MODEL.onnx SESSION WINDOW_INDEX STORY_ID [--out FILE.json]
Needs numpy and onnxruntime (the toolkit's venv).
"""
import argparse
import base64
import itertools
import json
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort


def groups_of(modality, columns):
    """The named cue groups of a modality's columns (src/fusion/cues.rs's rules)."""
    def au(c, numbers):
        return any(c.startswith(f"AU{n}_") for n in numbers)

    def landmark(c):
        for p in ("x_", "y_", "z_", "X_", "Y_", "Z_"):
            if c.startswith(p) and c[len(p):].isdigit():
                return True
        return False

    rules = {
        "face": [
            ("head pose", lambda c: c.startswith("pose_")),
            ("gaze", lambda c: c.startswith("gaze_")),
            ("smile (AU06, AU12)", lambda c: au(c, ["06", "12"])),
            ("brows (AU01, AU02, AU04)", lambda c: au(c, ["01", "02", "04"])),
            ("other action units", lambda c: c.startswith("AU")),
            ("face position and shape", lambda c: True),
        ],
        "blendshapes": [
            ("smile", lambda c: c.startswith("mouthSmile") or c.startswith("cheekSquint")),
            ("brows and eyes", lambda c: c.startswith("brow") or c.startswith("eye")),
            ("mouth and jaw", lambda c: c.startswith("mouth") or c.startswith("jaw")),
            ("other expression", lambda c: True),
        ],
        "body": [("posture", landmark), ("in view", lambda c: True)],
    }
    acoustic = [
        ("loudness", lambda c: c.lower().startswith(("audspec_lengthl1norm", "audspecrasta_lengthl1norm",
                                                     "pcm_rmsenergy", "loudness"))),
        ("pitch", lambda c: c.startswith("F0") or c.startswith("voicing")),
        ("voice quality", lambda c: c.lower().startswith(("jitter", "shimmer")) or "hnr" in c.lower()),
        ("spectral shape", lambda c: True),
    ]
    r = acoustic if modality.startswith("acoustic") else rules.get(modality, [])
    out = [(name, []) for name, _ in r]
    rest = []
    for i, c in enumerate(columns):
        for k, (_, match) in enumerate(r):
            if match(c):
                out[k][1].append(i)
                break
        else:
            rest.append(i)
    out = [(n, cols) for n, cols in out if cols]
    if rest or not out:
        out.append(("all of it", rest))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("model", type=Path)
    ap.add_argument("session")
    ap.add_argument("window", type=int)
    ap.add_argument("story")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    manifest = json.loads((args.export / "manifest.json").read_text())
    session = next(s for s in manifest["sessions"] if s["session_id"] == args.session)
    columns = {m["name"]: m["columns"] for m in session["modalities"]}
    window = next(json.loads(l) for l in (args.export / "windows.jsonl").read_text().splitlines()
                  if json.loads(l)["session_id"] == args.session and json.loads(l)["window_index"] == args.window)
    a, b = window["start_frame"], window["end_frame"]
    encoder = manifest["story_encoders"][0]
    ids = [json.loads(l)["story_id"] for l in (args.export / "stories" / f"{encoder}.jsonl").read_text().splitlines()]
    story = np.load(args.export / "stories" / f"{encoder}.npy")[ids.index(args.story)]

    sess = ort.InferenceSession(str(args.model), providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta().custom_metadata_map
    names = meta["empathic.modalities"].split(",")
    intercept, slope = (float(x) for x in meta["empathic.population_map"].split(","))
    base = {}
    for m in names:
        key = f"empathic.{m}.baseline"
        if key in meta:
            base[m] = np.frombuffer(base64.b64decode(meta[key]), dtype="<f4")
    values, masks = {}, {}
    for m in names:
        values[m] = np.load(args.export / args.session / f"{m}.npy")[a:b].astype(np.float32)
        masks[m] = np.load(args.export / args.session / f"{m}_mask.npy")[a:b].astype(np.float32)

    # The players: (modality, cue, kind, parts).
    players = []
    for m in names:
        if masks[m].sum() == 0:
            continue
        if m == "text":
            seen = []
            for f in range(b - a):
                if masks[m][f] == 0:
                    continue
                row = values[m][f].tobytes()
                for g in seen:
                    if g[0] == row:
                        g[1].append(f)
                        break
                else:
                    seen.append((row, [f]))
            players += [(m, "words", "frames", frames) for _, frames in seen]
        elif m in base and len(groups_of(m, columns[m])) > 1:
            players += [(m, cue, "columns", cols) for cue, cols in groups_of(m, columns[m])]
        else:
            players.append((m, "all of it", "whole", []))
    unions = []
    for i, p in enumerate(players):
        for u in unions:
            if players[u[0]][0] == p[0]:
                u.append(i)
                break
        else:
            unions.append([i])

    cache = {}

    def value(coalition):
        key = frozenset(coalition)
        if key in cache:
            return cache[key]
        feeds = {}
        for m in names:
            v, k = values[m].copy(), masks[m].copy()
            mine = [i for i, p in enumerate(players) if p[0] == m]
            inside = [i for i in mine if i in key]
            if mine and not inside:
                v[:], k[:] = 0, 0
            elif mine and len(inside) < len(mine):
                for i in mine:
                    if i in key:
                        continue
                    _, _, kind, parts = players[i]
                    if kind == "columns":
                        present = k > 0
                        v[np.ix_(present, parts)] = base[m][parts]
                    elif kind == "frames":
                        k[parts] = 0
                        v[parts] = 0
            feeds[m] = v[None]
            feeds[f"{m}_mask"] = k[None]
        z = sess.run(["z"], feeds)[0][0].astype(np.float64)
        cos = float(z @ story / (np.linalg.norm(z) * np.linalg.norm(story)))
        cache[key] = min(5.0, max(1.0, intercept + slope * cos))
        return cache[key]

    def shapley_weight(s, n):
        return math.factorial(s) * math.factorial(n - 1 - s) / math.factorial(n)

    out = {}
    p = len(unions)
    for k, g in enumerate(unions):
        others = [u for j, u in enumerate(unions) if j != k]
        for j in g:
            rest = [x for x in g if x != j]
            total = 0.0
            for r in range(len(others) + 1):
                for R in itertools.combinations(others, r):
                    full_r = [x for u in R for x in u]
                    for t in range(len(rest) + 1):
                        for T in itertools.combinations(rest, t):
                            w = shapley_weight(r, p) * shapley_weight(t, len(g))
                            total += w * (value(full_r + list(T) + [j]) - value(full_r + list(T)))
            out[j] = total
    result = {
        "session_id": args.session,
        "window_index": args.window,
        "story_id": args.story,
        "model": meta["empathic.id"],
        "baseline": value([]),
        "prediction": value(list(range(len(players)))),
        "cues": [{"modality": players[i][0], "cue": players[i][1], "value": out[i]} for i in range(len(players))],
    }
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
