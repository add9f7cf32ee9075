"""Road surface and paint of the generated intersection, in the scene's local frame.

One specification serves both sensors: ``ground_surface`` classifies ground points analytically (LiDAR
intensity) and ``marking_quads`` turns the same paint into ground polygons near the ego (camera).
Each road has its own frame: along-road u and lateral v (left of +u). Road A: (u, v) = (x, y);
road B: (u, v) = (y, -x). Traffic keeps right, so the +u lanes are at v < 0.
"""
from __future__ import annotations

import numpy as np

from generator.synth.world import CROSSWALK_U_M, PARK_HALF_M, ROAD_HALF_M, STOP_LINE_U_M

ROADS = (("A", 0.0), ("B", np.pi / 2))
PAINT_FREE_U_M = STOP_LINE_U_M + 0.5  # no lane lines inside the intersection, the crossings and stop lines
WHITE, YELLOW = 0, 1
# (lateral offset m, width m, dash length m, period m (== dash: solid), paint)
LINES = ((0.15, 0.12, 2.0, 2.0, YELLOW), (-0.15, 0.12, 2.0, 2.0, YELLOW),
         (3.5, 0.15, 3.0, 9.0, WHITE), (-3.5, 0.15, 3.0, 9.0, WHITE),
         (ROAD_HALF_M, 0.15, 2.0, 2.0, WHITE), (-ROAD_HALF_M, 0.15, 2.0, 2.0, WHITE))
ZEBRA_HALF_V_M = 9.0
ZEBRA_STRIPE_M, ZEBRA_PERIOD_M = 0.6, 1.2
STOP_LINE_W_M = 0.4

SURFACE_SIDEWALK, SURFACE_ASPHALT, SURFACE_WHITE, SURFACE_YELLOW = 0, 1, 2, 3
SURFACE_INTENSITY = np.array([22.0, 7.0, 85.0, 60.0])


