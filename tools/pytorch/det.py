"""GradBench's `det` for the PyTorch adapter: the determinant by expansion by minors along the
first row, as adgauge's engine computes it (workloads/src/det.rs): each minor of the last m rows
and a column set is expanded once, level by level from the bottom row (gathers of the entries
and of the sub-minors, their products, a matrix product with the alternating signs), instead of
cmpad's recursion that expands the same minors many times. Its gradient by
torch.autograd.grad."""

import functools

import torch
from protocol import number, plain
from tables import det_tables


@functools.cache
def tables(ell):
    """det_tables (tools/common/tables.py) as tensors."""
    bottom, levels = det_tables(ell)
    return torch.tensor(bottom), [
        (torch.tensor(e), torch.tensor(s), torch.tensor(g, dtype=torch.float64)) for e, s, g in levels
    ]


def _det(a, ell):
    bottom, levels = tables(ell)
    minors = a[bottom]
    for entries, subminors, signs in levels:
        minors = (a[entries] * minors[subminors]) @ signs
    return minors[0]


def module(function, x):
    ell = int(x["ell"])
    a = torch.tensor([number(v) for v in x["A"]], dtype=torch.float64)
    if a.shape != (ell * ell,):
        raise ValueError(f"A has {a.shape[0]} entries, ell = {ell} needs {ell * ell}")
    tables(ell)  # built once, before the timed runs
    if function == "primal":
        def run():
            with torch.no_grad():
                return _det(a, ell)
        return run, (lambda v: v.item())
    if function == "gradient":
        def run():
            v = a.clone().requires_grad_()
            return torch.autograd.grad(_det(v, ell), v)[0]
        return run, plain
    raise ValueError(f"det has no function {function}")
