#!/usr/bin/env bash
# What `adgauge check` alone reaches of the engine: region, function and line coverage of the
# engine's crates (ops, ad, cpu, kernels, backends) and the workloads under `check` on each device, with no unit test running, per
# file, and the functions it never enters.
#
#   scripts/coverage.sh            # every CPU device and OpenCL (PoCL here)
#   COVERAGE_DEVICES="cpu" scripts/coverage.sh
#   COVERAGE_REPORT_ONLY=1 scripts/coverage.sh   # the report of the profiles already there
#   COVERAGE_FLOOR=85 scripts/coverage.sh         # exit 1 when the rules, the engines or the
#                                                 # CPU device reach fewer regions (percent)
#   COVERAGE_CHECK_ARGS=--thorough scripts/coverage.sh
#
# Needs llvm-profdata and llvm-cov of the compiler's own LLVM major version, so that the
# profiles' format matches: the toolchain's llvm-tools (`rustup component add llvm-tools`), or
# Debian's llvm-N package for N = `rustc -vV`'s LLVM major (llvm-profdata-N, llvm-cov-N). Builds an
# instrumented release binary (`-C instrument-coverage`) under $COVERAGE_OUT/build (default
# target/coverage), runs `check --backend DEVICE` for each device with its profile in
# $COVERAGE_OUT/profiles, and writes $COVERAGE_OUT/report.txt (llvm-cov's table),
# $COVERAGE_OUT/summary.md (per file, and the functions never entered) and prints the summary.
# A check that fails is reported, and its profile kept: coverage is about what ran.
set -euo pipefail
cd "$(dirname "$0")/.."
sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
llvm_cov="$sysroot/lib/rustlib/$host/bin/llvm-cov"
if [ ! -x "$profdata" ] || [ ! -x "$llvm_cov" ]; then
  profdata=$(command -v "llvm-profdata-$llvm_major" || true)
  llvm_cov=$(command -v "llvm-cov-$llvm_major" || true)
fi
if [ -z "$profdata" ] || [ -z "$llvm_cov" ]; then
  echo "coverage.sh: no llvm-profdata and llvm-cov of LLVM $llvm_major: rustup component add llvm-tools, or apt-get install llvm-$llvm_major" >&2
  exit 2
fi
out="${COVERAGE_OUT:-target/coverage}"
devices="${COVERAGE_DEVICES:-cpu cpu-staged cpu-traced cpu-jit opencl}"
binary="$out/build/release/adgauge"
if [ -z "${COVERAGE_REPORT_ONLY:-}" ]; then
  # The instrumented build scripts and proc macros write profiles as they run (in rustc's
  # working directory unless told where): those go beside the build, not into the checkout.
  # Only adgauge's own crates are instrumented (a rustc wrapper adds the flag to them): with
  # every dependency instrumented too, the check spent most of its time in rand_chacha's
  # counters (the cases' seeded inputs), not in the code being measured.
  mkdir -p "$out"
  wrapper="$(realpath -m "$out")/rustc-instrument-adgauge"
  cat > "$wrapper" <<'SH'
#!/bin/sh
# rustc "$@", with coverage counters when the crate being built is one of adgauge's.
rustc="$1"; shift
prev=""
for arg in "$@"; do
  if [ "$prev" = "--crate-name" ]; then
    case "$arg" in adgauge*) exec "$rustc" "$@" -C instrument-coverage ;; esac
  fi
  prev="$arg"
done
exec "$rustc" "$@"
SH
  chmod +x "$wrapper"
  RUSTC_WRAPPER="$wrapper" CARGO_TARGET_DIR="$out/build" \
    LLVM_PROFILE_FILE="$(realpath -m "$out")/build/build-%p-%m.profraw" cargo build --release --quiet --bin adgauge
  rm -rf "$out/profiles" "$out/checks.txt"
  mkdir -p "$out/profiles"
else
  devices=""
