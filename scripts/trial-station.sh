#!/usr/bin/env bash
# A trial station without devices (docs/station.md, "A trial station without devices"):
# the live service as it runs on a station, with a video file as its camera and a
# user-space PulseAudio null sink as its microphone, driven through one whole session by
# the reference dialogue app (`empathic-dialogue`), then listed and reported.
#
#   scripts/trial-station.sh [VIDEO.avi] [SPEECH.wav] [FOLDER]
#   TRIAL_KILL_AFTER=SECONDS scripts/trial-station.sh ...
#
# With TRIAL_KILL_AFTER the service is killed (SIGKILL, as a power cut would) that many
# seconds into the session, started again (its start recovers the killed session: stored
# `incomplete` with what was kept), stopped, and the session's repaired recording replayed
# with `--replace` (stored again with its windows, still `incomplete`, saying why).
#
# VIDEO (default: the demo session's) is the camera; SPEECH (16 kHz mono WAV; default: the
# demo's) is played into the microphone while the robot waits for answers; FOLDER (default:
# a new one under /tmp) keeps the config, the database, the recording, the logs and the
# report. Needs `make build` first (both binaries) and the Debian packages `pulseaudio`,
# `pulseaudio-utils` and `ffmpeg` (scripts/setup.sh installs them). Nothing leaves the machine.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
video="$(realpath "${1:-$repo/demo/session/video.avi}")"
speech="$(realpath "${2:-$repo/demo/session/audio.wav}")"
dir="${3:-$(mktemp -d /tmp/empathic-trial.XXXXXX)}"
mkdir -p "$dir"
dir="$(realpath "$dir")"
bin="$repo/target/release"
for b in empathic empathic-dialogue libonnxruntime.so.1; do
  [[ -e $bin/$b ]] || { echo "trial: $bin/$b is missing: run \`make build\` first" >&2; exit 2; }
done
for c in pulseaudio pactl paplay ffmpeg; do
  command -v "$c" >/dev/null || { echo "trial: \`$c\` is missing: run scripts/setup.sh (Debian packages pulseaudio, pulseaudio-utils, ffmpeg)" >&2; exit 2; }
done
[[ -f $video ]] || { echo "trial: no video at $video" >&2; exit 2; }
[[ -f $speech ]] || { echo "trial: no speech WAV at $speech" >&2; exit 2; }

pids=()
# Stopped last-started first: the speech, the service, the room tone, then the sound server.
cleanup() { for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# The microphone: a null sink whose monitor is the default source; cpal opens `default`
# through the pulse ALSA plugin. A null sink's monitor delivers samples only while
# something plays, so ten minutes of room tone play under everything.
export XDG_RUNTIME_DIR="$dir/pulse"
mkdir -p "$XDG_RUNTIME_DIR"
HOME="$dir" pulseaudio -n --daemonize=no --exit-idle-time=-1 --disallow-exit --log-target=stderr \
  -L module-native-protocol-unix -L "module-null-sink sink_name=mic rate=16000 channels=1" \
  2>"$dir/pulse.log" & pids+=($!)
for _ in $(seq 100); do pactl info >/dev/null 2>&1 && break; sleep 0.1; done
pactl set-default-source mic.monitor
ffmpeg -loglevel error -y -f lavfi -i anullsrc=r=16000:cl=mono -t 600 -c:a pcm_s16le "$dir/room-tone.wav"
paplay -d mic "$dir/room-tone.wav" & pids+=($!)

cat >"$dir/station.toml" <<TOML
[station]
id = "st-trial"

[video]
device = "$video"

[store]
db_path = "$dir/station.db"

[live]
socket = "$dir/control.sock"
transcript_wait_ms = 3000
realtime_priority = 0

[recording]
dir = "$dir/recordings"
TOML
export EMPATHIC_CONFIG="$dir/station.toml"
"$bin/empathic" stories import "$repo/demo/stories/stories.jsonl" >/dev/null
"$bin/empathic" participant consent P-TRIAL --given >/dev/null
EMPATHIC_LOG=info,ort=warn "$bin/empathic" run 2>"$dir/service.log" & pids+=($!); service=$!
for _ in $(seq 300); do [[ -S $dir/control.sock ]] && break; sleep 0.1; done
[[ -S $dir/control.sock ]] || { echo "trial: the service did not open its socket; see $dir/service.log" >&2; exit 1; }
"$bin/empathic" doctor --live | grep -E "camera|microphone|control|story" || true

echo "trial: one session (the robot's lines below; the speech plays as the participant, again and again with 2 s pauses)"
( while :; do paplay -d mic "$speech" 2>/dev/null || exit 0; sleep 2; done ) & pids+=($!)
dialogue=("$bin/empathic-dialogue" --socket "$dir/control.sock" --participant P-TRIAL --ratings 4,2,5
  --answer-s 8 --max-turn-s 12 --read-s 3 --face-s 20 --prediction-wait-s 10 --words-wait-s 15
  --summary "$dir/dialogue.json")
if [[ -z ${TRIAL_KILL_AFTER:-} ]]; then
  "${dialogue[@]}"
else
  "${dialogue[@]}" & app=$!
  sleep "$TRIAL_KILL_AFTER"
  echo "trial: SIGKILL to the service ($service), ${TRIAL_KILL_AFTER} s in"
  kill -9 "$service"
  wait "$app" || echo "trial: the app ended with $? (the station went away, as it should say above)"
  echo "trial: as stored now (a command that opens the database recovers a session whose process is gone):"
  "$bin/empathic" sessions list
  echo "trial: the service starts again; its start repairs the killed session's recording"
  # The killed service left its socket file: wait for the new service to answer, not for the file.
  rm -f "$dir/control.sock"
  EMPATHIC_LOG=info,ort=warn "$bin/empathic" run 2>>"$dir/service.log" & restarted=$!
  for _ in $(seq 300); do "$bin/empathic" status >/dev/null 2>&1 && break; sleep 0.1; done
  "$bin/empathic" status >/dev/null 2>&1 || { echo "trial: the restarted service did not answer; see $dir/service.log" >&2; exit 1; }
  kill "$restarted"; wait "$restarted" || true
  recording=$(ls -td "$dir"/recordings/*/ | head -n1)
  echo "trial: its recording ${recording} replayed with --replace (exit 1 = stored incomplete, as it should be)"
  rc=0
  "$bin/empathic" replay "$recording" --replace || rc=$?
  [[ $rc -eq 1 ]] || { echo "trial: replay exited $rc, expected 1 (stored incomplete)" >&2; exit 1; }
  "$bin/empathic" sessions list
fi
echo
"$bin/empathic" sessions list
id=$("$bin/empathic" sessions list --json | grep -oE '"id": *"[^"]+"' | tail -n1 | sed -E 's/.*"([^"]+)"$/\1/' || true)
if [[ -n $id ]]; then
  "$bin/empathic" report "$id" --out "$dir/report.html" >/dev/null && echo "trial: report at $dir/report.html"
fi
echo "trial: everything is in $dir (config, database, recording, service.log)"
