"""Set-of-Mark images: the one function that draws ``Region [X]`` marks, masks and 2D boxes on a frame.

STRIDE-QA's models see each referenced object as a numbered region on the image; the questions name
``Region [X]``. ``draw_marks`` draws exactly what a QA row's groundings hold (``schemas.tables.QA_GROUNDING``:
``region_id``, ``box_xyxy`` in pixels, ``mask_rle`` as COCO RLE) and is used by both the WebDataset writer
(``writers.wds.marked_images``) and the HTML report (``generator.report``), so both show the same marks.
"""
from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
from pycocotools import mask as mask_utils

# tab10-like colours (RGB); a region keeps its colour wherever it is drawn (colour = palette[region % 10])
PALETTE = np.array([(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
                    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207)], np.uint8)
MASK_ALPHA = 0.45


def region_colour(region_id: int) -> tuple[int, int, int]:
    c = PALETTE[int(region_id) % len(PALETTE)]
    return int(c[0]), int(c[1]), int(c[2])


def decode_mask(rle, shape: tuple[int, int]) -> np.ndarray | None:
    """A boolean (H, W) mask from a COCO RLE dict (``{"size": [h, w], "counts": str}``) or a boolean array,
    resized (nearest) to ``shape`` when the RLE was made at another size; None for no mask."""
    if rle is None:
        return None
    if isinstance(rle, np.ndarray):
        m = rle.astype(bool)
    else:
        if not rle.get("counts"):
            return None
        counts = rle["counts"]
        m = mask_utils.decode({"size": [int(v) for v in rle["size"]],
                               "counts": counts.encode() if isinstance(counts, str) else counts}).astype(bool)
    if m.shape != tuple(shape):
        m = cv2.resize(m.astype(np.uint8), (shape[1], shape[0]), interpolation=cv2.INTER_NEAREST).astype(bool)
    return m


def _free(rect: tuple[int, int, int, int], taken: list[tuple[int, int, int, int]]) -> bool:
    x1, y1, x2, y2 = rect
    return all(x2 <= a1 or a2 <= x1 or y2 <= b1 or b2 <= y1 for a1, b1, a2, b2 in taken)


def place_tag(box: tuple[int, int, int, int], size: tuple[int, int], image_wh: tuple[int, int],
              taken: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    """Where a ``Region [X]`` tag of ``size`` (w, h) goes for ``box`` (x1, y1, x2, y2): the first of above the
    box's top-left corner, inside it, below the box, above its top-right corner, that lies in the image and
    overlaps no tag in ``taken``; else the nearest free place down the box's left edge (then below it), so no
    tag hides another. Returns the tag's rectangle (x1, y1, x2, y2), exclusive ends."""
    (x1, y1, x2, y2), (tw, th), (w, h) = box, size, image_wh

    def fit(tx, ty):
        tx = min(max(0, tx), max(0, w - tw))
        ty = min(max(0, ty), max(0, h - th))
        return tx, ty, tx + tw, ty + th

    candidates = [fit(x1, y1 - th), fit(x1, y1), fit(x1, y2), fit(x2 - tw, y1 - th)]
    for rect in candidates:
        if _free(rect, taken):
            return rect
    for ty in list(range(y1, h - th + 1, max(1, th // 2))) + list(range(y1 - th, -1, -max(1, th // 2))):
        rect = fit(x1, ty)
        if _free(rect, taken):
            return rect
    return candidates[0]  # the image is full of tags: the first place (a later tag may cover it)


def draw_marks(image: np.ndarray, boxes_xyxy: Sequence | np.ndarray, masks: Sequence | None,
               region_ids: Sequence[int], line_px: int | None = None, tags: list | None = None) -> np.ndarray:
    """A copy of ``image`` (H, W, 3 uint8, any channel order kept: colours are given as RGB) with, per
    region ``i``: its mask ``masks[i]`` (COCO RLE dict, boolean array or None) tinted, its box
    ``boxes_xyxy[i]`` (x1, y1, x2, y2 pixels; None or NaN: no box) outlined and a ``Region [X]`` tag
    (``X = region_ids[i]``) at the box's top-left corner, or where ``place_tag`` finds room: no tag covers
    another. Regions are drawn in the order given; a region listed twice is drawn once. ``tags``, when
    given, receives ``(region_id, x1, y1, x2, y2)`` per tag drawn (pixels of the image)."""
    img = np.array(image, dtype=np.uint8, order="C", copy=True)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"draw_marks: expected an (H, W, 3) image, got shape {img.shape}")
    h, w = img.shape[:2]
    n = len(region_ids)
    if masks is not None and len(masks) != n or len(boxes_xyxy) != n:
        raise ValueError(f"draw_marks: {n} region ids but {len(boxes_xyxy)} boxes and "
                         f"{'no' if masks is None else len(masks)} masks")
    thick = line_px or max(1, round(w / 400))
    scale = max(0.35, w / 1600)
    seen: set[int] = set()
    items = []
    for i in range(n):
        rid = int(region_ids[i])
        if rid in seen:
            continue
        seen.add(rid)
        items.append((rid, boxes_xyxy[i], None if masks is None else masks[i]))
    for rid, _, m in items:  # masks first, so boxes and labels stay readable on top of them
        mask = decode_mask(m, (h, w))
        if mask is not None and mask.any():
            colour = np.array(region_colour(rid), np.float32)
            img[mask] = (img[mask] * (1 - MASK_ALPHA) + colour * MASK_ALPHA).astype(np.uint8)
    placed: list[tuple[int, int, int, int]] = []
    for rid, box, _ in items:
        if box is None:
            continue
        b = np.asarray(box, np.float64)
        if b.shape != (4,) or not np.isfinite(b).all():
            continue
        x1, y1, x2, y2 = (int(round(v)) for v in np.clip(b, [0, 0, 0, 0], [w - 1, h - 1, w - 1, h - 1]))
        colour = region_colour(rid)
        cv2.rectangle(img, (x1, y1), (x2, y2), colour, thick, cv2.LINE_AA)
        text = f"Region [{rid}]"
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, 1)
        rect = place_tag((x1, y1, x2, y2), (tw + 3, th + base + 2), (w, h), placed)
        placed.append(rect)
        cv2.rectangle(img, (rect[0], rect[1]), (rect[2] - 1, rect[3] - 1), colour, -1)
        cv2.putText(img, text, (rect[0] + 1, rect[3] - 1 - base), cv2.FONT_HERSHEY_SIMPLEX, scale,
                    (255, 255, 255), 1, cv2.LINE_AA)
        if tags is not None:
            tags.append((rid, *rect))
    return img


def grounding_marks(groundings: Sequence[dict], frame_index: int, camera: str):
    """``(boxes, masks, region_ids)`` of the groundings (QA_GROUNDING dicts, from one or more QA rows) on the
    image of ``frame_index`` and ``camera`` that name a region; the arguments ``draw_marks`` takes."""
    boxes, masks, regions = [], [], []
    for g in groundings:
        if g.get("region_id") is None or int(g["frame_index"]) != int(frame_index) or g["camera"] != camera:
            continue
        boxes.append(g.get("box_xyxy"))
        masks.append(g.get("mask_rle"))
        regions.append(int(g["region_id"]))
    return boxes, masks, regions
