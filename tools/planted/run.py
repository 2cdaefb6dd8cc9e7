#!/usr/bin/env python3
"""A GradBench-protocol tool with planted faults, for testing adgauge's eval side (stdlib only).

Modules: `hist` (primal, vjp, jvp for the operators add, min and max; min/max give each bin's
adjoint to one winner, the lowest position, dest first), `llsq` (primal, gradient) and `ba`
(objective, jacobian: ADBench's residuals differentiated by dual numbers, one sweep per
parameter of an observation; both of GradBench's input forms, docs/protocol.md).

--fault chooses what goes wrong:
  none        correct derivatives
  wrong-dest  hist's vjp drops dest's adjoint (a planted AD bug: dest_bar = 0)
  nan-vjp     hist's vjp answers "nan" for every adjoint of dest (its checks' worst errors are
              not finite)
  hang        every evaluate message waits forever (creating the file --once FILE, if given, first)
  crash       every evaluate message makes the tool exit with status 3
  crash-escapes  as crash, its message on stderr full of control characters (a terminal colour
              escape, NUL, BEL, a carriage return)
  garbage     every evaluate message is answered with a line that is not JSON
  wrong-id    every evaluate message is answered with another id
  tie-all     min/max give the whole adjoint to every tied entry (wrong: no subgradient)
  tie-split   min/max split a tied bin's adjoint evenly (a valid convention, declared at start)
  ba-sign     ba's Jacobian has the wrong sign on the camera centre's columns (a chain-rule slip)
  ba-swap     ba's observation i uses the camera of observation i + 1 (an indexing mistake)
  ba-feat0    ba's every observation uses the first feature (an indexing mistake that replicated
              inputs cannot show)
  ba-compressed        ba ignores adgauge's `full` extension: GradBench's replicated input and
                       compressed outputs only (a GradBench-only tool)
  ba-feat0-compressed  both of the above

Faults of the protocol itself (adgauge must end the case with an error row, or a finding, and
leave no process behind):
  stop-reading   after `define`, never reads its input again (a large message fills the pipe)
  flood          every evaluate message is answered with an endless line
  crash-define   every define message makes the tool exit with status 3
  twice          every evaluate message is answered twice
  no-success     every evaluate response lacks `success`
  absurd-timing  every run is reported as 2^64 - 1 ns
  zero-timing    every run is reported as 0 ns
  crash-once     the first evaluate message of the run (the file --once FILE does not exist yet:
                 it is created) makes the tool exit with status 3; later processes are fine
  dispatch       every run computes and reports a thousandth of its time, then waits
                 --dispatch-ms (default 20) outside its timing, as a tool that times the
                 dispatch of asynchronous work (JAX without block_until_ready)

--work FACTOR does FACTOR times the work of every run (at least 1; default 1): the whole
computation floor(FACTOR) times, then hist's once more on the first (FACTOR - floor(FACTOR)) of
its elements, the results thrown away. `adgauge compare` tells a 1.25x tool from its baseline copy.

--sleep-ms MS adds MS ms of sleep to every timed run: a slowdown of a known size whatever the
machine's load, for the tests of `adgauge compare`.

--first-call-ms MS sleeps MS ms before the first evaluate of each module and function, as a tool
that compiles a function on its first call (JAX's jit).

--tag TEXT is ignored: it marks a test's processes in the process table.

Whatever the fault, an evaluate of a module this process has not defined is refused, as
GradBench's protocol requires `define` first (a restarted tool must be defined again).
"""

import argparse
import json
import math
import os
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
        if fault == "nan-vjp":
            dest_bar = ["nan"] * k
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


def extra_work(module, function, x, fault, factor):
    """The work beyond one computation that --work FACTOR asks for, results thrown away."""
    whole = int(factor)
    for _ in range(whole - 1):
        evaluate(module, function, x, fault)
    part = factor - whole
    if part > 0 and module == "hist":
        m = int(round(part * len(x["inds"])))
        cut = {key: (value[:m] if key in ("inds", "vals", "vals_dot") else value) for key, value in x.items()}
        hist(function, cut, fault)


def evaluate(module, function, x, fault):
    if module == "hist":
        return hist(function, x, fault)
    if module == "ba":
        return ba(function, x, fault)
    return llsq(function, x)


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


