"""A reference tracker for comparisons only (bench/tracking.py, tests): AB3DMOT (Weng, Wang, Held, Kitani, "3D
Multi-Object Tracking: A Baseline and New Evaluation Metrics", IROS 2020) with the rules and per-class settings of
its released code, written here (never copied) and never used by drivegen's pipeline.

Per class, frame by frame (one Kalman step per frame, whatever the frame rate), in the common (global) frame:

* state ``(x, y, z, theta, l, w, h, vx, vy, vz)``, a linear Kalman filter with a constant-velocity centre, theta and
  size constant; measurement ``(x, y, z, theta, l, w, h)``. Noises as released (filterpy's defaults, scaled):
  initial covariance 10 I with 10,000 on the velocities, process noise I with 0.01 on the velocities,
  measurement noise I;
* before an update, a predicted theta more than 90 degrees from the detection's is turned by pi (orientation
  correction), so the filter never averages opposite headings;
* association: an affinity per (detection, prediction) pair, 3D GIoU (``giou_3d``) or minus the distance of the
  box centres (``dist_3d``); ``hungar`` (``linear_sum_assignment`` on minus the affinity) or ``greedy`` (pairs taken
  in ascending cost, first come first served) over all pairs, then matches whose affinity is under the class's
  threshold undone;
* each unmatched detection starts a track; a track is output while ``time_since_update < max_age`` (so a coasted
  track gives its prediction) once it has ``min_hits`` matches in all or within the first ``min_hits`` frames, with
  the last matched detection's score; it is deleted at ``time_since_update >= max_age``.

Settings per class (``SETTINGS``): the released code's for KITTI with PointRCNN detections (car, pedestrian,
cyclist), and for nuScenes with CenterPoint detections (the other classes; a class it has none for takes the
car's). Each output box's ``num_lidar_pts`` is the index among the input boxes of the detection the track last
matched (its 2D box is that detection's, as the released code's output carries the detection's info).
"""
from __future__ import annotations

import numpy as np
import shapely
from scipy.optimize import linear_sum_assignment

from generator.geometry import SE3, box_corners
from generator.types import Boxes3D

# class: (association, metric, threshold on the affinity, min_hits, max_age)
SETTINGS = {
    "car": ("hungar", "giou_3d", -0.2, 3, 2),  # KITTI, PointRCNN
    "pedestrian": ("greedy", "giou_3d", -0.4, 1, 4),  # KITTI, PointRCNN
    "bicycle": ("hungar", "dist_3d", -2.0, 3, 4),  # KITTI Cyclist, PointRCNN
    "truck": ("greedy", "giou_3d", -0.4, 1, 2),  # nuScenes, CenterPoint
    "trailer": ("greedy", "giou_3d", -0.3, 3, 2),
    "bus": ("greedy", "giou_3d", -0.4, 1, 2),
    "motorcycle": ("greedy", "giou_3d", -0.7, 3, 2),
}

_F = np.eye(10)
_F[0, 7] = _F[1, 8] = _F[2, 9] = 1.0  # x += vx (one frame)
_Q = np.diag([1.0] * 7 + [0.01] * 3)
_P0 = np.diag([10.0] * 7 + [10000.0] * 3)


