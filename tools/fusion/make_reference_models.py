#!/usr/bin/env python3
"""Builds the reference fusion models of ONNX contract v1 used by the tests (development
only; needs the `onnx` package): `text-mean-v1.onnx`, z = the masked mean of the `text`
modality (what `text-zero-shot` computes in Rust, so the two must agree), and
`text-mean-bad-dims.onnx`, the same declaring 385 text values (a layout mismatch), and
`loudness-planted-v1.onnx`, a model that takes face, acoustic and text windows but reads one
column only, the frame energy `pcm_RMSenergy_sma` of `acoustic_compare`: z = d0 + 50 * (its
masked mean) * d1 for two fixed unit vectors (seeded), population map 3 + 20 * cosine, with
baselines for face and acoustic_compare in its metadata. An honest attribution of it puts
everything on `acoustic_compare`, and within it on `loudness` (tests/it/explain.rs).

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


def loudness_planted() -> onnx.ModelProto:
    import base64

    import numpy as np

    rng = np.random.default_rng(11)
    d0, d1 = (v / np.linalg.norm(v) for v in rng.standard_normal((2, 384)).astype(np.float32))
    inputs = []
    for name, dims in (("face", 391), ("acoustic_compare", 65), ("text", 384)):
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["B", "T", dims]))
        inputs.append(helper.make_tensor_value_info(f"{name}_mask", TensorProto.FLOAT, ["B", "T"]))
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", 384])
    energy = 8  # pcm_RMSenergy_sma in the ComParE-2016 order (docs/features.md)
    inits = [
        helper.make_tensor("start", TensorProto.INT64, [1], [energy]),
        helper.make_tensor("end", TensorProto.INT64, [1], [energy + 1]),
        helper.make_tensor("axis_f", TensorProto.INT64, [1], [2]),
        helper.make_tensor("axes_time", TensorProto.INT64, [1], [1]),
        helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6]),
        helper.make_tensor("gain", TensorProto.FLOAT, [], [50.0]),
        helper.make_tensor("d0", TensorProto.FLOAT, [1, 384], d0.tolist()),
        helper.make_tensor("d1", TensorProto.FLOAT, [1, 384], d1.tolist()),
    ]
    nodes = [
        helper.make_node("Slice", ["acoustic_compare", "start", "end", "axis_f"], ["col"]),  # [B,T,1]
        helper.make_node("Squeeze", ["col", "axis_f"], ["col2"]),  # [B,T]
        helper.make_node("Mul", ["col2", "acoustic_compare_mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axes_time"], ["total"], keepdims=1),  # [B,1]
        helper.make_node("ReduceSum", ["acoustic_compare_mask", "axes_time"], ["count"], keepdims=1),
        helper.make_node("Max", ["count", "eps"], ["count_safe"]),
        helper.make_node("Div", ["total", "count_safe"], ["mean"]),
        helper.make_node("Mul", ["mean", "gain"], ["scaled"]),
        helper.make_node("Mul", ["scaled", "d1"], ["moved"]),  # [B,384]
        helper.make_node("Add", ["moved", "d0"], ["z"]),
    ]
    graph = helper.make_graph(nodes, "loudness_planted", inputs, [z], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    b64 = lambda v: base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode()
    meta = {
        "empathic.contract": "1",
        "empathic.id": "loudness-planted-v1",
        "empathic.family": "reference-planted",
        "empathic.modalities": "face,acoustic_compare,text",
        "empathic.face.dims": "391",
        "empathic.face.layout_version": "2",
        "empathic.face.baseline": b64(np.zeros(391)),
        "empathic.acoustic_compare.dims": "65",
        "empathic.acoustic_compare.layout_version": "1",
        "empathic.acoustic_compare.baseline": b64(np.zeros(65)),
        "empathic.text.dims": "384",
        "empathic.text.layout_version": "1",
        "empathic.window_frames": "120",
        "empathic.encoder": "all-MiniLM-L6-v2",
        "empathic.population_map": "3,20",
        "empathic.synthetic": "true",
        "empathic.training": "none: a fixed graph that reads the frame energy only, for attribution tests",
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
    onnx.save(loudness_planted(), out / "loudness-planted-v1.onnx")


if __name__ == "__main__":
    main()
