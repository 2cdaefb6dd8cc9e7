"""GradBench's `hello` for the PyTorch adapter: `square` (x * x) and `double`, its derivative by
torch.autograd.grad. The input and the output are bare numbers."""

import torch
from protocol import number


def _square(x):
    return x * x


def _double(x):
    x = x.clone().requires_grad_()
    return torch.autograd.grad(_square(x), x)[0]


def module(function, x):
    value = torch.tensor(number(x), dtype=torch.float64)
    if function == "square":
        def run():
            with torch.no_grad():
                return _square(value)
    elif function == "double":
        def run():
            return _double(value)
    else:
        raise ValueError(f"hello has no function {function}")
    return run, (lambda v: v.item())