def _wrap(a):
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def affinity(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """(N, M) affinity of boxes ``a`` (N, 7) and ``b`` (M, 7) as (x, y, z, theta, l, w, h), z the box centre:
    3D GIoU, or minus the centre distance."""
    if metric == "dist_3d":
        return -np.linalg.norm(a[:, None, :3] - b[None, :, :3], axis=2)
    pa_ = shapely.polygons(box_corners(a[:, :3], a[:, 4:7], a[:, 3])[:, :4, :2])[:, None]
    pb_ = shapely.polygons(box_corners(b[:, :3], b[:, 4:7], b[:, 3])[:, :4, :2])[None, :]
    inter = shapely.area(shapely.intersection(pa_, pb_))
    hull = shapely.area(shapely.convex_hull(shapely.union(pa_, pb_)))
    top_a, bot_a = a[:, 2] + a[:, 6] / 2, a[:, 2] - a[:, 6] / 2
    top_b, bot_b = b[:, 2] + b[:, 6] / 2, b[:, 2] - b[:, 6] / 2
    overlap = np.clip(np.minimum(top_a[:, None], top_b[None]) - np.maximum(bot_a[:, None], bot_b[None]), 0, None)
    union_h = np.maximum(top_a[:, None], top_b[None]) - np.minimum(bot_a[:, None], bot_b[None])
    i3 = inter * overlap
    u3 = (np.prod(a[:, 4:7], axis=1)[:, None] + np.prod(b[:, 4:7], axis=1)[None]) - i3
    c3 = hull * union_h
    return i3 / u3 - (c3 - u3) / c3


def _greedy(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(cost, axis=None, kind="stable")
    rows, cols = np.unravel_index(order, cost.shape)
    used_r, used_c, out_r, out_c = set(), set(), [], []
    for r, c in zip(rows.tolist(), cols.tolist()):
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            out_r.append(r)
            out_c.append(c)
    return np.array(out_r, dtype=np.int64), np.array(out_c, dtype=np.int64)


def _track_class(cls: str, detections: list[Boxes3D], city_SE3_ego: list[SE3], first_id: int, offsets: np.ndarray):
    algm, metric, threshold, min_hits, max_age = SETTINGS.get(cls, SETTINGS["car"])
    x = np.zeros((0, 10))  # states
    P = np.zeros((0, 10, 10))
    ids = np.zeros(0, dtype=np.int64)
    hits = np.zeros(0, dtype=np.int64)
    since = np.zeros(0, dtype=np.int64)
    info = np.zeros(0, dtype=np.int64)  # the input index of the last matched detection
    score = np.zeros(0)
    next_id = first_id
    out = []
    for k, (dets, pose) in enumerate(zip(detections, city_SE3_ego)):
        sel = np.flatnonzero(dets.class_name == cls)
        c = pose.transform_points(dets.center_m[sel]) if len(sel) else np.zeros((0, 3))
        z = np.column_stack([c, _wrap(dets.yaw_rad[sel] + pose.yaw_rad), dets.size_lwh_m[sel]])
        # predict
        x = x @ _F.T
        P = _F @ P @ _F.T + _Q
        x[:, 3] = _wrap(x[:, 3])
        since += 1
        md, mt = np.zeros(0, np.int64), np.zeros(0, np.int64)
        if len(z) and len(x):
            aff = affinity(z, x[:, :7], metric)
            md, mt = linear_sum_assignment(-aff) if algm == "hungar" else _greedy(-aff)
            ok = aff[md, mt] >= threshold
            md, mt = md[ok], mt[ok]
        if len(md):
            zm = z[md].copy()
            th = x[mt, 3]
            d = np.abs(zm[:, 3] - th)
            turn = (d > np.pi / 2) & (d < 3 * np.pi / 2)
            th = np.where(turn, _wrap(th + np.pi), th)
            d = zm[:, 3] - th
            th = np.where(np.abs(d) >= 3 * np.pi / 2, th + np.sign(zm[:, 3]) * 2 * np.pi, th)
            x[mt, 3] = th
            S = P[mt][:, :7, :7] + np.eye(7)
            K = P[mt][:, :, :7] @ np.linalg.inv(S)
            x[mt] += np.einsum("nij,nj->ni", K, zm - x[mt, :7])
            P[mt] = P[mt] - K @ P[mt][:, :7, :]
            x[mt, 3] = _wrap(x[mt, 3])
            hits[mt] += 1
            since[mt] = 0
            info[mt] = offsets[k] + sel[md]
            score[mt] = dets.score[sel[md]]
        new = np.setdiff1d(np.arange(len(z)), md)
        if len(new):
            x = np.concatenate([x, np.column_stack([z[new], np.zeros((len(new), 3))])])
            P = np.concatenate([P, np.repeat(_P0[None], len(new), axis=0)])
            ids = np.concatenate([ids, np.arange(next_id, next_id + len(new))])
            next_id += len(new)
            hits = np.concatenate([hits, np.ones(len(new), dtype=np.int64)])
            since = np.concatenate([since, np.zeros(len(new), dtype=np.int64)])
            info = np.concatenate([info, offsets[k] + sel[new]])
            score = np.concatenate([score, dets.score[sel[new]]])
        shown = (since < max_age) & ((hits >= min_hits) | (k + 1 <= min_hits))
        if shown.any():
            X = x[shown]
            inv = pose.inverse()
            box = Boxes3D(inv.transform_points(X[:, :3]), X[:, 4:7], _wrap(X[:, 3] - pose.yaw_rad),
                          np.full(int(shown.sum()), cls, dtype=object), score=score[shown], track_id=ids[shown],
                          num_lidar_pts=info[shown])
            out.append((k, box))
        alive = since < max_age
        x, P, ids, hits, since, info, score = (v[alive] for v in (x, P, ids, hits, since, info, score))
    return out, next_id


def ab3dmot_scene(timestamps_us, detections: list[Boxes3D], city_SE3_ego: list[SE3]) -> list[Boxes3D]:
    """Track one scene (the signature of ``actors.track.pubtracker.track_scene`` without its config): per frame,
    the output boxes in that frame's ego frame with ``track_id`` set, each class tracked on its own."""
    f = len(detections)
    parts: list[list[Boxes3D]] = [[] for _ in range(f)]
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in detections])])
    next_id = 0
    for cls in sorted({c for d in detections for c in d.class_name}):
        out, next_id = _track_class(cls, detections, city_SE3_ego, next_id, offsets)
        for k, box in out:
            parts[k].append(box)
    return [Boxes3D.concat(p) if p else Boxes3D.empty() for p in parts]
