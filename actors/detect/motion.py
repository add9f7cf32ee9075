"""Object motion from an earlier LiDAR sweep, for the weight-free ``lidar`` detector.

An object that moved by ``d`` (BEV, metres) between an earlier sweep and the current one left its earlier
points where its current points are minus ``d``. Pure core ``estimate_displacement``: for each cluster of
current points, the displacement whose back-shifted points land on the most occupied cells of the earlier
sweep's obstacle points (both in the current ego frame, the earlier sweep moved there with the ego poses,
so static structure lines up at ``d = 0``). The search is a grid over ``d`` (along the object's axis up to
its class's top speed times the lag, across it up to a small lateral speed), coarse (ties: the smaller
displacement) then fine (the centre of the best-matching shifts: the match tolerance makes a plateau about
a cell wide), and ``d = 0`` wins unless another displacement matches clearly more points
(``min_gain``) and most of them (``min_match``): an object that stands still, or that the earlier sweep did
not see, is not given a motion.

Occupancy is a set of cells (``cell_m`` in BEV, a coarse ``z_cell_m`` in height) grown by one cell around
every earlier point, so a point matches when an earlier point lies within about 1.5 cells; cell keys are
global (independent of the data), looked up by binary search.
"""
from __future__ import annotations

import numpy as np

_OFFSET = np.int64(1 << 20)  # cell indices are shifted positive before packing three into one int64 key
_SPAN = np.int64(1 << 21)
_ZSPAN = np.int64(1 << 10)


