"""GradBench's `particle` eval in PyTorch (adgauge's PyTorch tool, tools/pytorch/run.py): a
charged particle from (0, 8) with velocity (0.75, 0) in the field of unit charges at
(10, 10 - w) and (10, 0), Euler steps of 0.1 (acceleration -grad_x p, the inner gradient) until
it would cross the x-axis, the crossing interpolated; GradBench's descent
(tools/common/descent.py) finds the w whose crossing is the origin. Functions ff, fr, rf, rr:
the outer gradient (with respect to w) by forward or reverse mode, the inner one (with respect
to the position) by torch.func.jvp per coordinate or torch.func.grad, nested (torch.func's
levels keep the two perturbations apart). The loop reads each next height back (.item(), which
torch.func's grad and jvp allow), as GradBench's tools do."""

import torch
from descent import argmin  # tools/common, on the path run.py sets
from protocol import number

DELTA_T = 0.1


def grad_f(fn, x):
    """The gradient by one torch.func.jvp per coordinate."""
    return torch.stack([torch.func.jvp(fn, (x,), (torch.eye(x.shape[0], dtype=x.dtype)[i],))[1] for i in range(x.shape[0])])


def grad_r(fn, x):
    return torch.func.grad(fn)(x)


GRADIENT = {"f": grad_f, "r": grad_r}


def potential(x, w):
    moving = torch.tensor([10.0, 10.0], dtype=torch.float64) - torch.tensor([0.0, 1.0], dtype=torch.float64) * w
    fixed = torch.tensor([10.0, 0.0], dtype=torch.float64)
    return 1.0 / torch.sqrt(torch.sum((x - moving) ** 2)) + 1.0 / torch.sqrt(torch.sum((x - fixed) ** 2))


def crossing(inner, w):
    x = torch.tensor([0.0, 8.0], dtype=torch.float64)
    v = torch.tensor([0.75, 0.0], dtype=torch.float64)
    for _ in range(1_000_000):
        x_new = x + DELTA_T * v
        if x_new[1].item() <= 0:
            t = -x[1] / v[1]
            return (x[0] + t * v[0]) ** 2
        g = GRADIENT[inner](lambda y: potential(y, w), x)
        x, v = x_new, v + DELTA_T * -g
    raise ValueError("particle: no crossing of the x-axis within 10^6 Euler steps")


def read(t):
    return t.detach().reshape(-1).tolist()


def particle(function, x):
    if function not in ("ff", "fr", "rf", "rr"):
        raise ValueError(f"particle has no function {function} (ff, fr, rf, rr)")
    outer, inner = function
    w0 = torch.tensor([number(x["w"])], dtype=torch.float64)

    def run():
        def objective(w):
            return crossing(inner, w[0])

        w, _ = argmin(objective, lambda w: GRADIENT[outer](objective, w), w0, read)
        return w

    return run, lambda w: w[0].item()
