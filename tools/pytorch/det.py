"""GradBench's `det` for the PyTorch adapter: the determinant by expansion by minors along the
first row, as adgauge's engine computes it (workloads/src/det.rs): each minor of the last m rows
and a column set is expanded once, level by level from the bottom row (gathers of the entries
and of the sub-minors, their products, a matrix product with the alternating signs), instead of
cmpad's recursion that expands the same minors many times. Its gradient by
torch.autograd.grad."""

import functools

import torch
from protocol import number, plain


@functools.cache
def tables(ell):
    """The bottom row's entries, then per level m = 2..ell: (entries, sub-minors, signs)."""
    position = {1 << c: c for c in range(ell)}
    bottom = torch.tensor([(ell - 1) * ell + c for c in range(ell)])
    levels = []
    for m in range(2, ell + 1):
        row = ell - m
        sets = [s for s in range(1 << ell) if bin(s).count("1") == m]
        entries, subminors = [], []
        for s in sets:
            for c in (c for c in range(ell) if s >> c & 1):
                entries.append(row * ell + c)
                subminors.append(position[s & ~(1 << c)])
        position = {s: p for p, s in enumerate(sets)}
        signs = torch.tensor([1.0 if j % 2 == 0 else -1.0 for j in range(m)], dtype=torch.float64)
        levels.append((torch.tensor(entries).reshape(len(sets), m), torch.tensor(subminors).reshape(len(sets), m),
                       signs))
    return bottom, levels


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
