#!/usr/bin/env python3
"""Writes each modality's population baseline into a fusion model's metadata, from the model
itself: `empathic.<modality>.baseline` = the training set's per-column mean that the graph
normalises with (the `mean_<modality>` initializer `models.py` registers), as base64 of
little-endian float32. The runtime's attributions (docs/prediction.md, "Why a prediction")
replace a cue group that is left out by these values: "this cue as the training population
had it on average". Nothing else in the file changes; `z` is the same to the bit.

`train.py` writes the key at export; this tool adds it to models exported before it.

Usage: add_baselines.py MODEL.onnx [MODEL.onnx ...]   (rewrites each file in place)
"""
import base64
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def baselines(graph):
    """{modality: mean vector} from the `mean_<modality>` initializers."""
    out = {}
    for init in graph.graph.initializer:
        if init.name.startswith("mean_"):
            out[init.name[len("mean_"):]] = numpy_helper.to_array(init).astype("<f4")
    return out


def encode(vector):
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode()


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for path in sys.argv[1:]:
        graph = onnx.load(path)
        meta = {p.key: p.value for p in graph.metadata_props}
        names = meta.get("empathic.modalities", "").split(",")
        found = baselines(graph)
        for m in names:
            if m not in found:
                raise SystemExit(f"{path}: no mean_{m} initializer: not a model of tools/fusion/models.py")
            dims = int(meta[f"empathic.{m}.dims"])
            if found[m].shape != (dims,):
                raise SystemExit(f"{path}: mean_{m} has shape {found[m].shape}, the model declares {dims}")
            meta[f"empathic.{m}.baseline"] = encode(found[m])
        del graph.metadata_props[:]
        for k, v in meta.items():
            p = graph.metadata_props.add()
            p.key, p.value = k, v
        onnx.save(graph, path)
        print(f"{path}: baselines for {', '.join(names)}")


if __name__ == "__main__":
    main()
