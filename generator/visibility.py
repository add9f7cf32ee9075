"""Visibility filter (STRIDE-QA §4.2): which objects are reliably visible in which camera.

Pure core ``decide_visibility`` over arrays; one decision per (object, camera). Checks, in this order,
the first failing one becoming the row's ``drop_reason`` (every drop has one):

  geometry (always)
    ``zero_size_box``       a size is <= 0 or a centre/size/yaw value is not finite
    ``behind_camera``       no box corner lies in front of the camera (depth <= 0.1 m)
    ``outside_image``       in front, but the projected box does not meet the image
    ``too_few_lidar_points`` fewer than ``min_lidar_points`` LiDAR points in the 3D box (unknown counts pass)
    ``box_too_small``       the projected box, clipped to the image, covers < ``min_box_area_px`` pixels
  image (when the camera has an image)
    ``image_unavailable``   the image could not be read (missing file, wrong size, undecodable)
    ``empty_mask``          the segmenter returned an empty mask
    ``low_box_iou``         IoU(projected 3D box, the mask's tight box) <= ``box_iou_min`` (0.3)
    ``low_coverage``        coverage <= ``coverage_min`` (0.8)
    ``low_mask_score``      the mask's score (SAM 2.1's predicted IoU) <= ``mask_score_min`` (0.8)

Coverage is the share of the mask's pixels that lie inside the projected 3D box (clipped to the image):
``|mask ∩ box| / |mask|``. It is low when the segmenter spills over onto a neighbour or the background.

Logs without images (the AV2 excerpt, or a camera whose ``image_paths`` entry is ''): the decision is
geometric only. Such rows are ``visible`` when the geometric checks pass, and their mask columns
(``mask_rle``, ``mask_box_xyxy``, ``mask_score``, ``box_iou``, ``coverage``) are null: a visible row with a
null ``mask_score`` was decided by geometry alone.
"""
from __future__ import annotations

import numpy as np

from generator.projection import box_iou_xyxy
from generator.types import CropMasks
from schemas.config import VisibilityConfig

DROP_REASONS = ("zero_size_box", "behind_camera", "outside_image", "too_few_lidar_points", "box_too_small",
                "image_unavailable", "empty_mask", "low_box_iou", "low_coverage", "low_mask_score")


