"""Sensor file readers: LiDAR sweeps into the ego frame, camera images as BGR arrays.

Every failure is a ``SourceError`` naming the scene, the file and what is wrong, so a run records it
for that scene and goes on with the others.
"""
from __future__ import annotations

import os

import numpy as np

from generator.types import Frame, SourceError

NUSCENES_RECORD_FLOATS = 5  # x, y, z, intensity, ring index (float32 each)
AV2_LIDAR_COLUMNS = ("x", "y", "z", "intensity")


def _err(frame: Frame, path: str, what: str) -> SourceError:
    return SourceError(f"frame {frame.frame_index} (t={frame.timestamp_us} us): {what}",
                       scene=frame.scene_id, file=path, stage="read")


def _check_points(frame: Frame, path: str, pts: np.ndarray) -> np.ndarray:
    bad = ~np.isfinite(pts[:, :3]).all(axis=1)
    if bad.any():
        raise _err(frame, path, f"LiDAR sweep has {int(bad.sum())} points with NaN/inf coordinates")
    return pts


def _load_nuscenes_bin(frame: Frame, path: str) -> np.ndarray:
    from nuscenes.utils.data_classes import LidarPointCloud

    record_bytes = 4 * NUSCENES_RECORD_FLOATS
    size = os.path.getsize(path)
    if size % record_bytes:
        raise _err(frame, path, f"LiDAR file is truncated or corrupt: {size} bytes is not a multiple of the "
                                f"{record_bytes}-byte nuScenes point record (float32 x, y, z, intensity, ring)")
    if not path.endswith(".bin"):
        raise _err(frame, path, "nuScenes LiDAR files must end in .bin")
    pc = LidarPointCloud.from_file(path)  # (4, N) x, y, z, intensity in the LiDAR frame
    pts = pc.points.T.astype(np.float32, copy=True)
    _check_points(frame, path, pts)
    pts[:, :3] = frame.ego_SE3_lidar.transform_points(pts[:, :3]).astype(np.float32)
    return pts


def _load_av2_feather(frame: Frame, path: str) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.feather as feather

    try:
        table = feather.read_table(path, columns=list(AV2_LIDAR_COLUMNS))
    except (pa.ArrowInvalid, pa.ArrowKeyError, KeyError, OSError) as err:
        raise _err(frame, path, f"unreadable AV2 LiDAR feather (needs columns {list(AV2_LIDAR_COLUMNS)}): "
                                f"{err}") from None
    pts = np.stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float32)
                    for c in AV2_LIDAR_COLUMNS], axis=1) if table.num_rows else np.zeros((0, 4), np.float32)
    return _check_points(frame, path, pts)


_READERS = {"nuscenes_bin": _load_nuscenes_bin, "av2_feather": _load_av2_feather}


def load_lidar_ego(frame: Frame) -> np.ndarray:
    """The frame's LiDAR sweep as (N, 4) float32 [x, y, z, intensity] in the frame's ego frame.

    'nuscenes_bin': float32 x5 records in the LiDAR frame, read with the devkit's
    ``LidarPointCloud.from_file`` and moved by ``frame.ego_SE3_lidar``; 'av2_feather': AV2 sweep
    (x, y, z float16, intensity uint8), already in the ego frame.
    """
    path = frame.lidar_path
    reader = _READERS.get(frame.lidar_format)
    if reader is None:
        raise _err(frame, path, f"unknown lidar_format {frame.lidar_format!r}; known: {sorted(_READERS)}")
    if not path or not os.path.isfile(path):
        raise _err(frame, path, "LiDAR file is missing")
    return reader(frame, path)


def load_image(frame: Frame, camera: str) -> np.ndarray:
    """Camera image as (H, W, 3) uint8 BGR (OpenCV order); its size must equal the calibration's."""
    import cv2

    if camera not in frame.cameras:
        raise _err(frame, "", f"no calibration for camera {camera!r}; cameras: {sorted(frame.cameras)}")
    path = frame.image_paths.get(camera, "")
    if not path:
        raise _err(frame, path, f"the log has no image for camera {camera!r}")
    if not os.path.isfile(path):
        raise _err(frame, path, f"image of camera {camera!r} is missing")
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise _err(frame, path, f"image of camera {camera!r} is unreadable (not a decodable image)")
    cal = frame.cameras[camera]
    if img.shape[:2] != (cal.height_px, cal.width_px):
        raise _err(frame, path, f"image of camera {camera!r} is {img.shape[1]}x{img.shape[0]} px but its "
                                f"calibration says {cal.width_px}x{cal.height_px}")
    return img
