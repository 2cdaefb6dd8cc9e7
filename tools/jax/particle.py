"""GradBench's `particle` eval in JAX (adgauge's JAX tool, tools/jax/run.py): a charged particle
from (0, 8) with velocity (0.75, 0) in the field of unit charges at (10, 10 - w) and (10, 0),
Euler steps of 0.1 (acceleration -grad_x p, the inner gradient) until it would cross the x-axis,
the crossing interpolated; GradBench's descent (tools/common/descent.py) finds the w whose
crossing is the origin. Functions ff, fr, rf, rr: the outer gradient (with respect to w) by
forward or reverse mode, the inner one (with respect to the position) by jax.jvp per coordinate
or jax.grad, nested.

JAX's transformations cannot branch on traced values, so the Euler loop runs twice: once on
concrete values (lax.while_loop, counting the steps), then as a loop of that many steps
(lax.fori_loop) that the outer transformation differentiates: the same path."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from descent import argmin  # tools/common, on the path run.py sets
from protocol import number

jax.config.update("jax_enable_x64", True)

DELTA_T = 0.1
START = (jnp.array([0.0, 8.0]), jnp.array([0.75, 0.0]))


def grad_f(fn, x):
    """The gradient by one jax.jvp per coordinate."""
    return jnp.stack([jax.jvp(fn, (x,), (jnp.zeros_like(x).at[i].set(1.0),))[1] for i in range(x.shape[0])])


def grad_r(fn, x):
    return jax.grad(fn)(x)


GRADIENT = {"f": grad_f, "r": grad_r}


def potential(x, w):
    moving = jnp.array([10.0, 10.0]) - jnp.array([0.0, 1.0]) * w
    fixed = jnp.array([10.0, 0.0])
    return 1.0 / jnp.sqrt(jnp.sum((x - moving) ** 2)) + 1.0 / jnp.sqrt(jnp.sum((x - fixed) ** 2))


def step(inner, state, w):
    x, v = state
    g = GRADIENT[inner](lambda y: potential(y, w), x)
    return x + DELTA_T * v, v + DELTA_T * -g


def squared_crossing(x, v):
    t = -x[1] / v[1]
    return (x[0] + t * v[0]) ** 2


@functools.partial(jax.jit, static_argnums=0)
def primal(inner, w):
    """(objective, steps) on concrete values."""

    def body(s):
        x, v = step(inner, s[:2], w)
        return x, v, s[2] + 1

    x, v, n = jax.lax.while_loop(lambda s: (s[0] + DELTA_T * s[1])[1] > 0, body, (*START, 0))
    return squared_crossing(x, v), n


def crossing(inner, w, n):
    x, v = jax.lax.fori_loop(0, n, lambda _, s: step(inner, s, w), START)
    return squared_crossing(x, v)


@functools.partial(jax.jit, static_argnums=(0, 1, 3))
def outer_gradient(outer, inner, w, n):
    return GRADIENT[outer](lambda u: crossing(inner, u[0], n), w)


def read(t):
    return np.asarray(t, dtype=np.float64).reshape(-1).tolist()


def particle(function, x):
    if function not in ("ff", "fr", "rf", "rr"):
        raise ValueError(f"particle has no function {function} (ff, fr, rf, rr)")
    outer, inner = function
    w0 = jnp.array([number(x["w"])])

    def run():
        w, _ = argmin(
            lambda w: primal(inner, w[0])[0],
            lambda w: outer_gradient(outer, inner, w, int(primal(inner, w[0])[1])),
            w0,
            read,
        )
        return w.block_until_ready()

    return run, lambda w: float(w[0])
