"""COCO run-length encoding of masks (pycocotools), in the Arrow form of ``schemas.tables.RLE``.

A row is ``{"size": [height, width], "counts": str}`` (compressed COCO RLE, column-major, as
pycocotools writes it). Masks are numpy bool arrays (H, W) or (M, H, W), or their ``generator.types.CropMasks``.
"""
from __future__ import annotations

import numpy as np
from pycocotools import mask as mask_utils

from generator.types import CropMasks


def encode(masks: np.ndarray | CropMasks) -> list[dict]:
    """(M, H, W) or (H, W) bool masks, or their ``CropMasks`` -> list of M RLE dicts ``{"size": [H, W],
    "counts": str}``.

    Each mask's runs are found in its crop alone (column-major, as COCO counts them: pixel (y, x) is number
    x * H + y) and handed to pycocotools as uncompressed RLE, which it compresses to the string form
    (``frPyObjects``); the image's other pixels are never looked at (pycocotools' own ``encode`` scans every
    pixel of every mask, most of the encoding time)."""
    cm = masks if isinstance(masks, CropMasks) else CropMasks.from_dense(masks)
    H, W = cm.height, cm.width
    if len(cm) == 0:
        return []
    uncompressed = [{"size": [H, W], "counts": _counts(c, x0, y0, H, W)}
                    for (x0, y0), c in zip(cm.origins.tolist(), cm.crops)]
    rles = mask_utils.frPyObjects(uncompressed, H, W)
    return [{"size": [H, W], "counts": r["counts"].decode("ascii")} for r in rles]


def _counts(crop: np.ndarray, x0: int, y0: int, H: int, W: int) -> list[int]:
    """Uncompressed COCO RLE counts (alternating runs of 0s and 1s, starting with 0s) of the (H, W) mask that
    is ``crop`` at (x0, y0) and False elsewhere."""
    h, w = crop.shape
    if not crop.any():
        return [H * W]
    col = np.zeros((w, h + 2), np.int8)  # the crop's columns, each padded with a 0 above and below
    col[:, 1:-1] = crop.T
    d = np.diff(col, axis=1)
    sx, sy = np.nonzero(d == 1)  # run starts (column, row), in column-major order
    ex, ey = np.nonzero(d == -1)  # run ends, one past the run's last row
    starts = (x0 + sx) * H + y0 + sy
    ends = (x0 + ex) * H + y0 + ey
    join = np.flatnonzero(ends[:-1] == starts[1:])  # a run down to the image's bottom row going on at the top
    starts, ends = np.delete(starts, join + 1), np.delete(ends, join)
    runs = np.empty(2 * len(starts) + 1, np.int64)
    runs[0:-1:2] = starts - np.r_[0, ends[:-1]]
    runs[1::2] = ends - starts
    runs[-1] = H * W - ends[-1]
    return runs[:-1].tolist() if runs[-1] == 0 else runs.tolist()  # no run of 0s after the image's last pixel


def decode(rles: list[dict] | dict) -> np.ndarray:
    """One RLE dict -> (H, W) bool; a list of M -> (M, H, W) bool (all must share one size)."""
    single = isinstance(rles, dict)
    items = [rles] if single else list(rles)
    if not items:
        return np.zeros((0, 0, 0), dtype=bool)
    coco = [{"size": [int(r["size"][0]), int(r["size"][1])],
             "counts": r["counts"].encode("ascii") if isinstance(r["counts"], str) else r["counts"]} for r in items]
    m = mask_utils.decode(coco).astype(bool)  # (H, W, M)
    m = np.moveaxis(m, -1, 0)
    return m[0] if single else m


def area(rles: list[dict]) -> np.ndarray:
    """Pixel areas (M,) of RLE masks without decoding them."""
    if not rles:
        return np.zeros(0, dtype=np.int64)
    coco = [{"size": list(r["size"]), "counts": r["counts"].encode("ascii")} for r in rles]
    return np.asarray(mask_utils.area(coco), dtype=np.int64)


def to_bbox_xyxy(rles: list[dict]) -> np.ndarray:
    """Tight bounding boxes (M, 4) [x1, y1, x2, y2] of RLE masks (pixel-edge coordinates); NaN for empty masks."""
    if not rles:
        return np.zeros((0, 4))
    coco = [{"size": list(r["size"]), "counts": r["counts"].encode("ascii")} for r in rles]
    xywh = np.asarray(mask_utils.toBbox(coco), dtype=np.float64).reshape(-1, 4)
    out = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    out[area(rles) == 0] = np.nan
    return out
