#!/usr/bin/env bash
# The nightly pipeline on one machine: build, run the nightly suite into the history (each case in
# its own process, rows flushed as they finish), write the HTML report, and gate the new run
# against the best of the last 7 nightlies. Exit code: the lowest non-zero of the run's and the gate's
# (README: 1 failed checks, 3 slower, 4 backend unavailable).
#
# Environment: ADGAUGE_HISTORY (default ~/adgauge-history), ADGAUGE_SUITE (default
# suites/nightly.yaml), ADGAUGE_THREADS (default: all cores), ADGAUGE_BENCH=1 to also run the
# criterion benches (n from ADGAUGE_BENCH_N, default 10^7). CARGO_TARGET_DIR is honoured.
set -uo pipefail
cd "$(dirname "$0")/.."

history="${ADGAUGE_HISTORY:-$HOME/adgauge-history}"
suite="${ADGAUGE_SUITE:-suites/nightly.yaml}"
report="$history/report"
mkdir -p "$history" "$report"
threads=()
[ -n "${ADGAUGE_THREADS:-}" ] && threads=(--threads "$ADGAUGE_THREADS")

cargo build --release || exit 2
# cargo puts the binary under CARGO_TARGET_DIR when it is set (relative to this directory).
bin="${CARGO_TARGET_DIR:-target}/release/adgauge"

previous="$(ls "$history"/*.csv 2>/dev/null | sort | tail -n 1)"
"$bin" "${threads[@]}" run --suite "$suite" --history "$history" --isolate --quiet | tee "$history/last-run.txt"
run_status=${PIPESTATUS[0]}
current="$(ls "$history"/*.csv 2>/dev/null | sort | tail -n 1)"

"$bin" report --history "$history" --out "$report" || exit 2

gate_status=0
if [ -n "$previous" ] && [ -n "$current" ] && [ "$previous" != "$current" ]; then
  # The best of the last 7 nightlies per case: a slow drift adds up to a finding (docs/gate.md).
  "$bin" gate --history "$history" --current "$current" --baseline best-of:7 --junit "$report/gate.xml"
  gate_status=$?
else
  echo "no previous nightly in $history: nothing to gate against"
fi

if [ "${ADGAUGE_BENCH:-0}" = 1 ]; then
  ADGAUGE_BENCH_N="${ADGAUGE_BENCH_N:-10000000}" cargo bench -p adgauge --bench hist | tee "$history/last-bench.txt"
fi

# The lowest non-zero code wins.
status=0
for s in "$run_status" "$gate_status"; do
  if [ "$s" -ne 0 ] && { [ "$status" -eq 0 ] || [ "$s" -lt "$status" ]; }; then status=$s; fi
done
echo "report: $report/index.html (run $run_status, gate $gate_status)"
exit "$status"