def road_uv(road: str, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (x, y) if road == "A" else (y, -x)


def _paint_on_road(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Paint code per point of one road (-1 none, WHITE, YELLOW), u, v in that road's frame."""
    out = np.full(u.shape, -1, dtype=np.int8)
    au, av = np.abs(u), np.abs(v)
    lines = np.flatnonzero(au >= PAINT_FREE_U_M)
    avl = av[lines]
    for off, w, dash, period, paint in LINES:
        if off < 0:  # the lines come in mirrored pairs: test |v| against the positive offset
            continue
        cand = lines[np.abs(avl - off) <= w / 2]
        if period > dash:
            cand = cand[np.mod(u[cand], period) < dash]
        out[cand] = paint
    zebra = np.nonzero((au >= CROSSWALK_U_M[0]) & (au <= CROSSWALK_U_M[1]) & (av <= ZEBRA_HALF_V_M))[0]
    zebra = zebra[np.mod(v[zebra] + ZEBRA_HALF_V_M, ZEBRA_PERIOD_M) < ZEBRA_STRIPE_M]
    out[zebra] = WHITE
    stop = np.flatnonzero((au >= STOP_LINE_U_M) & (au <= STOP_LINE_U_M + STOP_LINE_W_M))
    stop = stop[(av[stop] <= ROAD_HALF_M) & (np.sign(v[stop]) == np.sign(u[stop]))]
    out[stop] = WHITE
    return out


def ground_surface(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Surface code (SURFACE_*) of ground points at local (x, y) (N,) -> (N,) int8."""
    surf = np.full(x.shape, SURFACE_SIDEWALK, dtype=np.int8)
    for road, _ in ROADS:
        u, v = road_uv(road, x, y)
        on = np.nonzero(np.abs(v) < PARK_HALF_M)[0]
        surf[on] = np.maximum(surf[on], SURFACE_ASPHALT)
        paint = _paint_on_road(u[on], v[on])
        surf[on[paint == WHITE]] = SURFACE_WHITE
        surf[on[paint == YELLOW]] = SURFACE_YELLOW
    return surf


def road_polygons(half_length_m: float = 800.0, half_width_m: float = PARK_HALF_M) -> list[np.ndarray]:
    """The two carriageways (curb to curb by default) as (4, 3) ground polygons in the local frame."""
    out = []
    for _, h0 in ROADS:
        c, s = np.cos(h0), np.sin(h0)
        uv = np.array([[-half_length_m, -half_width_m], [half_length_m, -half_width_m],
                       [half_length_m, half_width_m], [-half_length_m, half_width_m]])
        xy = np.stack([uv[:, 0] * c - uv[:, 1] * s, uv[:, 0] * s + uv[:, 1] * c], axis=1)
        out.append(np.concatenate([xy, np.zeros((4, 1))], axis=1))
    return out


def marking_quads(center_xy: np.ndarray, radius_m: float = 60.0) -> tuple[np.ndarray, np.ndarray]:
    """Paint near ``center_xy`` as ground quads: ((N, 4, 3) local-frame corners, (N,) paint code)."""
    out_q, out_p = [], []
    for road, h0 in ROADS:
        quads, paint = [], []
        uc, vc = road_uv(road, float(center_xy[0]), float(center_xy[1]))
        if abs(vc) > radius_m + PARK_HALF_M:
            continue
        u0, u1 = uc - radius_m, uc + radius_m
        for off, w, dash, period, code in LINES:
            starts = np.arange(np.floor(u0 / period) * period, u1, period)
            ends = starts + dash
            keep = (np.minimum(np.abs(starts), np.abs(ends)) >= PAINT_FREE_U_M) & (np.sign(starts) == np.sign(ends))
            starts, ends = starts[keep], ends[keep]
            lo, hi = np.full_like(starts, off - w / 2), np.full_like(starts, off + w / 2)
            quads.append(np.stack([np.stack([starts, lo], -1), np.stack([ends, lo], -1),
                                   np.stack([ends, hi], -1), np.stack([starts, hi], -1)], axis=1))
            paint.append(np.full(len(starts), code))
        if u0 < CROSSWALK_U_M[1] + 1 and u1 > -CROSSWALK_U_M[1] - 1:
            v0 = -ZEBRA_HALF_V_M + np.arange(int(2 * ZEBRA_HALF_V_M / ZEBRA_PERIOD_M) + 1) * ZEBRA_PERIOD_M
            v0 = v0[v0 + ZEBRA_STRIPE_M <= ZEBRA_HALF_V_M + 1e-6]
            for sgn in (-1.0, 1.0):
                a, b = sgn * CROSSWALK_U_M[0], sgn * CROSSWALK_U_M[1]
                quads.append(np.stack([np.stack([np.full_like(v0, a), v0], -1),
                                       np.stack([np.full_like(v0, b), v0], -1),
                                       np.stack([np.full_like(v0, b), v0 + ZEBRA_STRIPE_M], -1),
                                       np.stack([np.full_like(v0, a), v0 + ZEBRA_STRIPE_M], -1)], axis=1))
                paint.append(np.full(len(v0), WHITE))
                ua, ub = sgn * STOP_LINE_U_M, sgn * (STOP_LINE_U_M + STOP_LINE_W_M)
                va, vb = (0.0, ROAD_HALF_M) if sgn > 0 else (-ROAD_HALF_M, 0.0)
                quads.append(np.array([[[ua, va], [ub, va], [ub, vb], [ua, vb]]]))
                paint.append(np.array([WHITE]))
        q = np.concatenate(quads)
        c, s = np.cos(h0), np.sin(h0)
        xy = np.stack([q[..., 0] * c - q[..., 1] * s, q[..., 0] * s + q[..., 1] * c], axis=-1)
        out_q.append(np.concatenate([xy, np.zeros(xy.shape[:-1] + (1,))], axis=-1))
        out_p.append(np.concatenate(paint))
    if not out_q:
        return np.zeros((0, 4, 3)), np.zeros(0, dtype=int)
    return np.concatenate(out_q), np.concatenate(out_p)