def _keys(ijk: np.ndarray) -> np.ndarray:
    """One int64 per integer cell (..., 3): BEV cells within +-2^20 (100 km at 0.1 m), height cells within
    +-2^9."""
    return ((ijk[..., 0] + _OFFSET) * _SPAN + (ijk[..., 1] + _OFFSET)) * _ZSPAN + (ijk[..., 2] + _ZSPAN // 2)


def _cells(points: np.ndarray, cell_m: float, z_cell_m: float) -> np.ndarray:
    size = np.array([cell_m, cell_m, z_cell_m])
    return np.floor(np.asarray(points, dtype=np.float64)[..., :3] / size).astype(np.int64)


def occupancy(points: np.ndarray, cell_m: float, z_cell_m: float) -> np.ndarray:
    """Sorted unique keys (K,) of the cells (``cell_m`` in BEV, ``z_cell_m`` in height) within one cell of any
    point of ``points`` (M, 3). Height matters: a car's back face must not match the line a ring draws on
    another car's roof, but rings hit a face at heights that change with its range, hence coarse height cells."""
    d = np.array([(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)], dtype=np.int64)
    return np.unique(_keys(_cells(points, cell_m, z_cell_m)[:, None, :] + d[None]).ravel())


def owned_occupancy(points: np.ndarray, owner: np.ndarray, cell_m: float, z_cell_m: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The current sweep's cells with their owner: sorted unique keys (K,) of the cells within one cell of
    ``points`` (M, 3) and the ``owner`` (M,) int of the points there (-2 where several owners share a cell)."""
    d = np.array([(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1)], dtype=np.int64)
    keys = _keys(_cells(points, cell_m, z_cell_m)[:, None, :] + d[None]).ravel()
    own = np.repeat(np.asarray(owner, dtype=np.int64), len(d))
    order = np.argsort(keys, kind="stable")
    keys, own = keys[order], own[order]
    uniq, first = np.unique(keys, return_index=True)
    lo, hi = np.minimum.reduceat(own, first), np.maximum.reduceat(own, first)
    return uniq, np.where(lo == hi, lo, -2)


def taken_fraction(pts: np.ndarray, shift: np.ndarray, owned: tuple[np.ndarray, np.ndarray], me: int,
                   cell_m: float, z_cell_m: float) -> float:
    """Fraction of ``pts`` (n, 3) that, moved back by ``shift`` (2,), land where another object than ``me``
    is now (``owned_occupancy``)."""
    keys, own = owned
    if len(keys) == 0 or len(pts) == 0:
        return 0.0
    q = pts[:, :3].copy()
    q[:, :2] -= shift
    k = _keys(_cells(q, cell_m, z_cell_m))
    pos = np.searchsorted(keys, k).clip(0, len(keys) - 1)
    hit = keys[pos] == k
    return float((hit & (own[pos] != me)).mean())


def match_fraction(pts: np.ndarray, shifts: np.ndarray, occ: np.ndarray, cell_m: float, z_cell_m: float) -> np.ndarray:
    """For each BEV shift (K, 2): the fraction of the points ``pts`` (n, 3) that, moved back by it, land on an
    occupied cell of ``occ`` (sorted keys). Returns (K,)."""
    if len(occ) == 0 or len(pts) == 0:
        return np.zeros(len(shifts))
    moved = np.broadcast_to(pts[None, :, :3], (len(shifts), len(pts), 3)).copy()
    moved[..., :2] -= shifts[:, None, :]
    k = _keys(_cells(moved, cell_m, z_cell_m))
    pos = np.searchsorted(occ, k).clip(0, len(occ) - 1)
    return (occ[pos] == k).mean(axis=1)


def _grid(along_max: float, across_max: float, step: float, axis: np.ndarray, centre=(0.0, 0.0)) -> np.ndarray:
    """Displacements (K, 2) on a grid along/across ``axis`` (unit (2,)) around ``centre`` (along, across)."""
    a = centre[0] + np.arange(-np.ceil(along_max / step), np.ceil(along_max / step) + 1) * step
    b = centre[1] + np.arange(-np.ceil(across_max / step), np.ceil(across_max / step) + 1) * step
    A, B = np.meshgrid(a, b, indexing="ij")
    perp = np.array([-axis[1], axis[0]])
    return A.reshape(-1, 1) * axis + B.reshape(-1, 1) * perp


def estimate_displacement(clusters: list[np.ndarray], axis_yaw: np.ndarray, along_max_m: np.ndarray,
                          across_max_m: np.ndarray, occ: np.ndarray, cell_m: float, z_cell_m: float, coarse_m: float,
                          fine_m: float, min_gain: float, min_match: float = 0.0,
                          owned: tuple[np.ndarray, np.ndarray] | None = None, max_taken: float = 1.0
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cluster (points (n_i, 3), current ego frame): (BEV displacement (C, 2) since the earlier sweep,
    matched fraction at that displacement (C,), matched fraction at zero (C,)).

    ``axis_yaw`` (C,) the object's axis (either direction), ``along_max_m`` / ``across_max_m`` (C,) the search
    extents (top speed times lag); ``occ`` the earlier sweep's ``occupancy``. A displacement other than zero
    is returned only when it matches at least ``min_gain`` more of the points than zero does, and at least
    ``min_match`` of them (an object seen in both sweeps is found again; a few points of a cluster the earlier
    sweep did not see can land on clutter somewhere in the search area), and, with ``owned`` (the current
    sweep's ``owned_occupancy``, cluster i owning its points), only when at most ``max_taken`` of the points
    moved back land on another object that is still there now: a parked car hidden in the earlier sweep
    would otherwise match its neighbour in the row."""
    n = len(clusters)
    disp = np.zeros((n, 2))
    best = np.zeros(n)
    still = np.zeros(n)
    for i, xy in enumerate(clusters):  # tens of clusters per sweep; each search is vectorised
        still[i] = best[i] = match_fraction(xy, np.zeros((1, 2)), occ, cell_m, z_cell_m)[0]
        if along_max_m[i] <= 0 and across_max_m[i] <= 0:
            continue
        axis = np.array([np.cos(axis_yaw[i]), np.sin(axis_yaw[i])])
        cand = _grid(along_max_m[i], across_max_m[i], coarse_m, axis)
        f = match_fraction(xy, cand, occ, cell_m, z_cell_m) - 1e-6 * np.hypot(cand[:, 0], cand[:, 1])  # ties: smaller
        c = cand[int(np.argmax(f))]
        cc = (float(c @ axis), float(c @ np.array([-axis[1], axis[0]])))
        fine = _grid(coarse_m, min(coarse_m, across_max_m[i]), fine_m, axis, cc)
        f = match_fraction(xy, fine, occ, cell_m, z_cell_m)
        score = f.max()
        if score >= still[i] + min_gain and score >= min_match:
            # every shift within about a cell matches equally well: the plateau's centre, not its edge
            d = fine[f >= score - 1e-9].mean(axis=0)
            if owned is None or taken_fraction(xy, d, owned, i, cell_m, z_cell_m) <= max_taken:
                disp[i], best[i] = d, score
    return disp, best, still
