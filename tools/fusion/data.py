"""Reads an `empathic export windows` folder (format `empathic-windows` v2 or v3, from a
station's database or a central one) into training samples: one per (window, rated story in
play).

Version 3 adds the stored window features (`<modality>_window_mean.npy`,
`<modality>_window_present.npy`), which this reader does not need, and allows sessions without
per-frame arrays (`frames: 0`: a central database that was not sent per-frame features). Such a
session has no T x F matrices to train on: it is skipped, and named, when others have frames;
with none at all the export cannot train a sequence model and `load` says so.

A sample is the window's T x F matrix and T mask of every modality of the subset, the
embedding E(S) of the story (from `stories/<encoder>.npy`), the self-rating (1-5), and the
window's session, participant and phase. Frames are read once per session (memory-mapped)
and windows are slices of them, as the export stores them.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = "empathic-windows"
VERSIONS = (2, 3, 4, 5)


@dataclass
class Modality:
    name: str
    dims: int
    producer: str | None
    layout_version: int


@dataclass
class Dataset:
    root: Path
    encoder: str
    modalities: dict[str, Modality]
    # per session: modality -> (values [frames, dims] float32, mask [frames] float32)
    frames: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict)
    # per sample: (session, participant, phase, start_frame, end_frame, story row, rating)
    samples: list[tuple] = field(default_factory=list)
    story_ids: list[str] = field(default_factory=list)
    story_vectors: np.ndarray | None = None

    def participants(self) -> list[str]:
        return sorted({s[1] for s in self.samples})

    def window(self, sample, names):
        """The sample's matrices and masks, in the order of `names`."""
        session, _, _, start, end = sample[:5]
        out = []
        for n in names:
            values, mask = self.frames[session][n]
            out.append(np.asarray(values[start:end], dtype=np.float32))
            out.append(np.asarray(mask[start:end], dtype=np.float32))
        return out


def load(root, encoder=None, phase=None):
    root = Path(root)
    manifest = json.loads((root / "manifest.json").read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") not in VERSIONS:
        raise SystemExit(f"{root}: not an {FORMAT} export of version {VERSIONS} "
                         f"(found {manifest.get('format')} v{manifest.get('version')})")
    encoders = manifest.get("story_encoders", [])
    if not encoders:
        raise SystemExit(f"{root}: the export has no story embeddings (stories/): export from an "
                         "empathic build that embeds the bank's stories, or import a story bank first")
    encoder = encoder or encoders[0]
    if encoder not in encoders:
        raise SystemExit(f"{root}: no stories embedded with {encoder} (have {encoders})")
    story_ids = [json.loads(l)["story_id"] for l in (root / "stories" / f"{encoder}.jsonl").open()]
    story_vectors = np.load(root / "stories" / f"{encoder}.npy")
    row = {s: i for i, s in enumerate(story_ids)}

    modalities: dict[str, Modality] = {}
    ds = Dataset(root, encoder, modalities, story_ids=story_ids, story_vectors=story_vectors)
    skipped = []
    for s in manifest["sessions"]:
        sid = s["session_id"]
        if s.get("frames", 1) == 0:
            skipped.append(sid)
            continue
        ds.frames[sid] = {}
        for m in s["modalities"]:
            mod = Modality(m["name"], m["dims"], m.get("producer"), m.get("layout_version") or 1)
            seen = modalities.setdefault(m["name"], mod)
            if (seen.dims, seen.producer, seen.layout_version) != (mod.dims, mod.producer, mod.layout_version):
                raise SystemExit(f"{sid}: modality {m['name']} is {mod} here and {seen} in an "
                                 "earlier session: one export, one layout")
            values = np.load(root / sid / f"{m['name']}.npy", mmap_mode="r")
            mask = np.load(root / sid / f"{m['name']}_mask.npy").astype(np.float32)
            ds.frames[sid][m["name"]] = (values, mask)
    if skipped:
        import sys
        print(f"{root}: {len(skipped)} session(s) without per-frame features skipped "
              f"({', '.join(skipped[:5])}{'...' if len(skipped) > 5 else ''}): a central database holds "
              "them only when the study syncs frame features", file=sys.stderr)
    if not ds.frames:
        raise SystemExit(f"{root}: no session has per-frame features (frames: 0 everywhere); a central "
                         "database holds them only when the study syncs them ([sync] frame_features = true)")
    for line in (root / "windows.jsonl").open():
        w = json.loads(line)
        if w["session_id"] not in ds.frames:
            continue
        if phase and w.get("phase") != phase:
            continue
        for story in w["stories"]:
            if story.get("rating") is None or story["story_id"] not in row:
                continue
            ds.samples.append((w["session_id"], w.get("participant_id") or w["session_id"],
                               w.get("phase"), w["start_frame"], w["end_frame"],
                               row[story["story_id"]], int(story["rating"])))
    if not ds.samples:
        raise SystemExit(f"{root}: no window with a rated story in play"
                         + (f" in phase {phase}" if phase else ""))
    return ds


def split_participants(participants, seed=0, fractions=(0.7, 0.2, 0.1)):
    """Participants into train / validation / test, so no test participant is trained on."""
    rng = np.random.default_rng(seed)
    p = list(participants)
    rng.shuffle(p)
    n = len(p)
    n_train = max(1, round(fractions[0] * n))
    n_val = max(1, round(fractions[1] * n)) if n > 2 else 0
    return p[:n_train], p[n_train:n_train + n_val], p[n_train + n_val:]
