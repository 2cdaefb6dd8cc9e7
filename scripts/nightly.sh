#!/usr/bin/env bash
# The nightly pipeline on one machine: build, run the nightly suite into the history (each case in
# its own process, rows flushed as they finish), time the last nightly's build against this one
# interleaved (`adgauge compare`, the speed verdict), write the HTML report, and gate the new run
# against the best of the last 7 nightlies (checks, coverage, statuses; its speed verdicts are the
# trend where the paired step ran), validate every device with `check --thorough` and, on request,
# measure what `check` reaches. Exit code: the lowest non-zero of the run's, the paired step's,
# the gate's, the checks' and the coverage floor's (README: 1 failed checks or coverage below its
# floor, 3 slower, 4 backend unavailable).
#
# Environment (docs/guide.md lists them all):
#   ADGAUGE_HISTORY          the history directory (default ~/adgauge-history)
#   ADGAUGE_SUITE            the suite run into the history (default suites/nightly.yaml)
#   ADGAUGE_FILTER           only cases whose id contains this text (run and paired step)
#   ADGAUGE_THREADS          worker threads (default: all cores)
#   ADGAUGE_PAIRED_SUITE     the suite of the paired step (default suites/quick.yaml)
#   ADGAUGE_BASELINE_REV     the paired step's baseline revision (default: the last nightly's
#                            commit, kept in $ADGAUGE_HISTORY/last-nightly-commit); the step is
#                            left out when there is none or it is this commit
#   ADGAUGE_BASELINE_CACHE   where baseline binaries are kept, one per commit (default
#                            ~/.cache/adgauge-baselines; scripts/build-baseline.sh)
#   ADGAUGE_CHECK_DEVICES    the devices `check --thorough` validates (default: every CPU device
#                            and OpenCL; a device that does not load is reported, not a failure)
#   ADGAUGE_COVERAGE=1       also measure what `check` reaches (scripts/coverage.sh into
#                            $ADGAUGE_HISTORY/coverage, the summary kept as coverage-DATE.md), failing
#                            below ADGAUGE_COVERAGE_FLOOR percent of regions (default 85) in the
#                            rules, the engines or the CPU device (docs/coverage.md)
#   ADGAUGE_BENCH=1          also run the criterion benches (n from ADGAUGE_BENCH_N, default 10^7)
# CARGO_TARGET_DIR is honoured.
set -uo pipefail
cd "$(dirname "$0")/.."

history="${ADGAUGE_HISTORY:-$HOME/adgauge-history}"
suite="${ADGAUGE_SUITE:-suites/nightly.yaml}"
report="$history/report"
mkdir -p "$history" "$report"
threads=()
[ -n "${ADGAUGE_THREADS:-}" ] && threads=(--threads "$ADGAUGE_THREADS")
filter=()
[ -n "${ADGAUGE_FILTER:-}" ] && filter=(--filter "$ADGAUGE_FILTER")

cargo build --release || exit 2
# cargo puts the binary under CARGO_TARGET_DIR when it is set (relative to this directory).
bin="${CARGO_TARGET_DIR:-target}/release/adgauge"

previous="$(ls "$history"/*.csv 2>/dev/null | sort | tail -n 1)"
"$bin" "${threads[@]}" run --suite "$suite" "${filter[@]}" --history "$history" --isolate --quiet | tee "$history/last-run.txt"
run_status=${PIPESTATUS[0]}
current="$(ls "$history"/*.csv 2>/dev/null | sort | tail -n 1)"

# The paired step: the baseline build and this one timed interleaved, in one job (docs/gate.md).
paired_status=0
paired_ran=0
head_rev="$(git rev-parse HEAD 2>/dev/null || true)"
baseline_rev="${ADGAUGE_BASELINE_REV:-$(cat "$history/last-nightly-commit" 2>/dev/null || true)}"
if [ -z "$baseline_rev" ]; then
  echo "paired step: no baseline revision yet (the first nightly records $history/last-nightly-commit)"
