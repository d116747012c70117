"""The four fusion families, after their published references, under ONNX contract v1.

Every model takes, per modality of its subset, `<name> [B,T,F]` and `<name>_mask [B,T]`
(1 = present) and returns `z [B,384]` in the sentence encoder's space; the prediction toward
story S is cos(z, E(S)). Shared by all families:

- normalisation inside the graph: per-modality mean and standard deviation of the training
  frames (present frames only) as buffers, absent frames zeroed after it;
- modalities grouped as the paper's v (face, appearance: what the camera gives), a (acoustic)
  and t (text); a group's step vector is the concatenation of its modalities' per-step
  projections (Linear to `proj` dims), its mask the union of theirs;
- a text residual: z = head(h) + alpha * (masked mean of the raw text vectors) when t is in
  the subset, alpha learnt from 1. Training so starts from the zero-shot predictor (the
  cosine of what was said with the story) and learns what the other modalities add.

Families:
- TFN (Zadeh et al. 2017): each group's masked mean through a small MLP to h_g, a 1 appended,
  the outer product of the groups' [h_g; 1] (all unimodal, bimodal and trimodal terms), then
  an MLP to z.
- EF-LSTM: the groups' step vectors concatenated per step (early fusion) into one LSTM; its
  final hidden state to z.
- LF-LSTM: one LSTM per group (late fusion); their final hidden states concatenated to z.
- AMER (attention-based multimodal empathy recognition, reduced to one speaker): per group a
  self-attention layer over time (key padding from the mask) and attention pooling with a
  learnt query; then attention over the groups (a learnt score per group vector, absent
  groups masked) and the weighted sum to z.
"""
import torch
from torch import nn

GROUPS = {"v": ("face", "appearance", "blendshapes"), "a": ("acoustic_compare", "acoustic_egemaps"),
          "t": ("text",)}
FAMILIES = ("tfn", "ef-lstm", "lf-lstm", "amer")
SUBSETS = ("t", "a+t", "v+t", "v+a", "v+a+t")
EMBED = 384


def subset_modalities(subset, available):
    """The modalities of `subset` ("v+a+t") among `available`, by group, in a fixed order."""
    groups = subset.split("+")
    for g in groups:
        if g not in GROUPS:
            raise SystemExit(f"subset {subset}: unknown group {g} (groups: v, a, t)")
    out = {g: [m for m in GROUPS[g] if m in available] for g in groups}
    for g, ms in out.items():
        if not ms:
            raise SystemExit(f"subset {subset}: the export has no modality of group {g} "
                             f"({', '.join(GROUPS[g])})")
    return out


def masked_mean(x, mask):
    m = mask.unsqueeze(-1)
    return (x * m).sum(1) / m.sum(1).clamp(min=1e-6)