def mask_boxes_and_coverage(masks: np.ndarray | CropMasks, boxes_xyxy: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """masks (M, H, W) bool or their ``CropMasks``, projected boxes (M, 4) -> (tight mask boxes (M, 4)
    [x1, y1, x2+1, y2+1] pixel edges, NaN when empty; coverage (M,) = |mask ∩ box| / |mask|, NaN when empty;
    mask areas (M,)). Each mask is read in its crop alone."""
    cm = masks if isinstance(masks, CropMasks) else CropMasks.from_dense(masks)
    n = len(cm)
    if n == 0:
        return np.zeros((0, 4)), np.zeros(0), np.zeros(0, dtype=np.int64)
    H, W = cm.height, cm.width
    # Pixels inside each projected box: pixel centres (x + 0.5, y + 0.5) within [x1, x2) x [y1, y2).
    b = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    lo = np.clip(np.ceil(np.nan_to_num(b[:, :2], nan=0.0) - 0.5), 0, [W, H]).astype(np.int64)
    hi = np.clip(np.ceil(np.nan_to_num(b[:, 2:], nan=0.0) - 0.5), 0, [W, H]).astype(np.int64)
    # from the masks' runs down their crops' columns (``CropMasks.runs``), all masks at once
    mask, col, r0, r1 = cm.runs
    area = np.bincount(mask, weights=r1 - r0, minlength=n).astype(np.int64)
    has = area > 0
    mb = np.full((n, 4), np.nan)
    if has.any():
        some = np.flatnonzero(has)
        first = np.searchsorted(mask, some)  # runs come in (mask, column, row) order
        last = np.searchsorted(mask, some, side="right") - 1
        x0, y0 = cm.origins[some].T
        mb[some] = np.column_stack([x0 + col[first], y0 + np.minimum.reduceat(r0, first), x0 + col[last] + 1,
                                    y0 + np.maximum.reduceat(r1, first)])
    # the box in each run's crop pixels, from its first row and column (a slice of the crop from there)
    bx = np.maximum(lo[mask] - cm.origins[mask], 0), np.maximum(hi[mask] - cm.origins[mask], 0)
    in_col = (col >= bx[0][:, 0]) & (col < bx[1][:, 0])
    rows_in = np.clip(np.minimum(r1, bx[1][:, 1]) - np.maximum(r0, bx[0][:, 1]), 0, None)
    inside = np.bincount(mask, weights=np.where(in_col, rows_in, 0), minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        cov = np.where(has, inside / np.maximum(area, 1), np.nan)
    return mb, cov, area


def geometric_reasons(size_ok: np.ndarray, any_in_front: np.ndarray, in_image: np.ndarray, num_lidar_pts: np.ndarray,
                      box2d_xyxy: np.ndarray, cfg: VisibilityConfig) -> np.ndarray:
    """(N,) drop reason from geometry alone ('' = passes). Inputs per object: finite positive size (bool),
    some corner in front of the camera (bool), projected box meets the image (bool), LiDAR point count (int,
    -1 unknown), projected box clipped to the image (N, 4)."""
    area = np.nan_to_num((box2d_xyxy[:, 2] - box2d_xyxy[:, 0]) * (box2d_xyxy[:, 3] - box2d_xyxy[:, 1]))
    pts = np.asarray(num_lidar_pts)
    conds = [~size_ok, ~any_in_front, ~in_image, (pts >= 0) & (pts < cfg.min_lidar_points), area < cfg.min_box_area_px]
    names = ["zero_size_box", "behind_camera", "outside_image", "too_few_lidar_points", "box_too_small"]
    return np.select(conds, names, default="").astype(object)


def mask_reasons(mask_area: np.ndarray, box_iou: np.ndarray, coverage: np.ndarray, mask_score: np.ndarray,
                 cfg: VisibilityConfig) -> np.ndarray:
    """(N,) drop reason from the mask checks ('' = passes): STRIDE-QA's three rules (strict '>' thresholds)."""
    conds = [mask_area <= 0, ~(box_iou > cfg.box_iou_min), ~(coverage > cfg.coverage_min),
             ~(mask_score > cfg.mask_score_min)]
    return np.select(conds, ["empty_mask", "low_box_iou", "low_coverage", "low_mask_score"], default="").astype(object)


def decide_visibility(geom_reason: np.ndarray, box2d_xyxy: np.ndarray, masks: np.ndarray | CropMasks | None,
                      mask_score: np.ndarray | None, cfg: VisibilityConfig, image_ok: bool = True) -> dict:
    """Decisions for the N objects of one camera.

    geom_reason (N,) from ``geometric_reasons``; box2d_xyxy (N, 4) projected boxes; masks (K, H, W) bool (or
    their ``CropMasks``) and mask_score (K,) for the K objects that pass the geometric checks, in order (only
    those are segmented), or None when the camera has no image (geometry-only decision); image_ok False = the
    image exists but could not be read.
    Returns dict of arrays: visible (N,) bool, drop_reason (N,) object (None when visible), mask_box_xyxy
    (N, 4), box_iou (N,), coverage (N,), mask_score (N,) (NaN where no mask was made).
    """
    n = len(geom_reason)
    reason = np.asarray(geom_reason, dtype=object).copy()
    mb = np.full((n, 4), np.nan)
    iou = np.full(n, np.nan)
    cov = np.full(n, np.nan)
    score = np.full(n, np.nan)
    geo_ok = reason == ""
    if not image_ok:
        reason[geo_ok] = "image_unavailable"
    elif masks is not None and geo_ok.any():
        idx = np.nonzero(geo_ok)[0]
        if len(masks) != len(idx):
            raise ValueError(f"decide_visibility: {len(masks)} masks for {len(idx)} geometrically visible objects")
        mbi, covi, area = mask_boxes_and_coverage(masks, box2d_xyxy[idx])
        ioui = np.where(area > 0, box_iou_xyxy(box2d_xyxy[idx], np.nan_to_num(mbi)), 0.0)
        si = np.asarray(mask_score, dtype=np.float64).reshape(-1)
        mb[idx], cov[idx], iou[idx], score[idx] = mbi, covi, ioui, si
        reason[idx] = mask_reasons(area, ioui, np.nan_to_num(covi), si, cfg)
    visible = reason == ""
    out_reason = np.where(visible, None, reason).astype(object)
    return dict(visible=visible, drop_reason=out_reason, mask_box_xyxy=mb, box_iou=iou, coverage=cov, mask_score=score)
