#!/usr/bin/env python3
"""Writes the `models/MODELS.toml` entries of the fusion models in models/fusion/ from their
contract metadata (id, family, modalities and widths, training provenance and held-out
figures) and sha256, between the two marker lines of the manifest. Run by train_demo.sh.
"""
import hashlib
import json
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "models" / "MODELS.toml"
BEGIN = "# --- fusion models: written by tools/fusion/manifest_entries.py ---"
END = "# --- end of fusion models ---"


def entry(path):
    model = onnx.load(str(path), load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    training = json.loads(meta["empathic.training"])
    held = training["held_out"]
    synthetic = meta["empathic.synthetic"] == "true"
    names = meta["empathic.modalities"].split(",")
    inputs = []
    for n in names:
        d = meta[f"empathic.{n}.dims"]
        inputs.append(f'  {{ name = "{n}", dtype = "float32", shape = ["B", 120, {d}] }},')
        inputs.append(f'  {{ name = "{n}_mask", dtype = "float32", shape = ["B", 120] }},')
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    mid = meta["empathic.id"]
    notes = (f"{'synthetic: not an empathy model. ' if synthetic else ''}"
             f"{meta['empathic.family']} on {meta['empathic.subset']}; held-out participants "
             f"({training['split']['test']}): session-level r {held['session_r']}, MSE {held['session_mse']} "
             f"(zero-shot on the same: r {held['zero_shot']['session_r']}, MSE {held['zero_shot']['session_mse']}"
             + (f"; the planted population rating reaches r {held['planted_population_rating_r']}" if
                'planted_population_rating_r' in held else "")
             + f"). {path.stat().st_size / 1e3:.0f} kB.")
    return "\n".join([
        "[[model]]",
        f'name = "{mid}"',
        f'file = "fusion/{path.name}"',
        f'sha256 = "{sha}"',
        'kind = "fusion_model"',
        f'weights = "{"synthetic" if synthetic else "real"}"',
        "shipped = true",
        'source = "trained by tools/fusion/train.py on the synthetic set of tools/fusion/synth.py '
        '(real features of the demo and shared fixture sessions, planted ratings)"' if synthetic else
        f'source = "{training["data"]}"',
        f'source_version = "{training["date"]}"',
        'licence = "MIT OR Apache-2.0"',
        "output_dim = 384",
        f'preprocessing = "ONNX contract v1: inputs named as the modalities with masks, normalisation in the '
        f'graph; z in the space of {meta["empathic.encoder"]}; population map {meta["empathic.population_map"]}"',
        f'built_by = "tools/fusion/train_demo.sh (make train-demo): train.py --family {meta["empathic.family"]} '
        f'--subset {meta["empathic.subset"]}, torch.onnx.export opset 17"',
        f'notes = "{notes}"',
        "inputs = [",
        *inputs,
        "]",
        'outputs = [{ name = "z", dtype = "float32", shape = ["B", 384] }]',
        f'known_answer = {{ file = "reference/fusion/{mid}.z.npy", min_cosine = 0.99999 }}',
    ])


def main():
    files = sorted((ROOT / "models" / "fusion").glob("*.onnx"))
    block = "\n\n".join(entry(f) for f in files)
    text = MANIFEST.read_text()
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
    else:
        head, tail = text.rstrip("\n") + "\n\n", "\n"
    MANIFEST.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")
    print(f"wrote {len(files)} fusion model entries into {MANIFEST}")


if __name__ == "__main__":
    sys.exit(main())
