"""GradBench's gradient descent for the nested-AD evals `particle` and `saddle`
(`multivariate_argmin` of its cpp/gradbench/gd.hpp, step for step), for any array module: from
x with step 1e-5, doubled after ten accepted steps and halved after a rejected one; stops when
the gradient or the step is at most 1e-5 long. Standard library only.

`argmin` also returns the step sizes of the accepted steps: `x_(k+1) = x_k - eta_k g(x_k)`. A
tool whose AD cannot follow Python control flow on traced values (JAX) runs the descent on
concrete values, then differentiates the same path: the accepted steps, replayed."""

import math

MAX_ITERATIONS = 1_000_000


def argmin(f, g, x, read):
    """(argmin, etas): `f(x)` a scalar, `g(x)` its gradient, `read(t)` a list of floats."""
    fx = read(f(x))[0]
    gx = g(x)
    gx_host, x_host = read(gx), read(x)
    accepted, eta, etas = 0, 1e-5, []
    for _ in range(MAX_ITERATIONS):
        if not all(math.isfinite(v) for v in gx_host + [fx]):
            raise ValueError(f"gradient descent met a non-finite value at {x_host}")
        if math.sqrt(sum(v * v for v in gx_host)) <= 1e-5:
            return x, etas
        if accepted == 10:
            eta *= 2
            accepted = 0
            continue
        x_prime = x - eta * gx
        x_prime_host = read(x_prime)
        if math.sqrt(sum((a - b) * (a - b) for a, b in zip(x_host, x_prime_host))) <= 1e-5:
            return x, etas
        fx_prime = read(f(x_prime))[0]
        if fx_prime < fx:
            x, x_host, fx = x_prime, x_prime_host, fx_prime
            etas.append(eta)
            gx = g(x)
            gx_host = read(gx)
            accepted += 1
        else:
            eta /= 2
            accepted = 0
    raise ValueError(f"gradient descent did not converge in {MAX_ITERATIONS} iterations")


def argmax(f, g, x, read):
    """`argmin` of -f (gradient -g): GradBench's multivariate_argmax."""
    return argmin(lambda y: -f(y), lambda y: -g(y), x, read)
