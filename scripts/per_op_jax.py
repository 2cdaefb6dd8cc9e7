#!/usr/bin/env python3
"""JAX's per-op cost on the chain of backends/examples/per_op_overhead.rs: n steps of
y = y * a + b (two ops a step) on a one-element f64 array, in nanoseconds per op, eager (each
op dispatched as it is called) and jitted (one compiled call), for the value and for the
gradient (jax.grad). Run beside the example on an idle machine:

    PY=~/.cache/adgauge-tools-venv/bin/python   # scripts/setup-tools.sh installs JAX there
    $PY scripts/per_op_jax.py [n] [reps]
"""
import statistics
import sys
import time

import jax
import jax.numpy as jnp

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platform_name", "cpu")


def chain(x, n):
    a, b = jnp.float64(1.0000001), jnp.float64(0.5)
    y = x
    for _ in range(n):
        y = y * a + b
    return y


def median_s(reps, f):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    x = jnp.array([0.25], dtype=jnp.float64)
    ops = 2 * n
    value = lambda x: chain(x, n)  # noqa: E731
    grad = jax.grad(lambda x: chain(x, n).sum())
    jit_value, jit_grad = jax.jit(value), jax.jit(grad)
    jax.block_until_ready(jit_value(x))  # compile outside the timing
    jax.block_until_ready(jit_grad(x))
    print(f"a chain of {n} steps (2 ops each) on one f64 element, median of {reps}, JAX {jax.__version__}")
    for name, f in [("eager", value), ("jit", jit_value), ("eager grad", grad), ("jit grad", jit_grad)]:
        print(f"jax {name:<11} {median_s(reps, lambda: f(x)) * 1e9 / ops:>9.1f} ns/op")


if __name__ == "__main__":
    main()
