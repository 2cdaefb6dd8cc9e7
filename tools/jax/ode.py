"""GradBench's `ode` for the JAX adapter: s RK4 steps from 0 to 2 on y_0' = x_0,
y_i' = x_i y_{i-1} (GradBench's ode.hpp, in its order of operations) under jax.lax.scan; the
gradient of the last element by jax.grad. In f64 (GradBench's own JAX ode tool does not enable
x64, so it computes in f32)."""

import jax
import jax.numpy as jnp
from protocol import number, plain

jax.config.update("jax_enable_x64", True)


def _solve(x, s):
    h = 2.0 / s

    def f(y):
        return jnp.concatenate([x[:1], x[1:] * y[:-1]])

    def step(y, _):
        k1 = f(y)
        k2 = f(y + h * k1 / 2.0)
        k3 = f(y + h * k2 / 2.0)
        k4 = f(y + h * k3)
        return y + h * (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0, None

    y, _ = jax.lax.scan(step, jnp.zeros_like(x), None, length=s)
    return y


def _last(x, s):
    return _solve(x, s)[-1]


_compiled = {
    "primal": jax.jit(_solve, static_argnums=1),
    "gradient": jax.jit(jax.grad(_last), static_argnums=1),
}


def module(function, x):
    if function not in _compiled:
        raise ValueError(f"ode has no function {function}")
    values, s = jnp.asarray([number(v) for v in x["x"]], dtype=jnp.float64), int(x["s"])
    f = _compiled[function]
    return (lambda: f(values, s).block_until_ready()), plain