class Fusion(nn.Module):
    def __init__(self, family, groups, dims, stats, proj=32, hidden=64, dropout=0.1):
        super().__init__()
        self.family = family
        self.groups = groups                      # group -> [modality]
        self.names = [m for ms in groups.values() for m in ms]
        self.dims = dims                          # modality -> F
        for m in self.names:
            mean, std = stats[m]
            self.register_buffer(f"mean_{m}", torch.as_tensor(mean, dtype=torch.float32))
            self.register_buffer(f"std_{m}", torch.as_tensor(std, dtype=torch.float32).clamp(min=1e-3))
        self.proj = nn.ModuleDict({m: nn.Linear(dims[m], proj) for m in self.names})
        self.drop = nn.Dropout(dropout)
        gdim = {g: proj * len(ms) for g, ms in groups.items()}
        self.has_text = "t" in groups
        self.alpha = nn.Parameter(torch.ones(())) if self.has_text else None
        if family == "tfn":
            h = 8
            self.unimodal = nn.ModuleDict({g: nn.Sequential(nn.Linear(d, h), nn.ReLU()) for g, d in gdim.items()})
            fused = (h + 1) ** len(groups)
            self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(fused, hidden), nn.ReLU(),
                                      nn.Linear(hidden, EMBED))
        elif family == "ef-lstm":
            self.lstm = nn.LSTM(sum(gdim.values()) + len(groups), hidden, batch_first=True)
            self.head = nn.Linear(hidden, EMBED)
        elif family == "lf-lstm":
            h = 32
            self.lstms = nn.ModuleDict({g: nn.LSTM(d + 1, h, batch_first=True) for g, d in gdim.items()})
            self.head = nn.Linear(h * len(groups), EMBED)
        elif family == "amer":
            d = 32
            self.inp = nn.ModuleDict({g: nn.Linear(gd, d) for g, gd in gdim.items()})
            self.attn = nn.ModuleDict({g: nn.MultiheadAttention(d, 2, batch_first=True) for g in groups})
            self.query = nn.ParameterDict({g: nn.Parameter(torch.randn(d) / d ** 0.5) for g in groups})
            self.score = nn.Linear(d, 1)
            self.head = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, EMBED))
        else:
            raise SystemExit(f"unknown family {family} (families: {', '.join(FAMILIES)})")
        if self.has_text:
            # Start exactly at the zero-shot predictor (z = the text mean).
            nn.init.zeros_(self.last_layer().weight)
            nn.init.zeros_(self.last_layer().bias)

    def last_layer(self):
        return self.head[-1] if isinstance(self.head, nn.Sequential) else self.head

    def input_names(self):
        return [n for m in self.names for n in (m, f"{m}_mask")]

    def steps(self, inputs):
        """Per group: step vectors [B,T,G] and mask [B,T]."""
        out = {}
        for g, ms in self.groups.items():
            parts, masks = [], []
            for m in ms:
                x, mask = inputs[m], inputs[f"{m}_mask"]
                x = (x - getattr(self, f"mean_{m}")) / getattr(self, f"std_{m}")
                x = x * mask.unsqueeze(-1)
                parts.append(self.drop(torch.relu(self.proj[m](x))) * mask.unsqueeze(-1))
                masks.append(mask)
            out[g] = (torch.cat(parts, -1), torch.stack(masks, 0).amax(0))
        return out

    def forward(self, *tensors):
        inputs = dict(zip(self.input_names(), tensors))
        steps = self.steps(inputs)
        if self.family == "tfn":
            fused = None
            for g, (x, mask) in steps.items():
                h = self.unimodal[g](masked_mean(x, mask))
                h = torch.cat([h, torch.ones_like(h[:, :1])], -1)
                fused = h if fused is None else (fused.unsqueeze(-1) * h.unsqueeze(1)).flatten(1)
            h = fused
        elif self.family == "ef-lstm":
            x = torch.cat([t for x, m in steps.values() for t in (x, m.unsqueeze(-1))], -1)
            _, (hn, _) = self.lstm(x)
            h = hn[-1]
        elif self.family == "lf-lstm":
            finals = []
            for g, (x, mask) in steps.items():
                _, (hn, _) = self.lstms[g](torch.cat([x, mask.unsqueeze(-1)], -1))
                finals.append(hn[-1])
            h = torch.cat(finals, -1)
        else:  # amer
            pooled, scores, present = [], [], []
            for g, (x, mask) in steps.items():
                e = self.inp[g](x)
                # An all-absent group attends over a fully masked sequence: keep it finite by
                # letting its first step through (its vector is zero) and masking the group below.
                pad = (mask < 0.5)
                pad = pad & ~(pad.all(1, keepdim=True) & (torch.arange(pad.shape[1]) == 0))
                a, _ = self.attn[g](e, e, e, key_padding_mask=pad, need_weights=False)
                a = a + e
                w = (a @ self.query[g]).masked_fill(pad, -1e4).softmax(1)
                v = (w.unsqueeze(-1) * a).sum(1)
                pooled.append(v)
                scores.append(self.score(torch.tanh(v)))
                present.append((mask.sum(1, keepdim=True) > 0).float())
            s = torch.cat(scores, 1).masked_fill(torch.cat(present, 1) < 0.5, -1e4).softmax(1)
            h = (torch.stack(pooled, 1) * s.unsqueeze(-1)).sum(1)
        z = self.head(h)
        if self.has_text:
            z = z + self.alpha * masked_mean(inputs["text"], inputs["text_mask"])
        return z
