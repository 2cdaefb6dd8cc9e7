#!/usr/bin/env python3
"""JAX as a GradBench-protocol tool for adgauge (modules `hist`, `llsq`, `kmeans`, `lstm`, `gmm`
and `ba`).

Needs JAX (CPU): scripts/setup-tools.sh makes a virtualenv with pinned versions. Every function
is jit-compiled per shape; derivatives come from jax.vjp and jax.jvp.

hist (docs/protocol.md): add, min, max and hypot through jax.ops.segment_* (JAX splits a tied
min/max bin's adjoint evenly between the tied entries: the convention declared at start);
logaddexp as a max-shifted log-sum-exp; mul through a zero-counting product with a custom VJP
(jax.ops.segment_prod has no derivative), so its forward mode is unsupported.

gmm: GradBench's objective (log likelihood + log Wishart prior), max-shifted log-sum-exps; its
gradient by jax.grad. ba: ADBench's residuals vectorised over observations; each observation's
2 x 15 Jacobian block by jax.jacfwd (vmapped), laid out as ADBench's CSR (docs/protocol.md, with
adgauge's `full` extension).
"""

import importlib
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "common"))
import ba as ba_module  # noqa: E402 - tools/common, put on the path above
from protocol import number, plain, serve  # noqa: E402

jax.config.update("jax_enable_x64", True)

CONVENTIONS = {"tie-policy": "split", "mul": "zero-count (reverse mode only)"}


def segments(inds, k):
    """Out-of-range indices go to an extra segment k, dropped afterwards."""
    return jnp.where((inds >= 0) & (inds < k), inds, k)


def zero_count_product(vals, seg, k):
    @jax.custom_vjp
    def prod(v):
        return forward(v)[0]

    def forward(v):
        nonzero = jnp.where(v == 0, 1.0, v)
        p = jax.ops.segment_prod(nonzero, seg, num_segments=k + 1)[:k]
        z = jax.ops.segment_sum((v == 0).astype(v.dtype), seg, num_segments=k + 1)[:k]
        return jnp.where(z > 0, 0.0, p), (v, p, z)

    def backward(res, g):
        v, p, z = res
        pk = jnp.concatenate([p, jnp.ones(1)])[seg]
        zk = jnp.concatenate([z, jnp.zeros(1)])[seg]
        gk = jnp.concatenate([g, jnp.zeros(1)])[seg]
        safe = jnp.where(v == 0, 1.0, v)
        dv = jnp.where(zk == 0, pk / safe, jnp.where((zk == 1) & (v == 0), pk, 0.0))
        return (gk * dv,)

    prod.defvjp(forward, backward)
    return prod(vals)


def hist_fn(op, k):
    def f(inds, vals, dest):
        seg = segments(inds, k)
        if op == "add":
            return dest + jax.ops.segment_sum(vals, seg, num_segments=k + 1)[:k]
        if op == "min":
            return jnp.minimum(dest, jax.ops.segment_min(vals, seg, num_segments=k + 1)[:k])
        if op == "max":
            return jnp.maximum(dest, jax.ops.segment_max(vals, seg, num_segments=k + 1)[:k])
        if op == "hypot":
            return jnp.sqrt(dest * dest + jax.ops.segment_sum(vals * vals, seg, num_segments=k + 1)[:k])
        if op == "logaddexp":
            m = jnp.maximum(dest, jax.ops.segment_max(vals, seg, num_segments=k + 1)[:k])
            safe = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
            mk = jnp.concatenate([safe, jnp.zeros(1)])[seg]
            s = jax.ops.segment_sum(jnp.exp(vals - mk), seg, num_segments=k + 1)[:k] + jnp.exp(dest - safe)
            return safe + jnp.log(s)
        if op == "mul":
            return dest * zero_count_product(vals, seg, k)
        raise ValueError(f"operator {op} is not supported")
    return f


_compiled = {}


def compiled(key, make):
    if key not in _compiled:
        _compiled[key] = jax.jit(make())
    return _compiled[key]


