#!/usr/bin/env bash
# Replay throughput at --speed max: frames per second and multiple of real time, for the
# demo session and (when present) the shared real sessions. Each session is replayed 3 times
# into a fresh database; the median is reported. Build first: cargo build --release.
# REPLAY_CONFIG=FILE passes --config FILE (e.g. a config with appearance_encoder = "").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./target/release/empathic
fixtures=${EMPATHIC_FIXTURES:-../shared/fixtures}
sessions=(demo/session)
for s in grid still selfie; do [[ -d $fixtures/sessions/$s ]] && sessions+=("$fixtures/sessions/$s"); done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf '%-34s %8s %10s %12s %12s\n' session frames media_s "frames/s" "x realtime"
for s in "${sessions[@]}"; do
  runs=()
  for i in 1 2 3; do
    rm -f "$tmp"/t.db*
    json=$("$bin" replay "$s" --db "$tmp/t.db" --json ${REPLAY_CONFIG:+--config "$REPLAY_CONFIG"})
    runs+=("$json")
  done
  python3 - "$s" "${runs[@]}" <<'PY'
import json, statistics, sys
name, runs = sys.argv[1], [json.loads(r) for r in sys.argv[2:]]
el = statistics.median(r["elapsed_secs"] for r in runs)
r = runs[0]
print(f"{name:<34} {r['frames']:>8} {r['duration_secs']:>10.1f} {r['frames']/el:>12.0f} {r['duration_secs']/el:>12.1f}")
PY
done
