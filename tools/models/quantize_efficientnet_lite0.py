#!/usr/bin/env python3
"""Static int8 (QDQ, per-channel weights) EfficientNet-Lite0 calibrated on real frames, with
its agreement to fp32 and its speed, both measured here in one run.

Development only (same venv as export_efficientnet_lite0.py, plus opencv-python-headless):

    .venv-models/bin/python tools/models/quantize_efficientnet_lite0.py [CALIBRATION_VIDEO ...]

Calibration: every 4th frame of the given videos (default: the demo session), preprocessed
exactly as the runtime does (area resize of the whole frame to 224x224, RGB, (x-127)/128).
Evaluation: every 5th frame of ../shared/fixtures/sessions/{grid,selfie,still} when present
(not used for calibration), else the demo frames; cosine between int8 and fp32 features,
and single-thread latency of both.

Measured 2026-11-22 (calibration: demo session; evaluation: 271 held-out frames of the shared
grid/selfie/still sessions): cosine int8 vs fp32 min 0.409, mean 0.845, p5 0.766; latency
fp32 22.0 ms, int8 18.8 ms (1.17x). Not good enough to ship: the depthwise-separable,
ReLU6 network loses too much with per-tensor uint8 activations, and ONNX Runtime's QDQ
depthwise kernels gain little. The output file is therefore not in the manifest.
"""
import hashlib
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

ROOT = Path(__file__).resolve().parents[2]
FP32 = ROOT / "models" / "efficientnet-lite0.onnx"
INT8 = ROOT / "models" / "efficientnet-lite0.int8.onnx"


def frames(path, every):
    cap = cv2.VideoCapture(str(path))
    i = 0
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        if i % every == 0:
            small = cv2.resize(bgr, (224, 224), interpolation=cv2.INTER_AREA)
            rgb = small[:, :, ::-1].astype(np.float32)
            yield ((rgb - 127.0) / 128.0).transpose(2, 0, 1)[None].copy()
        i += 1


class Reader(CalibrationDataReader):
    def __init__(self, videos):
        self.data = iter([{"image": f} for v in videos for f in frames(v, 4)])

    def get_next(self):
        return next(self.data, None)


def main():
    videos = [Path(a) for a in sys.argv[1:]] or [ROOT / "demo/session/video.avi"]
    quantize_static(str(FP32), str(INT8), Reader(videos), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    s32 = ort.InferenceSession(str(FP32), opts, providers=["CPUExecutionProvider"])
    s8 = ort.InferenceSession(str(INT8), opts, providers=["CPUExecutionProvider"])
    shared = ROOT.parent / "shared/fixtures/sessions"
    held_out = [shared / s / "video.avi" for s in ("grid", "selfie", "still") if (shared / s).exists()]
    evaluation = list(f for v in (held_out or videos) for f in frames(v, 5))
    cos, t32, t8 = [], 0.0, 0.0
    for x in evaluation:
        a = time.perf_counter(); f32 = s32.run(["features"], {"image": x})[0][0]
        b = time.perf_counter(); f8 = s8.run(["features"], {"image": x})[0][0]
        c = time.perf_counter()
        t32 += b - a; t8 += c - b
        cos.append(float((f32 * f8).sum() / (np.linalg.norm(f32) * np.linalg.norm(f8))))
    cos = np.array(cos)
    n = len(evaluation)
    print(f"evaluated on {n} frames ({'held-out shared sessions' if held_out else 'calibration videos'})")
    print(f"cosine int8 vs fp32: min {cos.min():.4f} mean {cos.mean():.4f} p5 {np.percentile(cos, 5):.4f}")
    print(f"latency one thread: fp32 {1e3 * t32 / n:.1f} ms, int8 {1e3 * t8 / n:.1f} ms, ratio {t32 / t8:.2f}")
    print(f"{INT8}: {INT8.stat().st_size / 1e6:.1f} MB sha256 {hashlib.sha256(INT8.read_bytes()).hexdigest()}")


if __name__ == "__main__":
    main()
