"""GradBench's `lse` for the JAX adapter: log-sum-exp written from its parts (the maximum, the
shifted exponentials' sum), its gradient by jax.grad through all of them."""

import jax
import jax.numpy as jnp
from protocol import number, plain

jax.config.update("jax_enable_x64", True)


def _lse(x):
    a = jnp.max(x)
    return a + jnp.log(jnp.sum(jnp.exp(x - a)))


_compiled = {"primal": jax.jit(_lse), "gradient": jax.jit(jax.grad(_lse))}


def module(function, x):
    if function not in _compiled:
        raise ValueError(f"lse has no function {function}")
    values, f = jnp.asarray([number(v) for v in x["x"]], dtype=jnp.float64), _compiled[function]
    post = float if function == "primal" else plain
    return (lambda: f(values).block_until_ready()), post
