#!/usr/bin/env python3
"""Builds the reference fusion models of ONNX contract v1 used by the tests (development
only; needs the `onnx` package): `text-mean-v1.onnx`, z = the masked mean of the `text`
modality (what `text-zero-shot` computes in Rust, so the two must agree), and
`text-mean-bad-dims.onnx`, the same declaring 385 text values (a layout mismatch).

Contract v1 (see docs/formats.md, "Models"): one input per modality named as the store names it,
`<name> [B,T,F]` float32, with `<name>_mask [B,T]` float32 (1 = present); output
`z [B,D]`; metadata_props `empathic.contract` = "1", `empathic.id`, `empathic.family`,
`empathic.modalities` (comma-separated), `empathic.<name>.dims`,
`empathic.<name>.layout_version`, `empathic.window_frames`, `empathic.encoder`,
`empathic.population_map` ("intercept,slope"), `empathic.synthetic` ("true"/"false"),
`empathic.training` (free text: data, date, split, held-out metrics).

Usage: python tools/fusion/make_reference_models.py tests/data/fusion
"""
import sys
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def build(dims: int, model_id: str) -> onnx.ModelProto:
    text = helper.make_tensor_value_info("text", TensorProto.FLOAT, ["B", "T", dims])
    mask = helper.make_tensor_value_info("text_mask", TensorProto.FLOAT, ["B", "T"])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", dims])
    axes_last = helper.make_tensor("axes_last", TensorProto.INT64, [1], [2])
    axes_time = helper.make_tensor("axes_time", TensorProto.INT64, [1], [1])
    eps = helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6])
    nodes = [
        helper.make_node("Unsqueeze", ["text_mask", "axes_last"], ["mask3"]),
        helper.make_node("Mul", ["text", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axes_time"], ["total"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "axes_time"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", "eps"], ["count_safe"]),
        helper.make_node("Div", ["total", "count_safe"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes, "masked_mean", [text, mask], [z], initializer=[axes_last, axes_time, eps]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    meta = {
        "empathic.contract": "1",
        "empathic.id": model_id,
        "empathic.family": "reference-masked-mean",
        "empathic.modalities": "text",
        "empathic.text.dims": str(dims),
        "empathic.text.layout_version": "1",
        "empathic.window_frames": "120",
        "empathic.encoder": "all-MiniLM-L6-v2-int8",
        "empathic.population_map": "1,4",
        "empathic.synthetic": "false",
        "empathic.training": "none: a fixed graph (masked mean), for contract tests",
    }
    for k, v in meta.items():
        p = model.metadata_props.add()
        p.key, p.value = k, v
    onnx.checker.check_model(model)
    return model


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/fusion")
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(build(384, "text-mean-v1"), out / "text-mean-v1.onnx")
    onnx.save(build(385, "text-mean-bad-dims"), out / "text-mean-bad-dims.onnx")


if __name__ == "__main__":
    main()
