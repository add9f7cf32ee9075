"""Run-folder OBJECTS rows and log annotations -> the devkit's ``DetectionBox`` / ``TrackingBox``.

Box conventions are the devkit's: global (city) frame, ``translation`` = box centre, ``size`` = (w, l, h)
(drivegen stores (l, w, h)), ``rotation`` = quaternion (w, x, y, z), ``velocity`` = global (vx, vy).
Geometry is computed on arrays; the per-box loop only instantiates the devkit's objects.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from nuscenes.eval.common.data_classes import EvalBoxes
from nuscenes.eval.detection.constants import DETECTION_NAMES
from nuscenes.eval.detection.data_classes import DetectionBox
from nuscenes.eval.tracking.data_classes import TrackingBox

from generator.geometry import yaw_to_quat_wxyz

TRACKING_NAMES = ("bicycle", "bus", "car", "motorcycle", "pedestrian", "trailer", "truck")  # tracking_nips_2019

# Predicted attributes. drivegen's detectors do not classify attributes; like the nuScenes result
# formatting of CenterPoint/mmdet3d, the attribute follows from the predicted speed: above 0.2 m/s a
# vehicle is 'moving', a cycle 'with_rider', a pedestrian 'moving'; below, the class's resting state.
# With an unknown velocity the class default is used.
MOVING_MPS = 0.2
_MOVING = {"car": "vehicle.moving", "truck": "vehicle.moving", "bus": "vehicle.moving", "trailer": "vehicle.moving",
           "construction_vehicle": "vehicle.moving", "pedestrian": "pedestrian.moving",
           "motorcycle": "cycle.with_rider", "bicycle": "cycle.with_rider"}
_RESTING = {"car": "vehicle.parked", "truck": "vehicle.parked", "bus": "vehicle.parked", "trailer": "vehicle.parked",
            "construction_vehicle": "vehicle.parked", "pedestrian": "pedestrian.standing",
            "motorcycle": "cycle.without_rider", "bicycle": "cycle.without_rider"}
_UNKNOWN = {"car": "vehicle.parked", "truck": "vehicle.parked", "bus": "vehicle.moving", "trailer": "vehicle.parked",
            "construction_vehicle": "vehicle.parked", "pedestrian": "pedestrian.moving",
            "motorcycle": "cycle.without_rider", "bicycle": "cycle.without_rider"}


def predicted_attributes(class_name: np.ndarray, velocity_mps: np.ndarray) -> np.ndarray:
    """(N,) class names and (N, 2) velocities (NaN = unknown) -> (N,) nuScenes attribute names ('' = none)."""
    cls = np.asarray(class_name, dtype=object)
    v = np.asarray(velocity_mps, dtype=np.float64).reshape(-1, 2)
    speed = np.hypot(v[:, 0], v[:, 1])
    out = np.full(len(cls), "", dtype=object)
    for table, mask in ((_MOVING, speed > MOVING_MPS), (_RESTING, speed <= MOVING_MPS), (_UNKNOWN, np.isnan(speed))):
        for c, attr in table.items():
            out[mask & (cls == c)] = attr
    return out


@dataclass
class BoxArrays:
    """N boxes in the global frame, one row per box.

    sample_token (N,) str, center_m (N, 3), size_lwh_m (N, 3), yaw_rad (N,) or quat_wxyz (N, 4),
    velocity_mps (N, 2) (NaN = unknown), class_name (N,) str, score (N,), track_id (N,) str,
    num_pts (N,) int (-1 = unknown; 0 = empty box, removed by the devkit's filter), attribute (N,) str.
    """

    sample_token: np.ndarray
    center_m: np.ndarray
    size_lwh_m: np.ndarray
    quat_wxyz: np.ndarray
    velocity_mps: np.ndarray
    class_name: np.ndarray
    score: np.ndarray
    track_id: np.ndarray
    num_pts: np.ndarray
    attribute: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.sample_token)
        for name in ("center_m", "size_lwh_m", "quat_wxyz", "velocity_mps", "class_name", "score", "track_id",
                     "num_pts", "attribute"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"BoxArrays.{name} has {len(getattr(self, name))} rows, sample_token has {n}")

    def __len__(self) -> int:
        return len(self.sample_token)

    def subset(self, idx) -> "BoxArrays":
        return BoxArrays(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})


def _wlh(size_lwh: np.ndarray) -> np.ndarray:
    return np.asarray(size_lwh, dtype=np.float64)[:, [1, 0, 2]]


def _eval_boxes(b: BoxArrays, sample_tokens: list[str], gt: bool, make) -> EvalBoxes:
    """``EvalBoxes`` with an entry (possibly empty) for every token in ``sample_tokens``; ``make(i, common,
    score)`` builds the devkit box of row ``i`` from the keyword arguments every box type shares."""
    wlh = np.maximum(_wlh(b.size_lwh_m), 1e-3)  # the devkit's scale IoU asserts sizes > 0
    score = b.score if not gt else np.full(len(b), -1.0)  # GT boxes get score -1 (devkit convention)
    out = EvalBoxes()
    for tok in sample_tokens:
        out.add_boxes(tok, [])
    for i in range(len(b)):  # the devkit's metrics work on box objects: one per row is unavoidable
        common = dict(sample_token=str(b.sample_token[i]), translation=tuple(b.center_m[i]), size=tuple(wlh[i]),
                      rotation=tuple(b.quat_wxyz[i]), velocity=tuple(b.velocity_mps[i]), num_pts=int(b.num_pts[i]))
        out.boxes[b.sample_token[i]].append(make(i, common, float(score[i])))
    return out


def to_detection_boxes(b: BoxArrays, sample_tokens: list[str], gt: bool) -> EvalBoxes:
    """``EvalBoxes`` of ``DetectionBox``; classes outside the ten detection classes are dropped."""
    b = b.subset(np.isin(b.class_name.astype(str), DETECTION_NAMES))
    return _eval_boxes(b, sample_tokens, gt, lambda i, common, score: DetectionBox(
        **common, detection_name=str(b.class_name[i]), detection_score=score,
        attribute_name=str(b.attribute[i])))


def to_tracking_boxes(b: BoxArrays, sample_tokens: list[str], gt: bool) -> EvalBoxes:
    """``EvalBoxes`` of ``TrackingBox`` (tracking classes only; predictions need a track id)."""
    keep = np.isin(b.class_name.astype(str), TRACKING_NAMES)
    if not gt:
        keep &= b.track_id.astype(str) != ""
    b = b.subset(keep)
    return _eval_boxes(b, sample_tokens, gt, lambda i, common, score: TrackingBox(
        **common, tracking_id=str(b.track_id[i]), tracking_name=str(b.class_name[i]), tracking_score=score))


def cap_per_sample(b: BoxArrays, max_boxes: int) -> tuple[BoxArrays, int]:
    """Keep the ``max_boxes`` highest-scoring boxes of each sample (the devkit refuses more). -> (boxes, dropped)."""
    if len(b) == 0:
        return b, 0
    order = np.lexsort((-b.score, b.sample_token.astype(str)))
    tok = b.sample_token.astype(str)[order]
    start = np.r_[0, np.flatnonzero(tok[1:] != tok[:-1]) + 1]
    rank = np.arange(len(tok)) - np.repeat(start, np.diff(np.r_[start, len(tok)]))
    keep = np.sort(order[rank < max_boxes])
    return b.subset(keep), len(b) - len(keep)


def _vec(col: pa.ChunkedArray, width: int) -> np.ndarray:
    """A fixed-size list column -> (N, width) float array (nulls -> NaN)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(arr) == 0:
        return np.zeros((0, width))
    filled = arr.fill_null([float("nan")] * width) if arr.null_count else arr
    return np.asarray(filled.flatten().to_numpy(zero_copy_only=False), dtype=np.float64).reshape(-1, width)


def objects_to_arrays(objects: pa.Table, sample_token: np.ndarray, scene_prefix: bool = True) -> BoxArrays:
    """schemas.tables.OBJECTS rows (global boxes) -> ``BoxArrays`` for the given per-row sample tokens.

    Track ids are made unique per scene (``<scene>#<track_id>``); rows with track_id -1 get ''.
    """
    cls = np.asarray(objects.column("class_name").to_pylist(), dtype=object)
    vel = _vec(objects.column("velocity_global_mps"), 2)
    tid = objects.column("track_id").to_numpy()
    scene = np.asarray(objects.column("scene_id").to_pylist(), dtype=object)
    track = np.where(tid >= 0, (scene + "#" if scene_prefix else "") + tid.astype(str).astype(object), "")
    score = np.nan_to_num(objects.column("score").to_numpy(zero_copy_only=False).astype(np.float64), nan=0.0)
    npts = objects.column("num_lidar_pts").to_numpy(zero_copy_only=False)
    npts = np.where(np.isnan(npts.astype(float)), -1, npts).astype(np.int64)
    return BoxArrays(
        sample_token=np.asarray(sample_token, dtype=object),
        center_m=_vec(objects.column("center_global_m"), 3),
        size_lwh_m=_vec(objects.column("size_lwh_m"), 3),
        quat_wxyz=yaw_to_quat_wxyz(objects.column("yaw_global_rad").to_numpy(zero_copy_only=False)).reshape(-1, 4),
        velocity_mps=vel, class_name=cls, score=np.clip(score, 0.0, 1.0), track_id=track.astype(object),
        num_pts=npts, attribute=predicted_attributes(cls, vel))
