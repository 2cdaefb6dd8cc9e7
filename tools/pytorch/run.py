#!/usr/bin/env python3
"""PyTorch (CPU, float64, eager) as a GradBench-protocol tool for adgauge: modules `hist`,
`llsq`, `kmeans`, `lstm`, `gmm` and `ba` (docs/protocol.md).

Needs PyTorch and numpy: scripts/setup-tools.sh makes a virtualenv with pinned versions.
Reverse mode is torch.autograd.grad; forward mode is torch.autograd.forward_ad (dual tensors),
which, unlike torch.func.jvp, shows when an operation carries no tangent at all instead of
turning it into zeros; such a function answers `success: false` with the reason.

hist: `dest.scatter_reduce(0, bins, vals, reduce, include_self=True)` with reduce sum (add),
prod (mul), amin (min) and amax (max); out-of-range indices go to an extra bin that is dropped.
scatter_reduce's amin/amax backward splits a tied bin's adjoint evenly between the tied entries,
dest included (the convention declared at start). Its prod backward handles zeros with exclusive
products (no division by zero), but prod has no forward-mode derivative in PyTorch (the output
has no tangent; torch.func.jvp silently returns zeros), so mul's jvp is unsupported. logaddexp
is max-shifted (the shift detached: it cancels in the derivative); hypot is
sqrt(dest^2 + sum vals^2).

The threads of PyTorch's CPU pool: $ADGAUGE_TOOLS_THREADS, else all cores; recorded in the start
response's config, with OpenMP's wait policy. That is passive unless $OMP_WAIT_POLICY says
otherwise: with active (spinning) waits, on a machine whose cores are busy with other processes,
every parallel region of a small op waits out a scheduler slice (torch.exp of 2000 doubles took
7.7 ms on 2 threads instead of 0.05 ms). adgauge sends one warm-up message before the timed ones, so the adapter adds
no warm-up of its own; each timing covers one run of the computation only (inputs are converted
to tensors before the timed runs, outputs to JSON after).
"""

import importlib
import math
import os
import pathlib
import sys

# Read by OpenMP when torch loads it: set before the import (see the module documentation).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.autograd.forward_ad as fwAD  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "common"))
import ba as ba_module  # noqa: E402 - tools/common, put on the path above
from protocol import number, plain, serve  # noqa: E402

F64 = torch.float64
THREADS = int(os.environ.get("ADGAUGE_TOOLS_THREADS", "0")) or (os.cpu_count() or 1)
torch.set_num_threads(THREADS)

CONVENTIONS = {
    "tie-policy": "split",
    "mul": "scatter_reduce prod: zeros by exclusive products (reverse mode only)",
}


def tensor(xs):
    return torch.tensor([number(v) for v in xs], dtype=F64)


def matrix(x, field):
    return torch.tensor([[number(v) for v in row] for row in x[field]], dtype=F64)


def grads(outputs, inputs, seed=None):
    """Reverse mode: d<seed, outputs>/d inputs, zeros for inputs the outputs do not use."""
    gs = torch.autograd.grad(outputs, inputs, seed, allow_unused=True)
    return [torch.zeros_like(i) if g is None else g for i, g in zip(inputs, gs)]


def forward(f, primals, tangents):
    """Forward mode: (f(primals), its derivative along tangents) by dual tensors. An output
    without a tangent means PyTorch has no forward-mode rule for an operation on the way (it
    would otherwise be read as a zero derivative): that is unsupported, not zero."""
    with fwAD.dual_level():
        out = f(*[fwAD.make_dual(p, t) for p, t in zip(primals, tangents)])
        primal, tangent = fwAD.unpack_dual(out)
        if tangent is None:
            raise NotImplementedError("PyTorch's forward-mode AD gives this function no tangent "
                                      "(an operation without a forward-mode rule)")
        return primal.detach().clone(), tangent.clone()


def hist_fn(op, k, inds):
    bins = torch.where((inds >= 0) & (inds < k), inds, torch.full_like(inds, k))
    reduce = {"add": "sum", "mul": "prod", "min": "amin", "max": "amax"}.get(op)

    def extended(d, fill):
        return torch.cat([d, torch.full((1,), fill, dtype=F64)])

    def f(vals, dest):
        if reduce is not None:
            # dest is the initial value of each bin (include_self); the extra bin is dropped.
            return extended(dest, 1.0).scatter_reduce(0, bins, vals, reduce, include_self=True)[:k]
        if op == "hypot":
            return torch.sqrt(dest * dest + extended(torch.zeros_like(dest), 0.0).scatter_add(0, bins, vals * vals)[:k])
        if op == "logaddexp":
            with torch.no_grad():
                m = extended(dest.detach(), -math.inf).scatter_reduce(0, bins, vals.detach(), "amax",
                                                                        include_self=True)
                m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            s = extended(torch.zeros_like(dest), 0.0).scatter_add(0, bins, torch.exp(vals - m[bins]))[:k]
            return m[:k] + torch.log(s + torch.exp(dest - m[:k]))
        raise ValueError(f"operator {op} is not supported")
    return f