elif [ -n "$head_rev" ] && [ "$(git rev-parse --verify --quiet "$baseline_rev^{commit}" || true)" = "$head_rev" ]; then
  echo "paired step: the baseline revision is this commit: nothing to compare"
elif ! cand_bin="$(scripts/aligned-build.sh)"; then
  echo "paired step: cannot build this commit aligned (scripts/aligned-build.sh)"
  paired_status=2
elif base_bin="$(scripts/build-baseline.sh "$baseline_rev")"; then
  paired_ran=1
  # Both sides aligned alike, so that a verdict is the code's, not where its loops fell.
  "$cand_bin" "${threads[@]}" compare --baseline "bin:$base_bin" --suite "${ADGAUGE_PAIRED_SUITE:-suites/quick.yaml}" \
    "${filter[@]}" --history "$history" --quiet | tee "$history/last-compare.txt"
  paired_status=${PIPESTATUS[0]}
else
  echo "paired step: cannot build the baseline revision $baseline_rev"
  paired_status=2
fi
[ -n "$head_rev" ] && echo "$head_rev" > "$history/last-nightly-commit"

"$bin" report --history "$history" --out "$report" || exit 2

gate_status=0
if [ -n "$previous" ] && [ -n "$current" ] && [ "$previous" != "$current" ]; then
  # The best of the last 7 nightlies per case: a slow drift adds up to a finding (docs/gate.md).
  "$bin" gate --history "$history" --current "$current" --baseline best-of:7 --junit "$report/gate.xml"
  gate_status=$?
  if [ "$paired_ran" = 1 ] && [ "$gate_status" = 3 ]; then
    # Between nightlies the machine changes as much as the code: with the paired verdict at
    # hand, the history's slower timings are a trend to read in the report, not the verdict.
    echo "gate: slower against the history (a trend); the paired step decides speed"
    gate_status=0
  fi
else
  echo "no previous nightly in $history: nothing to gate against"
fi

# The checks too long for every CI run (docs/guide.md, `check --thorough`), on every device.
check_status=0
for device in ${ADGAUGE_CHECK_DEVICES:-cpu cpu-staged cpu-traced cpu-jit opencl}; do
  "$bin" "${threads[@]}" check --thorough --backend "$device" > "$history/last-check-$device.txt" 2>&1
  s=$?
  tail -n 1 "$history/last-check-$device.txt"
  if [ "$s" = 4 ]; then
    echo "check --thorough --backend $device: the device is not available here"
  elif [ "$s" -ne 0 ]; then
    echo "check --thorough --backend $device: exit $s ($history/last-check-$device.txt)"
    { [ "$check_status" -eq 0 ] || [ "$s" -lt "$check_status" ]; } && check_status=$s
  fi
done

coverage_status=0
if [ "${ADGAUGE_COVERAGE:-0}" = 1 ]; then
  COVERAGE_OUT="$history/coverage" COVERAGE_FLOOR="${ADGAUGE_COVERAGE_FLOOR:-85}" scripts/coverage.sh
  coverage_status=$?
  [ -f "$history/coverage/summary.md" ] && cp "$history/coverage/summary.md" "$history/coverage-$(date -u +%Y-%m-%d).md"
fi

if [ "${ADGAUGE_BENCH:-0}" = 1 ]; then
  ADGAUGE_BENCH_N="${ADGAUGE_BENCH_N:-10000000}" cargo bench -p adgauge --bench hist | tee "$history/last-bench.txt"
fi

# The lowest non-zero code wins.
status=0
for s in "$run_status" "$paired_status" "$gate_status" "$check_status" "$coverage_status"; do
  if [ "$s" -ne 0 ] && { [ "$status" -eq 0 ] || [ "$s" -lt "$status" ]; }; then status=$s; fi
done
echo "report: $report/index.html (run $run_status, paired $paired_status, gate $gate_status, check $check_status, coverage $coverage_status)"
exit "$status"
