"""Projection of 3D boxes into cameras.

``project_boxes`` follows the nuScenes/mmdet3d convention for 2D boxes of 3D objects: the eight
corners are moved into the camera frame, corners behind the camera are dropped, the rest are projected
and the convex hull is intersected with the image; the 2D box is that intersection's bounds.
"""
from __future__ import annotations

import numpy as np

from generator.geometry import box_corners, project_to_image
from generator.types import Boxes3D, CameraCalib


def corners_in_camera(boxes: Boxes3D, cam: CameraCalib) -> np.ndarray:
    """(N, 8, 3) box corners in the optical frame of ``cam`` (boxes are in the ego frame)."""
    corners = box_corners(boxes.center_m, boxes.size_lwh_m, boxes.yaw_rad)
    cam_SE3_ego = cam.ego_SE3_cam.inverse()
    return cam_SE3_ego.transform_points(corners.reshape(-1, 3)).reshape(-1, 8, 3)


def project_boxes(boxes: Boxes3D, cam: CameraCalib, min_depth_m: float = 0.1):
    """Project ego-frame boxes into one camera.

    Returns (box2d_xyxy (N, 4) float pixels clipped to the image, NaN where not visible; depth_m (N,)
    depth of the box centre along the optical axis; in_image (N,) bool: some part of the box is in front
    of the camera and inside the image).
    """
    n = len(boxes)
    out = np.full((n, 4), np.nan)
    if n == 0:
        return out, np.zeros(0), np.zeros(0, dtype=bool)
    pc = corners_in_camera(boxes, cam)
    depth_c = cam.ego_SE3_cam.inverse().transform_points(boxes.center_m)[:, 2]
    uv, depth = project_to_image(pc, cam.K)
    front = depth > min_depth_m
    u = np.where(front, uv[..., 0], np.nan)
    v = np.where(front, uv[..., 1], np.nan)
    has = front.any(axis=1)
    with np.errstate(invalid="ignore"), np.errstate(all="ignore"):
        x1 = np.nanmin(np.where(has[:, None], u, 0), axis=1)
        x2 = np.nanmax(np.where(has[:, None], u, 0), axis=1)
        y1 = np.nanmin(np.where(has[:, None], v, 0), axis=1)
        y2 = np.nanmax(np.where(has[:, None], v, 0), axis=1)
    W, H = cam.width_px, cam.height_px
    cx1, cy1 = np.clip(x1, 0, W), np.clip(y1, 0, H)
    cx2, cy2 = np.clip(x2, 0, W), np.clip(y2, 0, H)
    in_image = has & (cx2 > cx1) & (cy2 > cy1)
    out[in_image] = np.stack([cx1, cy1, cx2, cy2], axis=1)[in_image]
    return out, depth_c, in_image


def box_iou_xyxy(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise IoU of (N, 4) boxes a and b (x1, y1, x2, y2); 0 where either is empty/NaN."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]), 0, None)
    inter = iw * ih
    area = lambda x: np.clip(x[:, 2] - x[:, 0], 0, None) * np.clip(x[:, 3] - x[:, 1], 0, None)
    union = area(a) + area(b) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, inter / union, 0.0)
    return np.nan_to_num(iou)