def hist(function, x):
    """Prepares `function` on the input; returns a timed run and the output's formatter."""
    op, k = x["op"], int(x["k"])
    inds = jnp.asarray(x["inds"], dtype=jnp.int64)
    vals = jnp.asarray([number(v) for v in x["vals"]], dtype=jnp.float64)
    dest = jnp.asarray([number(v) for v in x["dest"]], dtype=jnp.float64)
    f = hist_fn(op, k)
    if function == "primal":
        run = compiled(("primal", op, k), lambda: f)
        return (lambda: run(inds, vals, dest).block_until_ready()), (lambda h: {"hist": plain(h)})
    if function == "vjp":
        bar = jnp.asarray([number(v) for v in x["hist_bar"]], dtype=jnp.float64)

        def vjp(inds, vals, dest, bar):
            h, pull = jax.vjp(lambda v, d: f(inds, v, d), vals, dest)
            vb, db = pull(bar)
            return h, vb, db

        run = compiled(("vjp", op, k), lambda: vjp)
        return (lambda: jax.block_until_ready(run(inds, vals, dest, bar))), (
            lambda r: {"hist": plain(r[0]), "vals_bar": plain(r[1]), "dest_bar": plain(r[2])}
        )
    if function == "jvp":
        if op == "mul":
            raise ValueError("mul: the zero-counting product has a custom VJP and no forward mode")
        vd = jnp.asarray([number(v) for v in x["vals_dot"]], dtype=jnp.float64)
        dd = jnp.asarray([number(v) for v in x["dest_dot"]], dtype=jnp.float64)

        def jvp(inds, vals, dest, vd, dd):
            return jax.jvp(lambda v, d: f(inds, v, d), (vals, dest), (vd, dd))

        run = compiled(("jvp", op, k), lambda: jvp)
        return (lambda: jax.block_until_ready(run(inds, vals, dest, vd, dd))), (
            lambda r: {"hist": plain(r[0]), "hist_dot": plain(r[1])}
        )
    raise ValueError(f"hist has no function {function}")


def llsq(function, x):
    coeffs = jnp.asarray([number(v) for v in x["x"]], dtype=jnp.float64)
    n = int(x["n"])

    def y(c):
        t = -1.0 + jnp.arange(n, dtype=jnp.float64) * 2.0 / (n - 1)
        powers = t[:, None] ** jnp.arange(c.shape[0], dtype=jnp.float64)[None, :]
        r = jnp.sign(t) - powers @ c
        return 0.5 * jnp.sum(r * r)

    if function == "primal":
        run = compiled(("llsq", n), lambda: y)
        return (lambda: run(coeffs).block_until_ready()), float
    if function == "gradient":
        run = compiled(("llsq-grad", n), lambda: jax.grad(y))
        return (lambda: run(coeffs).block_until_ready()), plain
    raise ValueError(f"llsq has no function {function}")


def kmeans(function, x):
    points = jnp.asarray([[number(v) for v in row] for row in x["points"]], dtype=jnp.float64)
    centroids = jnp.asarray([[number(v) for v in row] for row in x["centroids"]], dtype=jnp.float64)

    def cost(c):
        d2 = jnp.sum((points[:, None, :] - c[None, :, :]) ** 2, axis=2)
        return jnp.sum(jnp.min(d2, axis=1))

    def direction(c):
        # The Hessian is diagonal: one Hessian-vector product with ones (forward over reverse).
        g, h = jax.jvp(jax.grad(cost), (c,), (jnp.ones_like(c),))
        return jnp.where(h > 0, g / jnp.where(h > 0, h, 1.0), 0.0)

    shape = points.shape + centroids.shape
    if function == "cost":
        run = compiled(("kmeans-cost", shape), lambda: cost)
        return (lambda: run(centroids).block_until_ready()), float
    if function == "dir":
        run = compiled(("kmeans-dir", shape), lambda: direction)
        return (lambda: run(centroids).block_until_ready()), (lambda d: [plain(row) for row in d])
    raise ValueError(f"kmeans has no function {function}")


