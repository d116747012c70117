#!/usr/bin/env python3
"""Plots the soak's figures (scripts/soak.sh) as one SVG of small multiples: per session,
the service's resident memory, file descriptors and threads, the database and its WAL, the
log, and the raw media kept under retention; faults marked, restarts as vertical lines.
Standard library only.  usage: soak_plot.py SOAK.csv OUT.svg"""
import csv
import sys

PANELS = [
    ("rss_kib", "resident memory (MiB)", lambda v: v / 1024),
    ("fds", "open file descriptors", float),
    ("threads", "threads", float),
    ("db_bytes", "database (MiB)", lambda v: v / 2**20),
    ("wal_bytes", "WAL (MiB)", lambda v: v / 2**20),
    ("log_bytes", "service log (KiB)", lambda v: v / 1024),
    ("with_media", "recordings with raw media (of all)", float),
    ("media_bytes", "raw media kept (MiB)", lambda v: v / 2**20),
]
COLOURS = {"none": "#444", "camera": "#1f77b4", "microphone": "#2ca02c", "broker": "#9467bd",
           "kill": "#d62728", "disk": "#ff7f0e", "clock": "#8c564b"}


def main(src, out):
    rows = list(csv.DictReader(open(src)))
    if not rows:
        sys.exit(f"{src}: no sessions")
    w, h, pad, cols = 440, 190, 46, 2
    n = len(rows)
    fig_w = cols * w
    fig_h = 60 + ((len(PANELS) + cols - 1) // cols) * h + 56
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{fig_w}" height="{fig_h}" '
           f'font-family="DejaVu Sans, sans-serif" font-size="11">',
           f'<rect width="{fig_w}" height="{fig_h}" fill="white"/>',
           f'<text x="10" y="22" font-size="15">A month accelerated: {n} sessions, one a "day" '
           f'(from {src.split("/")[-1]})</text>']
    restarts = [i for i in range(1, n) if rows[i]["pid"] != rows[i - 1]["pid"]]
    for p, (key, title, f) in enumerate(PANELS):
        x0 = (p % cols) * w + pad
        y0 = 50 + (p // cols) * h + 20
        pw, ph = w - pad - 20, h - 60
        values = [f(float(r[key])) for r in rows]
        top = max(values) * 1.1 or 1.0
        if key == "with_media":
            top = max(float(r["recordings"]) for r in rows) * 1.1 or 1.0
        sx = lambda i: x0 + (i / max(n - 1, 1)) * pw
        sy = lambda v: y0 + ph - (v / top) * ph
        svg.append(f'<text x="{x0}" y="{y0 - 6}" font-size="12">{title}</text>')
        svg.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#bbb"/>')
        for t in (0, top / 2, top / 1.1):
            svg.append(f'<text x="{x0 - 4}" y="{sy(t) + 4:.1f}" text-anchor="end" fill="#666">{t:.0f}</text>')
        for i in restarts:
            svg.append(f'<line x1="{sx(i):.1f}" x2="{sx(i):.1f}" y1="{y0}" y2="{y0 + ph}" '
                       f'stroke="#d62728" stroke-opacity="0.25"/>')
        if key == "with_media":
            pts = " ".join(f"{sx(i):.1f},{sy(float(r['recordings'])):.1f}" for i, r in enumerate(rows))
            svg.append(f'<polyline points="{pts}" fill="none" stroke="#bbb" stroke-dasharray="3,2"/>')
        pts = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in enumerate(values))
        svg.append(f'<polyline points="{pts}" fill="none" stroke="#333" stroke-width="1.2"/>')
        for i, (r, v) in enumerate(zip(rows, values)):
            c = COLOURS.get(r["fault"], "#444")
            hollow = r.get("fresh") == "1"
            svg.append(f'<circle cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="2.6" '
                       f'fill="{"white" if hollow else c}" stroke="{c}"><title>session {r["session"]} '
                       f'({r["fault"]}, {r["status"]}): {v:.1f}</title></circle>')
        svg.append(f'<text x="{x0 + pw}" y="{y0 + ph + 14}" text-anchor="end" fill="#666">session {n - 1}</text>')
        svg.append(f'<text x="{x0}" y="{y0 + ph + 14}" fill="#666">0</text>')
    lx = 10
    ly = fig_h - 30
    for name, c in COLOURS.items():
        svg.append(f'<circle cx="{lx + 5}" cy="{ly - 4}" r="4" fill="{c}"/>'
                   f'<text x="{lx + 13}" y="{ly}">{name}</text>')
        lx += 14 + 8 * len(name) + 14
    svg.append(f'<text x="10" y="{ly + 18}" fill="#666">hollow: measured in a process that had run no '
               f'session yet; red lines: the service restarted</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
