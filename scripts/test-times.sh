#!/usr/bin/env bash
# What a change costs a developer in build and test time (docs/ARCHITECTURE.md, the crates):
#
#   scripts/test-times.sh [REV] > times.md      # REV default HEAD; run on an idle machine
#
# On a fresh clone of REV in a temporary folder with a target folder of its own:
# 1. `cargo test` (README's command): wall and CPU seconds, and the test binaries cargo ran
#    (unit, integration and doc-test binaries: its "Running" and "Doc-tests" lines);
# 2. one CPU kernel file touched (the CPU device's histogram kernels), then `cargo test` of the
#    crate that holds it: wall and CPU seconds;
# 3. one report section touched (the HTML report's templates, or its writer before it had
#    templates), then `cargo test` of the reports crate: wall and CPU seconds.
# Steps 2 and 3 first build their package's tests once untimed (see below).
# Touching appends a comment line, so the compiler sees a changed file as an edit would make it.
# Prints one Markdown table; the logs stay in the temporary folder, whose path it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
rev="$(git rev-parse "${1:-HEAD}")"
work="$(mktemp -d)"
git clone --quiet --no-hardlinks . "$work/repo"
git -C "$work/repo" checkout --quiet "$rev"
export CARGO_TARGET_DIR="$work/target"
# The data the tests read from beside the checkout, where this checkout's tests find it.
shared="$(cd .. && pwd)/shared/datasets"
export ADGAUGE_ADBENCH_DIR="${ADGAUGE_ADBENCH_DIR:-$shared/adbench}" ADGAUGE_HT_DIR="${ADGAUGE_HT_DIR:-$shared/ht}"
cd "$work/repo"

# Runs "$@" and prints "WALL CPU" in seconds (user + system, children included).
timed() {
  local log="$1"; shift
  /usr/bin/time -f "%e %U %S" -o "$work/time" "$@" >"$log" 2>&1 || { echo "failed: $* (log $log)" >&2; exit 1; }
  awk '{ printf "%.0f %.0f\n", $1, $2 + $3 }' "$work/time"
}

# The CPU kernel file and its crate, before and after the CPU device had a crate of its own.
if [ -f cpu/src/hist.rs ]; then kernel=cpu/src/hist.rs; kernel_crate=adgauge-cpu
else kernel=backends/src/cpu/hist.rs; kernel_crate=adgauge-backends; fi
# The report section: its template once the report had templates, the one writer before.
if [ -f reports/src/html/markup.rs ]; then section=reports/src/html/markup.rs; else section=reports/src/html.rs; fi

read -r full_wall full_cpu < <(timed "$work/full.log" cargo test)
binaries=$(grep -cE '^ +(Running|Doc-tests) ' "$work/full.log" || true)
# `cargo test -p` resolves the features of one package's dependencies, not the workspace's: its
# first run rebuilds what those differ in. Built once untimed, as a developer's loop has it.
cargo test -p "$kernel_crate" --no-run >"$work/warm.log" 2>&1
cargo test -p adgauge-reports --no-run >>"$work/warm.log" 2>&1
echo "// touched by scripts/test-times.sh" >>"$kernel"
read -r kernel_wall kernel_cpu < <(timed "$work/kernel.log" cargo test -p "$kernel_crate")
echo "// touched by scripts/test-times.sh" >>"$section"
read -r section_wall section_cpu < <(timed "$work/section.log" cargo test -p adgauge-reports)

echo "Build and test times of $(git log -1 --format='%h (%cs)' "$rev"), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg) at the end; logs in $work"
echo
echo "| step | wall s | CPU s |"
echo "|---|---|---|"
echo "| fresh clone: \`cargo test\` ($binaries test binaries) | $full_wall | $full_cpu |"
echo "| touch \`$kernel\`: \`cargo test -p $kernel_crate\` | $kernel_wall | $kernel_cpu |"
echo "| touch \`$section\`: \`cargo test -p adgauge-reports\` | $section_wall | $section_cpu |"
