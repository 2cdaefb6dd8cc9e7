#!/usr/bin/env bash
# GradBench's evals where the engine was behind JAX, side by side in one run per repetition:
# the engine's cpu and cpu-jit devices and cpu-jit-flush (cpu-jit flushing subnormals to zero,
# as XLA's CPU code does) against the JAX adapter (suites/evals-vs-jax.yaml), f64, medians in
# ms, the ratio of the better IEEE engine device to JAX and that of cpu-jit-flush.
#
#   export ADGAUGE_TOOLS_PYTHON="$(scripts/setup-tools.sh)"   # JAX for tools/jax/run.py
#   scripts/evals-vs-jax.sh [RUNS] [-- adgauge run options, e.g. --filter lse]
#   scripts/evals-vs-jax.sh --paired [-- adgauge compare options, e.g. --filter ode]
#
# RUNS (default 2) runs one after the other; each prints its table with the load average at its
# start and end, and the last lines count the cells at most JAX's time in at least one run and
# at most 1.2x JAX's in every run. Run it on an idle machine. The binary is $ADGAUGE_BIN, or
# target/release/adgauge built here.
#
# --paired judges the close cells instead of reading two unpaired runs, whose medians swing by
# more than the differences in question on a shared machine: `adgauge compare` times
# cpu-jit-flush against the JAX adapter interleaved, in fresh pairs of processes
# (suites/evals-vs-jax-paired.yaml: lse, ode at n = 1000, ht at c = 100; its comment says why
# the rest is left out), and the table gives each cell's ratio
# (engine / JAX, the median of the pairs' ratios) with its 95% interval, read as "at most JAX"
# (the interval at or below 1), "within 1.2x" (at or below 1.2), "behind" (above 1.2) or
# "undecided".
set -euo pipefail
cd "$(dirname "$0")/.."
paired=0
if [ "${1:-}" = "--paired" ]; then
    paired=1
    shift
else
    runs="${1:-2}"
    shift || true
fi
[ "${1:-}" = "--" ] && shift
bin="${ADGAUGE_BIN:-target/release/adgauge}"
if [ -z "${ADGAUGE_BIN:-}" ]; then
    cargo build --release --quiet --bin adgauge
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ "$paired" = 1 ]; then
    load_start="$(cut -d' ' -f1 /proc/loadavg)"
    # Exit 3 is a cell where JAX is faster beyond compare's threshold (it calls the candidate
    # regressed), 1 a cell that could not be timed (its row says why): the table shows both.
    rc=0
    "$bin" compare --baseline "tool:${ADGAUGE_TOOLS_PYTHON:-python3} tools/jax/run.py" --candidate "bin:$bin" \
        --suite suites/evals-vs-jax-paired.yaml --confirm-processes 0 --max-processes 8 --json --quiet "$@" \
        >"$work/paired.jsonl" || rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 1 ] && [ "$rc" != 3 ]; then
        echo "evals-vs-jax: adgauge compare exited $rc" >&2
        exit "$rc"
    fi
    python3 - "$work/paired.jsonl" "$load_start" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json, sys

path, load_start, load_end = sys.argv[1:4]
print(f"cpu-jit-flush against JAX, paired: load {load_start} at the start, {load_end} at the end; ms are medians")
print()
print("| case | mode | JAX ms | engine ms | engine / JAX | 95% CI | pairs (processes) | reading |")
print("|---|---|---|---|---|---|---|---|")
counts = {}
for line in open(path):
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        continue
    ratio, low, high = row.get("ratio"), row.get("ci_low"), row.get("ci_high")
    if ratio is None or low is None or high is None:
        reading = f"not timed: {row.get('verdict')} {row.get('why') or ''}".strip()
        cells = "– | – | – | –"
    else:
        if high <= 1.0:
            reading = "at most JAX"
        elif high <= 1.2:
            reading = "within 1.2x"
        elif low > 1.2:
            reading = "behind"
        else:
            reading = "undecided"
        ms = [f"{row[k] * 1e3:.3g}" if row.get(k) is not None else "–" for k in ("baseline_s", "candidate_s")]
        cells = f"{ms[0]} | {ms[1]} | {ratio:.3f} | [{low:.3f}, {high:.3f}]"
    kind = reading.split(":")[0]
    counts[kind] = counts.get(kind, 0) + 1
    case = row["case_id"].split("/")[0]
    print(f"| {case} | {row['mode']} | {cells} | {row.get('pairs', '–')} ({row.get('processes', '–')}) | {reading} |")
print()
print("cells: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
PY
    exit 0
fi
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
