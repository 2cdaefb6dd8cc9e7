"""GradBench's `lse` for the PyTorch adapter: log-sum-exp written from its parts (the maximum, the
shifted exponentials' sum), its gradient by torch.autograd.grad through all of them."""

import torch
from protocol import number, plain


def _lse(x):
    a = torch.max(x)
    return a + torch.log(torch.sum(torch.exp(x - a)))


def module(function, x):
    values = torch.tensor([number(v) for v in x["x"]], dtype=torch.float64)
    if function == "primal":
        def run():
            with torch.no_grad():
                return _lse(values)
        return run, (lambda v: v.item())
    if function == "gradient":
        def run():
            v = values.clone().requires_grad_()
            return torch.autograd.grad(_lse(v), v)[0]
        return run, plain
    raise ValueError(f"lse has no function {function}")
