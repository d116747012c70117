#!/usr/bin/env python3
"""Trains one fusion model on an `empathic export windows` folder and exports it under ONNX
contract v1, with a PyTorch vs ONNX Runtime parity check.

The paper's recipe is the default: AdamW, lr 1e-4, StepLR (step 5, gamma 0.1), 10 epochs,
batch 64, MSE between cos(z, E(S)) and the rating rescaled to [0, 1], oversampling so every
rating value is drawn equally often, participants split 0.7 / 0.2 / 0.1 (train / validation /
test) so no test participant is trained on. The epoch with the lowest validation loss is kept.

Held-out figures (test participants), written to the model's `empathic.training` metadata
and printed: window-level and session-level Pearson r and MSE of the population-mapped score
against the self-ratings, beside the zero-shot predictor (cosine of the text mean with the
story) on the same windows, and, on a synthetic set, the r of the planted population rating.

The population map (cosine -> 1-5) is the least-squares line from the training windows'
cosines to their ratings.

Usage:
  train.py --data DIR --family lf-lstm --subset v+a+t --out model.onnx [--id ID]
           [--parity DIR] [--epochs 10 --lr 1e-4 --batch 64 --seed 0]
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import data as dataset  # noqa: E402
from models import FAMILIES, SUBSETS, Fusion, subset_modalities  # noqa: E402

CONTRACT = "1"


def pearson(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def frame_stats(ds, names, sessions):
    stats = {}
    for n in names:
        total, total2, count = 0.0, 0.0, 0
        for s in sessions:
            values, mask = ds.frames[s][n]
            present = np.asarray(values)[mask > 0].astype(np.float64)
            total = total + present.sum(0)
            total2 = total2 + (present ** 2).sum(0)
            count += present.shape[0]
        mean = total / max(count, 1)
        std = np.sqrt(np.maximum(total2 / max(count, 1) - mean ** 2, 0))
        stats[n] = (mean.astype(np.float32), std.astype(np.float32))
    return stats


def batch(ds, samples, names):
    cols = list(zip(*[ds.window(s, names) for s in samples]))
    tensors = [torch.from_numpy(np.stack(c)) for c in cols]
    stories = torch.from_numpy(ds.story_vectors[[s[5] for s in samples]].astype(np.float32))
    ratings = torch.tensor([s[6] for s in samples], dtype=torch.float32)
    return tensors, stories, ratings


def cue_groups(data, names):
    """Each modality's named cue groups (column indices), from the export's column names."""
    from explain import groups_of
    described = {}
    for session in json.loads((data / "manifest.json").read_text())["sessions"]:
        for m in session["modalities"]:
            described.setdefault(m["name"], m.get("columns") or [])
    return {n: [cols for _, cols in groups_of(n, described.get(n, []))] for n in names if n != "text"}


def leave_out(tensors, names, groups, stats, p, rng):
    """Cue dropout: in each window, each cue group is left out with probability p the way an
    attribution leaves it out (the training mean on the modality's present frames), and each
    modality is absent (mask 0) with probability p / 2. Why: an attribution asks the model
    about windows with cues left out; trained only on whole windows, a model's answer to a
    mean spectrum or an absent face is an extrapolation, and with few source recordings it
    was large and arbitrary (docs/prediction.md). Trained on them, the model answers as the
    data say: a cue that tells nothing about the rating changes nothing when left out."""
    for k, n in enumerate(names):
        values, mask = tensors[2 * k], tensors[2 * k + 1]
        for b in range(values.shape[0]):
            if rng.random() < p / 2:
                values[b] = 0
                mask[b] = 0
                continue
            present = mask[b] > 0
            for cols in groups.get(n, []):
                if rng.random() < p:
                    idx = torch.tensor(cols)
                    mean = torch.from_numpy(stats[n][0][cols])
                    rows = values[b, present]
                    rows[:, idx] = mean
                    values[b, present] = rows


def cosines(model, ds, samples, names, size=64):
    model.eval()
    out = []
    with torch.no_grad():
        for i in range(0, len(samples), size):
            tensors, stories, _ = batch(ds, samples[i:i + size], names)
            out.append(torch.cosine_similarity(model(*tensors), stories, dim=1).numpy())
    return np.concatenate(out) if out else np.zeros(0)


def zero_shot(ds, samples):
    out = []
    for s in samples:
        text, mask = ds.window(s, ["text"])
        if mask.sum() == 0:
            out.append(0.0)
            continue
        z = (text * mask[:, None]).sum(0) / mask.sum()
        e = ds.story_vectors[s[5]]
        out.append(float(z @ e / (np.linalg.norm(z) * np.linalg.norm(e) + 1e-12)))
    return np.array(out)


def session_level(samples, scores):
    """Mean score per (session, story) against its rating."""
    groups = {}
    for s, v in zip(samples, scores):
        groups.setdefault((s[0], s[5]), [s[6], []])[1].append(v)
    ratings = [g[0] for g in groups.values()]
    means = [float(np.mean(g[1])) for g in groups.values()]
    return np.array(means), np.array(ratings, float), list(groups)


def part_of(samples, session):
    return next(s[1] for s in samples if s[0] == session)


def metrics(samples, cos, intercept, slope):
    score = intercept + slope * cos
    ratings = np.array([s[6] for s in samples], float)
    sess, sess_r, _ = session_level(samples, score)
    return {"windows": len(samples), "window_r": round(pearson(score, ratings), 4),
            "window_mse": round(float(((score - ratings) ** 2).mean()), 4),
            "session_stories": len(sess), "session_r": round(pearson(sess, sess_r), 4),
            "session_mse": round(float(((sess - sess_r) ** 2).mean()), 4)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--family", required=True, choices=FAMILIES)
    ap.add_argument("--subset", default="v+a+t", choices=SUBSETS)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--id")
    ap.add_argument("--phase")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cue-dropout", type=float, default=0.0,
                    help="leave each cue group out (its training mean) with this probability per window, and "
                         "each modality (absent) with half of it; 0 = the paper's recipe")
    ap.add_argument("--parity", type=Path, help="write parity fixtures (inputs, expected z) here")
    ap.add_argument("--sessions-csv", type=Path,
                    help="write the held-out (validation and test) participants' session-level mean cosines "
                         "and ratings here, in session order (for the calibration check in Rust)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.set_num_threads(2)

    ds = dataset.load(args.data, phase=args.phase)
    synthetic_path = args.data / "synthetic.json"
    synthetic = synthetic_path.exists()
    groups = subset_modalities(args.subset, ds.modalities)
    names = [m for ms in groups.values() for m in ms]
    train_p, val_p, test_p = dataset.split_participants(ds.participants(), args.seed)
    part = {p: "train" for p in train_p} | {p: "val" for p in val_p} | {p: "test" for p in test_p}
    split = {k: [s for s in ds.samples if part[s[1]] == k] for k in ("train", "val", "test")}
    train_sessions = sorted({s[0] for s in split["train"]})
    stats = frame_stats(ds, names, train_sessions)
    model = Fusion(args.family, groups, {m: ds.modalities[m].dims for m in names}, stats)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.1)

    # Oversampling: every rating value drawn equally often.
    ratings = np.array([s[6] for s in split["train"]])
    freq = np.bincount(ratings, minlength=6).astype(float)
    weights = 1.0 / freq[ratings]
    weights /= weights.sum()
    rng = np.random.default_rng(args.seed)
    cue_groups_of = cue_groups(args.data, names) if args.cue_dropout > 0 else {}
    best = (float("inf"), None, -1)
    for epoch in range(args.epochs):
        model.train()
        order = rng.choice(len(split["train"]), size=len(split["train"]), p=weights)
        losses = []
        for i in range(0, len(order), args.batch):
            tensors, stories, r = batch(ds, [split["train"][j] for j in order[i:i + args.batch]], names)
            if args.cue_dropout > 0:
                leave_out(tensors, names, cue_groups_of, stats, args.cue_dropout, rng)
            cos = torch.cosine_similarity(model(*tensors), stories, dim=1)
            loss = torch.nn.functional.mse_loss(cos, (r - 1) / 4)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        sched.step()
        if split["val"]:
            vcos = cosines(model, ds, split["val"], names)
            vloss = float(((vcos - (np.array([s[6] for s in split["val"]]) - 1) / 4) ** 2).mean())
            print(f"epoch {epoch + 1}/{args.epochs}: train loss {np.mean(losses):.4f}, validation loss {vloss:.4f}",
                  flush=True)
        else:
            # No held-out participant: there is no validation metric, and the epoch is chosen
            # on the training loss (said once below, and in the exported metadata).
            vloss = float(np.mean(losses))
            print(f"epoch {epoch + 1}/{args.epochs}: train loss {vloss:.4f} (no validation participant)", flush=True)
        if vloss < best[0]:
            best = (vloss, {k: v.clone() for k, v in model.state_dict().items()}, epoch + 1)
    model.load_state_dict(best[1])
    model.eval()
    if not split["val"]:
        print("WARNING: no held-out validation participant: the kept epoch was chosen on the TRAINING loss; "
              "there is no validation metric", file=sys.stderr)
    if not split["test"]:
        print("WARNING: no held-out test participant: every held-out metric below is undefined (NaN); "
              "do not report this model's accuracy", file=sys.stderr)
    print(f"ratings: {'synthetic (planted by synth.py)' if synthetic else 'real (no synthetic.json in the export): the model is exported as synthetic: false'}",
          file=sys.stderr)

    # Population map: least squares from the training cosines to the ratings.
    tcos = cosines(model, ds, split["train"], names)
    slope, intercept = np.polyfit(tcos, ratings.astype(float), 1)
    test = split["test"]
    held_out = metrics(test, cosines(model, ds, test, names), intercept, slope)
    zs = zero_shot(ds, test)
    zs_slope, zs_intercept = np.polyfit(zero_shot(ds, split["train"]), ratings.astype(float), 1)
    held_out["zero_shot"] = metrics(test, zs, zs_intercept, zs_slope)
    if synthetic:
        truth = {(t["session_id"], t["story_id"]): t["population_rating"]
                 for t in json.loads(synthetic_path.read_text())["ratings"]}
        _, sess_r, keys = session_level(test, np.zeros(len(test)))
        planted = [truth[(k[0], ds.story_ids[k[1]])] for k in keys]
        held_out["planted_population_rating_r"] = round(pearson(planted, sess_r), 4)
    if args.sessions_csv:
        held = split["val"] + split["test"]
        means, rated, keys = session_level(held, cosines(model, ds, held, names))
        order = {sid: i for i, sid in enumerate(ds.frames)}  # sessions in export order
        rows = sorted(zip(keys, means, rated), key=lambda r: (part_of(held, r[0][0]), order[r[0][0]], r[0][1]))
        with args.sessions_csv.open("w") as f:
            f.write("participant,session,story,mean_cosine,rating\n")
            for (sid, story), c, r in rows:
                f.write(f"{part_of(held, sid)},{sid},{ds.story_ids[story]},{c:.6f},{int(r)}\n")
    model_id = args.id or f"{args.family}-{args.subset.replace('+', '')}"
    training = {
        "data": str(args.data), "synthetic": synthetic, "date": datetime.date.today().isoformat(),
        "recipe": {"optimiser": "AdamW", "lr": args.lr, "schedule": "StepLR(5, 0.1)", "epochs": args.epochs,
                   "batch": args.batch, "loss": "MSE(cos, (rating-1)/4)", "oversampling": "ratings balanced",
                   "cue_dropout": args.cue_dropout,
                   "kept_epoch": best[2], "seed": args.seed},
        "selection": "lowest validation loss" if split["val"] else "lowest TRAINING loss: no held-out validation participant",
        "held_out_metrics": "defined" if split["test"] else "none: no held-out test participant",
        "split": {"train": len(train_p), "validation": len(val_p), "test": len(test_p),
                  "unit": "participants", "test_participants": test_p,
                  "train_participants": train_p, "validation_participants": val_p},
        "held_out": held_out,
    }
    print(json.dumps({"id": model_id, "held_out": held_out}, indent=1))
    export(model, names, ds, args, model_id, (intercept, slope), synthetic, training, test)


def export(model, names, ds, args, model_id, pop_map, synthetic, training, test):
    example = batch(ds, test[:2] or ds.samples[:2], names)[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    input_names = model.input_names()
    torch.onnx.export(
        model, tuple(example), str(args.out), input_names=input_names, output_names=["z"],
        dynamic_axes={n: {0: "B"} for n in input_names} | {"z": {0: "B"}},
        opset_version=17, dynamo=False)
    graph = onnx.load(str(args.out))
    meta = {
        "empathic.contract": CONTRACT, "empathic.id": model_id, "empathic.family": args.family,
        "empathic.subset": args.subset, "empathic.modalities": ",".join(names),
        "empathic.window_frames": "120", "empathic.hop_frames": "15", "empathic.fps": "15",
        "empathic.encoder": ds.encoder,
        "empathic.population_map": f"{pop_map[0]:.6f},{pop_map[1]:.6f}",
        "empathic.synthetic": "true" if synthetic else "false",
        "empathic.training": json.dumps(training),
    }
    for m in names:
        meta[f"empathic.{m}.dims"] = str(ds.modalities[m].dims)
        meta[f"empathic.{m}.layout_version"] = str(ds.modalities[m].layout_version)
        if ds.modalities[m].producer:
            meta[f"empathic.{m}.producer"] = ds.modalities[m].producer
    # The population baseline of the runtime's attributions (add_baselines.py).
    from add_baselines import baselines, encode
    for m, vector in baselines(graph).items():
        meta[f"empathic.{m}.baseline"] = encode(vector)
    del graph.metadata_props[:]
    for k, v in meta.items():
        p = graph.metadata_props.add()
        p.key, p.value = k, v
    onnx.checker.check_model(graph)
    onnx.save(graph, str(args.out))

    # Parity: PyTorch against ONNX Runtime on held-out windows, and on one with a modality
    # wholly absent.
    samples = (test or ds.samples)[:16]
    tensors, _, _ = batch(ds, samples, names)
    tensors = [t.clone() for t in tensors]
    absent = names[0]
    i = input_names.index(absent)
    tensors[i][0] = 0
    tensors[i + 1][0] = 0
    with torch.no_grad():
        expected = model(*tensors).numpy()
    sess = ort.InferenceSession(str(args.out), providers=["CPUExecutionProvider"])
    got = sess.run(["z"], {n: t.numpy() for n, t in zip(input_names, tensors)})[0]
    diff = float(np.abs(got - expected).max())
    print(f"parity PyTorch vs ONNX Runtime on {len(samples)} windows ({absent} absent in the first): "
          f"max abs diff {diff:.2e}; wrote {args.out} ({args.out.stat().st_size / 1e3:.0f} kB)")
    if diff > 1e-4:
        raise SystemExit(f"parity failed: max abs diff {diff}")
    if args.parity:
        args.parity.mkdir(parents=True, exist_ok=True)
        # Two windows, the held-out first (with `absent` absent) and second, shared by the
        # models trained on the same data and split (written once, checked equal after).
        for n, t in zip(input_names, tensors):
            path = args.parity / f"window.{n}.npy"
            if path.exists() and not np.array_equal(np.load(path), t[:2].numpy()):
                raise SystemExit(f"{path} holds other windows: one parity folder per data set and split")
            np.save(path, t[:2].numpy())
        np.save(args.parity / f"{model_id}.z.npy", expected[:2])


if __name__ == "__main__":
    main()