def hist(function, x):
    op, k = x["op"], int(x["k"])
    inds = torch.tensor([int(i) for i in x["inds"]], dtype=torch.int64)
    vals, dest = tensor(x["vals"]), tensor(x["dest"])
    f = hist_fn(op, k, inds)
    if function == "primal":
        def run():
            with torch.no_grad():
                return f(vals, dest)
        return run, (lambda h: {"hist": plain(h)})
    if function == "vjp":
        bar = tensor(x["hist_bar"])

        def run():
            v, d = vals.clone().requires_grad_(), dest.clone().requires_grad_()
            h = f(v, d)
            vb, db = grads(h, (v, d), bar)
            return h.detach(), vb, db
        return run, (lambda r: {"hist": plain(r[0]), "vals_bar": plain(r[1]), "dest_bar": plain(r[2])})
    if function == "jvp":
        vd, dd = tensor(x["vals_dot"]), tensor(x["dest_dot"])
        return (lambda: forward(f, (vals, dest), (vd, dd))), (
            lambda r: {"hist": plain(r[0]), "hist_dot": plain(r[1])})
    raise ValueError(f"hist has no function {function}")


def llsq(function, x):
    coeffs, n = tensor(x["x"]), int(x["n"])

    def y(c):
        t = -1.0 + torch.arange(n, dtype=F64) * 2.0 / (n - 1)
        powers = t[:, None] ** torch.arange(c.shape[0], dtype=F64)[None, :]
        r = torch.sign(t) - powers @ c
        return 0.5 * torch.sum(r * r)

    if function == "primal":
        def run():
            with torch.no_grad():
                return y(coeffs)
        return run, (lambda v: v.item())
    if function == "gradient":
        def run():
            c = coeffs.clone().requires_grad_()
            return grads(y(c), (c,))[0]
        return run, plain
    raise ValueError(f"llsq has no function {function}")


def kmeans(function, x):
    points, centroids = matrix(x, "points"), matrix(x, "centroids")

    def cost(c):
        d2 = torch.sum((points[:, None, :] - c[None, :, :]) ** 2, dim=2)
        return torch.sum(torch.min(d2, dim=1).values)

    if function == "cost":
        def run():
            with torch.no_grad():
                return cost(centroids)
        return run, (lambda v: v.item())
    if function == "dir":
        def run():
            # The Hessian is diagonal: one Hessian-vector product with ones, forward over reverse.
            g, h = torch.func.jvp(torch.func.grad(cost), (centroids,), (torch.ones_like(centroids),))
            return torch.where(h > 0, g / torch.where(h > 0, h, torch.ones_like(h)), torch.zeros_like(g))
        return run, (lambda d: [plain(row) for row in d])
    raise ValueError(f"kmeans has no function {function}")


def lstm(function, x):
    """ADBench's D-LSTM (diagonal weights, the +2 inside the log-sum-exp kept), step by step."""
    main, extra = matrix(x, "main_params"), matrix(x, "extra_params")
    state, seq = matrix(x, "state"), matrix(x, "sequence")
    layers, b = main.shape[0] // 2, main.shape[1] // 4

    def loss(main, extra):
        hidden, cell = list(state[0::2]), list(state[1::2])
        total = torch.zeros((), dtype=F64)
        for t in range(seq.shape[0] - 1):
            inp = seq[t] * extra[0]
            for j in range(layers):
                w, bias = main[2 * j], main[2 * j + 1]
                forget = torch.sigmoid(inp * w[:b] + bias[:b])
                ingate = torch.sigmoid(hidden[j] * w[b:2 * b] + bias[b:2 * b])
                outgate = torch.sigmoid(inp * w[2 * b:3 * b] + bias[2 * b:3 * b])
                change = torch.tanh(hidden[j] * w[3 * b:] + bias[3 * b:])
                cell[j] = cell[j] * forget + ingate * change
                hidden[j] = outgate * torch.tanh(cell[j])
                inp = hidden[j]
            ypred = inp * extra[1] + extra[2]
            ynorm = ypred - torch.log(torch.sum(torch.exp(ypred)) + 2.0)
            total = total + torch.sum(seq[t + 1] * ynorm)
        return -total / ((seq.shape[0] - 1) * b)

    if function == "objective":
        def run():
            with torch.no_grad():
                return loss(main, extra)
        return run, (lambda v: v.item())
    if function == "jacobian":
        def run():
            mp, ep = main.clone().requires_grad_(), extra.clone().requires_grad_()
            return grads(loss(mp, ep), (mp, ep))
        return run, (lambda g: plain(torch.cat([g[0].reshape(-1), g[1].reshape(-1)])))
    raise ValueError(f"lstm has no function {function}")


