"""GradBench's `det` for the JAX adapter: the determinant by expansion by minors along the first
row, as adgauge's engine computes it (workloads/src/det.rs): each minor of the last m rows and a
column set is expanded once, level by level from the bottom row (gathers of the entries and of
the sub-minors, their products, a matrix product with the alternating signs), instead of
cmpad's recursion that expands the same minors many times. Its gradient by jax.grad."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from protocol import number, plain

jax.config.update("jax_enable_x64", True)


@functools.cache
def tables(ell):
    """The bottom row's entries, then per level m = 2..ell: (entries, sub-minors, signs)."""
    position = {}
    for c in range(ell):
        position[1 << c] = c
    bottom = np.array([(ell - 1) * ell + c for c in range(ell)])
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
        signs = np.array([1.0 if j % 2 == 0 else -1.0 for j in range(m)])
        levels.append((np.array(entries).reshape(len(sets), m), np.array(subminors).reshape(len(sets), m), signs))
    return bottom, levels


def _det(a, ell):
    bottom, levels = tables(ell)
    minors = a[bottom]
    for entries, subminors, signs in levels:
        minors = (a[entries] * minors[subminors]) @ signs
    return minors[0]


_compiled = {
    "primal": jax.jit(_det, static_argnums=1),
    "gradient": jax.jit(jax.grad(_det), static_argnums=1),
}


def module(function, x):
    if function not in _compiled:
        raise ValueError(f"det has no function {function}")
    ell = int(x["ell"])
    a = jnp.asarray([number(v) for v in x["A"]], dtype=jnp.float64)
    if a.shape != (ell * ell,):
        raise ValueError(f"A has {a.shape[0]} entries, ell = {ell} needs {ell * ell}")
    f = _compiled[function]
    post = float if function == "primal" else plain
    return (lambda: f(a, ell).block_until_ready()), post
