#!/usr/bin/env python3
"""Exports torchvision's ResNet50 penultimate layer (2048-d, global average pool) as ONNX,
taking the runtime's image input (RGB 224x224, (x - 127) / 128, NCHW) and applying
torchvision's ImageNet normalisation inside the graph, so it drops in as
`models.appearance_encoder` like EfficientNet-Lite0.

Development only:

    .venv-models/bin/pip install torch==2.15.0 torchvision==0.29.2 onnx onnxruntime==1.31.1
    .venv-models/bin/python tools/models/export_resnet50.py --random
        # random weights, same compute: for benchmarks (models/resnet50-random.onnx)
    .venv-models/bin/python tools/models/export_resnet50.py --weights resnet50-11ad3fa6.pth
        # the paper's features, wherever torchvision's IMAGENET1K_V2 (or V1) weights file is
        # available (it cannot be downloaded on the machines this project is built on)

Prints size and sha256 for models/MODELS.toml. Random weights use a fixed seed, so the file
is the same on every run of the same torch version.
"""
import argparse
import hashlib
from pathlib import Path

import torch
import torchvision

ROOT = Path(__file__).resolve().parents[2]


class Penultimate(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        net.fc = torch.nn.Identity()
        self.net = net
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, image):
        x01 = (image * 128.0 + 127.0) / 255.0
        return self.net((x01 - self.mean) / self.std)


def main():
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--random", action="store_true")
    g.add_argument("--weights", type=Path)
    args = ap.parse_args()
    torch.manual_seed(0)
    net = torchvision.models.resnet50(weights=None)
    if args.weights:
        net.load_state_dict(torch.load(args.weights, map_location="cpu"))
        out = ROOT / "models" / "resnet50.onnx"
    else:
        out = ROOT / "models" / "resnet50-random.onnx"
    model = Penultimate(net).eval()
    torch.onnx.export(model, (torch.zeros(1, 3, 224, 224),), str(out), input_names=["image"],
                      output_names=["features"], dynamic_axes={"image": {0: "batch"}, "features": {0: "batch"}},
                      opset_version=17, dynamo=False)
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB sha256 {hashlib.sha256(out.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
