"""2D boxes of projected 3D boxes: the hull clipped to the canvas, with and without GEOS."""
from __future__ import annotations

import warnings

import numpy as np
import shapely

from generator.projection import hull_boxes_in_canvas


def _geos(uv, valid, W, H):
    """Every set's hull clipped by GEOS (what hull_boxes_in_canvas did for every box)."""
    out = np.full((len(uv), 4), np.nan)
    for i in range(len(uv)):
        if valid[i].any():
            hull = shapely.convex_hull(shapely.multipoints(uv[i][valid[i]]))
            out[i] = shapely.bounds(shapely.intersection(hull, shapely.box(0.0, 0.0, float(W), float(H))))
    return out


def test_hull_boxes_inside_beyond_and_truncated_equal_geos():
    """Hulls inside the canvas take their points' extremes and hulls beyond one edge are NaN without GEOS:
    the same bounds as clipping each hull, for hulls inside, on the edges, beyond each edge, across corners, of
    one or two points, with invalid (behind the camera) and non-finite points."""
    rng = np.random.default_rng(7)
    W, H = 1600, 900
    kinds = {"inside": 0, "beyond": 0, "clipped": 0}
    for _ in range(60):
        n = int(rng.integers(1, 40))
        centre = rng.uniform([-900, -600], [W + 900, H + 600], (n, 1, 2))
        uv = centre + rng.uniform(-300, 300, (n, 8, 2)) * rng.uniform(0.01, 1, (n, 1, 1))
        valid = rng.random((n, 8)) < 0.85
        valid[rng.random(n) < 0.1] = False
        edge = rng.random(n) < 0.1  # points exactly on the canvas edges
        uv[edge, 0, 0], uv[edge, 1, 1] = 0.0, float(H)
        odd = rng.random(n) < 0.05
        uv[odd, 2] = np.nan
        few = rng.random(n) < 0.1  # one or two valid points
        valid[few, 2:] = False
        got = hull_boxes_in_canvas(uv, valid, W, H)
        want = _geos(uv, valid, W, H)
        np.testing.assert_array_equal(got, want)
        xs = np.where(valid, uv[..., 0], np.nan)
        ys = np.where(valid, uv[..., 1], np.nan)
        with warnings.catch_warnings():  # all-NaN rows (no valid point)
            warnings.simplefilter("ignore", RuntimeWarning)
            lo_x, hi_x, lo_y, hi_y = np.nanmin(xs, 1), np.nanmax(xs, 1), np.nanmin(ys, 1), np.nanmax(ys, 1)
        kinds["inside"] += int(((lo_x >= 0) & (hi_x <= W) & (lo_y >= 0) & (hi_y <= H)).sum())
        kinds["beyond"] += int(((lo_x > W) | (hi_x < 0) | (lo_y > H) | (hi_y < 0)).sum())
        kinds["clipped"] += int((np.isfinite(want).all(1) & ((lo_x < 0) | (hi_x > W) | (lo_y < 0) | (hi_y > H))).sum())
    assert min(kinds.values()) > 50, kinds  # every case is exercised
