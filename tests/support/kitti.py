"""KITTI tracking as a log source for tracking benches (``bench/tracking.py``, tests): the shared excerpt's ground
truth and PointRCNN detections (``../shared/data/kitti-tracking``, its README) read into drivegen's boxes, and the
tracker's boxes written back in KITTI's terms. Test and bench support only: KITTI is no log drivegen generates
datasets from (no sensors, calibration or poses here), so this is not in ``generator/sources``.

Frames. KITTI's boxes are in the rectified camera-0 frame: x right, y down, z forward; a box's ``(x, y, z)`` is the
centre of its *bottom* face, ``(h, w, l)`` its height, width and length, ``ry`` its yaw about the camera's y axis
(0: heading along +x, the camera's right; -pi/2: straight ahead). drivegen's boxes are in a right-handed frame with
z up and a box's centre at its geometric centre. The camera frame is read as an ego frame with x forward (camera
z), y left (camera -x), z up (camera -y):

    centre_ego = (z, -x, -y + h/2),   size_lwh = (l, w, h),   yaw_ego = -ry - pi/2   (and back)

There are no ego poses: each sequence is tracked in the moving camera frame (identity poses), at 10 Hz.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from generator.geometry import SE3
from generator.types import Boxes3D

FRAME_INTERVAL_US = 100_000  # KITTI tracking: 10 Hz
SEQUENCES = ("0001", "0008", "0012", "0013", "0015")
CLASSES = {"Car": "car", "Pedestrian": "pedestrian", "Cyclist": "bicycle"}  # KITTI class -> drivegen class
_DET_TYPE = {1: "Pedestrian", 2: "Car", 3: "Cyclist"}  # the detection files' type codes (their README)
# PointRCNN's scores are logits, thresholded at 0.3 (the smallest is logit(0.3) = -0.847) and over-confident: a
# logistic fit (Platt scaling) of "the detection matches a labelled box at 3D IoU 0.25" on the raw score over the
# five shared sequences, all classes, gives P = sigmoid(0.958 s - 2.85), half at s = 2.98. The tracker reads them as
# sigmoid(s - 3), one map for the detector (tracking.score_map, knots every 1 from -2 to 20).
POINTRCNN_SCORE_MAP = [[float(s), float(1 / (1 + np.exp(3.0 - s)))] for s in range(-2, 21)]
# AB3DMOT's released code on the five shared sequences (no ego poses, its evaluator, 3D IoU 0.25): sAMOTA, MOTA (%)
AB3DMOT_SHARED = {"car": (87.00, 83.05), "pedestrian": (66.73, 54.05), "cyclist": (92.39, 88.97)}
# ... and its published figures on the whole val split (eleven sequences, with ego-motion compensation)
AB3DMOT_PUBLISHED = {"car": (93.34, 86.47), "pedestrian": (82.73, 73.86), "cyclist": (93.78, 84.79)}


def _wrap(a):
    return np.arctan2(np.sin(a), np.cos(a))


def camera_to_ego(xyz_bottom: np.ndarray, hwl: np.ndarray, ry: np.ndarray):
    """KITTI camera-frame boxes -> (centre (N, 3), size lwh (N, 3), yaw (N,)) in the z-up frame of the docstring."""
    x, y, z = xyz_bottom.T
    h, w, l = hwl.T
    return np.column_stack([z, -x, -y + h / 2]), np.column_stack([l, w, h]), _wrap(-ry - np.pi / 2)


def ego_to_camera(center_m: np.ndarray, size_lwh_m: np.ndarray, yaw_rad: np.ndarray):
    """The inverse of ``camera_to_ego``: (bottom-face centre xyz (N, 3), hwl (N, 3), ry (N,)) in KITTI's camera frame."""
    X, Y, Z = center_m.T
    l, w, h = size_lwh_m.T
    return np.column_stack([-Y, -Z + h / 2, X]), np.column_stack([h, w, l]), _wrap(-yaw_rad - np.pi / 2)


@dataclass
class Annotations:
    """One sequence's KITTI ``label_02`` rows (every type, DontCare included), one entry per row: ``frame``,
    ``track`` (-1 for DontCare), ``kind`` (KITTI type, lower case), ``truncation``, ``occlusion``, ``box2d`` (N, 4)
    x1 y1 x2 y2 px, and the 3D box in drivegen's frame (``center``, ``size``, ``yaw``; meaningless for DontCare)."""

    frame: np.ndarray
    track: np.ndarray
    kind: np.ndarray
    truncation: np.ndarray
    occlusion: np.ndarray
    box2d: np.ndarray
    center: np.ndarray
    size: np.ndarray
    yaw: np.ndarray


@dataclass
class Sequence:
    """One KITTI sequence: ``timestamps_us`` (F,), ``detections`` (F Boxes3D, every class, drivegen's frame, raw
    PointRCNN scores; ``num_lidar_pts`` holds each box's row in ``det_box2d``, the detections' 2D boxes (N, 4), so a
    tracker's output box can be traced to its detection), ``poses`` (F identity poses) and its ``labels``."""

    name: str
    timestamps_us: np.ndarray
    detections: list[Boxes3D]
    det_box2d: np.ndarray
    poses: list[SE3]
    labels: Annotations


