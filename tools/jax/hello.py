"""GradBench's `hello` for the JAX adapter: `square` (x * x) and `double`, its derivative by
jax.grad. The input and the output are bare numbers."""

import jax
import jax.numpy as jnp
from protocol import number

jax.config.update("jax_enable_x64", True)


def _square(x):
    return x * x


_compiled = {"square": jax.jit(_square), "double": jax.jit(jax.grad(_square))}


def module(function, x):
    if function not in _compiled:
        raise ValueError(f"hello has no function {function}")
    value, f = jnp.asarray(number(x), dtype=jnp.float64), _compiled[function]
    return (lambda: f(value).block_until_ready()), float
