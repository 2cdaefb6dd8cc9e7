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
from tables import det_tables

jax.config.update("jax_enable_x64", True)


@functools.cache
def tables(ell):
    """det_tables (tools/common/tables.py) as arrays."""
    bottom, levels = det_tables(ell)
    return np.array(bottom), [(np.array(e), np.array(s), np.array(g)) for e, s, g in levels]


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
