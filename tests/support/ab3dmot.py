"""A reference tracker for comparisons only (bench/tracking.py, tests): AB3DMOT as its paper describes it
(Weng, Wang, Held, Kitani, "3D Multi-Object Tracking: A Baseline and New Evaluation Metrics", IROS 2020, Sec. III),
written here from the paper's text, never from its code, and never used by drivegen's pipeline.

Per class, frame by frame, in the common (global) frame:
  * state ``(x, y, z, theta, l, w, h, vx, vy, vz)``: a linear Kalman filter with a constant-velocity model for the
    centre (one frame per step, as the paper's), theta and the size constant; the measurement is a detection's
    ``(x, y, z, theta, l, w, h)``;
  * association: 3D IoU between each predicted track box and each detection, the Hungarian algorithm on its
    negative, pairs below ``IoU_min = 0.01`` rejected;
  * orientation correction: before an update, a predicted heading more than 90 degrees from its detection's is
    turned by pi (so the filter never averages opposite headings);
  * birth and death: an unmatched detection starts a track; a track is output once it was matched in
    ``min_hits = 3`` consecutive frames (or within the first ``min_hits`` frames of the sequence), and deleted
    after ``max_age = 2`` frames without a match; output boxes are the updated states of the tracks matched in
    the frame, with their detection's score.
The filter's noises are the paper's choices: initial state covariance 10 I with 1000 x that on the unobserved
velocities, process noise 0.01 on the velocities, measurement noise I.
"""
from __future__ import annotations

import numpy as np
import shapely
from scipy.optimize import linear_sum_assignment

from generator.geometry import SE3, box_corners
from generator.types import Boxes3D

IOU_MIN, MIN_HITS, MAX_AGE = 0.01, 3, 2

_F = np.eye(10)
_F[0, 7] = _F[1, 8] = _F[2, 9] = 1.0  # x += vx (one frame)
_H = np.eye(7, 10)
_Q = np.diag([0.0] * 7 + [0.01] * 3)
_R = np.eye(7)
_P0 = np.diag([10.0] * 7 + [10000.0] * 3)


def _wrap(a):
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def iou_3d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3D IoU of yaw-rotated boxes ``a`` (N, 7) and ``b`` (M, 7) as (x, y, z, theta, l, w, h) -> (N, M)."""
    if not len(a) or not len(b):
        return np.zeros((len(a), len(b)))

    def polys(x):
        c = box_corners(x[:, :3], x[:, 4:7], x[:, 3])[:, :4, :2]  # top face corners, BEV
        return shapely.polygons(c)

    pa_, pb_ = polys(a), polys(b)
    inter = shapely.area(shapely.intersection(pa_[:, None], pb_[None, :]))
    za0, za1 = a[:, 2] - a[:, 6] / 2, a[:, 2] + a[:, 6] / 2
    zb0, zb1 = b[:, 2] - b[:, 6] / 2, b[:, 2] + b[:, 6] / 2
    dz = np.clip(np.minimum(za1[:, None], zb1[None]) - np.maximum(za0[:, None], zb0[None]), 0, None)
    vi = inter * dz
    va, vb = a[:, 4] * a[:, 5] * a[:, 6], b[:, 4] * b[:, 5] * b[:, 6]
    return vi / np.maximum(va[:, None] + vb[None] - vi, 1e-9)


class _Track:
    def __init__(self, z: np.ndarray, tid: int, score: float):
        self.x = np.concatenate([z, np.zeros(3)])
        self.P = _P0.copy()
        self.id, self.hits, self.streak, self.since_update, self.score = tid, 1, 1, 0, score

    def predict(self):
        self.x = _F @ self.x
        self.P = _F @ self.P @ _F.T + _Q
        self.x[3] = _wrap(self.x[3])
        self.since_update += 1
        if self.since_update > 1:
            self.streak = 0

    def update(self, z: np.ndarray, score: float):
        d = _wrap(z[3] - self.x[3])
        if abs(d) > np.pi / 2:  # orientation correction
            self.x[3] = _wrap(self.x[3] + np.pi)
        d = _wrap(z[3] - self.x[3])
        y = z - _H @ self.x
        y[3] = d
        S = _H @ self.P @ _H.T + _R
        K = self.P @ _H.T @ np.linalg.inv(S)
        self.x = self.x + K @ y
        self.x[3] = _wrap(self.x[3])
        self.P = (np.eye(10) - K @ _H) @ self.P
        self.hits += 1
        self.streak = self.streak + 1 if self.since_update <= 1 else 1
        self.since_update = 0
        self.score = score


def ab3dmot_scene(timestamps_us, detections: list[Boxes3D], city_SE3_ego: list[SE3]) -> list[Boxes3D]:
    """Track one scene (the signature of ``actors.track.pubtracker.track_scene`` without its config): per frame,
    the output boxes in that frame's ego frame with ``track_id`` set, per class as the paper runs it."""
    f = len(detections)
    out: list[list[Boxes3D]] = [[] for _ in range(f)]
    classes = sorted({c for d in detections for c in d.class_name})
    next_id = 0
    for cls in classes:
        tracks: list[_Track] = []
        for k, (dets, pose) in enumerate(zip(detections, city_SE3_ego)):
            sel = np.flatnonzero(dets.class_name == cls)
            c = pose.transform_points(dets.center_m[sel]) if len(sel) else np.zeros((0, 3))
            z = np.column_stack([c, _wrap(dets.yaw_rad[sel] + pose.yaw_rad), dets.size_lwh_m[sel]])
            for t in tracks:
                t.predict()
            pred = np.array([t.x[:7] for t in tracks]).reshape(-1, 7)
            iou = iou_3d(z, pred)
            matched_d, matched_t = np.zeros(0, int), np.zeros(0, int)
            if iou.size:
                a, b = linear_sum_assignment(-iou)
                ok = iou[a, b] >= IOU_MIN
                matched_d, matched_t = a[ok], b[ok]
            for di, ti in zip(matched_d, matched_t):
                tracks[ti].update(z[di], float(dets.score[sel[di]]))
            for di in sorted(set(range(len(z))) - set(matched_d.tolist())):
                tracks.append(_Track(z[di], next_id, float(dets.score[sel[di]])))
                next_id += 1
            shown = [t for t in tracks if t.since_update == 0 and (t.streak >= MIN_HITS or k < MIN_HITS)]
            if shown:
                X = np.array([t.x for t in shown])
                inv = pose.inverse()
                box = Boxes3D(inv.transform_points(X[:, :3]), X[:, 4:7], _wrap(X[:, 3] - pose.yaw_rad),
                              np.full(len(shown), cls, dtype=object), score=np.array([t.score for t in shown]))
                box.track_id = np.array([t.id for t in shown], dtype=np.int64)
                out[k].append(box)
            tracks = [t for t in tracks if t.since_update < MAX_AGE]
    return [Boxes3D.concat(parts) if parts else Boxes3D.empty() for parts in out]
