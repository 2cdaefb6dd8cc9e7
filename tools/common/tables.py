"""Index tables that the JAX and PyTorch adapters share: plain Python lists, which each adapter
turns into its own arrays (built on the host, once per size, outside the timed runs)."""

import functools

# The pose parameters of ADBench's hand; index N_THETA stands for an angle fixed at zero.
N_THETA = 26


@functools.cache
def det_tables(ell):
    """det's expansion by minors along the first row, as adgauge's engine runs it
    (workloads/src/det.rs): the bottom row's entries, then per level m = 2..ell the entries,
    the sub-minors each term multiplies (rows of m, one row per column set of m) and the
    alternating signs. Each minor of the last m rows and a column set is expanded once."""
    position = {1 << c: c for c in range(ell)}
    bottom = [(ell - 1) * ell + c for c in range(ell)]
    levels = []
    for m in range(2, ell + 1):
        row = ell - m
        sets = [s for s in range(1 << ell) if bin(s).count("1") == m]
        entries, subminors = [], []
        for s in sets:
            cols = [c for c in range(ell) if s >> c & 1]
            entries.append([row * ell + c for c in cols])
            subminors.append([position[s & ~(1 << c)] for c in cols])
        position = {s: p for p, s in enumerate(sets)}
        signs = [1.0 if j % 2 == 0 else -1.0 for j in range(m)]
        levels.append((entries, subminors, signs))
    return bottom, levels


def ht_pose_indices(bones):
    """ADBench's to_pose_params as theta indices per bone: (x angles, z angles), N_THETA where
    the angle is zero (the wrist, each finger's first bone, the forearm)."""
    ix, iz = [N_THETA] * bones, [N_THETA] * bones
    t, bone = 6, 2
    for _finger in range(5):
        for joint in range(3):
            ix[bone] = t
            if joint == 0:
                iz[bone] = t + 1
                t += 2
            else:
                t += 1
            bone += 1
        bone += 1
    return ix, iz
