#!/usr/bin/env bash
# Replay throughput at --speed max: frames per second and multiple of real time, for the
# demo session and (when present) the shared real sessions. Each session is replayed 3 times
# into a fresh database; the median is reported. Build first: cargo build --release.
# REPLAY_CONFIG=FILE passes --config FILE (e.g. a config with appearance_encoder = "").
# EMPATHIC_BINS="A B" compares binaries in one sitting: their runs are interleaved (A, B,
# A, B, ...) so the machine's load falls on both alike, and each row after the first binary's
# gives its median time as a ratio to the first's.
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a bins <<< "${EMPATHIC_BINS:-./target/release/empathic}"
fixtures=${EMPATHIC_FIXTURES:-../shared/fixtures}
sessions=(demo/session)
for s in grid still selfie; do [[ -d $fixtures/sessions/$s ]] && sessions+=("$fixtures/sessions/$s"); done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '%-34s %-28s %8s %10s %10s %11s %9s\n' session binary frames media_s "frames/s" "x realtime" "time/1st"
for s in "${sessions[@]}"; do
  for b in "${!bins[@]}"; do : > "$tmp/runs.$b"; done
  for i in 1 2 3; do
    for b in "${!bins[@]}"; do
      rm -f "$tmp"/t.db*
      "${bins[$b]}" replay "$s" --db "$tmp/t.db" --json ${REPLAY_CONFIG:+--config "$REPLAY_CONFIG"} \
        | tr -d '\n' >> "$tmp/runs.$b"
      echo >> "$tmp/runs.$b"
    done
  done
  python3 - "$s" "$tmp" "${bins[@]}" <<'PY'
import json, statistics, sys
name, tmp, bins = sys.argv[1], sys.argv[2], sys.argv[3:]
first = None
for b, path in enumerate(bins):
    runs = [json.loads(l) for l in open(f"{tmp}/runs.{b}") if l.strip()]
    el = statistics.median(r["elapsed_secs"] for r in runs)
    first = first or el
    r = runs[0]
    label = path if len(path) <= 28 else "..." + path[-25:]
    print(f"{name:<34} {label:<28} {r['frames']:>8} {r['duration_secs']:>10.1f} "
          f"{r['frames']/el:>10.0f} {r['duration_secs']/el:>11.1f} {el/first:>9.3f}")
PY
done