def logsumexp(a, dim):
    """Max-shifted: exp never overflows; the shift is detached (it cancels in the derivative)."""
    mx = torch.max(a, dim=dim, keepdim=True).values.detach()
    return mx.squeeze(dim) + torch.log(torch.sum(torch.exp(a - mx), dim=dim))


def gmm(function, x):
    """GradBench's GMM: sum_i logsumexp_k(alpha_k + sum(q_k) - |Q_k (x_i - mu_k)|^2 / 2)
    - n logsumexp(alpha) + the log Wishart prior, Q_k = diag(exp q_k) + the strictly lower part
    filled column by column from l_k."""
    d, k, n = int(x["d"]), int(x["k"]), int(x["n"])
    alpha, mu, q, points = tensor(x["alpha"]), matrix(x, "mu"), matrix(x, "q"), matrix(x, "x")
    lw = d * (d - 1) // 2
    l = matrix(x, "l") if lw > 0 else torch.zeros((k, 0), dtype=F64)
    gamma, m = float(x["gamma"]), int(x["m"])
    # Column-by-column order of the strictly lower part: (1,0), (2,0), ..., (2,1), ...
    cols, rws = (torch.from_numpy(a) for a in np.triu_indices(d, 1))
    np1 = d + m + 1
    log_gamma_d = 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(0.5 * np1 + 0.5 * (1 - j))
                                                               for j in range(1, d + 1))
    c = np1 * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_d
    const = -n * d * 0.5 * math.log(2.0 * math.pi) + k * c

    def objective(alpha, mu, q, l):
        lower = torch.zeros((k, d, d), dtype=F64)
        lower[:, rws, cols] = l
        qmat = lower + torch.diag_embed(torch.exp(q))
        xc = points[:, None, :] - mu[None, :, :]
        z = torch.einsum("krc,nkc->nkr", qmat, xc)
        main = alpha[None, :] + torch.sum(q, dim=1)[None, :] - 0.5 * torch.sum(z * z, dim=2)
        prior = 0.5 * gamma * gamma * (torch.sum(torch.exp(2.0 * q)) + torch.sum(l * l)) - m * torch.sum(q)
        return const + torch.sum(logsumexp(main, 1)) - n * logsumexp(alpha, 0) - prior

    if function == "objective":
        def run():
            with torch.no_grad():
                return objective(alpha, mu, q, l)
        return run, (lambda v: v.item())
    if function == "jacobian":
        def run():
            ps = [t.clone().requires_grad_() for t in (alpha, mu, q, l)]
            return grads(objective(*ps), ps)
        return run, (lambda g: {"alpha": plain(g[0]), "mu": [plain(r) for r in g[1]],
                                "q": [plain(r) for r in g[2]], "l": [plain(r) for r in g[3]]})
    raise ValueError(f"gmm has no function {function}")


def ba(function, x):
    n, m, p, cams, pts, w, feats, obs, full = ba_module.problem(x)
    # Each observation's 15 parameters, gathered once (outside the timed runs, as the layout).
    params = torch.from_numpy(ba_module.gathered(cams, pts, w, obs))
    feats = torch.from_numpy(feats)
    rows, cols = ba_module.pattern(n, m, p, obs)
    output = ba_module.output(function, full, p, rows, cols)

    def residual(q, f):
        return ba_module.residual(q, f, torch)

    if function == "objective":
        def run():
            with torch.no_grad():
                return torch.func.vmap(residual)(params, feats), 1.0 - params[:, 14] ** 2
    else:
        jac = torch.func.vmap(torch.func.jacfwd(residual))

        def run():
            # Each observation's 2 x 15 block by forward mode (15 tangents), all at once.
            return jac(params, feats), -2.0 * params[:, 14]
    return run, (lambda r: output((r[0].numpy(), r[1].numpy())))


MODULES = {"hist": hist, "llsq": llsq, "kmeans": kmeans, "lstm": lstm, "gmm": gmm, "ba": ba}
# GradBench's other evals, one file each beside this one (tools/pytorch/<eval>.py, whose `module`
# answers it), one line each.
MODULES["hello"] = importlib.import_module("hello").module
MODULES["lse"] = importlib.import_module("lse").module
MODULES["det"] = importlib.import_module("det").module
MODULES["ode"] = importlib.import_module("ode").module
MODULES["ht"] = __import__("ht").ht  # tools/pytorch/ht.py
MODULES["particle"] = __import__("particle").particle  # tools/pytorch/particle.py
MODULES["saddle"] = __import__("saddle").saddle  # tools/pytorch/saddle.py


def main():
    config = {"version": torch.__version__, "numpy": np.__version__, "threads": THREADS,
              "omp_wait_policy": os.environ["OMP_WAIT_POLICY"], "conventions": CONVENTIONS}
    serve("pytorch", config, MODULES)


if __name__ == "__main__":
    main()
