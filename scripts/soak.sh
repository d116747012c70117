#!/usr/bin/env bash
# A month, accelerated (docs/performance.md, "A month on one station"): the live service
# through SESSIONS sessions (default 63, each fault nine times) with the reference dialogue
# app and faults between and inside sessions, one session standing for a day. Writes the
# figures after each session to OUT.csv and plots them to OUT.svg.
#   scripts/soak.sh [SESSIONS] [OUT]      (default: 63 docs/soak/soak)
# About 45 s a session on two cores (63 sessions: about 50 minutes). Needs `make test`'s
# set-up (PulseAudio, Mosquitto, libfaketime); runs the test build (`--features failpoints`,
# as make test does, so nothing is rebuilt between the two).
set -euo pipefail
cd "$(dirname "$0")/.."
sessions=${1:-63}
out=${2:-docs/soak/soak}
mkdir -p "$(dirname "$out")"
./scripts/setup.sh
echo "soak: $sessions sessions; figures in $out.csv" >&2
EMPATHIC_SOAK_SESSIONS=$sessions EMPATHIC_SOAK_CSV="$PWD/$out.csv" \
  cargo test --release --locked --features failpoints --test live -- soak --nocapture --test-threads 1
python3 scripts/soak_plot.py "$out.csv" "$out.svg"
echo "soak: plot in $out.svg" >&2
