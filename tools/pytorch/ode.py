"""GradBench's `ode` for the PyTorch adapter: s RK4 steps from 0 to 2 on y_0' = x_0,
y_i' = x_i y_{i-1} (GradBench's ode.hpp, in its order of operations), eagerly; the gradient of
the last element by torch.autograd.grad."""

import torch
from protocol import number, plain


def _solve(x, s):
    h = 2.0 / s

    def f(y):
        return torch.cat([x[:1], x[1:] * y[:-1]])

    y = torch.zeros_like(x)
    for _ in range(s):
        k1 = f(y)
        k2 = f(y + h * k1 / 2.0)
        k3 = f(y + h * k2 / 2.0)
        k4 = f(y + h * k3)
        y = y + h * (k1 + 2.0 * k2 + 2.0 * k3 + k4) / 6.0
    return y


def module(function, x):
    values, s = torch.tensor([number(v) for v in x["x"]], dtype=torch.float64), int(x["s"])
    if function == "primal":
        def run():
            with torch.no_grad():
                return _solve(values, s)
        return run, plain
    if function == "gradient":
        def run():
            v = values.clone().requires_grad_()
            return torch.autograd.grad(_solve(v, s)[-1], v)[0]
        return run, plain
    raise ValueError(f"ode has no function {function}")
