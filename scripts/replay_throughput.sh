#!/usr/bin/env bash
# Replay throughput at --speed max, per session: frames per second, multiple of real time
# (also after the set-up, the replay's own `setup_secs`: opening the store and the models),
# CPU cores used (user + system CPU time over wall time), peak resident memory, and a table
# of CPU per thread (sampled from /proc every 50 ms: CPU ms a frame and share of the run
# each named thread was busy). The demo session and (when present) the shared real
# sessions; each replayed 3 times into a fresh database; medians reported. Build first:
# cargo build --release.
# REPLAY_CONFIG=FILE passes --config FILE (e.g. a config with appearance_encoder = "");
# REPLAY_CONFIGS="A B" compares config variants in one sitting ("-" is the default config).
# EMPATHIC_BINS="A B" compares binaries in one sitting. Every variant (binary x config) runs
# interleaved (A, B, A, B, ...) so the machine's load falls on all alike, and each row after
# the first variant's gives its median time as a ratio to the first's.
set -euo pipefail
cd "$(dirname "$0")/.."
fixtures=${EMPATHIC_FIXTURES:-../shared/fixtures}
sessions=(demo/session)
for s in grid still selfie; do [[ -d $fixtures/sessions/$s ]] && sessions+=("$fixtures/sessions/$s"); done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
  "flags: $(grep -m1 -o -w -E 'avx512_vnni|avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
python3 - "${EMPATHIC_BINS:-./target/release/empathic}" "${REPLAY_CONFIGS:-${REPLAY_CONFIG:--}}" "${sessions[@]}" <<'PY'
import json, os, resource, statistics, subprocess, sys, tempfile, time

bins, configs, sessions = sys.argv[1].split(), sys.argv[2].split(), sys.argv[3:]
variants = [(b, "" if c == "-" else c) for b in bins for c in configs]
tick = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid, seen):
    """Adds every live thread's CPU seconds (by tid) into seen[tid] = (name, secs)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        seen[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)


def run(variant, session):
    binary, config = variant
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [binary, "replay", session, "--db", f"{tmp}/t.db", "--json"]
        if config:
            cmd += ["--config", config]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        seen, hwm_kib = {}, 0
        while p.poll() is None:
            thread_cpu(p.pid, seen)
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm_kib = max(hwm_kib, int(line.split()[1]))
            except (FileNotFoundError, ProcessLookupError):
                pass
            time.sleep(0.05)
        out = p.stdout.read()
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed with exit {p.returncode}")
        r = json.loads(out)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        threads = {}
        for name, secs in seen.values():
            threads[name] = threads.get(name, 0.0) + secs
        # Peak RSS: the process's high-water mark (VmHWM) at the last sample before it ended.
        return {"elapsed": r["elapsed_secs"], "setup": r.get("setup_secs"), "wall": wall,
                "frames": r["frames"],
                "media": r["duration_secs"], "cpu": cpu, "rss_mib": hwm_kib / 1024,
                "threads": threads}


print(f"{'session':<30} {'binary / config':<24} {'frames':>7} {'media s':>8} {'frames/s':>9} "
      f"{'x real':>7} {'set-up s':>9} {'x real after set-up':>20} {'cores':>6} {'peak RSS MiB':>13} "
      f"{'time/1st':>9}")
tables = []
for s in sessions:
    runs = {v: [] for v in variants}
    for _ in range(3):
        for v in variants:
            runs[v].append(run(v, s))
    first = None
    for v in variants:
        rs = sorted(runs[v], key=lambda r: r["elapsed"])
        med = rs[1]
        first = first or med["elapsed"]
        # Name what varies: the binary, the config (the default config is "default"), or both.
        parts = ([v[0]] if len(bins) > 1 else []) + (
            [os.path.basename(v[1]) or "default"] if len(configs) > 1 or v[1] else [])
        b = " + ".join(parts) or v[0]
        label = b if len(b) <= 24 else "..." + b[-21:]
        # Set-up (store, session folder, models) is a fixed cost per session; the rate
        # after it is what an hour-long session sees. Older binaries do not report it.
        setup = med["setup"]
        after = "-" if setup is None else f"{med['media'] / (med['elapsed'] - setup):.1f}"
        print(f"{s[-30:]:<30} {label:<24} {med['frames']:>7} {med['media']:>8.1f} "
              f"{med['frames'] / med['elapsed']:>9.0f} {med['media'] / med['elapsed']:>7.1f} "
              f"{'-' if setup is None else f'{setup:.2f}':>9} {after:>20} "
              f"{med['cpu'] / med['wall']:>6.2f} {max(r['rss_mib'] for r in rs):>13.0f} "
              f"{med['elapsed'] / first:>9.3f}")
        tables.append((s, label, med))
print()
print("CPU per thread (median run): ms of CPU a frame, and busy share of the run")
for s, label, med in tables:
    print(f"  {s}  [{label}]")
    for name, secs in sorted(med["threads"].items(), key=lambda kv: -kv[1]):
        if secs * 1000 / max(med["frames"], 1) < 0.05:
            continue
        print(f"    {name:<22} {secs * 1000 / max(med['frames'], 1):>8.2f} ms/frame "
              f"{100 * secs / med['wall']:>6.1f} %")
PY
