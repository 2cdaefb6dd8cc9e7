"""GradBench's `saddle` eval in JAX (adgauge's JAX tool, tools/jax/run.py): the saddle point of
f(p1, p2) = |p1|^2 - |p2|^2 as r1 = argmin_p1 max_p2 f(p1, p2), then r2 = argmax_p2 f(r1, p2),
every descent GradBench's (tools/common/descent.py) from `start`. Functions ff, fr, rf, rr: the
outer gradient (with respect to p1, through the inner ascent) by forward or reverse mode, the
inner one (with respect to p2) by jax.jvp per coordinate or jax.grad; r2's ascent uses the outer
mode.

JAX's transformations cannot branch on traced values, so the inner ascent runs on concrete
values first (its decisions fix the accepted step sizes), then its accepted steps are replayed
(lax.scan) inside the outer transformation: the same path, differentiated."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from descent import argmax, argmin  # tools/common, on the path run.py sets
from protocol import number

jax.config.update("jax_enable_x64", True)

from particle import GRADIENT  # noqa: E402 - the same nested gradients


def f(p1, p2):
    return (p1[0] ** 2 + p1[1] ** 2) - (p2[0] ** 2 + p2[1] ** 2)


@functools.partial(jax.jit, static_argnums=0)
def inner_gradient(mode, p1, p2):
    return GRADIENT[mode](lambda q: f(p1, q), p2)


value = jax.jit(f)


def read(t):
    return np.asarray(t, dtype=np.float64).reshape(-1).tolist()


def ascent(mode, p1, start):
    """(argmax_p2 f(p1, p2), accepted step sizes), on concrete values."""
    return argmax(lambda p2: value(p1, p2), lambda p2: inner_gradient(mode, p1, p2), start, read)


@functools.partial(jax.jit, static_argnums=(0, 1))
def outer_gradient(outer, inner, p1, start, etas):
    def objective(u):
        # The ascent's accepted steps p2 - eta (-g(p2)), as argmax takes them.
        def accepted(p2, eta):
            return p2 - eta * -GRADIENT[inner](lambda q: f(u, q), p2), None

        return f(u, jax.lax.scan(accepted, start, etas)[0])

    return GRADIENT[outer](objective, p1)


def saddle(function, x):
    if function not in ("ff", "fr", "rf", "rr"):
        raise ValueError(f"saddle has no function {function} (ff, fr, rf, rr)")
    outer, inner = function
    start = jnp.array([number(v) for v in x["start"]], dtype=jnp.float64)
    if start.shape != (2,):
        raise ValueError("saddle: start must have 2 numbers")

    def run():
        def gradient(p1):
            etas = jnp.array(ascent(inner, p1, start)[1], dtype=jnp.float64)
            return outer_gradient(outer, inner, p1, start, etas)

        r1, _ = argmin(lambda p1: value(p1, ascent(inner, p1, start)[0]), gradient, start, read)
        r2, _ = ascent(outer, r1, start)
        return jnp.concatenate([r1, r2]).block_until_ready()

    return run, lambda r: read(r)
