#!/usr/bin/env bash
# Builds the Debian packages of empathic from binaries already built (`make deb` builds them
# first; docs/station.md, "Packages"):
#   empathic_<v>_amd64.deb            the station: binary, ONNX Runtime, unit, config, user
#   empathic-models_<m>_all.deb       the models (architecture-independent, versioned apart)
#   empathic-collector_<v>_amd64.deb  the collector build (no OpenCV, ALSA or ONNX Runtime)
#   empathic-dbgsym, empathic-collector-dbgsym   the debug symbols, by build id
# dpkg-deb, dpkg-shlibdeps and objcopy only: what Debian's own tools do, with nothing to
# build first. Dependencies are worked out from what the binaries link (dpkg-shlibdeps).
#
# Settings (environment):
#   STATION_BIN    the station binary (default target/release/empathic)
#   COLLECTOR_BIN  the collector binary (default target/collector/release/empathic)
#   OUT            where the .deb files go (default target/deb)
#   VERSION        the version of the station and collector packages (default: Cargo's
#                  version + the commit's date and hash, so every build sorts after the last)
#   PACKAGES       which to build, of: station models collector (default all three)
#   COMPRESS       dpkg-deb compression: xz (default), gzip (quicker; the tests) or none
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

STATION_BIN=${STATION_BIN:-target/release/empathic}
COLLECTOR_BIN=${COLLECTOR_BIN:-target/collector/release/empathic}
OUT=${OUT:-target/deb}
PACKAGES=${PACKAGES:-station models collector}
COMPRESS=${COMPRESS:-xz}
MAINTAINER="empathic maintainers <maintainers@empathic.invalid>"
HOMEPAGE="https://github.com/empathic-robot/empathic"

die() { echo "build-debs: $*" >&2; exit 2; }
for tool in dpkg-deb dpkg-shlibdeps objcopy readelf gzip; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian packages dpkg-dev and binutils; scripts/setup.sh installs them)"
done

cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$cargo_version" ] || die "no version in Cargo.toml"
commit_version() {
  # Date and hash of the last commit touching $@ (everything when empty), and ".dirty"
  # when the working tree differs from it there: a package names the source it came from.
  local when hash dirty=""
  when=$(git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S -- "$@" 2>/dev/null || true)
  hash=$(git log -1 --format=%h -- "$@" 2>/dev/null || true)
  [ -n "$when" ] || { echo "0"; return; }
  if [ -n "$(git status --porcelain --untracked-files=no -- "$@" 2>/dev/null)" ]; then dirty=".dirty"; fi
  echo "${when}.${hash}${dirty}"
}
VERSION=${VERSION:-${cargo_version}+git$(commit_version)}
# The models change far less often than the code: their package keeps its version (and
# stations download nothing) until models/ changes. Every file is pinned by sha256 in
# models/MODELS.toml, which `empathic models verify` checks on the station.
MODELS_VERSION=${MODELS_VERSION:-${cargo_version}+models$(commit_version models)}
case "$VERSION" in *[!A-Za-z0-9.+~-]*|"") die "VERSION '$VERSION' is not a Debian version";; esac
date_r=$(date -R -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")

mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/empathic-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- helpers -------------------------------------------------------------------------
doc_files() { # package-name staging-dir: copyright, changelog, README and the docs
  local pkg=$1 dir=$2 d="$2/usr/share/doc/$1"
  install -d -m 0755 "$d"
  install -m 0644 packaging/copyright "$d/copyright"
  printf '%s (%s) stable; urgency=medium\n\n  * Built from the empathic source tree (%s).\n\n -- %s  %s\n' \
    "$pkg" "$3" "$(git log -1 --format='commit %h' 2>/dev/null || echo 'no git')" "$MAINTAINER" "$date_r" \
    | gzip -9n > "$d/changelog.gz"
}

service_files() { # package staging-dir scripts-folder conffile: what both services ship alike
  local pkg=$1 d=$2 scripts=packaging/$3
  doc_files "$pkg" "$d" "$VERSION"
  install -m 0644 README.md "$d/usr/share/doc/$pkg/"
  install -d -m 0755 "$d/usr/share/doc/$pkg/docs" "$d/DEBIAN"
  install -m 0644 docs/*.md "$d/usr/share/doc/$pkg/docs/"
  install -m 0755 "$scripts/postinst" "$scripts/prerm" "$scripts/postrm" "$d/DEBIAN/"
  echo "$4" > "$d/DEBIAN/conffiles"
}

strip_and_split() { # binary staged-path package-name debug-staging: strips, keeps symbols apart
  local bin=$1 staged=$2 dbgdir=$3 id
  id=$(readelf -n "$bin" | sed -n 's/^ *Build ID: *\([0-9a-f]*\)$/\1/p' | head -n1)
  [ -n "$id" ] || die "$bin has no build id (the linker's --build-id); cannot file its debug symbols"
  local debug="$dbgdir/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug"
  install -d -m 0755 "$(dirname "$debug")"
  objcopy --only-keep-debug --compress-debug-sections "$bin" "$debug"
  chmod 0644 "$debug"
  install -D -m 0755 "$bin" "$staged"
  # --strip-all keeps the build-id note: gdb and debuginfod find the symbols by it (the
  # debug link below is for tools that look beside the binary instead).
  objcopy --strip-all --remove-section=.comment "$staged"
  objcopy --add-gnu-debuglink="$debug" "$staged"
  echo "$id"
}

shlib_depends() { # files...: the Depends of what they link, as dpkg-shlibdeps works it out
  local tmp="$work/shlibs"
  rm -rf "$tmp"; mkdir -p "$tmp/debian"
  printf 'Source: empathic\n\nPackage: empathic\nArchitecture: any\n' > "$tmp/debian/control"
  local files=()
  for f in "$@"; do files+=("$(realpath "$f")"); done
  (cd "$tmp" && dpkg-shlibdeps -O -e"${files[@]}" 2>"$tmp/warnings") \
    | sed -n 's/^shlibs:Depends=//p'
  # ONNX Runtime's wheel links librt, libpthread and libdl without using them: noise.
  grep -v "useless dependency\|binaries to analyze should already be installed" "$tmp/warnings" >&2 || true
}

installed_size() { du -k -s --apparent-size "$1" | cut -f1; }

build() { # staging-dir [compression]: writes the .deb, prints its name
  local dir=$1 compress=${2:-$COMPRESS} name
  name=$(sed -n 's/^Package: //p' "$dir/DEBIAN/control")_$(sed -n 's/^Version: //p' "$dir/DEBIAN/control")_$(sed -n 's/^Architecture: //p' "$dir/DEBIAN/control").deb
  # Files and folders as Debian wants them: root-owned (--root-owner-group), no group or
  # other write bit.
  find "$dir" -path "$dir/DEBIAN" -prune -o -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group -Z"$compress" --build "$dir" "$OUT/$name" >/dev/null
  echo "$OUT/$name"
}

control() { # dir package arch depends description... (extra fields from stdin)
  local dir=$1 pkg=$2 arch=$3 version=$4; shift 4
  install -d -m 0755 "$dir/DEBIAN"
  {
    echo "Package: $pkg"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: $MAINTAINER"
    echo "Installed-Size: $(installed_size "$dir")"
    cat
    echo "Homepage: $HOMEPAGE"
  } > "$dir/DEBIAN/control"
}

dbgsym() { # package version build-id staging-dir
  local pkg=$1 version=$2 id=$3 dir=$4
  install -d -m 0755 "$dir/usr/share/doc"
  ln -s "$pkg" "$dir/usr/share/doc/$pkg-dbgsym"
  control "$dir" "$pkg-dbgsym" amd64 "$version" <<EOT
Section: debug
Priority: optional
Depends: $pkg (= $version)
Auto-Built-Package: debug-symbols
Build-Ids: $id
Description: debug symbols for $pkg
 The DWARF of the stripped /usr/bin/empathic of $pkg, filed by
 build id under /usr/lib/debug/.build-id/ where gdb and debuginfod
 look.
EOT
  build "$dir"
}

# --- the station ---------------------------------------------------------------------
station() {
  [ -x "$STATION_BIN" ] || die "no station binary at $STATION_BIN (make build)"
  local ort=third_party/onnxruntime/libonnxruntime.so.1
  [ -f "$ort" ] || die "no ONNX Runtime at $ort (scripts/setup.sh)"
  local d="$work/station" g="$work/station-dbgsym" id
  id=$(strip_and_split "$STATION_BIN" "$d/usr/bin/empathic" "$g")
  install -D -m 0644 "$(realpath "$ort")" "$d/usr/lib/empathic/libonnxruntime.so.1"
  install -D -m 0644 systemd/empathic.service "$d/lib/systemd/system/empathic.service"
  install -D -m 0644 packaging/empathic.sysusers "$d/usr/lib/sysusers.d/empathic.conf"
  install -D -m 0644 packaging/empathic.lintian-overrides "$d/usr/share/lintian/overrides/empathic"
  install -D -m 0644 firmware-config/station.toml "$d/etc/empathic/station.toml"
  service_files empathic "$d" station /etc/empathic/station.toml
  install -m 0644 systemd/70-empathic-devices.rules.example "$d/usr/share/doc/empathic/"
  local libs
  libs=$(shlib_depends "$d/usr/bin/empathic" "$d/usr/lib/empathic/libonnxruntime.so.1")
  [ -n "$libs" ] || die "dpkg-shlibdeps found no dependency of the station binary"
  control "$d" empathic amd64 "$VERSION" <<EOT
Section: science
Priority: optional
Depends: $libs, adduser, init-system-helpers (>= 1.52), empathic-models (= $MODELS_VERSION)
Recommends: mosquitto-clients
Conflicts: empathic-collector
Description: empathy sensing on an in-home social robot station
 Captures the station's webcam and microphone on one timeline, extracts facial,
 acoustic, appearance and text features per frame, assembles 8-second windows,
 predicts the participant's empathy toward each story in play, stores every
 session in a local SQLite file and syncs it to the study over MQTT, exactly
 once. Runs as the systemd service empathic.service under its own user.
EOT
  build "$d"
  dbgsym empathic "$VERSION" "$id" "$g"
}

# --- the models ----------------------------------------------------------------------
models() {
  [ -f models/MODELS.toml ] || die "no models/MODELS.toml"
  local missing
  # Every model the manifest says is shipped (`shipped = true`) must be here; the others
  # (a development model made on demand) go only when present.
  missing=$(awk -F' = ' '/^\[\[model\]\]/{f=""} $1=="file"{gsub(/"/,"",$2); f=$2} $1=="shipped" && $2=="true"{print f}' models/MODELS.toml \
    | while read -r f; do [ -e "models/$f" ] || echo "$f"; done | head -n3)
  [ -z "$missing" ] || die "models named in models/MODELS.toml are missing (scripts/setup.sh fetches them): $missing"
  local d="$work/models"
  install -d -m 0755 "$d/usr/share/empathic"
  cp -r --no-preserve=ownership models "$d/usr/share/empathic/models"
  find "$d/usr/share/empathic/models" -type f -exec chmod 0644 {} +
  doc_files empathic-models "$d" "$MODELS_VERSION"
  control "$d" empathic-models all "$MODELS_VERSION" <<EOT
Section: science
Priority: optional
Description: models of the empathic station (ONNX, with their manifest)
 The face, appearance, sentence and speech models the empathic station runs,
 each pinned by sha256 with its source, version and licence in MODELS.toml
 (empathic models verify checks them). Architecture-independent, and
 versioned apart from the station so that a code update downloads no models.
EOT
  # ONNX weights are near-incompressible (xz: 191 MB to 162 MB in 70 s); gzip is as good
  # for them in a tenth of the time.
  build "$d" "$([ "$COMPRESS" = none ] && echo none || echo gzip)"
}

# --- the collector -------------------------------------------------------------------
collector() {
  [ -x "$COLLECTOR_BIN" ] || die "no collector binary at $COLLECTOR_BIN (make collector)"
  local d="$work/collector" g="$work/collector-dbgsym" id
  id=$(strip_and_split "$COLLECTOR_BIN" "$d/usr/bin/empathic" "$g")
  install -D -m 0644 systemd/empathic-collect.service "$d/lib/systemd/system/empathic-collect.service"
  install -D -m 0644 packaging/empathic-collect.sysusers "$d/usr/lib/sysusers.d/empathic-collect.conf"
  install -D -m 0644 firmware-config/collect.toml "$d/etc/empathic/collect.toml"
  service_files empathic-collector "$d" collector /etc/empathic/collect.toml
  local libs
  libs=$(shlib_depends "$d/usr/bin/empathic")
  [ -n "$libs" ] || die "dpkg-shlibdeps found no dependency of the collector binary"
  control "$d" empathic-collector amd64 "$VERSION" <<EOT
Section: science
Priority: optional
Depends: $libs, adduser, init-system-helpers (>= 1.52)
Suggests: mosquitto, postgresql
Conflicts: empathic
Description: collector of the empathic study: every station's sessions, centrally
 Receives every station's sessions, consent changes and health over MQTT into
 the study's central database (SQLite or PostgreSQL), exactly once, and keeps
 the study page current. The empathic collector build: no capture, features
 or models, so it links neither OpenCV, ALSA nor ONNX Runtime. Runs as the
 systemd service empathic-collect.service under its own user.
EOT
  build "$d"
  dbgsym empathic-collector "$VERSION" "$id" "$g"
}

for p in $PACKAGES; do
  case "$p" in
    station) station ;;
    models) models ;;
    collector) collector ;;
    *) die "unknown package '$p' (station, models, collector)" ;;
  esac
done
