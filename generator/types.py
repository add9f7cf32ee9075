"""In-memory data model shared by every stage: cameras, 3D boxes, frames and scenes.

All boxes are yaw-only cuboids in the ego frame of their own frame (x forward, y left, z up),
centre at the geometric centre. Global (city) quantities are derived with ``Frame.city_SE3_ego``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from collections.abc import Sequence

from generator.geometry import SE3
from schemas.errors import DrivegenError, SourceError  # noqa: F401  (the errors stages raise most)
from schemas.vocab import FRONT_CAMERA_NAMES

if TYPE_CHECKING:
    from schemas.config import SourceLimitsConfig


def front_camera(names: Sequence[str], ego_SE3_cam: Sequence[np.ndarray], preferred: str = "CAM_FRONT") -> str | None:
    """The forward-facing camera of a rig, the one rule every stage uses ("the front camera"):
    ``preferred`` (``qa.front_camera``) when the rig has it, else a known front camera of a log format
    (``schemas.vocab.FRONT_CAMERA_NAMES``: nuScenes CAM_FRONT, AV2 ring_front_center), else the camera whose
    optical axis (+z of the camera) points most along the ego's +x. ``ego_SE3_cam``: (4, 4) or flattened
    (16,) row-major transforms, one per name. None for a rig without cameras."""
    names = list(names)
    if not names:
        return None
    if preferred in names:
        return preferred
    for known in FRONT_CAMERA_NAMES:
        if known in names:
            return known
    fwd = [float(np.asarray(T, dtype=np.float64).reshape(4, 4)[0, 2]) for T in ego_SE3_cam]
    fwd = [f if np.isfinite(f) else -2.0 for f in fwd]
    return names[int(np.argmax(fwd))]


def scene_front_cameras(entry_scene: np.ndarray, entry_frame: np.ndarray, names, ego_SE3_cam: np.ndarray,
                        preferred: str = "CAM_FRONT") -> tuple[np.ndarray, np.ndarray]:
    """Each scene's front camera: ``front_camera`` over the cameras of the scene's first frame (in row order)
    that has any. The inputs describe the flattened camera entries of a frames table (``frames.cameras``, entries
    grouped by frame): (E,) integer scene key and frame row of each, its name (a list or an Arrow string array)
    and (E, 16) ``ego_SE3_cam``. Returns (scene keys, the chosen entry of each), one Python step per scene."""
    entry_frame = np.asarray(entry_frame)
    if len(entry_frame) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, entry_frame[1:] != entry_frame[:-1]])  # each frame's first entry
    ends = np.r_[starts[1:], len(entry_frame)]
    keys, first = np.unique(np.asarray(entry_scene)[starts], return_index=True)
    chosen = np.empty(len(keys), np.int64)
    for k, j in enumerate(first):
        a, b = int(starts[j]), int(ends[j])
        rig = names[a:b]
        rig = rig.to_pylist() if hasattr(rig, "to_pylist") else list(rig)
        chosen[k] = a + rig.index(front_camera(rig, ego_SE3_cam[a:b], preferred))
    return keys, chosen


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

    @cached_property
    def cam_SE3_ego(self) -> SE3:
        """The inverse of ``ego_SE3_cam`` (ego frame -> this camera's optical frame), computed once."""
        return self.ego_SE3_cam.inverse()


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
        return Boxes3D._trusted({k: getattr(self, k)[idx] for k in _BOX_FIELDS})

    @staticmethod
    def _trusted(columns: dict) -> "Boxes3D":
        """A Boxes3D from columns already of the right dtypes, shapes and equal lengths (rows of valid boxes):
        no conversion or check, for the per-frame splits of tracked scenes."""
        out = object.__new__(Boxes3D)
        out.__dict__.update(columns)
        return out

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
        return Boxes3D._trusted({k: np.concatenate([getattr(p, k) for p in parts]) for k in _BOX_FIELDS})


_BOX_FIELDS = Boxes3D.fields()


@dataclass(frozen=True)
class CropMasks:
    """M binary masks of one image of ``height`` x ``width`` pixels, each held as a crop of the image that
    contains all its pixels: mask m is ``crops[m]`` ((h, w) bool) with its top-left pixel at ``origins[m]``
    (x0, y0), False elsewhere. A mask covers a small part of its image (a 1600 x 900 camera's object masks a
    few percent): a dense (M, H, W) array costs M full images to allocate, scan and encode, the crops only
    their own pixels. ``dense()`` gives that array, ``from_dense`` the crops of one (each cut to its mask's
    bounding box; an empty mask has a (0, 0) crop at (0, 0))."""

    height: int
    width: int
    origins: np.ndarray  # (M, 2) int64 x0, y0
    crops: tuple  # M (h, w) bool arrays

    def __post_init__(self):
        o = np.asarray(self.origins, dtype=np.int64).reshape(-1, 2)
        if len(o) != len(self.crops):
            raise ValueError(f"CropMasks: {len(o)} origins for {len(self.crops)} crops")
        for (x0, y0), c in zip(o.tolist(), self.crops):
            if c.ndim != 2 or x0 < 0 or y0 < 0 or x0 + c.shape[1] > self.width or y0 + c.shape[0] > self.height:
                raise ValueError(f"CropMasks: a crop of shape {c.shape} at (x0, y0) = ({x0}, {y0}) leaves the "
                                 f"{self.width} x {self.height} image")
        object.__setattr__(self, "origins", o)

    def __len__(self) -> int:
        return len(self.crops)

    @classmethod
    def from_dense(cls, masks: np.ndarray) -> CropMasks:
        """The crops of (M, H, W) (or (H, W)) bool masks."""
        m = np.asarray(masks, dtype=bool)
        if m.ndim == 2:
            m = m[None]
        if m.ndim != 3:
            raise ValueError(f"masks must be (H, W) or (M, H, W), got shape {m.shape}")
        origins = np.zeros((len(m), 2), np.int64)
        crops = []
        for i, mask in enumerate(m):
            ys = np.flatnonzero(mask.any(axis=1))
            if not len(ys):
                crops.append(np.zeros((0, 0), bool))
                continue
            band = mask[ys[0]:ys[-1] + 1]
            xs = np.flatnonzero(band.any(axis=0))
            crops.append(band[:, xs[0]:xs[-1] + 1])
            origins[i] = xs[0], ys[0]
        return cls(m.shape[1], m.shape[2], origins, tuple(crops))

    @cached_property
    def runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every run of set pixels down a crop's column, of all masks, in (mask, column, row) order:
        (mask (R,), column (R,), first row (R,), one past its last row (R,)), columns and rows in the mask's
        crop. Found with one ``diff`` over every crop's columns laid end to end, each padded with a False pixel
        above and below: a mask's own numpy calls would cost more than its pixels (an image has a few masks, a
        scene thousands). Computed once per object (the RLE encoder and the visibility filter both read it)."""
        hw = np.array([c.shape for c in self.crops], np.int64).reshape(-1, 2)
        col_len = hw[:, 0] + 2
        off = np.r_[0, np.cumsum(hw[:, 1] * col_len)]
        buf = np.zeros(int(off[-1]) + 1, np.int8)
        for k, c in enumerate(self.crops):
            if c.size:
                buf[off[k]:off[k + 1]].reshape(c.shape[1], c.shape[0] + 2)[:, 1:-1] = c.T
        d = np.diff(buf)
        start = np.flatnonzero(d == 1) + 1  # a run's first pixel, as a position in buf
        length = np.flatnonzero(d == -1) + 1 - start  # its end is the next fall, in the same padded column
        mask = np.searchsorted(off, start, side="right") - 1
        col, row = np.divmod(start - off[mask], col_len[mask])
        return mask, col, row - 1, row - 1 + length

    def dense(self) -> np.ndarray:
        """(M, H, W) bool."""
        out = np.zeros((len(self), self.height, self.width), dtype=bool)
        for k, ((x0, y0), c) in enumerate(zip(self.origins.tolist(), self.crops)):
            out[k, y0:y0 + c.shape[0], x0:x0 + c.shape[1]] = c
        return out


@dataclass(frozen=True)
class LidarSweep:
    """One earlier LiDAR sweep of a frame's sensor (multi-sweep models, motion from sweeps): the file
    (``lidar_format`` as ``Frame``), its capture time, and the ego pose and LiDAR mounting at that time, so
    its points can be moved into the frame's LiDAR or ego frame (nuScenes ``sample_data`` rows between
    keyframes, as mmdet3d's info files list them under ``lidar_sweeps``)."""

    lidar_path: str
    lidar_format: str
    timestamp_us: int
    city_SE3_ego: SE3
    ego_SE3_lidar: SE3


