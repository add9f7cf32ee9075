"""Ray-cast LiDAR sweeps: a 32-beam spinning sensor against yaw-only boxes and the ground plane z = 0.

All rays fire at the sweep's timestamp (no motion within a revolution). Each ray keeps its nearest hit,
so near objects occlude far ones. A box is only tested against the rays of its own azimuth window (the
angular span of its corners seen from the sensor), which keeps a sweep to a few milliseconds.
Hit points on a box are pushed a few centimetres *into* the box along the ray (range noise that never
leaves the surface it hit), so a box-membership count of the saved points equals the hit count.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from generator.geometry import SE3, box_corners
from generator.synth.rig import LIDAR_MAX_RANGE_M


@dataclass
class BoxSet:
    """N yaw-only boxes in one frame: centre (N, 3), size lwh (N, 3), yaw (N,), LiDAR intensity (N,)."""

    center_m: np.ndarray
    size_lwh_m: np.ndarray
    yaw_rad: np.ndarray
    intensity: np.ndarray

    def __len__(self) -> int:
        return len(self.center_m)


@dataclass
class Sweep:
    """One sweep: points (M, 5) float32 (x, y, z, intensity, ring) in the LiDAR frame; ``box_index`` (M,)
    the box each point hit (-1 ground); per box ``hits`` (N,) visible points and ``unoccluded`` (N,) rays
    that would hit the box if nothing else were there (both within range)."""

    points: np.ndarray
    box_index: np.ndarray
    hits: np.ndarray
    unoccluded: np.ndarray


def cast_sweep(frame_SE3_lidar: SE3, dirs_lidar: np.ndarray, boxes: BoxSet, ground_intensity, rng: np.random.Generator,
               max_range_m: float = LIDAR_MAX_RANGE_M, range_noise_m: float = 0.015) -> Sweep:
    """Cast every ray of ``dirs_lidar`` (R, A, 3) from the LiDAR at ``frame_SE3_lidar``.

    ``ground_intensity(x, y) -> (N,)`` gives the intensity of ground hits at frame coordinates.
    """
    n_ring, n_az = dirs_lidar.shape[:2]
    R, o = frame_SE3_lidar.rotation, frame_SE3_lidar.translation
    d_l = dirs_lidar.reshape(-1, 3)
    D = d_l @ R.T  # (K, 3) in the frame
    K = len(D)
    best_t = np.full(K, np.inf)
    with np.errstate(divide="ignore"):
        tg = np.where(D[:, 2] < -1e-9, -o[2] / D[:, 2], np.inf)
    best_t[:] = tg
    best_id = np.full(K, -1, dtype=np.int64)
    best_exit = best_t.copy()
    nb = len(boxes)
    unocc = np.zeros(nb, dtype=np.int64)
    if nb:
        # cull boxes out of range
        rad = 0.5 * np.linalg.norm(boxes.size_lwh_m[:, :2], axis=1)
        dist = np.linalg.norm(boxes.center_m[:, :2] - o[:2], axis=1) - rad
        corners = box_corners(boxes.center_m, boxes.size_lwh_m, boxes.yaw_rad)  # (N, 8, 3)
        cl = (corners - o) @ R  # in the LiDAR frame
        az = np.arctan2(cl[..., 1], cl[..., 0])  # (N, 8)
        cen = (boxes.center_m - o) @ R
        az_c = np.arctan2(cen[:, 1], cen[:, 0])
        rel = (az - az_c[:, None] + np.pi) % (2 * np.pi) - np.pi
        step = 2 * np.pi / n_az
        j0 = np.floor((az_c + rel.min(1)) / step).astype(np.int64)
        j1 = np.ceil((az_c + rel.max(1)) / step).astype(np.int64)
        rings = np.arange(n_ring)[:, None] * n_az
        cy, sy = np.cos(boxes.yaw_rad), np.sin(boxes.yaw_rad)
        for b in np.nonzero(dist < max_range_m)[0]:
            span = j1[b] - j0[b] + 1
            if span <= 0:
                continue
            if span >= n_az:  # the sensor is inside the box's footprint span: test every ray
                cols = np.arange(n_az)
            else:
                cols = np.arange(j0[b], j1[b] + 1) % n_az
            idx = (rings + cols[None, :]).reshape(-1)
            d = D[idx]
            # into the box frame
            oc = o - boxes.center_m[b]
            ob = np.array([cy[b] * oc[0] + sy[b] * oc[1], -sy[b] * oc[0] + cy[b] * oc[1], oc[2]])
            db = np.stack([cy[b] * d[:, 0] + sy[b] * d[:, 1], -sy[b] * d[:, 0] + cy[b] * d[:, 1], d[:, 2]], axis=1)
            half = boxes.size_lwh_m[b] / 2
            with np.errstate(divide="ignore", invalid="ignore"):
                inv = 1.0 / db
                t1 = (-half - ob) * inv
                t2 = (half - ob) * inv
            tmin = np.nanmax(np.minimum(t1, t2), axis=1)
            tmax = np.nanmin(np.maximum(t1, t2), axis=1)
            hit = (tmax > tmin) & (tmin > 0) & (tmin < max_range_m)
            unocc[b] = int(hit.sum())
            better = hit & (tmin < best_t[idx])
            ii = idx[better]
            best_t[ii] = tmin[better]
            best_exit[ii] = tmax[better]
            best_id[ii] = b
    valid = best_t < max_range_m
    ids = best_id[valid]
    t = best_t[valid]
    noise = np.abs(rng.normal(0.0, range_noise_m, len(t))) + 0.004
    on_box = ids >= 0
    depth_in = np.minimum(noise, 0.5 * (best_exit[valid] - t))
    t = np.where(on_box, t + depth_in, t + rng.normal(0.0, range_noise_m, len(t)))
    pts_l = d_l[valid] * t[:, None]
    ring = np.repeat(np.arange(n_ring), n_az)[valid]
    inten = np.empty(len(t))
    if on_box.any():
        inten[on_box] = boxes.intensity[ids[on_box]]
    g = ~on_box
    if g.any():
        pg = o + D[valid][g] * t[g, None]
        inten[g] = ground_intensity(pg[:, 0], pg[:, 1])
    inten = np.clip(inten * rng.uniform(0.8, 1.2, len(t)), 0, 255)
    pts = np.concatenate([pts_l, inten[:, None], ring[:, None]], axis=1).astype(np.float32)
    hits = np.bincount(ids[on_box], minlength=nb) if nb else np.zeros(0, dtype=np.int64)
    return Sweep(points=pts, box_index=ids, hits=hits, unoccluded=unocc)