def read_labels(path: Path) -> Annotations:
    """A ``label_02/<seq>.txt`` file (space-separated, 17 columns)."""
    rows = [ln.split() for ln in Path(path).read_text().splitlines() if ln.strip()]
    if any(len(r) < 17 for r in rows):
        raise ValueError(f"{path}: a label_02 row has fewer than 17 fields")
    num = np.array([[float(v) for v in r[3:17]] for r in rows]).reshape(-1, 14)
    center, size, yaw = camera_to_ego(num[:, 10:13], num[:, 7:10], num[:, 13])
    return Annotations(np.array([int(r[0]) for r in rows], dtype=np.int64),
                       np.array([int(r[1]) for r in rows], dtype=np.int64),
                       np.array([r[2].lower() for r in rows], dtype=object),
                       num[:, 0].astype(np.int64), num[:, 1].astype(np.int64), num[:, 3:7], center, size, yaw)


def read_detections(root: Path, name: str) -> tuple[np.ndarray, np.ndarray, Boxes3D]:
    """The PointRCNN rows of one sequence over the three class files: (frame (N,), 2D boxes (N, 4), Boxes3D)."""
    parts = []
    for kitti_cls in CLASSES:
        path = Path(root) / "pointrcnn_val" / kitti_cls / f"{name}.txt"
        if path.stat().st_size:
            a = np.loadtxt(path, delimiter=",", ndmin=2)
            if a.shape[1] < 15:
                raise ValueError(f"{path}: a detection row has fewer than 15 fields")
            parts.append(a)
    a = np.concatenate(parts) if parts else np.zeros((0, 15))
    a = a[np.lexsort((np.arange(len(a)), a[:, 0]))]  # by frame, file order within a frame
    center, size, yaw = camera_to_ego(a[:, 10:13], a[:, 7:10], a[:, 13])
    cls = np.array([CLASSES[_DET_TYPE[int(t)]] for t in a[:, 1]], dtype=object)
    return a[:, 0].astype(np.int64), a[:, 2:6], Boxes3D(center, size, yaw, cls, score=a[:, 6])


def read_sequence(root: Path, name: str) -> Sequence:
    """One sequence of the shared excerpt (``root`` = ``../shared/data/kitti-tracking``)."""
    labels = read_labels(Path(root) / "label_02" / f"{name}.txt")
    frame, box2d, dets = read_detections(root, name)
    n_frames = int(max(labels.frame.max(initial=-1), frame.max(initial=-1))) + 1
    dets.num_lidar_pts = np.arange(len(dets), dtype=np.int32)  # the row of each box's 2D box
    bounds = np.searchsorted(frame, np.arange(n_frames + 1))
    per_frame = [dets.subset(slice(bounds[k], bounds[k + 1])) for k in range(n_frames)]
    ts = np.arange(n_frames, dtype=np.int64) * FRAME_INTERVAL_US
    return Sequence(name, ts, per_frame, box2d, [SE3(np.eye(3), np.zeros(3))] * n_frames, labels)


@dataclass
class Results:
    """A tracker's output over one sequence, one row per box: ``frame``, ``track``, ``kind`` ('car', 'pedestrian',
    'cyclist': KITTI's names), 3D box (``center``, ``size``, ``yaw``, drivegen's frame), ``box2d`` (N, 4) and
    ``score``."""

    frame: np.ndarray
    track: np.ndarray
    kind: np.ndarray
    center: np.ndarray
    size: np.ndarray
    yaw: np.ndarray
    box2d: np.ndarray
    score: np.ndarray


def results_from_boxes(seq: Sequence, out: list[Boxes3D]) -> Results:
    """A tracker's per-frame boxes (``track_scene``'s output on ``seq.detections``) as KITTI results. Each box's 2D
    box is its detection's (``num_lidar_pts`` = the detection's row); a box the tracker made (coasted or filled in a
    gap, ``num_lidar_pts`` -1) takes the 2D box interpolated in time between its track's detected boxes before and
    after it (the nearest one's beyond them): KITTI's evaluator reads 2D boxes only to ignore boxes under 25 px high
    or inside DontCare areas."""
    counts = [len(o) for o in out]
    b = Boxes3D.concat(out)
    frame = np.repeat(np.arange(len(out)), counts)
    track = b.track_id.astype(np.int64)
    det = b.num_lidar_pts.astype(np.int64)
    box2d = np.full((len(b), 4), np.nan)
    box2d[det >= 0] = seq.det_box2d[det[det >= 0]]
    made = np.flatnonzero(det < 0)
    if len(made):
        for t in np.unique(track[made]):
            own = np.flatnonzero(track == t)
            known = own[det[own] >= 0]
            gap = own[det[own] < 0]
            if not len(known):
                continue
            for c in range(4):
                box2d[gap, c] = np.interp(frame[gap], frame[known], box2d[known, c])
    inv = {v: k.lower() for k, v in CLASSES.items()}
    kind = np.array([inv.get(c, c) for c in b.class_name], dtype=object)
    return Results(frame, track, kind, b.center_m, b.size_lwh_m, b.yaw_rad, box2d, b.score)
