"""GradBench's `saddle` eval in PyTorch (adgauge's PyTorch tool, tools/pytorch/run.py): the
saddle point of f(p1, p2) = |p1|^2 - |p2|^2 as r1 = argmin_p1 max_p2 f(p1, p2), then
r2 = argmax_p2 f(r1, p2), every descent GradBench's (tools/common/descent.py) from `start`.
Functions ff, fr, rf, rr: the outer gradient (with respect to p1, through the inner ascent, whose
decisions read values back) by forward or reverse mode, the inner one (with respect to p2) by
torch.func.jvp per coordinate or torch.func.grad, nested; r2's ascent uses the outer mode."""

import torch
from descent import argmax, argmin  # tools/common, on the path run.py sets
from particle import GRADIENT, read  # the same nested gradients
from protocol import number


def f(p1, p2):
    return (p1[0] ** 2 + p1[1] ** 2) - (p2[0] ** 2 + p2[1] ** 2)


def saddle(function, x):
    if function not in ("ff", "fr", "rf", "rr"):
        raise ValueError(f"saddle has no function {function} (ff, fr, rf, rr)")
    outer, inner = function
    start = torch.tensor([number(v) for v in x["start"]], dtype=torch.float64)
    if start.shape != (2,):
        raise ValueError("saddle: start must have 2 numbers")

    def ascent(mode, p1):
        return argmax(lambda p2: f(p1, p2), lambda p2: GRADIENT[mode](lambda q: f(p1, q), p2), start, read)[0]

    def run():
        def objective(p1):
            return f(p1, ascent(inner, p1))

        r1, _ = argmin(objective, lambda p1: GRADIENT[outer](objective, p1), start, read)
        return torch.cat([r1, ascent(outer, r1)])

    return run, read
