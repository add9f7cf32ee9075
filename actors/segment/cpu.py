"""``cpu`` backend: weight-free masks from the object's own LiDAR points projected into the image.

Per box prompt (pure core ``mask_from_points``):
  1. the object's points (pixels, from the caller: its LiDAR points inside its 3D box, projected) are
     filled as their convex hull (``cv2.convexHull`` / ``fillConvexPoly``) in the box's crop. LiDAR rows
     are ~1.3 deg apart (about 30 px on a nuScenes front camera at any range), so closing the rows by
     morphology needs kernels as large as small objects; the hull closes them at any spacing;
  2. the hull is grown by ``dilate_px`` (the points sample the surface, the silhouette edge lies up to
     about half a point spacing beyond the outermost points);
  3. optionally ``grabcut_iterations`` of GrabCut refine it against the image (hull = probable
     foreground, the points = sure foreground, the rest of the crop = probable background), then a
     ``close_px`` closing and hole filling (``findContours`` + ``drawContours``);
  4. the mask is clipped to the prompt box.

Quality score (in place of SAM's predicted IoU), ``score = support * fill`` in [0, 1]:
  * ``support = 1 - exp(-K / points_ref)``: K object points inside the box (``points_ref`` = 10): a mask
    drawn from 3 points is a guess, from 30 it is well supported (0.95);
  * ``fill = min(1, area(mask) / (fill_ref * area(box)))`` with ``fill_ref`` = 0.5: the silhouette of a
    fully visible object covers at least about half of its projected 3D box; a mask covering much less
    means the object is mostly hidden or its points are few and scattered.
With the STRIDE-QA threshold (score > 0.8) this keeps objects with >= ~17 points whose mask fills
>= ~45 % of the box.
"""
from __future__ import annotations

import numpy as np

from actors.segment.base import Segmenter, check_prompts
from generator.types import CropMasks

POINTS_REF = 10.0
FILL_REF = 0.5


def mask_from_points(image: np.ndarray | None, box_xyxy: np.ndarray, points_uv: np.ndarray, height: int, width: int,
                     dilate_px: int, close_px: int, grabcut_iterations: int = 0):
    """One mask. Returns (crop mask (h, w) bool, (x0, y0) crop origin, score float). Empty crop -> zero mask."""
    import cv2  # cv2: about a second to import; only where images are read or drawn

    x0, y0 = int(np.floor(max(box_xyxy[0], 0))), int(np.floor(max(box_xyxy[1], 0)))
    x1, y1 = int(np.ceil(min(box_xyxy[2], width))), int(np.ceil(min(box_xyxy[3], height)))
    if not np.all(np.isfinite(box_xyxy)) or x1 <= x0 or y1 <= y0:
        return np.zeros((0, 0), dtype=bool), (0, 0), 0.0
    h, w = y1 - y0, x1 - x0
    uv = np.asarray(points_uv, dtype=np.float64).reshape(-1, 2)
    uv = uv[np.isfinite(uv).all(axis=1)]
    inside = (uv[:, 0] >= box_xyxy[0]) & (uv[:, 0] < box_xyxy[2]) & (uv[:, 1] >= box_xyxy[1]) & (uv[:, 1] < box_xyxy[3])
    uv = uv[inside]
    k = len(uv)
    canvas = np.zeros((h, w), dtype=np.uint8)
    if k == 0:
        return canvas.astype(bool), (x0, y0), 0.0
    px = np.clip(np.rint(uv - [x0, y0]).astype(np.int32), 0, [w - 1, h - 1])
    if k >= 3:
        cv2.fillConvexPoly(canvas, cv2.convexHull(px.reshape(-1, 1, 2)), 255)
    canvas[px[:, 1], px[:, 0]] = 255
    if dilate_px > 0:
        canvas = cv2.dilate(canvas, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * dilate_px + 1,) * 2))
    mask = canvas > 0
    if grabcut_iterations > 0 and image is not None and mask.any() and (~mask).any():
        crop = np.ascontiguousarray(image[y0:y1, x0:x1])
        gc = np.where(mask, cv2.GC_PR_FGD, cv2.GC_PR_BGD).astype(np.uint8)
        gc[px[:, 1], px[:, 0]] = cv2.GC_FGD
        try:
            cv2.grabCut(crop, gc, None, np.zeros((1, 65)), np.zeros((1, 65)), grabcut_iterations, cv2.GC_INIT_WITH_MASK)
            refined = ((gc == cv2.GC_FGD) | (gc == cv2.GC_PR_FGD)).astype(np.uint8) * 255
            if close_px > 0:  # GrabCut output can be ragged: close it and fill holes
                pad = close_px  # pad so the closing is not pinned to the crop border
                big = cv2.copyMakeBorder(refined, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=0)
                big = cv2.morphologyEx(big, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (close_px,) * 2))
                refined = np.ascontiguousarray(big[pad:-pad, pad:-pad])
            contours, _ = cv2.findContours(refined, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            cv2.drawContours(refined, contours, -1, 255, thickness=cv2.FILLED)
            mask = refined > 0
        except cv2.error:
            pass  # degenerate colour model (e.g. a flat crop): keep the hull mask
    box_area = max((box_xyxy[2] - box_xyxy[0]) * (box_xyxy[3] - box_xyxy[1]), 1e-9)
    support = 1.0 - np.exp(-k / POINTS_REF)
    fill = min(1.0, float(mask.sum()) / (FILL_REF * box_area))
    return mask, (x0, y0), float(support * fill)


class CpuSegmenter(Segmenter):
    name = "cpu"

    def __call__(self, image, boxes_xyxy, points_uv=None):
        masks, scores = self.crops(image, boxes_xyxy, points_uv)
        return masks.dense(), scores

    def crops(self, image, boxes_xyxy, points_uv=None) -> tuple[CropMasks, np.ndarray]:
        """The masks of one image as ``CropMasks`` (each drawn in its box's crop), and their scores."""
        boxes, pts = check_prompts(image, boxes_xyxy, points_uv)
        H, W = image.shape[:2]
        origins = np.zeros((len(boxes), 2), np.int64)
        crops = []
        scores = np.zeros(len(boxes))
        c = self.cfg.cpu
        for m, (b, p) in enumerate(zip(boxes, pts)):
            crop, origins[m], scores[m] = mask_from_points(image, b, p, H, W, c.dilate_px, c.close_px,
                                                          c.grabcut_iterations)
            crops.append(crop)
        return CropMasks(H, W, origins, tuple(crops)), scores

    def segment_crops(self, items):
        return [self.crops(*it) for it in items]
