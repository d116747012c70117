#!/usr/bin/env python3
"""Word error rate of `empathic transcribe` on the shared fixture speech (development tool).

Runs the built binary on every LJ Speech clip of ../shared/fixtures/speech/ljspeech (or
EMPATHIC_FIXTURES/speech/ljspeech) and scores the recognised words against the
metadata.csv's normalised transcripts, under the project's one scoring normalisation
(`empathic words`: docs/features.md "Scoring words"). Prints per clip and the total.
Standard library only. `tools/asr_reference.py` compares against Moonshine's reference
implementations.

Usage: scripts/speech_wer.py [BINARY]
"""
import csv
import json
import os
import subprocess
import sys
import time
import wave

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "target/release/empathic")
fixtures = os.environ.get("EMPATHIC_FIXTURES", os.path.join(root, "../shared/fixtures"))
folder = os.path.join(fixtures, "speech/ljspeech")


def words(text):
    """The project's scoring normalisation, from the binary (`empathic words`)."""
    out = subprocess.run([binary, "words"], input=text.replace("\n", " "),
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def errors(ref, hyp):
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref):
        cur = [i + 1] * (len(hyp) + 1)
        for j, h in enumerate(hyp):
            cur[j + 1] = min(prev[j] + (r != h), prev[j + 1] + 1, cur[j] + 1)
        prev = cur
    return prev[len(hyp)]


refs = {}
with open(os.path.join(folder, "metadata.csv"), newline="") as f:
    for row in csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE):
        refs[row[0]] = row[2] if len(row) > 2 else row[1]
total_err = total_words = 0
audio_s = wall_s = 0.0
for clip in sorted(refs):
    path = os.path.join(folder, clip + ".wav")
    if not os.path.exists(path):
        continue
    with wave.open(path) as w:
        audio_s += w.getnframes() / w.getframerate()
    t = time.monotonic()
    out = subprocess.run([binary, "transcribe", path], capture_output=True, text=True, check=True)
    wall_s += time.monotonic() - t
    hyp = " ".join(json.loads(line)["text"] for line in out.stdout.splitlines() if line.strip())
    e, n = errors(words(refs[clip]), words(hyp)), len(words(refs[clip]))
    total_err += e
    total_words += n
    print(f"{clip}  {e:>2}/{n:<3}  {hyp}")
print(f"ljspeech: {total_err} errors in {total_words} words, WER {100 * total_err / total_words:.1f} %; "
      f"{audio_s:.1f} s of audio in {wall_s:.1f} s wall (with a model load per clip)")
