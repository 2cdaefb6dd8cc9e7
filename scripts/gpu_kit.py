#!/usr/bin/env python3
"""The GPU kit's helper (scripts/gpu-kit.sh, docs/gpu.md); Python's standard library only.

  gpu_kit.py artifacts CARGO_JSON NAME...      executables that cargo's --message-format=json built
  gpu_kit.py evals --adgauge BIN --device DEV --inputs DIR --out FILE [--tiny] [--adbench DIR]
  gpu_kit.py summary --work DIR                the timing part of summary.md, on stdout

`evals` writes seeded histogram inputs (and a k-means one) into DIR, evaluates each on the CPU
device and on DEV with `adgauge eval`, and compares the JSON answers: bit for bit for min and max
(each bin's value, adjoint and tangent is one of its inputs', whatever the order of the fold:
the conformance suite holds every device to this too), within the conformance suite's tolerance
otherwise (f32 2e-4, f64 1e-10, relative to max(1, |cpu|)), and for the classic workloads (GMM,
LSTM, BA from ADBench's files, k-means) within 1e-8 (f64 sums in another order). One line per
evaluation; exit 1 when any differs or fails.

`summary` reads what `run` left in its work folder (steps, bandwidth.json, timing-*.jsonl) and
prints Markdown: cases timed against cases planned, the histogram overheads next to the Futhark
thesis' GPU figures, the `+` primal's bytes per second against the measured copy bandwidth, and
the classic workloads' times.
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import time

OPS = ["add", "mul", "min", "max", "logaddexp", "hypot"]
RULES = ["auto", "special", "general-sort", "general-chunked"]
EXACT_OPS = {"min", "max"}
TOLERANCE = {"f32": 2e-4, "f64": 1e-10}
CLASSIC_TOLERANCE = 1e-8
SEED = 20261127


# ---------------------------------------------------------------- artifacts


def artifacts(args):
    """Prints `name<TAB>path` for every executable cargo reported whose target is one of NAMES."""
    found = {}
    with open(args.cargo_json) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
                continue
            name = msg["target"]["name"]
            if name in args.names:
                found[name] = msg["executable"]
    missing = [n for n in args.names if n not in found]
    if missing:
        print(f"gpu_kit.py: cargo reported no executable for {', '.join(missing)}", file=sys.stderr)
        return 1
    for n in args.names:
        print(f"{n}\t{found[n]}")
    return 0


# ---------------------------------------------------------------- inputs


def grid(rng, lo, hi):
    """A value in [lo, hi) on a grid of 1/1024: exact in f32 and f64, so both dtypes read it."""
    return round(rng.uniform(lo, hi) * 1024) / 1024


def hist_cases(tiny):
    """(name, k, inds, vals, dest): adversarial by hand, then seeded random ones."""
    rng = random.Random(SEED)
    cases = [
        # Ties with dest and between elements, bins with 0, 1 and 2+ zeros, an empty bin,
        # indices -1 and >= k (harness/tests/it/eval.rs' "mixed" case).
        ("adversarial", 5, [0, 1, 0, 1, 2, 2, 2, -1, 5, 9, 0, 1, 3],
         [1.0, 0.0, 0.3, 0.0, 2.5, 0.0, 0.7, 4.0, 5.0, 6.0, 1.0, 0.0, -1.0], [1.0, 0.0, 2.5, -1.0, 3.0]),
    ]

    def random_case(name, n, k, value_set=None):
        inds = [rng.randrange(-1, k + 1) if rng.random() < 0.05 else rng.randrange(k) for _ in range(n)]
        if value_set:
            vals = [rng.choice(value_set) for _ in range(n)]
            dest = [rng.choice(value_set) for _ in range(k)]
        else:
            # Near 1 in magnitude: products of hundreds stay in range (guide, Histogram rules: keep products
            # in range, or association decides), with a few zeros for `*`.
            vals = [0.0 if rng.random() < 0.001 else grid(rng, 0.75, 1.25) * rng.choice((-1, 1)) for _ in range(n)]
            dest = [grid(rng, -1, 1) for _ in range(k)]
        return (name, k, inds, vals, dest)

    if tiny:
        return cases
    # Ties everywhere: values from a small set, zeros included.
    cases.append(random_case("ties-n400-k8", 400, 8, [0.0, 0.5, 1.0, 1.0, 2.0, -0.5, -1.0]))
    # Many elements per bin: several chunks of the chunked rule, local-memory sub-histograms.
    cases.append(random_case("random-n50000-k64", 50000, 64))
    # More bins than elements: global atomics, mostly empty bins.
    cases.append(random_case("random-n50000-k100000", 50000, 100000))
    return cases


def write_hist_inputs(directory, tiny):
    """Writes one input per (case, operator); returns [(case, op, path)]."""
    rng = random.Random(SEED + 1)
    out = []
    for name, k, inds, vals, dest in hist_cases(tiny):
        n = len(inds)
        hist_bar = [0.0 if b == 1 else grid(rng, -2, 2) for b in range(k)]
        vals_dot = [grid(rng, -1, 1) for _ in range(n)]
        dest_dot = [grid(rng, -1, 1) for _ in range(k)]
        for op in OPS:
            # hypot's neutral element 0 is neutral on magnitudes only: its inputs are magnitudes.
            v = [abs(x) for x in vals] if op == "hypot" else vals
            d = [abs(x) for x in dest] if op == "hypot" else dest
            path = os.path.join(directory, f"hist-{op}-{name}.json")
            with open(path, "w") as f:
                json.dump({"op": op, "k": k, "inds": inds, "vals": v, "dest": d, "hist_bar": hist_bar,
                           "vals_dot": vals_dot, "dest_dot": dest_dot}, f)
            out.append((name, op, path))
    return out


def write_kmeans_input(directory, tiny):
    rng = random.Random(SEED + 2)
    n, k, d = (300, 5, 4) if tiny else (2000, 10, 8)
    points = [[grid(rng, -4, 4) for _ in range(d)] for _ in range(n)]
    centres = [list(points[i * (n // k)]) for i in range(k)]
    path = os.path.join(directory, f"kmeans-n{n}-k{k}-d{d}.json")
    with open(path, "w") as f:
        json.dump({"points": points, "centres": centres}, f)
    return path


# ---------------------------------------------------------------- evals


def number(v):
    if isinstance(v, str):
        return float(v)  # "inf", "-inf", "nan"
    return float(v)


def flatten(v):
    """Every number of a JSON value, in order (nested arrays and objects by sorted key)."""
    if isinstance(v, list):
        return [x for item in v for x in flatten(item)]
    if isinstance(v, dict):
        return [x for key in sorted(v) for x in flatten(v[key])]
    if isinstance(v, bool) or v is None:
        return []
    return [number(v)]


def compare(cpu, dev, tol):
    """(worst relative difference, first mismatch or None) of two eval answers."""
    if sorted(cpu) != sorted(dev):
        return math.inf, f"keys {sorted(dev)} vs the CPU's {sorted(cpu)}"
    worst = 0.0
    for key in sorted(cpu):
        a, b = flatten(dev[key]), flatten(cpu[key])
        if len(a) != len(b):
            return math.inf, f"{key}: {len(a)} numbers vs the CPU's {len(b)}"
        for j, (x, e) in enumerate(zip(a, b)):
            if x == e or (math.isnan(x) and math.isnan(e)):
                continue
            diff = abs(x - e) / max(1.0, abs(e)) if math.isfinite(x) and math.isfinite(e) else math.inf
            worst = max(worst, diff)
            if diff > tol:
                return worst, f"{key}[{j}]: {x!r} vs the CPU's {e!r}"
    return worst, None


def run_eval(adgauge, argv, timeout):
    """(answer or None, error text) of one `adgauge eval`."""
    try:
        p = subprocess.run([adgauge, "eval", *argv], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"no answer in {timeout} s"
    except OSError as e:
        return None, f"cannot run {adgauge}: {e}"
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {p.stderr.strip()[-400:]}"
    try:
        return json.loads(p.stdout), None
    except ValueError as e:
        return None, f"not JSON ({e}): {p.stdout[:200]!r}"


def evals(args):
    os.makedirs(args.inputs, exist_ok=True)
    jobs = []  # (label, argv without --backend, tolerance)
    for name, op, path in write_hist_inputs(args.inputs, args.tiny):
        for dtype in ["f32"] if args.tiny else ["f32", "f64"]:
            tol = 0.0 if op in EXACT_OPS else TOLERANCE[dtype]
            runs = [("primal", "auto")] + [("vjp", r) for r in RULES] + [("jvp", "auto")]
            if args.tiny:
                runs = [("vjp", "auto"), ("vjp", "general-sort"), ("jvp", "auto")]
            for mode, rule in runs:
                label = f"hist-{op} {name} {dtype} {mode} {rule}"
                argv = [f"hist-{op}", "--input", path, "--mode", mode, "--rule", rule, "--dtype", dtype]
                jobs.append((label, argv, tol))
                # Every index here fits i32, which `eval` then picks: the same input with i64
                # indices takes the other kernels (f32, the rules' default).
                if dtype == "f32" and rule == "auto":
                    jobs.append((f"{label} i64", argv + ["--index-dtype", "i64"], tol))
    kmeans = write_kmeans_input(args.inputs, args.tiny)
    jobs.append((f"kmeans {os.path.basename(kmeans)} f64 hessian-diag", ["kmeans", "--input", kmeans],
                 CLASSIC_TOLERANCE))
    skipped = []
    files = [("gmm", "gmm/1k/gmm_d2_K5.txt")] if args.tiny else \
        [("gmm", "gmm/1k/gmm_d10_K25.txt"), ("lstm", "lstm/lstm_l2_c1024.txt"), ("ba", "ba/test.txt")]
    for workload, rel in files:
        path = os.path.join(args.adbench, rel) if args.adbench else None
        if path and os.path.isfile(path):
            for mode in ["vjp"] if args.tiny else ["primal", "vjp"]:
                jobs.append((f"{workload} {rel} f64 {mode}", [workload, "--input", path, "--mode", mode],
                             CLASSIC_TOLERANCE))
        else:
            skipped.append(f"{workload} {rel}: no ADBench file (--adbench {args.adbench or 'not given'})")

    def one(job):
        label, argv, tol = job
        started = time.monotonic()
        cpu, err = run_eval(args.adgauge, argv + ["--backend", "cpu"], args.timeout)
        if err:
            return label, "error", f"cpu: {err}", time.monotonic() - started
        dev, err = run_eval(args.adgauge, argv + ["--backend", args.device], args.timeout)
        if err:
            return label, "error", f"{args.device}: {err}", time.monotonic() - started
        worst, mismatch = compare(cpu, dev, tol)
        kind = "bit-equal" if tol == 0.0 else f"tol {tol:g}"
        if mismatch:
            return label, "DIFFERS", f"{kind}: {mismatch}", time.monotonic() - started
        return label, "ok", f"{kind}, worst {worst:.2e}", time.monotonic() - started

    counts = {"ok": 0, "DIFFERS": 0, "error": 0}
    with open(args.out, "w") as out, concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        out.write(f"# adgauge eval on cpu vs {args.device}: {len(jobs)} evaluations, {args.jobs} at a time\n")
        for s in skipped:
            out.write(f"skipped  {s}\n")
        for label, status, note, seconds in pool.map(one, jobs):
            counts[status] += 1
            out.write(f"{status:<8} {label}: {note} ({seconds:.1f} s)\n")
            out.flush()
        line = (f"evals on {args.device}: {len(jobs)} compared with the CPU, {counts['ok']} matched, "
                f"{counts['DIFFERS']} differed, {counts['error']} failed to run, {len(skipped)} skipped")
        out.write(line + "\n")
    print(line)
    return 0 if counts["ok"] == len(jobs) else 1


# ---------------------------------------------------------------- summary

# The Futhark thesis' reverse-mode overheads of reduce_by_index on a GPU (seeds/000, section 5.2
# "GPU benchmarks", also listed in its introduction): AD run time / run time without AD.
THESIS = {"add": ("+", "2.5x"), "min": ("min/max", "13.6x"), "max": ("min/max", "13.6x"),
          "mul": ("*", "14.1x"), "general": ("general", "> 500x")}
INDEX_BYTES = 8  # i64 indices
VALUE_BYTES = {"f32": 4, "f64": 8}


def read_rows(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        pass  # a line cut by the step's time limit
    except OSError:
        pass
    return rows


def size(x):
    """10^7 for a power of ten from 10^3 on, else the number."""
    e = round(math.log10(x)) if x > 0 else 0
    return f"10^{e}" if e >= 3 and 10 ** e == x else str(x)


def ms(x):
    return "" if x is None else f"{1e3 * x:.3f}"


def ratio(x):
    return "" if x is None else f"{x:.2f}"


def by_case(rows):
    """case_id -> {'row': first row, mode: row}."""
    cases = {}
    for r in rows:
        c = cases.setdefault(r["case_id"], {"row": r})
        if r.get("mode"):
            c[r["mode"]] = r
    return cases


def median(c, mode):
    r = c.get(mode)
    return r.get("median_s") if r else None


def summary(args):
    work = args.work
    out = []
    bandwidth = None
    try:
        with open(os.path.join(work, "bandwidth.json")) as f:
            for line in f:
                d = json.loads(line)
                if d.get("name") == args.device and "copy_bandwidth" in d:
                    bandwidth = d["copy_bandwidth"]
    except (OSError, ValueError):
        pass
    out.append("## Roofline: device-to-device copy\n")
    if bandwidth:
        out.append(f"{bandwidth['bytes']} bytes, {bandwidth['copies']} copies, read back and checked: best "
                   f"{bandwidth['best_s'] * 1e3:.3f} ms = **{bandwidth['best_bytes_per_s'] / 1e9:.1f} GB/s**, median "
                   f"{bandwidth['median_bytes_per_s'] / 1e9:.1f} GB/s (bytes read + written).\n")
    else:
        out.append("No copy bandwidth was measured (see checks.log and timing.log).\n")

    for suite in args.suites:
        rows = read_rows(os.path.join(work, f"timing-{suite}.jsonl"))
        planned = None
        try:
            with open(os.path.join(work, f"planned-{suite}.txt")) as f:
                planned = sum(1 for line in f if line.strip())
        except OSError:
            pass
        cases = by_case(rows)
        statuses = {}
        for c in cases.values():
            statuses[c["row"]["status"]] = statuses.get(c["row"]["status"], 0) + 1
        done = ", ".join(f"{v} {k}" for k, v in sorted(statuses.items())) or "none"
        out.append(f"## Suite {suite}: {len(cases)} of {planned if planned is not None else '?'} cases ({done})\n")
        if not cases:
            continue
        hist = [c for c in cases.values() if c["row"]["workload"].startswith("hist-")]
        other = [c for c in cases.values() if not c["row"]["workload"].startswith("hist-")]
        if hist:
            out.append("| op | n | k | dtype | rule (used) | primal ms | vjp ms | jvp ms | vjp/primal | jvp/primal "
                       "| thesis | primal GB/s | of copy | status |")
            out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for c in hist:
                r = c["row"]
                op = r["workload"][len("hist-"):]
                n, k = int(r.get("param.n", 0)), int(r.get("param.k", 0))
                p, v, j = median(c, "primal"), median(c, "vjp"), median(c, "jvp")
                used = r.get("rule_used") or ""
                rule = r["rule"] + (f" ({used})" if used and used != r["rule"] else "")
                general = (used or r["rule"]).startswith("general")
                anchor = THESIS["general"] if general else THESIS.get(op)
                thesis = f"{anchor[1]} ({anchor[0]})" if anchor else ""
                rate = frac = ""
                if p and op == "add":
                    # The + primal reads every index and value once and k bins of dest, writes k.
                    moved = n * (INDEX_BYTES + VALUE_BYTES[r["dtype"]]) + 2 * k * VALUE_BYTES[r["dtype"]]
                    rate = f"{moved / p / 1e9:.1f}"
                    if bandwidth:
                        frac = f"{moved / p / bandwidth['best_bytes_per_s']:.0%}"
                status = r["status"] + (f": {r['message'][:80]}" if r.get("message") else "")
                out.append(f"| {op} | {size(n)} | {size(k)} | {r['dtype']} | {rule} | {ms(p)} | {ms(v)} | {ms(j)} | "
                           f"{ratio(v / p if p and v else None)} | {ratio(j / p if p and j else None)} | {thesis} | "
                           f"{rate} | {frac} | {status} |")
            out.append("")
        if other:
            out.append("| case | dtype | primal ms | vjp ms | jvp ms | vjp/primal | jvp/primal | status |")
            out.append("|---|---|---|---|---|---|---|---|")
            for c in other:
                r = c["row"]
                p, v, j = median(c, "primal"), median(c, "vjp"), median(c, "jvp")
                status = r["status"] + (f": {r['message'][:80]}" if r.get("message") else "")
                case = r["case_id"].split("/")[0]
                out.append(f"| {case} | {r['dtype']} | {ms(p)} | {ms(v)} | {ms(j)} | "
                           f"{ratio(v / p if p and v else None)} | {ratio(j / p if p and j else None)} | {status} |")
            out.append("")
    print("\n".join(out))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("artifacts")
    a.add_argument("cargo_json")
    a.add_argument("names", nargs="+")
    e = sub.add_parser("evals")
    e.add_argument("--adgauge", required=True)
    e.add_argument("--device", required=True)
    e.add_argument("--inputs", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--adbench", default="")
    e.add_argument("--tiny", action="store_true")
    e.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    e.add_argument("--timeout", type=float, default=120.0)
    s = sub.add_parser("summary")
    s.add_argument("--work", required=True)
    s.add_argument("--device", required=True)
    s.add_argument("--suites", nargs="*", default=[])
    args = parser.parse_args()
    return {"artifacts": artifacts, "evals": evals, "summary": summary}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