class Dual:
    """A number with one tangent (forward mode)."""

    def __init__(self, v, d=0.0):
        self.v, self.d = v, d

    def __add__(a, b):
        b = lift(b)
        return Dual(a.v + b.v, a.d + b.d)

    __radd__ = __add__

    def __sub__(a, b):
        b = lift(b)
        return Dual(a.v - b.v, a.d - b.d)

    def __rsub__(a, b):
        return lift(b) - a

    def __mul__(a, b):
        b = lift(b)
        return Dual(a.v * b.v, a.d * b.v + a.v * b.d)

    __rmul__ = __mul__

    def __truediv__(a, b):
        b = lift(b)
        return Dual(a.v / b.v, (a.d * b.v - a.v * b.d) / (b.v * b.v))


def lift(x):
    return x if isinstance(x, Dual) else Dual(float(x))


def dsqrt(a):
    r = math.sqrt(a.v)
    return Dual(r, a.d / (2 * r))


def dcos(a):
    return Dual(math.cos(a.v), -math.sin(a.v) * a.d)


def dsin(a):
    return Dual(math.sin(a.v), math.cos(a.v) * a.d)


def cross(a, b):
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def reprojection(q, feat):
    """ADBench's two reprojection errors of one observation from its 15 parameters (camera 11,
    point 3, weight), Duals."""
    r, c, f, x0, k, w = q[0:3], q[3:6], q[6], q[7:9], q[9:11], q[14]
    xo = [q[11 + i] - c[i] for i in range(3)]
    sqtheta = r[0] * r[0] + r[1] * r[1] + r[2] * r[2]
    if sqtheta.v != 0:
        theta = dsqrt(sqtheta)
        cos, sin = dcos(theta), dsin(theta)
        axis = [ri / theta for ri in r]
        axo = cross(axis, xo)
        tmp = (axis[0] * xo[0] + axis[1] * xo[1] + axis[2] * xo[2]) * (1 - cos)
        xc = [xo[i] * cos + axo[i] * sin + axis[i] * tmp for i in range(3)]
    else:
        rxo = cross(r, xo)
        xc = [xo[i] + rxo[i] for i in range(3)]
    u, v = xc[0] / xc[2], xc[1] / xc[2]
    rsq = u * u + v * v
    lsc = 1 + k[0] * rsq + k[1] * rsq * rsq
    return [w * (u * lsc * f + x0[0] - feat[0]), w * (v * lsc * f + x0[1] - feat[1])]


