"""In-memory data model shared by every stage: cameras, 3D boxes, frames and scenes.

All boxes are yaw-only cuboids in the ego frame of their own frame (x forward, y left, z up),
centre at the geometric centre. Global (city) quantities are derived with ``Frame.city_SE3_ego``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from generator.geometry import SE3

CAMERA_NAMES = ("CAM_FRONT", "CAM_FRONT_RIGHT", "CAM_BACK_RIGHT", "CAM_BACK", "CAM_BACK_LEFT", "CAM_FRONT_LEFT")


class DrivegenError(Exception):
    """Base error. Carries the scene, the file and the stage so a run can record it and go on."""

    def __init__(self, message: str, *, scene: str | None = None, file: str | None = None, stage: str | None = None):
        self.message = message
        self.scene = scene
        self.file = file
        self.stage = stage
        where = ", ".join(f"{k}={v}" for k, v in (("scene", scene), ("file", file), ("stage", stage)) if v)
        super().__init__(f"{message} [{where}]" if where else message)


class SourceError(DrivegenError):
    """A log could not be read: missing/truncated file, bad calibration, missing poses, bad table row."""


@dataclass(frozen=True)
class CameraCalib:
    """One camera: intrinsics ``K`` (3, 3), extrinsics ``ego_SE3_cam`` and the image size in pixels."""

    name: str
    K: np.ndarray
    ego_SE3_cam: SE3
    width_px: int
    height_px: int

    def __post_init__(self) -> None:
        K = np.asarray(self.K, dtype=np.float64)
        if K.shape != (3, 3):
            raise ValueError(f"camera {self.name}: intrinsics must be (3, 3), got {K.shape}")
        if not np.all(np.isfinite(K)) or K[0, 0] <= 0 or K[1, 1] <= 0:
            raise ValueError(f"camera {self.name}: intrinsics have non-positive focal length or non-finite values")
        if self.width_px <= 0 or self.height_px <= 0:
            raise ValueError(f"camera {self.name}: image size must be positive, got {self.width_px}x{self.height_px}")
        object.__setattr__(self, "K", K)


@dataclass
class Boxes3D:
    """N yaw-only 3D boxes in the ego frame of one frame.

    center_m (N, 3), size_lwh_m (N, 3) [length along heading, width, height], yaw_rad (N,) about +z,
    velocity_mps (N, 2) ego-frame (vx, vy), NaN where unknown, class_name (N,) str (nuScenes detection
    classes), score (N,) in [0, 1], track_id (N,) int64 (-1 = not tracked), num_lidar_pts (N,) int32
    (-1 = unknown), instance_token (N,) str ('' = none; ground-truth identity for labelled logs).
    """

    center_m: np.ndarray
    size_lwh_m: np.ndarray
    yaw_rad: np.ndarray
    class_name: np.ndarray
    score: np.ndarray = None
    velocity_mps: np.ndarray = None
    track_id: np.ndarray = None
    num_lidar_pts: np.ndarray = None
    instance_token: np.ndarray = None

    def __post_init__(self) -> None:
        self.center_m = np.asarray(self.center_m, dtype=np.float64).reshape(-1, 3)
        n = len(self.center_m)
        self.size_lwh_m = np.asarray(self.size_lwh_m, dtype=np.float64).reshape(-1, 3)
        self.yaw_rad = np.asarray(self.yaw_rad, dtype=np.float64).reshape(-1)
        self.class_name = np.asarray(self.class_name, dtype=object).reshape(-1)
        self.score = np.ones(n) if self.score is None else np.asarray(self.score, dtype=np.float64).reshape(-1)
        self.velocity_mps = (np.full((n, 2), np.nan) if self.velocity_mps is None
                             else np.asarray(self.velocity_mps, dtype=np.float64).reshape(-1, 2))
        self.track_id = (np.full(n, -1, dtype=np.int64) if self.track_id is None
                         else np.asarray(self.track_id, dtype=np.int64).reshape(-1))
        self.num_lidar_pts = (np.full(n, -1, dtype=np.int32) if self.num_lidar_pts is None
                              else np.asarray(self.num_lidar_pts, dtype=np.int32).reshape(-1))
        self.instance_token = (np.full(n, "", dtype=object) if self.instance_token is None
                               else np.asarray(self.instance_token, dtype=object).reshape(-1))
        for name in ("size_lwh_m", "yaw_rad", "class_name", "score", "velocity_mps", "track_id",
                     "num_lidar_pts", "instance_token"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Boxes3D.{name} has {len(getattr(self, name))} rows, center_m has {n}")

    def __len__(self) -> int:
        return len(self.center_m)

    @classmethod
    def empty(cls) -> "Boxes3D":
        return cls(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0), np.zeros(0, dtype=object))

    def subset(self, idx) -> "Boxes3D":
        return Boxes3D(**{k: getattr(self, k)[idx] for k in self.fields()})

    @staticmethod
    def fields() -> tuple[str, ...]:
        return ("center_m", "size_lwh_m", "yaw_rad", "class_name", "score", "velocity_mps", "track_id",
                "num_lidar_pts", "instance_token")

    def copy(self, **changes) -> "Boxes3D":
        return replace(self, **{k: getattr(self, k).copy() for k in self.fields()}, **changes)

    @staticmethod
    def concat(parts: list["Boxes3D"]) -> "Boxes3D":
        if not parts:
            return Boxes3D.empty()
        return Boxes3D(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in Boxes3D.fields()})


@dataclass
class Frame:
    """One synchronized sample: LiDAR sweep, cameras, calibration and ego pose.

    ``lidar_path`` is read with ``generator.sources.io.load_lidar_ego`` according to ``lidar_format``
    ('nuscenes_bin': float32 x5 in the LiDAR frame; 'av2_feather': ego frame). ``image_paths`` maps a
    camera name to its image file ('' when the log has no images). ``labels`` are the log's own
    annotations in this frame's ego frame (None for unlabelled logs).
    """

    scene_id: str
    frame_index: int
    timestamp_us: int
    token: str
    city_SE3_ego: SE3
    ego_SE3_lidar: SE3
    lidar_path: str
    lidar_format: str
    cameras: dict[str, CameraCalib] = field(default_factory=dict)
    image_paths: dict[str, str] = field(default_factory=dict)
    labels: Boxes3D | None = None
    is_anchor: bool = False  # a 1 Hz keyframe that anchors QA (see generator.sources.keyframes)


@dataclass
class Scene:
    """A clip: frames in time order (nuScenes samples at 2 Hz, AV2 sweeps at 10 Hz)."""

    scene_id: str
    source: str  # 'nuscenes' | 'av2'
    log_name: str
    frames: list[Frame]
    anchor_indices: list[int] = field(default_factory=list)
    front_camera: str = "CAM_FRONT"  # the forward-facing camera's name (AV2: 'ring_front_center')

    def __post_init__(self) -> None:
        ts = [f.timestamp_us for f in self.frames]
        if any(b <= a for a, b in zip(ts, ts[1:])):
            raise SourceError("frame timestamps are not strictly increasing", scene=self.scene_id)

    @property
    def timestamps_us(self) -> np.ndarray:
        return np.array([f.timestamp_us for f in self.frames], dtype=np.int64)

    @property
    def frame_interval_s(self) -> float:
        ts = self.timestamps_us
        return float(np.median(np.diff(ts)) / 1e6) if len(ts) > 1 else 0.5
