import math, torch, torch.nn as nn, torch.nn.functional as F

# (repeats, kernel, stride, expand, in, out)
BLOCKS = [(1,3,1,1,32,16),(2,3,2,6,16,24),(2,5,2,6,24,40),(3,3,2,6,40,80),(3,5,1,6,80,112),(4,5,2,6,112,192),(1,3,1,6,192,320)]

class SamePad(nn.Module):
    """TensorFlow SAME padding for a given kernel and stride (dynamic in the input size,
    unless `Lite0.fix_padding` recorded the pads for one input size)."""
    def __init__(self, k, s, mode):
        super().__init__(); self.k, self.s, self.mode = k, s, mode
        self.fixed, self.record = None, False
    def forward(self, x):
        if self.fixed is not None:
            return F.pad(x, self.fixed)
        if self.mode == "sym":
            p = (self.k - 1) // 2
            pads = (p, p, p, p)
        else:
            ih, iw = x.shape[-2:]
            ph = max((math.ceil(ih / self.s) - 1) * self.s + self.k - ih, 0)
            pw = max((math.ceil(iw / self.s) - 1) * self.s + self.k - iw, 0)
            pads = (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2)
        if self.record:
            self.fixed = tuple(int(p) for p in pads)
        return F.pad(x, pads)

class Block(nn.Module):
    def __init__(self, k, s, e, cin, cout, mode):
        super().__init__()
        mid = cin * e
        self.e = e
        if e != 1:
            self._expand_conv = nn.Conv2d(cin, mid, 1, bias=False)
            self._bn0 = nn.BatchNorm2d(mid, eps=1e-3, momentum=0.01)
        self.pad = SamePad(k, s, mode)
        self._depthwise_conv = nn.Conv2d(mid, mid, k, s, groups=mid, bias=False)
        self._bn1 = nn.BatchNorm2d(mid, eps=1e-3, momentum=0.01)
        self._project_conv = nn.Conv2d(mid, cout, 1, bias=False)
        self._bn2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.skip = s == 1 and cin == cout
    def forward(self, x):
        y = x
        if self.e != 1:
            y = F.relu6(self._bn0(self._expand_conv(y)))
        y = F.relu6(self._bn1(self._depthwise_conv(self.pad(y))))
        y = self._bn2(self._project_conv(y))
        return y + x if self.skip else y

class Lite0(nn.Module):
    def __init__(self, mode="tf"):
        super().__init__()
        self.stem_pad = SamePad(3, 2, mode)
        self._conv_stem = nn.Conv2d(3, 32, 3, 2, bias=False)
        self._bn0 = nn.BatchNorm2d(32, eps=1e-3, momentum=0.01)
        blocks = []
        for r, k, s, e, cin, cout in BLOCKS:
            for i in range(r):
                blocks.append(Block(k, s if i == 0 else 1, e, cin if i == 0 else cout, cout, mode))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(320, 1280, 1, bias=False)
        self._bn1 = nn.BatchNorm2d(1280, eps=1e-3, momentum=0.01)
        self._fc = nn.Linear(1280, 1000)
    def fix_padding(self, size):
        """Records every SAME padding for a size x size input, so an export holds constant
        pads (which the exporter then folds into the convolutions) instead of shape arithmetic."""
        pads = [m for m in self.modules() if isinstance(m, SamePad)]
        for m in pads:
            m.fixed, m.record = None, True
        with torch.no_grad():
            self.features(torch.zeros(1, 3, size, size))
        for m in pads:
            m.record = False
    def features(self, x):
        x = F.relu6(self._bn0(self._conv_stem(self.stem_pad(x))))
        for b in self._blocks:
            x = b(x)
        x = F.relu6(self._bn1(self._conv_head(x)))
        return x.mean((2, 3))
    def forward(self, x):
        return self._fc(self.features(x))