def lstm(function, x):
    """ADBench's D-LSTM (diagonal weights, the +2 inside the log-sum-exp kept)."""
    main = jnp.asarray([[number(v) for v in row] for row in x["main_params"]], dtype=jnp.float64)
    extra = jnp.asarray([[number(v) for v in row] for row in x["extra_params"]], dtype=jnp.float64)
    state = jnp.asarray([[number(v) for v in row] for row in x["state"]], dtype=jnp.float64)
    seq = jnp.asarray([[number(v) for v in row] for row in x["sequence"]], dtype=jnp.float64)
    layers, b = main.shape[0] // 2, main.shape[1] // 4

    def loss(main, extra):
        def step(carry, t):
            hidden, cell = carry
            inp = seq[t] * extra[0]
            new_h, new_c = [], []
            for j in range(layers):
                w, bias = main[2 * j], main[2 * j + 1]
                forget = jax.nn.sigmoid(inp * w[:b] + bias[:b])
                ingate = jax.nn.sigmoid(hidden[j] * w[b:2 * b] + bias[b:2 * b])
                outgate = jax.nn.sigmoid(inp * w[2 * b:3 * b] + bias[2 * b:3 * b])
                change = jnp.tanh(hidden[j] * w[3 * b:] + bias[3 * b:])
                c = cell[j] * forget + ingate * change
                h = outgate * jnp.tanh(c)
                new_h.append(h)
                new_c.append(c)
                inp = h
            ypred = inp * extra[1] + extra[2]
            ynorm = ypred - jnp.log(jnp.sum(jnp.exp(ypred)) + 2.0)
            return (jnp.stack(new_h), jnp.stack(new_c)), jnp.sum(seq[t + 1] * ynorm)

        init = (state[0::2], state[1::2])
        _, totals = jax.lax.scan(step, init, jnp.arange(seq.shape[0] - 1))
        return -jnp.sum(totals) / ((seq.shape[0] - 1) * b)

    shape = (main.shape, seq.shape)
    if function == "objective":
        run = compiled(("lstm", shape), lambda: loss)
        return (lambda: run(main, extra).block_until_ready()), float
    if function == "jacobian":
        run = compiled(("lstm-grad", shape), lambda: jax.grad(loss, argnums=(0, 1)))
        return (lambda: jax.block_until_ready(run(main, extra))), (
            lambda g: plain(jnp.concatenate([g[0].reshape(-1), g[1].reshape(-1)]))
        )
    raise ValueError(f"lstm has no function {function}")


def logsumexp(a, axis):
    """Max-shifted: exp never overflows; the shift carries no derivative (it cancels)."""
    mx = jax.lax.stop_gradient(jnp.max(a, axis=axis, keepdims=True))
    return jnp.squeeze(mx, axis) + jnp.log(jnp.sum(jnp.exp(a - mx), axis=axis))


def multigammaln(a, d):
    j = jnp.arange(1, d + 1, dtype=jnp.float64)
    return 0.25 * d * (d - 1) * math.log(math.pi) + jnp.sum(jax.scipy.special.gammaln(a + 0.5 * (1.0 - j)))


def rows(x, field):
    return jnp.asarray([[number(v) for v in row] for row in x[field]], dtype=jnp.float64)