def ba(function, x, fault):
    n, m, p = x["n"], x["m"], x["p"]
    full = x.get("full") if fault not in ("ba-compressed", "ba-feat0-compressed") else None
    if full is not None:
        cams, pts = [[number(v) for v in r] for r in full["cams"]], [[number(v) for v in r] for r in full["x"]]
        ws, feats = [number(v) for v in full["w"]], [[number(v) for v in r] for r in full["feats"]]
        obs = [tuple(o) for o in full["obs"]]
    else:
        cams, pts = [[number(v) for v in x["cam"]]] * n, [[number(v) for v in x["x"]]] * m
        ws, feats = [number(x["w"])] * p, [[number(v) for v in x["feat"]]] * p
        obs = [(i % n, i % m) for i in range(p)]
    if fault == "ba-swap":
        obs = [(obs[(i + 1) % p][0], obs[i][1]) for i in range(p)]
    if fault in ("ba-feat0", "ba-feat0-compressed"):
        feats = [feats[0]] * p
    params = [cams[c] + pts[j] + [ws[i]] for i, (c, j) in enumerate(obs)]
    if function == "objective":
        err = [e.v for i, q in enumerate(params) for e in reprojection([Dual(v) for v in q], feats[i])]
        w_err = [1 - w * w for w in ws]
        if full is not None:
            return {"reproj_err": err, "w_err": w_err}
        return {"reproj_error": {"elements": err[:2], "repeated": p}, "w_err": {"element": w_err[0], "repeated": p}}
    if function != "jacobian":
        raise ValueError(f"ba has no function {function}")
    wcol = 11 * n + 3 * m
    rows, cols, vals = [0], [], []
    for i, ((c, j), q) in enumerate(zip(obs, params)):
        sweeps = [reprojection([Dual(v, float(s == t)) for t, v in enumerate(q)], feats[i]) for s in range(15)]
        for row in range(2):
            rows.append(rows[-1] + 15)
            cols += [11 * c + t for t in range(11)] + [11 * n + 3 * j + t for t in range(3)] + [wcol + i]
            block = [sweeps[s][row].d for s in range(15)]
            if fault == "ba-sign":
                block[3:6] = [-b for b in block[3:6]]
            vals += block
    for i, w in enumerate(ws):
        rows.append(rows[-1] + 1)
        cols.append(wcol + i)
        vals.append(-2 * w)
    if full is not None:
        return {"nrows": 3 * p, "ncols": wcol + p, "rows": rows, "cols": cols, "vals": vals}
    return {"rows": rows[:30] + rows[-1:], "cols": cols[:30] + cols[-1:], "vals": vals[:30] + vals[-1:]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fault", default="none",
                        choices=["none", "wrong-dest", "hang", "crash", "garbage", "wrong-id", "tie-all", "tie-split",
                                 "ba-sign", "ba-swap", "ba-feat0", "ba-compressed", "ba-feat0-compressed",
                                 "stop-reading", "flood", "crash-define", "twice", "no-success", "absurd-timing",
                                 "zero-timing", "dispatch", "crash-once", "nan-vjp", "crash-escapes"])
    parser.add_argument("--tag", default="")
    parser.add_argument("--once", default="")
    parser.add_argument("--work", type=float, default=1.0)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--dispatch-ms", type=float, default=20.0)
    parser.add_argument("--first-call-ms", type=float, default=0.0)
    args = parser.parse_args()
    if not (args.work >= 1.0 and min(args.sleep_ms, args.dispatch_ms, args.first_call_ms) >= 0.0):
        parser.error("--work must be at least 1, and --sleep-ms, --dispatch-ms and --first-call-ms at least 0")
    fault = args.fault
    defined = set()
    called = set()
    for line in sys.stdin:
        message = json.loads(line)
        kind, mid = message["kind"], message["id"]
        response = {"id": mid}
        if kind == "start":
            response["tool"] = f"planted-{fault}"
            response["config"] = {"version": "1.0", "threads": 1}
            if fault == "tie-split":
                response["config"]["conventions"] = {"tie-policy": "split"}
        elif kind == "define":
            if fault == "crash-define":
                print("planted crash at define", file=sys.stderr, flush=True)
                sys.exit(3)
            known = message["module"] in ("hist", "llsq", "ba")
            response["success"] = known
            if known:
                defined.add(message["module"])
            if not known:
                response["error"] = f"the planted tool has no module {message['module']}"
            if fault == "stop-reading":
                print(json.dumps(response), flush=True)
                time.sleep(3600)
        elif kind == "evaluate":
            if message["module"] not in defined:
                response.update(success=False, error=f"module {message['module']} was not defined in this process")
                print(json.dumps(response), flush=True)
                continue
            if fault == "crash-once" and not os.path.exists(args.once):
                open(args.once, "w").close()
                print("planted crash (once)", file=sys.stderr, flush=True)
                sys.exit(3)
            if fault == "flood":
                chunk = "0," * 65536
                while True:
                    sys.stdout.write(chunk)
            if fault == "hang":
                if args.once:
                    open(args.once, "w").close()
                time.sleep(3600)
            if fault == "crash":
                print("planted crash", file=sys.stderr, flush=True)
                sys.exit(3)
            if fault == "crash-escapes":
                print("planted crash \x1b[31mred\x1b[0m nul\x00 bel\x07 cr\r end", file=sys.stderr, flush=True)
                sys.exit(3)
            if fault == "garbage":
                print("this is not a protocol line", flush=True)
                continue
            if fault == "wrong-id":
                response["id"] = mid + 1
            x = dict(message.get("input") or {})
            runs = max(1, int(x.pop("min_runs", 1)))
            function = (message["module"], message["function"])
            if function not in called:
                called.add(function)
                time.sleep(args.first_call_ms * 1e-3)
            x.pop("min_seconds", None)
            timings = []
            try:
                for _ in range(runs):
                    start = time.perf_counter_ns()
                    output = evaluate(message["module"], message["function"], x, fault)
                    if args.work > 1.0:
                        extra_work(message["module"], message["function"], x, fault, args.work)
                    if args.sleep_ms > 0.0:
                        time.sleep(args.sleep_ms * 1e-3)
                    took = time.perf_counter_ns() - start
                    if fault == "dispatch":
                        took = max(1, took // 1000)
                        time.sleep(args.dispatch_ms * 1e-3)
                    elif fault == "absurd-timing":
                        took = 2**64 - 1
                    elif fault == "zero-timing":
                        took = 0
                    timings.append({"name": "evaluate", "nanoseconds": took})
                response.update(success=True, output=output, timings=timings)
                if fault == "no-success":
                    del response["success"]
            except (ValueError, KeyError) as e:
                response.update(success=False, error=str(e))
            if fault == "twice":
                print(json.dumps(response), flush=True)
        print(json.dumps(response), flush=True)


if __name__ == "__main__":
    main()
