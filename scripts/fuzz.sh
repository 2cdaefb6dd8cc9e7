#!/usr/bin/env bash
# Runs adgauge's fuzz targets (fuzz/, cargo-fuzz + libFuzzer) for SECONDS each (default 60).
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). Crashes land in
# fuzz/artifacts/<target>/; every one becomes a regression test (harness/tests/it/hardening.rs).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Targets: eval_json adbench_readers protocol_line result_csv suite_yaml.
# FUZZ_TARGET_DIR: cargo's target directory for the fuzz builds (default fuzz/target).
# Prints one line per target with libFuzzer's execution count; exit 1 if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(eval_json adbench_readers protocol_line result_csv suite_yaml)
fi
status=0
for t in "${targets[@]}"; do
  features=()
  case "$t" in
    eval_json) features=(--features eval) ;;
    result_csv) features=(--features reports) ;;
    suite_yaml) features=(--features harness) ;;
  esac
  mkdir -p "corpus/$t"
  log="$(mktemp)"
  # -rss_limit_mb: the targets set a 256 MiB memory limit of their own; more is a finding.
  # corpus/<target> grows (ignored by git); seeds/<target> holds valid inputs (committed).
  target_dir=()
  if [ -n "${FUZZ_TARGET_DIR:-}" ]; then target_dir=(--target-dir "$FUZZ_TARGET_DIR"); fi
  if cargo +nightly fuzz run "${target_dir[@]}" "${features[@]}" "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
    status=1
  fi
  execs="$(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' | tail -1 || true)"
  if [ -z "$execs" ]; then execs="$(grep -ao '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)"; fi
  echo "$t: $result, ${execs:-?} executions in ${seconds} s"
  if [ "$result" = CRASH ]; then tail -40 "$log"; fi
  rm -f "$log"
done
exit "$status"
