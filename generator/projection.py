"""Projection of 3D boxes into cameras.

``project_boxes`` follows the nuScenes/mmdet3d convention for the 2D box of a 3D object (nuScenes
devkit ``export_2d_annotations_as_json`` / mmdet3d ``get_2d_boxes``): the eight corners are moved into
the camera frame, corners at or behind the image plane (depth <= ``min_depth_m``) are dropped, the rest
are projected, their convex hull is intersected with the image canvas and the 2D box is the bounds of
that intersection. Clipping the corners' bounding box to the canvas instead gives a box that is too
large whenever the hull leaves the image through a corner; the real nuScenes keyframe test
(tests/perception/test_projection_real.py) shows the difference (IoU 0.82 -> 0.96 on a truncated car).
The hull clipping runs vectorised in shapely 2 (GEOS), a nuscenes-devkit dependency.
"""
from __future__ import annotations

import numpy as np
import shapely

from generator.geometry import box_corners, project_to_image
from generator.types import Boxes3D, CameraCalib


def corners_in_camera(boxes: Boxes3D, cam: CameraCalib, corners_ego: np.ndarray | None = None) -> np.ndarray:
    """(N, 8, 3) box corners in the optical frame of ``cam`` (boxes are in the ego frame). ``corners_ego``: the
    boxes' ``box_corners`` when the caller has them (one frame's boxes go into every camera)."""
    corners = box_corners(boxes.center_m, boxes.size_lwh_m, boxes.yaw_rad) if corners_ego is None else corners_ego
    return cam.cam_SE3_ego.transform_points(corners.reshape(-1, 3)).reshape(-1, 8, 3)


def hull_boxes_in_canvas(uv: np.ndarray, valid: np.ndarray, width_px: int, height_px: int) -> np.ndarray:
    """Bounds of (convex hull of the valid points) intersected with the canvas [0, W] x [0, H].

    uv (N, P, 2) pixel coordinates, valid (N, P) bool. Returns (N, 4) x1, y1, x2, y2; NaN rows where a
    set has no valid point or its hull misses the canvas.
    """
    n = uv.shape[0]
    out = np.full((n, 4), np.nan)
    # Two cases need no geometry: a hull whose points all lie in the canvas is its own intersection with it
    # (bounds: the points' extremes), and one whose points all lie beyond one edge of it misses it (NaN).
    # Only the boxes the image truncates are clipped by GEOS.
    ux, uy = uv[..., 0], uv[..., 1]
    x_lo, x_hi = np.where(valid, ux, np.inf).min(axis=1), np.where(valid, ux, -np.inf).max(axis=1)
    y_lo, y_hi = np.where(valid, uy, np.inf).min(axis=1), np.where(valid, uy, -np.inf).max(axis=1)
    some = valid.any(axis=1)  # (a NaN coordinate makes every comparison False: GEOS decides)
    inside = some & (x_lo >= 0) & (y_lo >= 0) & (x_hi <= width_px) & (y_hi <= height_px)
    beyond = some & ((x_lo > width_px) | (y_lo > height_px) | (x_hi < 0) | (y_hi < 0))
    out[inside] = np.column_stack([x_lo, y_lo, x_hi, y_hi])[inside]
    valid = valid & ~(inside | beyond)[:, None]
    rows, cols = np.nonzero(valid)
    if len(rows) == 0:
        return out
    present = np.unique(rows)
    # shapely wants contiguous indices 0..k-1 for the output geometries
    dense = np.searchsorted(present, rows)
    mp = shapely.multipoints(uv[rows, cols], indices=dense)
    hull = shapely.convex_hull(mp)
    clipped = shapely.intersection(hull, shapely.box(0.0, 0.0, float(width_px), float(height_px)))
    bounds = shapely.bounds(clipped)  # NaN for empty geometries
    out[present] = bounds
    return out


def project_boxes(boxes: Boxes3D, cam: CameraCalib, min_depth_m: float = 0.0):
    """Project ego-frame boxes into one camera (nuScenes 2D-box convention, see module docstring).

    Returns (box2d_xyxy (N, 4) float pixels inside the image, NaN where not visible; depth_m (N,)
    depth of the box centre along the optical axis (negative behind the camera); in_image (N,) bool:
    some part of the box is in front of the camera and the clipped 2D box has positive area).
    """
    if len(boxes) == 0:
        return np.full((0, 4), np.nan), np.zeros(0), np.zeros(0, dtype=bool)
    return project_corners(corners_in_camera(boxes, cam), boxes.center_m, cam, min_depth_m)


def project_corners(pc: np.ndarray, center_m: np.ndarray, cam: CameraCalib, min_depth_m: float = 0.0):
    """``project_boxes`` of boxes given by their corners in the camera's optical frame (``corners_in_camera``,
    (N, 8, 3)) and their centres in the ego frame (N, 3): for a caller that reads the corners too."""
    if len(pc) == 0:
        return np.full((0, 4), np.nan), np.zeros(0), np.zeros(0, dtype=bool)
    depth_c = cam.cam_SE3_ego.transform_points(center_m)[:, 2]
    front = pc[..., 2] > min_depth_m
    uv, _ = project_to_image(np.where(front[..., None], pc, 1.0), cam.K)
    box2d = hull_boxes_in_canvas(uv, front, cam.width_px, cam.height_px)
    with np.errstate(invalid="ignore"):
        in_image = (box2d[:, 2] > box2d[:, 0]) & (box2d[:, 3] > box2d[:, 1])
    box2d[~in_image] = np.nan
    return box2d, depth_c, in_image


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
