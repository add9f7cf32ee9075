"""COCO run-length encoding of masks (pycocotools), in the Arrow form of ``schemas.tables.RLE``.

A row is ``{"size": [height, width], "counts": str}`` (compressed COCO RLE, column-major, as
pycocotools writes it). Masks are numpy bool arrays (H, W) or (M, H, W).
"""
from __future__ import annotations

import numpy as np
from pycocotools import mask as mask_utils


def encode(masks: np.ndarray) -> list[dict]:
    """(M, H, W) or (H, W) bool masks -> list of M RLE dicts ``{"size": [H, W], "counts": str}``."""
    m = np.asarray(masks, dtype=bool)
    if m.ndim == 2:
        m = m[None]
    if m.ndim != 3:
        raise ValueError(f"masks must be (H, W) or (M, H, W), got shape {m.shape}")
    if len(m) == 0:
        return []
    # pycocotools takes (H, W, M) uint8 in column-major order, which is the transpose of (M, W, H) rows: each
    # mask's bounding band is copied there transposed, the rest stays zero (a mask is a small part of its image:
    # transposing whole masks took most of the encoding time)
    n, h, w = m.shape
    out = np.zeros((n, w, h), dtype=np.uint8)
    rows = m.any(axis=2)
    for i in np.flatnonzero(rows.any(axis=1)):
        ys = np.flatnonzero(rows[i])
        band = m[i, ys[0]:ys[-1] + 1]
        xs = np.flatnonzero(band.any(axis=0))
        out[i, xs[0]:xs[-1] + 1, ys[0]:ys[-1] + 1] = band[:, xs[0]:xs[-1] + 1].T
    rles = mask_utils.encode(out.transpose(2, 1, 0))
    return [{"size": [int(r["size"][0]), int(r["size"][1])], "counts": r["counts"].decode("ascii")} for r in rles]


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
