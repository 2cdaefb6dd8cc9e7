#!/usr/bin/env python3
"""A GradBench-protocol tool with planted faults, for testing adgauge's eval side (stdlib only).

Modules: `hist` (primal, vjp, jvp for the operators add, min and max; min/max give each bin's
adjoint to one winner, the lowest position, dest first) and `llsq` (primal, gradient).

--fault chooses what goes wrong:
  none        correct derivatives
  wrong-dest  hist's vjp drops dest's adjoint (a planted AD bug: dest_bar = 0)
  hang        every evaluate message waits forever
  crash       every evaluate message makes the tool exit with status 3
  garbage     every evaluate message is answered with a line that is not JSON
  wrong-id    every evaluate message is answered with another id
  tie-all     min/max give the whole adjoint to every tied entry (wrong: no subgradient)
  tie-split   min/max split a tied bin's adjoint evenly (a valid convention, declared at start)
"""

import argparse
import json
import sys
import time


def number(x):
    if isinstance(x, str):
        return {"inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}[x]
    return float(x)


def hist_primal(op, k, inds, vals, dest):
    hist = list(dest)
    for b, v in zip(inds, vals):
        if 0 <= b < k:
            if op == "add":
                hist[b] += v
            elif op == "min":
                hist[b] = min(hist[b], v)
            else:
                hist[b] = max(hist[b], v)
    return hist


def winners(op, k, inds, vals, dest):
    """Per bin the winning position (-1: dest), ties to the lowest position."""
    best = list(dest)
    win = [-1] * k
    for i, (b, v) in enumerate(zip(inds, vals)):
        if 0 <= b < k and ((op == "min" and v < best[b]) or (op == "max" and v > best[b])):
            best[b], win[b] = v, i
    return win


def hist(function, x, fault):
    op, k = x["op"], x["k"]
    if op not in ("add", "min", "max"):
        raise ValueError(f"operator {op} is not supported")
    inds = x["inds"]
    vals = [number(v) for v in x["vals"]]
    dest = [number(v) for v in x["dest"]]
    out = {"hist": hist_primal(op, k, inds, vals, dest)}
    if function == "vjp":
        bar = [number(v) for v in x["hist_bar"]]
        if op == "add":
            vals_bar = [bar[b] if 0 <= b < k else 0.0 for b in inds]
            dest_bar = list(bar)
        elif fault in ("tie-all", "tie-split"):
            best = hist_primal(op, k, inds, vals, dest)
            tied = [[i for i, (bb, v) in enumerate(zip(inds, vals)) if bb == b and v == best[b]] for b in range(k)]
            share = [1.0 if fault == "tie-all" else 1.0 / (len(tied[b]) + (dest[b] == best[b])) for b in range(k)]
            vals_bar = [0.0] * len(vals)
            for b in range(k):
                for i in tied[b]:
                    vals_bar[i] = bar[b] * share[b]
            dest_bar = [bar[b] * share[b] if dest[b] == best[b] else 0.0 for b in range(k)]
        else:
            win = winners(op, k, inds, vals, dest)
            vals_bar = [0.0] * len(vals)
            dest_bar = [0.0] * k
            for b in range(k):
                if win[b] < 0:
                    dest_bar[b] = bar[b]
                else:
                    vals_bar[win[b]] = bar[b]
        if fault == "wrong-dest":
            dest_bar = [0.0] * k
        out.update(vals_bar=vals_bar, dest_bar=dest_bar)
    elif function == "jvp":
        vd = [number(v) for v in x["vals_dot"]]
        dd = [number(v) for v in x["dest_dot"]]
        if op == "add":
            hist_dot = list(dd)
            for b, t in zip(inds, vd):
                if 0 <= b < k:
                    hist_dot[b] += t
        else:
            win = winners(op, k, inds, vals, dest)
            hist_dot = [dd[b] if win[b] < 0 else vd[win[b]] for b in range(k)]
        out["hist_dot"] = hist_dot
    elif function != "primal":
        raise ValueError(f"hist has no function {function}")
    return out


def llsq(function, x):
    coeffs, n = [number(v) for v in x["x"]], x["n"]
    residuals, powers = [], []
    for i in range(n):
        t = -1 + i * 2 / (n - 1)
        row = [t ** j for j in range(len(coeffs))]
        s = (t > 0) - (t < 0)
        residuals.append(s - sum(c * p for c, p in zip(coeffs, row)))
        powers.append(row)
    if function == "primal":
        return sum(r * r for r in residuals) / 2
    if function == "gradient":
        return [-sum(r * row[j] for r, row in zip(residuals, powers)) for j in range(len(coeffs))]
    raise ValueError(f"llsq has no function {function}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", default="none",
                        choices=["none", "wrong-dest", "hang", "crash", "garbage", "wrong-id", "tie-all", "tie-split"])
    fault = parser.parse_args().fault
    for line in sys.stdin:
        message = json.loads(line)
        kind, mid = message["kind"], message["id"]
        response = {"id": mid}
        if kind == "start":
            response["tool"] = f"planted-{fault}"
            if fault == "tie-split":
                response["config"] = {"conventions": {"tie-policy": "split"}}
        elif kind == "define":
            response["success"] = message["module"] in ("hist", "llsq")
        elif kind == "evaluate":
            if fault == "hang":
                time.sleep(3600)
            if fault == "crash":
                print("planted crash", file=sys.stderr, flush=True)
                sys.exit(3)
            if fault == "garbage":
                print("this is not a protocol line", flush=True)
                continue
            if fault == "wrong-id":
                response["id"] = mid + 1
            x = dict(message.get("input") or {})
            runs = max(1, int(x.pop("min_runs", 1)))
            x.pop("min_seconds", None)
            timings = []
            try:
                for _ in range(runs):
                    start = time.perf_counter_ns()
                    if message["module"] == "hist":
                        output = hist(message["function"], x, fault)
                    else:
                        output = llsq(message["function"], x)
                    timings.append({"name": "evaluate", "nanoseconds": time.perf_counter_ns() - start})
                response.update(success=True, output=output, timings=timings)
            except (ValueError, KeyError) as e:
                response.update(success=False, error=str(e))
        print(json.dumps(response), flush=True)


if __name__ == "__main__":
    main()
