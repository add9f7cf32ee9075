"""The sensor rig of the generated logs: nuScenes' six cameras and the top LiDAR.

Calibration numbers are those of the real nuScenes rig (log n015-2018-07-24-11-22-45+0800, the same car
that recorded scene-0061): ``ego_SE3_sensor`` as (w, x, y, z) quaternion + translation in metres, camera
intrinsics at the native 1600x900 resolution. The LiDAR model is a Velodyne HDL-32E: 32 beams spread
evenly from -30.67 to +10.67 degrees elevation.
"""
from __future__ import annotations

import numpy as np

from generator.geometry import SE3
from generator.types import CameraCalib
from schemas.errors import InputError
from schemas.vocab import NUSCENES_CAMERAS

NATIVE_WIDTH_PX = 1600
NATIVE_HEIGHT_PX = 900

# channel -> (quaternion wxyz, translation m, (fx = fy, cx, cy) at 1600x900)
_CAMERAS = {
    "CAM_FRONT": ([0.49980154, -0.50303162, 0.49977981, -0.49737084], [1.700791, 0.015946, 1.510958],
                  (1266.4172, 816.267, 491.5071)),
    "CAM_FRONT_RIGHT": ([0.20603479, -0.20269405, 0.68245078, -0.67136109], [1.550848, -0.493405, 1.495748],
                        (1260.8474, 807.9682, 495.3344)),
    "CAM_BACK_RIGHT": ([0.1228098, -0.13240084, -0.70043058, 0.69049603], [1.014878, -0.480568, 1.562395],
                       (1259.5137, 807.2529, 501.1958)),
    "CAM_BACK": ([0.50378727, -0.4974025, -0.49418502, 0.50454961], [0.028326, 0.003451, 1.579103],
                 (809.221, 829.2196, 481.7784)),
    "CAM_BACK_LEFT": ([0.69241856, -0.70316194, -0.11648343, 0.11203318], [1.035691, 0.484795, 1.59097],
                      (1256.7415, 792.1126, 492.7757)),
    "CAM_FRONT_LEFT": ([0.6757265, -0.67362665, 0.21214015, -0.21122827], [1.523878, 0.494631, 1.509328],
                       (1272.5979, 826.6155, 479.7517)),
}
assert tuple(_CAMERAS) == NUSCENES_CAMERAS

LIDAR_CHANNEL = "LIDAR_TOP"
LIDAR_QUAT_WXYZ = [0.70779551, -0.00649224, 0.01064621, -0.70630731]
LIDAR_TRANSLATION_M = [0.943713, 0.0, 1.84023]
LIDAR_ELEVATION_DEG = np.linspace(-30.67, 10.67, 32)  # HDL-32E, ring 0 = lowest beam
LIDAR_MAX_RANGE_M = 70.0

# The ego body (rear-axle origin, as in nuScenes): used only to keep agents from driving through the ego.
EGO_SIZE_LWH_M = np.array([4.9, 2.0, 1.8])
EGO_CENTER_OFFSET_X_M = 1.4


def camera_rig(width_px: int = 800, height_px: int = 450) -> dict[str, CameraCalib]:
    """The six nuScenes cameras at ``width_px`` x ``height_px``; intrinsics scaled from 1600x900.

    The aspect ratio must stay 16:9 so one scale factor applies to both axes.
    """
    if width_px * NATIVE_HEIGHT_PX != height_px * NATIVE_WIDTH_PX:
        raise InputError(f"camera size {width_px}x{height_px} is not 16:9 like nuScenes' 1600x900")
    s = width_px / NATIVE_WIDTH_PX
    rig = {}
    for name, (q, t, (f, cx, cy)) in _CAMERAS.items():
        K = np.array([[f * s, 0.0, cx * s], [0.0, f * s, cy * s], [0.0, 0.0, 1.0]])
        rig[name] = CameraCalib(name=name, K=K, ego_SE3_cam=SE3.from_quat(q, t), width_px=width_px, height_px=height_px)
    return rig


def camera_extrinsics(name: str) -> tuple[list[float], list[float]]:
    """(quaternion wxyz, translation m) of ``ego_SE3_cam`` as stored in calibrated_sensor."""
    q, t, _ = _CAMERAS[name]
    return list(q), list(t)


def ego_SE3_lidar() -> SE3:
    return SE3.from_quat(LIDAR_QUAT_WXYZ, LIDAR_TRANSLATION_M)


def lidar_ray_dirs(num_azimuth: int = 1084) -> np.ndarray:
    """Unit ray directions in the LiDAR frame, (32, num_azimuth, 3): row = ring (beam), column = azimuth
    step ``2*pi*j/num_azimuth`` counter-clockwise from the LiDAR x axis."""
    el = np.deg2rad(LIDAR_ELEVATION_DEG)[:, None]
    az = (2 * np.pi * np.arange(num_azimuth) / num_azimuth)[None, :]
    return np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el) * np.ones_like(az)], axis=-1)