fi
# Counters are plain increments: threads that share them contend for their cache lines (a
# two-thread check of hist-add took 42 s instrumented, 19 s on one thread). So each check runs
# on one worker thread, which takes the same paths (the kernels choose by size, not by thread
# count; rayon's joins run on one thread too), and COVERAGE_JOBS checks (default 2) run at once.
run_check() {
  device="$1"
  start=$(date +%s)
  status=0
  LLVM_PROFILE_FILE="$out/profiles/$device-%p-%m.profraw" "$binary" check --backend "$device" --threads 1 \
    ${COVERAGE_CHECK_ARGS:-} > "$out/check-$device.txt" 2>&1 || status=$?
  echo "check --backend $device --threads 1 ${COVERAGE_CHECK_ARGS:-}: exit $status in $(( $(date +%s) - start )) s" \
    | tee -a "$out/checks.txt" >&2
}
jobs_max="${COVERAGE_JOBS:-2}"
for device in $devices; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_check "$device" &
done
wait
"$profdata" merge -sparse "$out"/profiles/*.profraw -o "$out/check.profdata"
# The engine and the workloads only: the harness, reports, datasets and dependencies are not
# what `check` validates.
ignore='(/\.cargo/|/rustc/|/harness/|/reports/|/datasets/|/testkit/|/tests/)'
"$llvm_cov" report "$binary" -instr-profile="$out/check.profdata" -ignore-filename-regex="$ignore" \
  > "$out/report.txt"
"$llvm_cov" export "$binary" -instr-profile="$out/check.profdata" -ignore-filename-regex="$ignore" \
  -format=text > "$out/export.json"
# The devices whose profiles are there (a report-only run names what an earlier run measured).
reported=$(ls "$out/profiles" | sed -E 's/-[0-9]+-[0-9_]+\.profraw$//' | sort -u | tr '\n' ' ' | sed 's/ $//')
python3 - "$out" "$reported" <<'PY'
import json, os, sys
out, devices = sys.argv[1], sys.argv[2]
data = json.load(open(os.path.join(out, "export.json")))["data"][0]
root = os.getcwd() + "/"
def pct(c):
    return 100.0 * c["covered"] / c["count"] if c["count"] else 100.0
lines = [f"Coverage of `adgauge check` on {devices} (regions, functions, lines; per file):", "",
         "| file | regions | functions | lines |", "|---|---|---|---|"]
for f in sorted(data["files"], key=lambda f: f["filename"]):
    s = f["summary"]
    name = f["filename"].replace(root, "")
    lines.append(f"| {name} | {pct(s['regions']):.1f}% of {s['regions']['count']} | "
                 f"{pct(s['functions']):.1f}% of {s['functions']['count']} | {pct(s['lines']):.1f}% of {s['lines']['count']} |")
t = data["totals"]
# The areas the issue's target names: the rules, the engines and each device's own code.
areas = [("rules (`ad/src/rules`)", lambda n: n.startswith("ad/src/rules/")),
         ("AD engines (`ad/src/forward.rs`, `reverse.rs`)", lambda n: n in ("ad/src/forward.rs", "ad/src/reverse.rs")),
         ("CPU device (`cpu/src`, without `staged.rs`, `roofline.rs`)",
          lambda n: n.startswith("cpu/src/") and n not in ("cpu/src/staged.rs", "cpu/src/roofline.rs")),
         ("staged device (`cpu/src/staged.rs`)", lambda n: n == "cpu/src/staged.rs"),
         ("traced devices (`backends/src/traced.rs`)", lambda n: n == "backends/src/traced.rs"),
         ("GPU devices' host code (`kernels/src`, without `bandwidth.rs`)",
          lambda n: n.startswith("kernels/src/") and not n.endswith("bandwidth.rs")),
         ("ops (`ops/src`: oracle, shapes, general operators)", lambda n: n.startswith("ops/src/")),
         ("workloads (`workloads/src`)", lambda n: n.startswith("workloads/src/"))]
# Also by source region, the instances of a generic function merged (a region is reached when
# any instance reached it), and without the error exits no check reached: a `?` is a region of
# its own, the branch taken when the op before it fails, which only `faults` runs.
merged = {}
sources = {}
for fn in data["functions"]:
    for r in fn["regions"]:
        if r[7] != 0:
            continue
        name = fn["filenames"][r[5]].replace(root, "")
        key = (name, r[0], r[1], r[2], r[3])
        merged[key] = merged.get(key, 0) + r[4]
def share(a, b):
    return f"{100.0 * a / b if b else 100.0:.1f}%"
def is_exit(name, ls, cs, le, ce):
    if ls != le:
        return False
    if name not in sources:
        try:
            sources[name] = open(os.path.join(root, name)).read().split("\n")
        except OSError:
            sources[name] = []
    src = sources[name]
    return ls <= len(src) and src[ls - 1][cs - 1:ce - 1] == "?"
area_lines = ["| area | regions reached | source regions reached | without unreached error exits |", "|---|---|---|---|"]
# Each area's llvm-cov share of regions, which the floor below reads again.
area_share = []
for label, member in areas:
    c = n = 0
    for f in data["files"]:
        if member(f["filename"].replace(root, "")):
            c += f["summary"]["regions"]["covered"]
            n += f["summary"]["regions"]["count"]
    area_share.append((label, 100.0 * c / n if n else 100.0))
    keys = [k for k in merged if member(k[0])]
    reached = sum(1 for k in keys if merged[k] > 0)
    exits = sum(1 for k in keys if merged[k] == 0 and is_exit(*k))
    area_lines.append(f"| {label} | {share(c, n)} of {n} | {share(reached, len(keys))} of {len(keys)} | "
                      f"{share(reached, len(keys) - exits)} ({exits} exits left out) |")
lines[2:2] = area_lines + [""]
lines.append(f"| **all** | {pct(t['regions']):.1f}% of {t['regions']['count']} | "
             f"{pct(t['functions']):.1f}% of {t['functions']['count']} | {pct(t['lines']):.1f}% of {t['lines']['count']} |")
# Functions never entered: a function is its source position (file, first line), so that the
# instances of a generic function count as one, entered when any instance was.
import subprocess
def demangle(names):
    try:
        got = subprocess.run(["rustfilt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        return got if len(got) >= len(names) else names
    except OSError:
        return names
by_position = {}
for fn in data["functions"]:
    if not fn["filenames"] or not fn["regions"]:
        continue
    key = (fn["filenames"][0].replace(root, ""), fn["regions"][0][0])
    if not key[0].startswith(("ops/", "ad/", "cpu/", "kernels/", "backends/", "workloads/")):
        continue
    entered, name = by_position.get(key, (False, fn["name"]))
    by_position[key] = (entered or fn["count"] > 0, name)
never = {}
for (name, line), (entered, fn_name) in by_position.items():
    if not entered:
        never.setdefault(name, []).append((line, fn_name))
lines += ["", "Functions never entered (per file, by source line; generic instances counted once):", ""]
for name in sorted(never):
    missing = sorted(never[name])
    lines.append(f"- {name}: {len(missing)}")
    lines += [f"  - line {line}" for line, _ in missing[:60]]
    if len(missing) > 60:
        lines.append(f"  - ... {len(missing) - 60} more")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
# The floor the nightly keeps: the rules, the engines and the CPU device, regions.
floor = os.environ.get("COVERAGE_FLOOR")
below = [f"{label}: {got:.1f}% < {floor}%" for label, got in area_share[:3] if floor and got < float(floor)]
print("\n".join(lines[: len(data['files']) + len(area_lines) + 6]))
if below:
    print("coverage below the floor: " + "; ".join(below), file=sys.stderr)
    sys.exit(1)
PY
