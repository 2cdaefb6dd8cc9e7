#!/usr/bin/env bash
# docs/gate.md's sensitivity table: how often `adgauge compare` and `adgauge gate` flag a slowdown
# planted in a real computation (`+`'s primal histogram fold, which `+`'s VJP runs too: both are
# the affected timings), and how often they flag what was not slowed down (`+`'s JVP, `*`), on an
# idle machine and under two busy processes.
#
#   scripts/sensitivity.sh PLANTED [REPS] > table.md
#
# PLANTED: adgauge built with `cargo build --release --features planted-slowdown`; each process
# reads its factor from ADGAUGE_PLANTED_SLOWDOWN. Both sides are this one binary, the baseline at
# factor 1 (no extra work), so that nothing but the planted work differs (two builds also differ
# by their code's layout: docs/gate.md). For each load, factor and repetition:
# - compare: `PLANTED compare --baseline bin:PLANTED` with the baseline's factor 1 and the
#   candidate's set;
# - gate: three runs at factor 1 into a fresh history, then one at the factor, and
#   `gate --baseline best-of:3` on the last.
# REPS 0 measures nothing and prints the table of what SENS_OUT holds.
# Environment: SENS_SUITE (default suites/sensitivity.yaml), SENS_FACTORS (default
# "1.05 1.10 1.20 1.50"), SENS_LOADS (default "idle loaded"), SENS_OUT (default a temporary
# directory; every JSON answer is kept there).
set -uo pipefail
cd "$(dirname "$0")/.."
planted="${1:?usage: scripts/sensitivity.sh PLANTED [REPS]}"
reps="${2:-5}"
suite="${SENS_SUITE:-suites/sensitivity.yaml}"
factors="${SENS_FACTORS:-1.05 1.10 1.20 1.50}"
loads="${SENS_LOADS:-idle loaded}"
out="${SENS_OUT:-$(mktemp -d)}"
mkdir -p "$out"
busy=()
stop_busy() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done; busy=(); }
trap stop_busy EXIT

for load in $loads; do
  [ "$reps" -gt 0 ] || break
  stop_busy
  if [ "$load" = loaded ]; then
    # Two busy processes at normal priority: as many as this VM has cores.
    for _ in 1 2; do (while :; do :; done) & busy+=($!); done
  fi
  for f in $factors; do
    for r in $(seq 1 "$reps"); do
      tag="$load-$f-$r"
      echo "== $tag (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$out/loads.txt" >&2
      "$planted" compare --baseline "bin:$planted" --suite "$suite" --json --quiet \
        --baseline-env ADGAUGE_PLANTED_SLOWDOWN=1 --candidate-env "ADGAUGE_PLANTED_SLOWDOWN=$f" > "$out/compare-$tag.jsonl"
      hist="$out/history-$tag"
      rm -rf "$hist"
      for _ in 1 2 3; do ADGAUGE_PLANTED_SLOWDOWN=1 "$planted" run --suite "$suite" --history "$hist" --quiet > /dev/null; done
      ADGAUGE_PLANTED_SLOWDOWN="$f" "$planted" run --suite "$suite" --history "$hist" --quiet > /dev/null
      "$planted" gate --history "$hist" --baseline best-of:3 --json > "$out/gate-$tag.json"
    done
  done
done
stop_busy
python3 - "$out" "$factors" "$loads" <<'PY'
import glob, json, os, sys
out, factors, loads = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def affected(case_id, mode):
    # `+`'s VJP runs the primal fold too (its share of the VJP's time is smaller).
    return case_id.startswith("hist-add[") and mode in ("primal", "vjp")
def tally(pairs):
    hit = tot = fa = un = 0
    for case_id, mode, verdict in pairs:
        if affected(case_id, mode):
            tot += 1; hit += verdict == "regressed"
        else:
            un += 1; fa += verdict in ("regressed", "improved")
    return hit, tot, fa, un
print(f"results: {out}\n")
print("| slowdown | " + " | ".join(f"{l}: compare flagged | {l}: gate flagged | {l}: compare false / 1000 | {l}: gate false / 1000" for l in loads) + " |")
print("|---|" + "---|" * (4 * len(loads)))
for f in factors:
    cells = []
    for l in loads:
        cp, gp = [], []
        for path in glob.glob(f"{out}/compare-{l}-{f}-*.jsonl"):
            for line in open(path):
                if line.strip():
                    r = json.loads(line); cp.append((r["case_id"], r["mode"], r["verdict"]))
        for path in glob.glob(f"{out}/gate-{l}-{f}-*.json"):
            text = open(path).read().strip()
            if text:
                for c in json.loads(text.splitlines()[-1]).get("changes", []):
                    gp.append((c["case_id"], c["mode"], c["verdict"]))
        for pairs in (cp, gp):
            hit, tot, _, _ = tally(pairs)
            cells.append(f"{hit}/{tot}" + (f" ({100*hit/tot:.0f}%)" if tot else ""))
        for pairs in (cp, gp):
            _, _, fa, un = tally(pairs)
            cells.append(f"{1000*fa/un:.0f} ({fa}/{un})" if un else "-")
    print(f"| {float(f):.2f}x | " + " | ".join(cells) + " |")
PY
