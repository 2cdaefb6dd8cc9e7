"""GradBench's `ht` module (ADBench's hand tracking) for the PyTorch adapter
(tools/pytorch/run.py), float64, eager.

The objective on the whole model at once: per-bone Euler angles gathered from the pose, the
posed relative transforms base_relative [Rz Rx 0; 0 1], the chain of absolutes (a loop over the
bones), the transforms blended per vertex by the skinning weights and applied to the base
positions, the mirror, the global angle-axis rotation (the identity below a norm of 1e-4) and
translation, then the points minus the vertices (simple) or minus the barycentric points on the
triangles (complicated). `jacobian`: the 26 pose columns by torch.func.jacfwd (vectorised
forward mode), and for the complicated variant d/du0 and d/du1 of each point's own residuals by
two torch.func.jvp sweeps (the us part is block diagonal), in GradBench's layout: 3c rows of
[du0, du1,] theta.
"""

import numpy as np
import torch

from protocol import number, plain  # tools/common, on the path run.py set
from tables import N_THETA, ht_pose_indices

F64 = torch.float64


def pose_indices(bones):
    """ht_pose_indices (tools/common/tables.py) as arrays."""
    ix, iz = ht_pose_indices(bones)
    return torch.tensor(ix), torch.tensor(iz)


def floats(xs, shape):
    flat = [number(v) for v in np.asarray(xs, dtype=object).reshape(-1)]
    return torch.tensor(flat, dtype=F64).reshape(shape)


def rotation(a):
    """ADBench's angle_axis_to_rotation_matrix; the branch not taken sees a norm of 1."""
    norm = torch.sqrt(torch.sum(a * a))
    small = norm < 1e-4
    n = torch.where(small, torch.ones_like(norm), norm)
    x, y, z = a[0] / n, a[1] / n, a[2] / n
    s, c = torch.sin(n), torch.cos(n)
    r = torch.stack(
        [
            torch.stack([x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s]),
            torch.stack([x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s]),
            torch.stack([x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c]),
        ]
    )
    return torch.where(small, torch.eye(3, dtype=F64), r)


class Hand:
    def __init__(self, x):
        data, m = x["data"], x["data"]["model"]
        bones = len(m["bone_names"])
        if bones < 22:
            raise ValueError(f"the model has {bones} bones; the 26 pose parameters address 22")
        self.rel = floats(m["base_relatives"], (bones, 4, 4))
        self.inv = floats(m["inverse_base_absolutes"], (bones, 4, 4))
        self.pos = floats(m["base_positions"], (-1, 4))
        self.weights = floats(m["weights"], (-1, bones))
        self.points = floats(data["points"], (-1, 3))
        self.parents = [int(p) for p in m["parents"]]
        self.mirror = torch.tensor([-1.0, 1.0, 1.0], dtype=F64) if m["is_mirrored"] else None
        corr = torch.tensor(data["correspondences"], dtype=torch.int64)
        self.complicated = len(x["us"]) > 0
        if self.complicated:
            self.corners = torch.tensor(m["triangles"], dtype=torch.int64).reshape(-1, 3)[corr]
            self.us = floats(x["us"], (-1, 2))
        else:
            self.corners = corr[:, None]
            self.us = torch.zeros((0, 2), dtype=F64)
        self.ix, self.iz = pose_indices(bones)
        self.theta = floats(x["theta"], (N_THETA,))

    def residuals(self, theta, us):
        padded = torch.cat([theta, torch.zeros(1, dtype=F64)])
        ax, az = padded[self.ix], padded[self.iz]
        cx, sx, cz, sz = torch.cos(ax), torch.sin(ax), torch.cos(az), torch.sin(az)
        zero, one = torch.zeros_like(ax), torch.ones_like(ax)
        posed = torch.stack(
            [
                torch.stack([cz, -sz * cx, sz * sx, zero], -1),
                torch.stack([sz, cz * cx, -cz * sx, zero], -1),
                torch.stack([zero, sx, cx, zero], -1),
                torch.stack([zero, zero, zero, one], -1),
            ],
            -2,
        )
        relatives = self.rel @ posed
        absolutes = []
        for i, parent in enumerate(self.parents):
            absolutes.append(relatives[i] if parent < 0 else absolutes[parent] @ relatives[i])
        transforms = torch.stack(absolutes) @ self.inv
        blended = torch.einsum("vb,bij->vij", self.weights, transforms)
        verts = torch.einsum("vij,vj->vi", blended, self.pos)[:, :3]
        if self.mirror is not None:
            verts = verts * self.mirror
        verts = verts @ rotation(theta[:3]).T + theta[3:6]
        corners = verts[self.corners]
        if self.complicated:
            u0, u1 = us[:, :1], us[:, 1:]
            hand = u0 * corners[:, 0] + u1 * corners[:, 1] + (1 - u0 - u1) * corners[:, 2]
        else:
            hand = corners[:, 0]
        return (self.points - hand).reshape(-1)

    def jacobian(self):
        theta, us = self.theta, self.us
        jt = torch.func.jacfwd(lambda t: self.residuals(t, us))(theta)
        if not self.complicated:
            return jt
        cols = []
        for j in range(2):
            tangent = torch.zeros_like(us)
            tangent[:, j] = 1.0
            cols.append(torch.func.jvp(lambda u: self.residuals(theta, u), (us,), (tangent,))[1][:, None])
        return torch.cat(cols + [jt], dim=1)


def ht(function, x):
    hand = Hand(x)
    if function == "objective":
        def run():
            with torch.no_grad():
                return hand.residuals(hand.theta, hand.us)
        return run, (lambda r: plain(r.numpy()))
    if function == "jacobian":
        return hand.jacobian, (lambda j: [plain(row) for row in j.numpy()])
    raise ValueError(f"ht has no function {function}")
