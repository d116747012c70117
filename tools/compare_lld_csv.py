#!/usr/bin/env python3
"""Per-column agreement of an `empathic extract audio` CSV with an openSMILE LLD CSV.

    python3 tools/compare_lld_csv.py ours.csv reference.csv

Rows are matched by index; the reference's last 4 rows are excluded (end-of-input
flushing, see the specification). A value agrees when |err| <= 1e-4 + 1e-3 |ref|.
Prints, per column, the share of agreeing rows and the worst error; exit code 1 when a
column is below 99 %. Standard library only.
"""
import csv
import sys


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = [h.strip() for h in rows[0]]
    return header, [[float(v) for v in r] for r in rows[1:]]


def main():
    ours_h, ours = load(sys.argv[1])
    ref_h, ref = load(sys.argv[2])
    names = [h for h in ref_h if h not in ("start_s", "end_s", "frameTime", "name", "frameTime")]
    n = min(len(ours), len(ref) - 4)
    worst_share = 1.0
    for name in names:
        io, ir = ours_h.index(name), ref_h.index(name)
        ok, worst, worst_row = 0, 0.0, -1
        for t in range(n):
            a, b = ours[t][io], ref[t][ir]
            err = abs(a - b)
            if err <= 1e-4 + 1e-3 * abs(b):
                ok += 1
            elif err > worst:
                worst, worst_row = err, t
        share = ok / n if n else 1.0
        worst_share = min(worst_share, share)
        flag = "" if share >= 0.99 else "   <-- below 99 %"
        print(f"{name:<40} {100 * share:7.2f} %  worst err {worst:.4g} at row {worst_row}{flag}")
    print(f"rows compared: {n}; lowest column agreement: {100 * worst_share:.2f} %")
    sys.exit(0 if worst_share >= 0.99 else 1)


if __name__ == "__main__":
    main()
