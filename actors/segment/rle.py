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
    uncompressed = [{"size": [H, W], "counts": c} for c in _counts(cm)]
    rles = mask_utils.frPyObjects(uncompressed, H, W)
    return [{"size": [H, W], "counts": r["counts"].decode("ascii")} for r in rles]


def _counts(cm: CropMasks) -> list[list[int]]:
    """Per mask, its uncompressed COCO RLE counts (alternating runs of 0s and 1s, starting with 0s) in the
    (H, W) image: the crop's pixels, False elsewhere; from the runs of all masks at once (``CropMasks.runs``)."""
    H = cm.height
    mask, col, r0, r1 = cm.runs
    starts = (cm.origins[mask, 0] + col) * H + cm.origins[mask, 1] + r0
    ends = starts + (r1 - r0)
    # a run down to the image's bottom row going on at the next column's top is one run (of one mask)
    join = np.flatnonzero((ends[:-1] == starts[1:]) & (mask[:-1] == mask[1:]))
    starts, ends, mask = np.delete(starts, join + 1), np.delete(ends, join), np.delete(mask, join + 1)
    n = len(cm)
    nruns = np.bincount(mask, minlength=n)
    first = np.r_[0, np.cumsum(nruns)[:-1]]  # each mask's first run
    some = nruns > 0
    prev_end = np.r_[0, ends[:-1]]
    prev_end[first[some]] = 0  # a mask's first run of 0s starts at the image's first pixel
    last_end = np.zeros(n, np.int64)
    last_end[some] = ends[first[some] + nruns[some] - 1]
    tail = H * cm.width - last_end  # the run of 0s after a mask's last run: none when it ends at the last pixel
    out_off = np.r_[0, np.cumsum(2 * nruns + (tail > 0))]
    flat = np.empty(int(out_off[-1]), np.int64)
    pos = out_off[mask] + 2 * (np.arange(len(starts)) - first[mask])
    flat[pos] = starts - prev_end[:len(starts)]
    flat[pos + 1] = ends - starts
    flat[out_off[1:][tail > 0] - 1] = tail[tail > 0]
    values, b = flat.tolist(), out_off.tolist()
    return [values[b[k]:b[k + 1]] for k in range(n)]


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
