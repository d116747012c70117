#!/usr/bin/env python3
"""The station's speech recognition against Moonshine's reference implementations (development tool).

Same weights (Moonshine tiny-en, int8 `.ort`, from PyPI `moonshine-voice==0.1.0`), same 16 kHz
files, same scoring normalisation (`features::speech::normalised_words`, docs/features.md
"Scoring words"), four ways:

  station      `empathic transcribe FILE` (Silero VAD segments, the station's decoder)
  python-whole the whole file in one encoder pass, greedy decoding with ONNX Runtime in Python,
               stopping at </s> or ceil(6.5 tokens a second of audio), as the package's C++
               model does (`MoonshineModel::transcribe`)
  python-segs  the station's own segments (its start_ms/end_ms), each decoded in Python as
               above: separates what the segmenter does from what the decoder does
  package      the package's own C++ transcriber, `Transcriber.transcribe_without_streaming`
               with its defaults (its VAD, its segmenting), the way its README runs a file

Inputs: every LJ Speech clip of the shared fixtures with a transcript (resampled to 16 kHz
with sox, very high quality), the demo session's audio (its participant utterances as the
reference) and any `--extra DIR` of `NAME.wav` + `NAME.txt` pairs. Prints a table per file
and totals; `--json OUT` writes every hypothesis.

Needs a virtual environment with `moonshine-voice==0.1.0 onnxruntime numpy soundfile` (not
the project's runtime: a development tool only) and sox on PATH.

Usage: tools/asr_reference.py [--binary target/release/empathic] [--extra DIR] [--json OUT]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import soundfile as sf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def words(text):
    """The project's one scoring normalisation, from the binary itself (`empathic words`:
    features::speech::score), so this tool and the station score alike."""
    out = subprocess.run([ARGS.binary, "words"], input=text.replace("\n", " "),
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{ARGS.binary} words failed: {out.stderr.strip()}")
    return out.stdout.split()


def errors(ref, hyp):
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref):
        cur = [i + 1] * (len(hyp) + 1)
        for j, h in enumerate(hyp):
            cur[j + 1] = min(prev[j] + (r != h), prev[j + 1] + 1, cur[j] + 1)
        prev = cur
    return prev[len(hyp)]


class PythonMoonshine:
    """Greedy decoding with the key/value cache, as the package's C++ model runs it."""

    def __init__(self, folder):
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        self.enc = ort.InferenceSession(os.path.join(folder, "encoder_model.ort"), so)
        self.dec = ort.InferenceSession(os.path.join(folder, "decoder_model_merged.ort"), so)
        self.vocab = load_vocab(os.path.join(folder, "tokenizer.bin"))
        self.dec_inputs = {i.name for i in self.dec.get_inputs()}

    def __call__(self, audio):
        n = len(audio)
        if n < 1600:
            return ""
        x = audio.astype(np.float32)[None, :]
        mask = np.ones((1, n), dtype=np.int64)
        hidden = self.enc.run(None, {"input_values": x, "attention_mask": mask})[0]
        max_len = int(np.ceil(n / 16000 * 6.5))
        past = {}
        for layer in range(6):
            for a in ("decoder", "encoder"):
                for b in ("key", "value"):
                    past[f"past_key_values.{layer}.{a}.{b}"] = np.zeros((1, 8, 0, 36), np.float32)
        tokens, last = [], 1
        out_names = [o.name for o in self.dec.get_outputs()]
        for step in range(max_len):
            feed = {
                "input_ids": np.array([[last]], dtype=np.int64),
                "encoder_hidden_states": hidden,
                "use_cache_branch": np.array([step > 0]),
                **past,
            }
            if "encoder_attention_mask" in self.dec_inputs:
                feed["encoder_attention_mask"] = mask
            outs = dict(zip(out_names, self.dec.run(None, feed)))
            best = int(np.argmax(outs["logits"][0, -1]))
            for layer in range(6):
                parts = ("decoder", "encoder") if step == 0 else ("decoder",)
                for a in parts:
                    for b in ("key", "value"):
                        past[f"past_key_values.{layer}.{a}.{b}"] = outs[f"present.{layer}.{a}.{b}"]
            if best == 2:
                break
            tokens.append(best)
            last = best
        return decode(self.vocab, tokens)


def load_vocab(path):
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        n = data[i]
        i += 1
        if n >= 0x80:
            n = (n & 0x7F) | (data[i] << 7)
            i += 1
        out.append(data[i : i + n])
        i += n
    return out


def decode(vocab, tokens):
    raw = b"".join(vocab[t] for t in tokens if t > 2 and t < len(vocab))
    return raw.decode("utf-8", errors="replace").replace("\u2581", " ").strip()


