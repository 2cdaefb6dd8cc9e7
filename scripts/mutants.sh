#!/usr/bin/env bash
# Mutation testing of adgauge's AD code (.cargo/mutants.toml: rules, engines, general operators,
# CPU histogram kernels, the histogram workload), judged by `adgauge check` alone
# (harness/tests/it/check_oracle.rs). cargo-mutants 27 runs its unmutated baseline on the mutated
# packages' tests only, where check_oracle does not exist, so the baseline is skipped (CI runs
# check_oracle on main every push) and the test timeout is explicit (`adgauge check` takes ~7 s
# in the dev profile). Prints caught/missed/timeout/unviable, the kill rate and the
# surviving mutants; survivors do not fail the script (each is to be explained in
# docs/mutants.md or killed by a better check).
#
#   scripts/mutants.sh rules [OUT]          every mutant of the rules (ad/src/rules/, ops/src/composed/; ~130; nightly)
#   scripts/mutants.sh rest K/N [OUT]       shard K of N (round-robin) of the other files
#   scripts/mutants.sh sample K/N [OUT]     shard K of N of the rule files (a quick estimate)
#   scripts/mutants.sh tests [OUT]          the rule files judged by the backends tests instead
#                                           (.cargo/mutants-tests.toml; OpenCL hidden)
#
# OUT (default mutants-out) receives cargo-mutants' mutants.out/. Extra arguments for
# cargo-mutants go in MUTANTS_ARGS (e.g. "-j 2" or "--copy-target true").
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:?rules, rest K/N or sample K/N}"
case "$what" in
  rules) select=(--re 'ad/src/rules/|ops/src/composed/'); out="${2:-mutants-out}" ;;
  rest) select=(--exclude-re 'ad/src/rules/|ops/src/composed/' --shard "${2:?K/N}" --sharding round-robin); out="${3:-mutants-out}" ;;
  sample) select=(--re 'ad/src/rules/|ops/src/composed/' --shard "${2:?K/N}" --sharding round-robin); out="${3:-mutants-out}" ;;
  tests)
    out="${2:-mutants-out}"
    # shellcheck disable=SC2086
    OCL_ICD_VENDORS="$(mktemp -d)" cargo mutants --config .cargo/mutants-tests.toml --no-shuffle --baseline skip \
      --timeout 300 -o "$out" ${MUTANTS_ARGS:-} || true
    select=() ;;
  *) echo "mutants.sh: unknown selection '$what' (rules, rest K/N, sample K/N, tests)" >&2; exit 2 ;;
esac
if [ "$what" != tests ]; then
  # shellcheck disable=SC2086
  cargo mutants --no-shuffle --test-package adgauge --baseline skip --timeout 300 "${select[@]}" -o "$out" ${MUTANTS_ARGS:-} || true
fi
dir="$out/mutants.out"
count() { if [ -f "$dir/$1.txt" ]; then wc -l <"$dir/$1.txt"; else echo 0; fi; }
caught=$(count caught); missed=$(count missed); timeout=$(count timeout); unviable=$(count unviable)
judged=$((caught + missed + timeout))
if [ "$what" = tests ]; then judge="the engine's tests"; else judge="adgauge check"; fi
echo "## cargo-mutants ($what ${2:-}), judged by $judge"
echo "caught $caught, missed $missed, timeout $timeout, unviable $unviable"
if [ "$judged" -gt 0 ]; then
  echo "kill rate: $(( 1000 * (caught + timeout) / judged / 10 )).$(( 1000 * (caught + timeout) / judged % 10 ))% of $judged"
fi
echo '```'
if [ -f "$dir/missed.txt" ]; then cat "$dir/missed.txt"; fi
echo '```'
