#!/usr/bin/env bash
# The live service's latency, CPU and memory at 15 fps with every stage on (README,
# "Performance"): `empathic run` with the file camera playing the demo video in real time,
# a user-space PulseAudio null sink as the microphone fed the demo speech, one scripted
# session of DURATION seconds (default 60). Prints capture-to-store-writer latency
# (p50/p95/max over decoded frames, from the service's own measurement), the service's CPU
# in cores (utime+stime over the session / wall time) and its peak RSS (VmHWM).
# WAIT sets live.transcript_wait_ms (default 0: the pipeline's own latency; the station
# default, 10000, holds frames that long for transcripts by design).
# ROBOT=1: instead of a silent scripted session, the reference dialogue app
# (target/release/empathic-dialogue) drives a whole session subscribed to every topic, and
# the latency of the `voice` and `prediction` messages it received is printed by share
# (docs/station.md, "Latency of the stream"): rule (the voice rule's own wait), to runtime
# (device, sound server and capture thread: the rig's share), runtime (from the block handed
# on to the message queued for the subscriber). PLAY_LATENCY_MS (default 20) is paplay's
# buffer: the null sink delivers the played audio in blocks about that long.
# EXTRA_TOML: more of the station's config (e.g. "[asr]\nenabled = false", with $'...').
# Development and benchmarking only: needs pulseaudio and paplay (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-60}
WAIT=${WAIT:-0}
bin=target/release/empathic
[[ -x $bin ]] || { echo "build first: make build" >&2; exit 1; }
tmp=$(mktemp -d)
cleanup() {
  [[ -n ${svc:-} ]] && kill "$svc" 2>/dev/null || true
  [[ -n ${play:-} ]] && kill "$play" 2>/dev/null || true
  [[ -n ${pulse:-} ]] && kill "$pulse" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
export XDG_RUNTIME_DIR=$tmp/pulse HOME=$tmp
mkdir -p "$XDG_RUNTIME_DIR"
pulseaudio -n --daemonize=no --exit-idle-time=-1 --disallow-exit -L module-native-protocol-unix \
  -L "module-null-sink sink_name=mic rate=16000 channels=1" >/dev/null 2>&1 &
pulse=$!
for _ in $(seq 100); do pactl info >/dev/null 2>&1 && break; sleep 0.1; done
pactl set-default-source mic.monitor
cat > "$tmp/station.toml" <<TOML
[station]
id = "bench"
[video]
device = "$PWD/demo/session/video.avi"
[store]
db_path = "$tmp/station.db"
[live]
socket = "$tmp/control.sock"
transcript_wait_ms = $WAIT
realtime_priority = 0
[recording]
dir = "$tmp/recordings"
min_free_mib = 16
${EXTRA_TOML:-}
TOML
$bin participant consent P-BENCH --given --config "$tmp/station.toml" >/dev/null
[[ -n ${ROBOT:-} ]] && $bin stories import demo/stories/stories.jsonl --db "$tmp/station.db" >/dev/null
EMPATHIC_LOG=${EMPATHIC_LOG:-info,ort=warn} $bin run --config "$tmp/station.toml" 2>"$tmp/service.log" &
svc=$!
for _ in $(seq 300); do [[ -S $tmp/control.sock ]] && break; sleep 0.1; done
ticks() { awk '{print $14 + $15}' "/proc/$svc/stat"; }
hz=$(getconf CLK_TCK)
play_loop() { while true; do paplay --latency-msec="${PLAY_LATENCY_MS:-20}" -d mic demo/session/audio.wav; done; }
if [[ -n ${ROBOT:-} ]]; then
  play_loop &
  play=$!
  t0=$(date +%s.%N); c0=$(ticks)
  target/release/empathic-dialogue --socket "$tmp/control.sock" --participant P-BENCH \
    --ratings 3,4,2 --answer-s 6 --end-of-turn-ms 600 --max-turn-s 15 --read-s 8 \
    --prediction-wait-s 20 --summary "$tmp/dialogue.json" >/dev/null
  t1=$(date +%s.%N); c1=$(ticks)
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$svc/status")
else
  $bin ctl start P-BENCH --config "$tmp/station.toml" >/dev/null
  play_loop &
  play=$!
  $bin ctl phase warm_up --config "$tmp/station.toml" >/dev/null
  t0=$(date +%s.%N); c0=$(ticks)
  sleep "$DURATION"
  t1=$(date +%s.%N); c1=$(ticks)
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$svc/status")
  $bin ctl stop --config "$tmp/station.toml" >/dev/null
fi
for _ in $(seq 600); do grep -q "capture to store writer latency" "$tmp/service.log" && break; sleep 0.1; done
echo "cpu flags: $(grep -o -w -E 'avx2|avx512f|avx512_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ')"
if [[ -n ${ROBOT:-} ]]; then
  echo "cores: $(nproc); the reference dialogue app's session, paplay buffer ${PLAY_LATENCY_MS:-20} ms, transcript wait ${WAIT} ms"
  python3 - "$tmp/dialogue.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
lat = s["latency_ms"]
print(f"session {s['session_id']}: {s['ended'].get('status')}, messages {s['messages']}, dropped {s['dropped']}")
print("| stream latency (ms) | n | p50 | p95 | max |")
print("|---|---|---|---|---|")
v = lat["voice"]
for share in ["total", "rule", "to_runtime", "runtime"]:
    x = v[share] or {}
    print(f"| voice {share} | {v['n']} | {x.get('p50')} | {x.get('p95')} | {x.get('max')} |")
p = lat["prediction"]
x = p["total"] or {}
print(f"| prediction total | {p['n']} | {x.get('p50')} | {x.get('p95')} | {x.get('max')} |")
PY
else
  echo "cores: $(nproc); session: ${DURATION} s at 15 fps, every stage on, transcript wait ${WAIT} ms"
fi
grep "capture to store writer latency" "$tmp/service.log" | sed 's/.*INFO //'
[[ -n ${KEEP_LOG:-} ]] && cp "$tmp/service.log" "$KEEP_LOG"
awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$hz" -v n="$(nproc)" \
  'BEGIN { cores = (c1 - c0) / hz / (t1 - t0); printf "service CPU: %.2f cores (%.0f %% of %d)\n", cores, 100 * cores / n, n }'
echo "service peak RSS: $((hwm / 1024)) MiB"
grep -E "video_queue_drops|frames_dropped" "$tmp/service.log" | tail -1 || true
