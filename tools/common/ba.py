"""GradBench's `ba` module for the adapters (docs/protocol.md): the problem of an input (its
replicated form or adgauge's `full` extension), ADBench's CSR layout, one observation's
residuals written once for any array module, and the outputs in either shape. Needs numpy."""

import numpy as np

from protocol import number, plain


def problem(x):
    """(n, m, p, cams, points, weights, feats, obs, full) of a `ba` input: full arrays
    (adgauge's extension) or GradBench's replicated camera, point, weight and feature with
    observation i = (i mod n, i mod m)."""
    n, m, p = int(x["n"]), int(x["m"]), int(x["p"])
    full = x.get("full")
    if full is not None:
        cams = np.asarray([[number(v) for v in r] for r in full["cams"]], dtype=np.float64)
        pts = np.asarray([[number(v) for v in r] for r in full["x"]], dtype=np.float64)
        w = np.asarray([number(v) for v in full["w"]], dtype=np.float64)
        feats = np.asarray([[number(v) for v in r] for r in full["feats"]], dtype=np.float64)
        obs = np.asarray(full["obs"], dtype=np.int64).reshape(p, 2)
    else:
        cams = np.tile(np.asarray([number(v) for v in x["cam"]], dtype=np.float64), (n, 1))
        pts = np.tile(np.asarray([number(v) for v in x["x"]], dtype=np.float64), (m, 1))
        w = np.full(p, number(x["w"]), dtype=np.float64)
        feats = np.tile(np.asarray([number(v) for v in x["feat"]], dtype=np.float64), (p, 1))
        obs = np.stack([np.arange(p) % n, np.arange(p) % m], axis=1)
    if cams.shape != (n, 11) or pts.shape != (m, 3) or w.shape != (p,) or feats.shape != (p, 2):
        raise ValueError("ba: array shapes do not match n, m, p")
    if (obs < 0).any() or (obs[:, 0] >= n).any() or (obs[:, 1] >= m).any():
        raise ValueError("ba: an observation names a camera or point out of range")
    return n, m, p, cams, pts, w, feats, obs, full is not None


def gathered(cams, pts, w, obs):
    """Each observation's 15 parameters (camera 11, point 3, weight), p x 15."""
    return np.concatenate([cams[obs[:, 0]], pts[obs[:, 1]], w[:, None]], axis=1)


def pattern(n, m, p, obs):
    """ADBench's CSR layout: rows 2i and 2i+1 hold camera obs[i][0]'s 11 columns, point
    obs[i][1]'s 3 and weight i's; row 2p + i weight i's column alone."""
    wcol = 11 * n + 3 * m
    block = np.concatenate([11 * obs[:, :1] + np.arange(11), 11 * n + 3 * obs[:, 1:] + np.arange(3),
                            wcol + np.arange(p)[:, None]], axis=1)
    cols = np.concatenate([np.repeat(block, 2, axis=0).reshape(-1), wcol + np.arange(p)])
    rows = np.concatenate([15 * np.arange(2 * p + 1), 30 * p + np.arange(1, p + 1)])
    return rows, cols


def residual(params, feat, xp):
    """One observation's two reprojection errors from its 15 parameters, as ADBench's
    `computeReprojError`, in the array module `xp` (jax.numpy or torch): Rodrigues' rotation
    with its small-angle fallback (both evaluated, one selected, the other's theta kept away
    from 0 so that no NaN reaches the derivative), projection, radial distortion."""
    r, c, f, x0, k = params[0:3], params[3:6], params[6], params[7:9], params[9:11]
    xo = params[11:14] - c
    w = params[14]
    sqtheta = xp.sum(r * r)
    small = sqtheta == 0
    theta = xp.sqrt(xp.where(small, xp.ones_like(sqtheta), sqtheta))
    axis = r / theta
    cos, sin = xp.cos(theta), xp.sin(theta)

    def cross(a, b):
        return xp.stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])

    rotated = xo * cos + cross(axis, xo) * sin + axis * (xp.sum(axis * xo) * (1.0 - cos))
    xc = xp.where(small, xo + cross(r, xo), rotated)
    proj = xc[0:2] / xc[2]
    rsq = xp.sum(proj * proj)
    proj = proj * (1.0 + k[0] * rsq + k[1] * rsq * rsq) * f + x0
    return w * (proj - feat)


def output(function, full, p, rows, cols):
    """The JSON of a result: objective (errors p x 2, w_err p) or Jacobian (blocks p x 2 x 15,
    weight derivatives p), whole for a `full` input, else GradBench's compressed shapes."""
    def objective(r):
        err, w_err = np.asarray(r[0]).reshape(-1), np.asarray(r[1])
        if full:
            return {"reproj_err": plain(err), "w_err": plain(w_err)}
        return {"reproj_error": {"elements": plain(err[:2]), "repeated": p},
                "w_err": {"element": plain(w_err[:1])[0], "repeated": p}}

    def jacobian(r):
        vals = np.concatenate([np.asarray(r[0]).reshape(-1), np.asarray(r[1])])
        if full:
            return {"nrows": 3 * p, "ncols": int(cols[-1]) + 1, "rows": rows.tolist(), "cols": cols.tolist(),
                    "vals": plain(vals)}

        def kept(a):
            return a[:30].tolist() + [a[-1].item()]
        return {"rows": kept(rows), "cols": kept(cols), "vals": plain(kept(vals))}

    if function == "objective":
        return objective
    if function == "jacobian":
        return jacobian
    raise ValueError(f"ba has no function {function}")