@dataclass
class Frame:
    """One synchronized sample: LiDAR sweep, cameras, calibration and ego pose.

    ``lidar_path`` is read with ``generator.sources.io.load_lidar_ego`` according to ``lidar_format``
    ('nuscenes_bin': float32 x5 in the LiDAR frame; 'av2_feather': ego frame). ``image_paths`` maps a
    camera name to its image file ('' when the log has no images). ``labels`` are the log's own
    annotations in this frame's ego frame (None for unlabelled logs). ``limits``: the source's sanity bounds
    (``schemas.config.SourceLimitsConfig``; None = the defaults), which the sensor readers apply wherever the
    frame is read (LiDAR file size and completeness). ``lidar_sweeps``: the sweeps of the same LiDAR before
    this one, newest first (mmdet3d's order), at most the source's ``max_sweeps``; ``[]`` when the log has none
    before this frame, None when the source does not list them.
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
    limits: SourceLimitsConfig | None = None
    lidar_sweeps: list[LidarSweep] | None = None
    lidar_checked: int = 0  # size of the LiDAR file the source found sound (``sources.io.check_lidar``); 0: none


@dataclass
class Scene:
    """A clip: frames in time order (nuScenes samples at 2 Hz, AV2 sweeps at 10 Hz)."""

    scene_id: str
    source: str  # 'nuscenes' | 'av2'
    log_name: str
    frames: list[Frame]
    anchor_indices: list[int] = field(default_factory=list)
    front_camera: str = "CAM_FRONT"  # the forward-facing camera's name (AV2: 'ring_front_center')
    # sensor files found damaged when the scene loaded (``FrameIssue``, stage 'load'): the frame keeps its
    # other sensors; the pipeline counts these frames against failures.max_failed_frame_share
    issues: list = field(default_factory=list)
    # logs on object storage (``generator.sources.remote``): (node-cache folder, URI) — the frames' files are
    # read from the cache, the tables the run writes name them by URI (``shown_path``)
    files_at: tuple[str, str] | None = None

    def shown_path(self, path: str) -> str:
        """How the run's tables name one of this scene's files: its URI for logs on object storage."""
        if self.files_at and path and path.startswith(self.files_at[0] + "/"):
            return self.files_at[1] + path[len(self.files_at[0]):]
        return path

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


@dataclass(frozen=True)
class FrameIssue:
    """A frame-level problem a stage recorded and skipped instead of failing the scene: the frame, the camera
    (None for the LiDAR or the whole frame), the stage, a reason code, the file and the message. A scene
    whose share of such frames passes ``failures.max_failed_frame_share`` fails (``generator.pipeline``)."""

    frame_index: int
    stage: str
    reason: str
    message: str
    file: str | None = None
    camera: str | None = None

    @classmethod
    def of(cls, frame: "Frame", stage: str, reason: str, err: BaseException | str, camera: str | None = None,
           file: str | None = None) -> "FrameIssue":
        return cls(frame.frame_index, stage, reason, str(err), file or getattr(err, "file", None), camera)
