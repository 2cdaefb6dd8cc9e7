"""GradBench's `ht` module (ADBench's hand tracking) for the JAX adapter (tools/jax/run.py).

The objective on the whole model at once: per-bone Euler angles gathered from the pose, the
posed relative transforms base_relative [Rz Rx 0; 0 1], the chain of absolutes (a Python loop
over the bones, unrolled by jit), the transforms blended per vertex by the skinning weights and
applied to the base positions, the mirror, the global angle-axis rotation (the identity below a
norm of 1e-4) and translation, then the points minus the vertices (simple) or minus the
barycentric points on the triangles (complicated). `jacobian`: the 26 pose columns by
jax.jacfwd, and for the complicated variant d/du0 and d/du1 of each point's own residuals by two
jax.jvp sweeps (the us part is block diagonal), in GradBench's layout: 3c rows of [du0, du1,]
theta.
"""

import jax
import jax.numpy as jnp
import numpy as np

from protocol import number, plain  # tools/common, on the path run.py set
from tables import N_THETA, ht_pose_indices


_compiled = {}


def pose_indices(bones):
    """ht_pose_indices (tools/common/tables.py) as arrays."""
    ix, iz = ht_pose_indices(bones)
    return np.asarray(ix), np.asarray(iz)


def floats(xs, shape):
    return np.asarray([number(v) for v in np.asarray(xs, dtype=object).reshape(-1)], dtype=np.float64).reshape(shape)


def problem(x):
    data, m = x["data"], x["data"]["model"]
    bones = len(m["bone_names"])
    if bones < 22:
        raise ValueError(f"the model has {bones} bones; the 26 pose parameters address 22")
    consts = {
        "rel": floats(m["base_relatives"], (bones, 4, 4)),
        "inv": floats(m["inverse_base_absolutes"], (bones, 4, 4)),
        "pos": floats(m["base_positions"], (-1, 4)),
        "weights": floats(m["weights"], (-1, bones)),
        "points": floats(data["points"], (-1, 3)),
    }
    corr = np.asarray(data["correspondences"], dtype=np.int64)
    us = floats(x["us"], (-1, 2)) if len(x["us"]) else None
    if us is not None:
        consts["corners"] = np.asarray(m["triangles"], dtype=np.int64).reshape(-1, 3)[corr]
    else:
        consts["corners"] = corr[:, None]
    ix, iz = pose_indices(bones)
    consts["ix"], consts["iz"] = ix, iz
    structure = (tuple(int(p) for p in m["parents"]), bool(m["is_mirrored"]), us is not None)
    return floats(x["theta"], (N_THETA,)), us, consts, structure


def rotation(a):
    """ADBench's angle_axis_to_rotation_matrix; the branch not taken sees a norm of 1."""
    norm = jnp.sqrt(jnp.sum(a * a))
    small = norm < 1e-4
    n = jnp.where(small, 1.0, norm)
    x, y, z = a[0] / n, a[1] / n, a[2] / n
    s, c = jnp.sin(n), jnp.cos(n)
    r = jnp.array(
        [
            [x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
            [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
            [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c],
        ]
    )
    return jnp.where(small, jnp.eye(3), r)


def residuals(structure, theta, us, k):
    parents, mirrored, complicated = structure
    padded = jnp.concatenate([theta, jnp.zeros(1)])
    ax, az = padded[k["ix"]], padded[k["iz"]]
    cx, sx, cz, sz = jnp.cos(ax), jnp.sin(ax), jnp.cos(az), jnp.sin(az)
    zero, one = jnp.zeros_like(ax), jnp.ones_like(ax)
    posed = jnp.stack(
        [
            jnp.stack([cz, -sz * cx, sz * sx, zero], -1),
            jnp.stack([sz, cz * cx, -cz * sx, zero], -1),
            jnp.stack([zero, sx, cx, zero], -1),
            jnp.stack([zero, zero, zero, one], -1),
        ],
        -2,
    )
    relatives = k["rel"] @ posed
    absolutes = []
    for i, parent in enumerate(parents):
        absolutes.append(relatives[i] if parent < 0 else absolutes[parent] @ relatives[i])
    transforms = jnp.stack(absolutes) @ k["inv"]
    blended = jnp.einsum("vb,bij->vij", k["weights"], transforms)
    verts = jnp.einsum("vij,vj->vi", blended, k["pos"])[:, :3]
    if mirrored:
        verts = verts * jnp.array([-1.0, 1.0, 1.0])
    verts = verts @ rotation(theta[:3]).T + theta[3:6]
    corners = verts[k["corners"]]
    if complicated:
        u0, u1 = us[:, :1], us[:, 1:]
        hand = u0 * corners[:, 0] + u1 * corners[:, 1] + (1 - u0 - u1) * corners[:, 2]
    else:
        hand = corners[:, 0]
    return (k["points"] - hand).reshape(-1)


def ht(function, x):
    theta, us, consts, structure = problem(x)
    complicated = structure[2]
    us_arg = jnp.asarray(us) if complicated else jnp.zeros((0, 2))
    consts = {name: jnp.asarray(v) for name, v in consts.items()}

    def objective(theta, us, k):
        return residuals(structure, theta, us, k)

    def jacobian(theta, us, k):
        jt = jax.jacfwd(lambda t: residuals(structure, t, us, k))(theta)
        if not complicated:
            return jt
        cols = []
        for j in range(2):
            tangent = jnp.zeros_like(us).at[:, j].set(1.0)
            cols.append(jax.jvp(lambda u: residuals(structure, theta, u, k), (us,), (tangent,))[1][:, None])
        return jnp.concatenate(cols + [jt], axis=1)

    if function not in ("objective", "jacobian"):
        raise ValueError(f"ht has no function {function}")
    key = (function, structure, theta.shape, us_arg.shape, tuple((n, v.shape) for n, v in sorted(consts.items())))
    if key not in _compiled:
        _compiled[key] = jax.jit(objective if function == "objective" else jacobian)
    run = _compiled[key]
    theta = jnp.asarray(theta)
    if function == "objective":
        return (lambda: jax.block_until_ready(run(theta, us_arg, consts))), plain
    return (lambda: jax.block_until_ready(run(theta, us_arg, consts))), (lambda j: [plain(row) for row in j])
