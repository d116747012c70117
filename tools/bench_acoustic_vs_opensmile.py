#!/usr/bin/env python3
"""CPU-time real-time factor of `empathic extract audio` and of openSMILE 3.0 (PyPI
`opensmile`, development reference only) on the same 60 s of 16 kHz speech, in one run.

    .venv-smile/bin/python tools/bench_acoustic_vs_opensmile.py

The 60 s file is the demo session's audio (LibriVox, public domain) repeated. Each tool runs
5 times; the median CPU time (user + system) is reported, with the ratio.
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np
import opensmile

ROOT = Path(__file__).resolve().parent.parent


def make_60s(path):
    with wave.open(str(ROOT / "demo/session/audio.wav")) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    pcm = np.tile(pcm, 3)[: 60 * 16000]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return pcm


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    binary = ROOT / "target/release/empathic"
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech60.wav"
        pcm = make_60s(wav)
        signal = pcm.astype(np.float32) / 32768.0
        for name, feature_set in [("compare", opensmile.FeatureSet.ComParE_2016),
                                  ("egemaps", opensmile.FeatureSet.eGeMAPSv02)]:
            ours, theirs = [], []
            smile = opensmile.Smile(
                feature_set=feature_set,
                feature_level=opensmile.FeatureLevel.LowLevelDescriptors,
            )
            for _ in range(5):
                before = cpu_children()
                subprocess.run([str(binary), "extract", "audio", str(wav), "--set", name,
                                "--out", str(Path(tmp) / "o.csv")],
                               check=True, stderr=subprocess.DEVNULL)
                ours.append(cpu_children() - before)
                before = cpu_self()
                smile.process_signal(signal, 16000)
                theirs.append(cpu_self() - before)
            o, t = statistics.median(ours), statistics.median(theirs)
            print(f"[{name}] empathic extract audio: {o:.3f} s CPU for 60 s (RTF {o / 60:.4f}, {60 / o:.0f}x real time)")
            print(f"[{name}] openSMILE 3.0 (Python): {t:.3f} s CPU for 60 s (RTF {t / 60:.4f}, {60 / t:.0f}x real time)")
            print(f"[{name}] ratio openSMILE / empathic CPU time: {t / o:.2f}")


if __name__ == "__main__":
    main()