def station(path):
    config = ["--config", ARGS.config] if ARGS.config else []
    out = subprocess.run([ARGS.binary, "transcribe", path, *config], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{ARGS.binary} transcribe {path} failed: {out.stderr.strip()}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.strip()]


def material(tmp):
    """(name, 16 kHz wav path, reference text) of every scored file."""
    fixtures = os.environ.get("EMPATHIC_FIXTURES", os.path.join(ROOT, "../shared/fixtures"))
    lj = os.path.join(fixtures, "speech/ljspeech")
    items = []
    if os.path.isdir(lj):
        for line in open(os.path.join(lj, "metadata.csv"), encoding="utf-8"):
            parts = line.rstrip("\n").split("|")
            src = os.path.join(lj, parts[0] + ".wav")
            if not os.path.exists(src):
                continue
            dst = os.path.join(tmp, parts[0] + ".wav")
            subprocess.run(["sox", src, "-r", "16000", "-c", "1", "-b", "16", dst, "rate", "-v"], check=True)
            items.append((parts[0], dst, parts[2] if len(parts) > 2 else parts[1]))
    else:
        print(f"no LJ Speech fixtures at {lj}", file=sys.stderr)
    demo = os.path.join(ROOT, "demo/session")
    ref = []
    for line in open(os.path.join(demo, "events.jsonl"), encoding="utf-8"):
        e = json.loads(line)
        if e.get("type") == "utterance" and e.get("speaker", "participant") == "participant":
            ref.append(e["text"])
    items.append(("demo-session", os.path.join(demo, "audio.wav"), " ".join(ref)))
    for d in ARGS.extra or []:
        for f in sorted(os.listdir(d)):
            if f.endswith(".wav") and os.path.exists(os.path.join(d, f[:-4] + ".txt")):
                items.append((f[:-4], os.path.join(d, f), open(os.path.join(d, f[:-4] + ".txt")).read()))
    return items


def main():
    from moonshine_voice import ModelArch, Transcriber
    from moonshine_voice.utils import get_model_path

    folder = str(get_model_path("tiny-en"))
    py = PythonMoonshine(folder)
    package = Transcriber(model_path=folder, model_arch=ModelArch.TINY)
    systems = ["station", "python-whole", "python-segs", "package"]
    totals = {s: [0, 0] for s in systems}
    timing = {s: 0.0 for s in systems}
    record = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, path, ref in material(tmp):
            audio, rate = sf.read(path, dtype="float32")
            assert rate == 16000, path
            if audio.ndim > 1:
                audio = audio.mean(axis=1)
            hyps = {}
            t = time.monotonic()
            utts = station(path)
            timing["station"] += time.monotonic() - t
            hyps["station"] = " ".join(u["text"] for u in utts)
            t = time.monotonic()
            hyps["python-whole"] = py(audio)
            timing["python-whole"] += time.monotonic() - t
            t = time.monotonic()
            hyps["python-segs"] = " ".join(
                py(audio[u["start_ms"] * 16 : u["end_ms"] * 16]) for u in utts
            )
            timing["python-segs"] += time.monotonic() - t
            t = time.monotonic()
            lines = package.transcribe_without_streaming(list(map(float, audio)), 16000).lines
            timing["package"] += time.monotonic() - t
            hyps["package"] = " ".join(l.text for l in lines)
            r = words(ref)
            row = {"file": name, "words": len(r), "seconds": len(audio) / 16000,
                   "segments": [[u["start_ms"], u["end_ms"]] for u in utts],
                   "package_lines": [[round(l.start_time, 2), round(l.duration, 2)] for l in lines]}
            for s in systems:
                e = errors(r, words(hyps[s]))
                totals[s][0] += e
                totals[s][1] += len(r)
                row[s] = {"errors": e, "text": hyps[s]}
            record.append(row)
            print(f"{name:14} {len(r):4} words  " + "  ".join(f"{s} {row[s]['errors']:2}" for s in systems))
            for s in systems:
                print(f"    {s:12} {hyps[s]}")
    print()
    for s in systems:
        e, n = totals[s]
        print(f"{s:12} {e:3} errors in {n} words, WER {100 * e / max(n, 1):.1f} %  ({timing[s]:.1f} s)")
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"files": record, "totals": totals}, f, indent=1)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/empathic"))
    p.add_argument("--extra", action="append")
    p.add_argument("--json")
    p.add_argument("--config", help="a station config whose [asr] segment rules to use")
    p.add_argument("--only", choices=["station", "all"], default="all")
    ARGS = p.parse_args()
    main()
