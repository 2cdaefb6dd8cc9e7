#!/usr/bin/env bash
# GradBench's evals where the engine was behind JAX, side by side in one run per repetition:
# the engine's cpu and cpu-jit devices and cpu-jit-flush (cpu-jit flushing subnormals to zero,
# as XLA's CPU code does) against the JAX adapter (suites/evals-vs-jax.yaml), f64, medians in
# ms, the ratio of the better IEEE engine device to JAX and that of cpu-jit-flush.
#
#   export ADGAUGE_TOOLS_PYTHON="$(scripts/setup-tools.sh)"   # JAX for tools/jax/run.py
#   scripts/evals-vs-jax.sh [RUNS] [-- adgauge run options, e.g. --filter lse]
#
# RUNS (default 2) runs one after the other; each prints its table with the load average at its
# start and end, and the last lines count the cells at most JAX's time in at least one run and
# at most 1.2x JAX's in every run. Run it on an idle machine. The binary is $ADGAUGE_BIN, or
# target/release/adgauge built here.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-2}"
shift || true
[ "${1:-}" = "--" ] && shift
bin="${ADGAUGE_BIN:-target/release/adgauge}"
if [ -z "${ADGAUGE_BIN:-}" ]; then
    cargo build --release --quiet --bin adgauge
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for i in $(seq 1 "$runs"); do
    load_start="$(cut -d' ' -f1 /proc/loadavg)"
    # Exit 1 is a case that failed its checks or a tool that did not answer: its rows say which
    # (listed under the table as not timed), and the other cells are still compared.
    rc=0
    "$bin" run --suite suites/evals-vs-jax.yaml --no-save --json --quiet "$@" >"$work/run-$i.jsonl" || rc=$?
    if [ "$rc" -gt 1 ]; then
        echo "evals-vs-jax: adgauge run exited $rc" >&2
        exit "$rc"
    fi
    echo "$load_start $(cut -d' ' -f1 /proc/loadavg)" >"$work/load-$i"
done
python3 - "$work" "$runs" <<'PY'
import json, pathlib, sys

work, runs = pathlib.Path(sys.argv[1]), int(sys.argv[2])
# The engine's IEEE devices, and cpu-jit-flush: cpu-jit in JAX's arithmetic (XLA's CPU code
# flushes subnormals to zero), judged on its own ratio.
ENGINE, FLUSH, PEER = ("cpu", "cpu-jit"), "cpu-jit-flush", "jax"


def case_name(row):
    params = {k[len("param."):]: v for k, v in row.items() if k.startswith("param.")}
    inner = ", ".join(f"{k} = {v}" for k, v in sorted(params.items()))
    return f"{row['workload']} {inner}"


def fmt(x):
    return "–" if x is None else f"{x:.3g}"


ratios = {}  # (case, mode) -> [ratio of the better IEEE device per run]
flush_ratios = {}  # (case, mode) -> [ratio of cpu-jit-flush per run]
for i in range(1, runs + 1):
    medians, order, problems = {}, [], []
    for line in (work / f"run-{i}.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        key = (case_name(row), row["mode"])
        if key not in order:
            order.append(key)
        if row["status"] == "ok" and row.get("median_s") is not None:
            medians[(key, row["tool"])] = row["median_s"] * 1e3
        else:
            problems.append(f"{row['case_id']} {row['mode']}: {row['status']} {row.get('message') or ''}".strip())
    start, end = (work / f"load-{i}").read_text().split()
    print(f"Run {i} of {runs}: load {start} at the start, {end} at the end; medians in ms")
    print()
    print("| case | mode | " + " | ".join(ENGINE) + f" | {FLUSH} | JAX | ratio | ratio, flushing |")
    print("|---|---|" + "---|" * (len(ENGINE) + 4))
    for key in order:
        engine = [medians.get((key, t)) for t in ENGINE]
        flush = medians.get((key, FLUSH))
        peer = medians.get((key, PEER))
        best = min((x for x in engine if x is not None), default=None)
        ratio = best / peer if best is not None and peer else None
        flush_ratio = flush / peer if flush is not None and peer else None
        ratios.setdefault(key, []).append(ratio)
        flush_ratios.setdefault(key, []).append(flush_ratio)
        cells = " | ".join(fmt(x) for x in engine + [flush])
        print(f"| {key[0]} | {key[1]} | {cells} | {fmt(peer)} | {fmt(ratio)} | {fmt(flush_ratio)} |")
    for p in problems:
        print(f"- not timed: {p}")
    print()
for label, table in (("the better IEEE device (cpu, cpu-jit)", ratios), (FLUSH, flush_ratios)):
    judged = {k: r for k, r in table.items() if all(x is not None for x in r)}
    at_most = sum(1 for r in judged.values() if min(r) <= 1.0)
    within = sum(1 for r in judged.values() if max(r) <= 1.2)
    print(f"{label}: {len(judged)} cells timed on both sides in every run, {at_most} at most JAX's time in at "
          f"least one run, {within} at most 1.2x JAX's in every run")
PY
