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
               max_range_m: float = LIDAR_MAX_RANGE_M, range_noise_m: float = 0.015,
               elevation_deg: np.ndarray | None = None) -> Sweep:
    """Cast every ray of ``dirs_lidar`` (R, A, 3) (rings ordered by increasing elevation) from the LiDAR at
    ``frame_SE3_lidar``. ``ground_intensity(x, y) -> (N,)`` gives the intensity of ground hits at frame
    coordinates.
    """
    n_ring, n_az = dirs_lidar.shape[:2]
    R, o = frame_SE3_lidar.rotation, frame_SE3_lidar.translation
    dirs32 = dirs_lidar.astype(np.float32, copy=False)
    R32 = R.astype(np.float32)
    Dx = dirs32 @ R32[0]  # ray directions in the frame, one (R, A) array per axis
    Dy = dirs32 @ R32[1]
    Dz = dirs32 @ R32[2]
    with np.errstate(divide="ignore"):
        iz = np.float32(1.0) / Dz
    best_t = np.where(Dz < -1e-6, np.float32(-o[2]) * iz, np.float32(np.inf)).astype(np.float32)
    best_id = np.full((n_ring, n_az), -1, dtype=np.int32)
    best_exit = np.zeros((n_ring, n_az), dtype=np.float32)
    if elevation_deg is None:
        elevation_deg = np.rad2deg(np.arcsin(np.clip(dirs_lidar[:, 0, 2], -1, 1)))
    elev = np.deg2rad(np.asarray(elevation_deg))
    nb = len(boxes)
    unocc = np.zeros(nb, dtype=np.int64)
    tilt = np.arccos(np.clip(R[2, 2], -1, 1)) + np.deg2rad(0.5)  # LiDAR z vs frame z, plus a margin
    if nb:
        half = boxes.size_lwh_m / 2
        cy, sy = np.cos(boxes.yaw_rad), np.sin(boxes.yaw_rad)
        oc = o[None, :] - boxes.center_m
        ob = np.stack([cy * oc[:, 0] + sy * oc[:, 1], -sy * oc[:, 0] + cy * oc[:, 1], oc[:, 2]], axis=1)
        # horizontal distance from the sensor to each footprint (min) and to its farthest corner (max)
        dmin = np.hypot(np.maximum(np.abs(ob[:, 0]) - half[:, 0], 0), np.maximum(np.abs(ob[:, 1]) - half[:, 1], 0))
        dmax = np.hypot(np.abs(ob[:, 0]) + half[:, 0], np.abs(ob[:, 1]) + half[:, 1])
        ztop, zbot = -ob[:, 2] + half[:, 2], -ob[:, 2] - half[:, 2]  # box top/bottom relative to the sensor
        el_hi = np.arctan2(ztop, np.where(ztop > 0, np.maximum(dmin, 1e-3), dmax))
        el_lo = np.arctan2(zbot, np.where(zbot < 0, np.maximum(dmin, 1e-3), dmax))
        r0 = np.searchsorted(elev, el_lo - tilt, side="left")
        r1 = np.searchsorted(elev, el_hi + tilt, side="right")
        corners = box_corners(boxes.center_m, boxes.size_lwh_m, boxes.yaw_rad)  # (N, 8, 3)
        cl = (corners - o) @ R  # in the LiDAR frame
        az = np.arctan2(cl[..., 1], cl[..., 0])
        cen = (boxes.center_m - o) @ R
        az_c = np.arctan2(cen[:, 1], cen[:, 0])
        rel = (az - az_c[:, None] + np.pi) % (2 * np.pi) - np.pi
        step = 2 * np.pi / n_az
        j0 = np.floor((az_c + rel.min(1)) / step).astype(np.int64)
        j1 = np.ceil((az_c + rel.max(1)) / step).astype(np.int64)
        inside = (dmin <= 0) | (j1 - j0 + 1 >= n_az)
        lo32 = (-half - ob).astype(np.float32)  # slab bounds relative to the sensor, box frame
        hi32 = (half - ob).astype(np.float32)
        todo = np.nonzero((dmin < max_range_m) & (r1 > r0))[0]
        # every (box, ray) pair of every box's ray window, flattened: no Python loop over boxes
        c0 = np.where(inside, 0, j0 % n_az)[todo]
        nc = np.where(inside, n_az, j1 - j0 + 1)[todo]
        nr = (r1 - r0)[todo]
        counts = nr * nc
        total = int(counts.sum())
        if total:
            k = np.repeat(np.arange(len(todo)), counts)
            local = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
            ncs = nc[k]
            ray = (r0[todo][k] + local // ncs) * n_az + (c0[k] + local % ncs) % n_az
            box = todo[k]
            dx, dy = Dx.reshape(-1)[ray], Dy.reshape(-1)[ray]
            cyb, syb = cy.astype(np.float32)[box], sy.astype(np.float32)[box]
            lo_, hi_ = lo32[box], hi32[box]
            with np.errstate(divide="ignore", invalid="ignore"):
                ix = 1.0 / (cyb * dx + syb * dy)
                iy = 1.0 / (cyb * dy - syb * dx)
                izz = iz.reshape(-1)[ray]
                a1_, a2_ = lo_[:, 0] * ix, hi_[:, 0] * ix
                b1_, b2_ = lo_[:, 1] * iy, hi_[:, 1] * iy
                c1_, c2_ = lo_[:, 2] * izz, hi_[:, 2] * izz
                tmin = np.maximum(np.maximum(np.minimum(a1_, a2_), np.minimum(b1_, b2_)), np.minimum(c1_, c2_))
                tmax = np.minimum(np.minimum(np.maximum(a1_, a2_), np.maximum(b1_, b2_)), np.maximum(c1_, c2_))
                hit = (tmax > tmin) & (tmin > 0) & (tmin < max_range_m)
            ray, box, tmin, tmax = ray[hit], box[hit], tmin[hit], tmax[hit]
            unocc = np.bincount(box, minlength=nb).astype(np.int64)
            flat_t = best_t.reshape(-1)
            np.minimum.at(flat_t, ray, tmin)
            win = tmin == flat_t[ray]  # the nearest hit of its ray (exact ties: the later box wins)
            best_id.reshape(-1)[ray[win]] = box[win]
            best_exit.reshape(-1)[ray[win]] = tmax[win]
    valid = np.flatnonzero(best_t < max_range_m)
    ids = best_id.reshape(-1)[valid]
    t = best_t.reshape(-1)[valid]
    on_box = ids >= 0
    noise = rng.standard_normal(len(t), dtype=np.float32) * np.float32(range_noise_m)
    depth_in = np.minimum(np.abs(noise) + np.float32(0.004), np.float32(0.5) * (best_exit.reshape(-1)[valid] - t))
    t = t + np.where(on_box, depth_in, noise)
    pts = np.empty((len(t), 5), dtype=np.float32)
    pts[:, :3] = dirs32.reshape(-1, 3)[valid] * t[:, None]
    pts[:, 4] = valid // n_az
    inten = np.empty(len(t), dtype=np.float32)
    if on_box.any():
        inten[on_box] = boxes.intensity[ids[on_box]]
    g = np.flatnonzero(~on_box)
    if len(g):
        vg = valid[g]
        tg = t[g]
        gx = o[0] + Dx.reshape(-1)[vg] * tg
        gy = o[1] + Dy.reshape(-1)[vg] * tg
        inten[g] = ground_intensity(gx, gy)
    pts[:, 3] = np.clip(inten * (1.0 + 0.2 * np.tanh(noise / np.float32(range_noise_m))), 0, 255)
    hits = np.bincount(ids[on_box], minlength=nb) if nb else np.zeros(0, dtype=np.int64)
    return Sweep(points=pts, box_index=ids, hits=hits, unoccluded=unocc)