def gmm(function, x):
    """GradBench's GMM: sum_i logsumexp_k(alpha_k + sum(q_k) - |Q_k (x_i - mu_k)|^2 / 2)
    - n logsumexp(alpha) + the log Wishart prior, Q_k = diag(exp q_k) + the strictly lower part
    filled column by column from l_k."""
    d, k, n = int(x["d"]), int(x["k"]), int(x["n"])
    alpha = jnp.asarray([number(v) for v in x["alpha"]], dtype=jnp.float64)
    mu, q, points = rows(x, "mu"), rows(x, "q"), rows(x, "x")
    lw = d * (d - 1) // 2
    l = rows(x, "l") if lw > 0 else jnp.zeros((k, 0), dtype=jnp.float64)
    gamma, m = float(x["gamma"]), int(x["m"])
    # Column-by-column order of the strictly lower part: (1,0), (2,0), ..., (2,1), ...
    cols, rws = np.triu_indices(d, 1)

    def objective(alpha, mu, q, l):
        lower = jnp.zeros((k, d, d), dtype=jnp.float64).at[:, rws, cols].set(l)
        qmat = lower + jnp.exp(q)[:, :, None] * jnp.eye(d)
        xc = points[:, None, :] - mu[None, :, :]
        z = jnp.einsum("krc,nkc->nkr", qmat, xc)
        main = alpha[None, :] + jnp.sum(q, axis=1)[None, :] - 0.5 * jnp.sum(z * z, axis=2)
        np1 = d + m + 1
        c = np1 * d * (math.log(gamma) - 0.5 * math.log(2.0)) - multigammaln(0.5 * np1, d)
        prior = 0.5 * gamma * gamma * (jnp.sum(jnp.exp(2.0 * q)) + jnp.sum(l * l)) - m * jnp.sum(q)
        const = -n * d * 0.5 * math.log(2.0 * math.pi) + k * c
        return const + jnp.sum(logsumexp(main, 1)) - n * logsumexp(alpha, 0) - prior

    key = (d, k, n, gamma, m)
    args = (alpha, mu, q, l)
    if function == "objective":
        run = compiled(("gmm", key), lambda: objective)
        return (lambda: run(*args).block_until_ready()), float
    if function == "jacobian":
        run = compiled(("gmm-grad", key), lambda: jax.grad(objective, argnums=(0, 1, 2, 3)))
        return (lambda: jax.block_until_ready(run(*args))), (
            lambda g: {"alpha": plain(g[0]), "mu": [plain(r) for r in g[1]], "q": [plain(r) for r in g[2]],
                       "l": [plain(r) for r in g[3]]}
        )
    raise ValueError(f"gmm has no function {function}")


def ba(function, x):
    n, m, p, cams, pts, w, feats, obs, full = ba_module.problem(x)
    # Each observation's 15 parameters, gathered once (outside the timed runs, as the layout).
    params = jnp.asarray(ba_module.gathered(cams, pts, w, obs))
    feats = jnp.asarray(feats)
    rows, cols = ba_module.pattern(n, m, p, obs)
    output = ba_module.output(function, full, p, rows, cols)

    def residual(q, f):
        return ba_module.residual(q, f, jnp)

    def objective(params, feats):
        return jax.vmap(residual)(params, feats), 1.0 - params[:, 14] ** 2

    def jacobian(params, feats):
        return jax.vmap(jax.jacfwd(residual))(params, feats), -2.0 * params[:, 14]

    run = compiled(("ba", function, p), lambda: objective if function == "objective" else jacobian)
    return (lambda: jax.block_until_ready(run(params, feats))), output


MODULES = {"hist": hist, "llsq": llsq, "kmeans": kmeans, "lstm": lstm, "gmm": gmm, "ba": ba}
# GradBench's other evals, one file each beside this one (tools/jax/<eval>.py, whose `module`
# answers it), one line each.
MODULES["hello"] = importlib.import_module("hello").module
MODULES["lse"] = importlib.import_module("lse").module
MODULES["det"] = importlib.import_module("det").module
MODULES["ode"] = importlib.import_module("ode").module
MODULES["ht"] = __import__("ht").ht  # tools/jax/ht.py
MODULES["particle"] = __import__("particle").particle  # tools/jax/particle.py
MODULES["saddle"] = __import__("saddle").saddle  # tools/jax/saddle.py


def main():
    serve("jax", {"version": jax.__version__, "conventions": CONVENTIONS}, MODULES)


if __name__ == "__main__":
    main()
