"""Instance masks for the projected 3D boxes: ``build_segmenter(cfg) -> Segmenter``.

Backends (``SegmentationConfig.backend``): ``sam2`` (SAM 2.1 with box prompts, torch-only preprocessing)
and ``cpu`` (weight-free: the object's LiDAR points in the image closed with OpenCV morphology).
Masks are stored as COCO RLE (``actors.segment.rle``).
"""
from __future__ import annotations

from actors.segment.base import Segmenter
from schemas.config import SegmentationConfig


def build_segmenter(cfg: SegmentationConfig) -> Segmenter:
    if cfg.backend == "cpu":
        from actors.segment.cpu import CpuSegmenter

        return CpuSegmenter(cfg)
    if cfg.backend == "sam2":
        from actors.segment.sam2_backend import Sam2Segmenter

        return Sam2Segmenter(cfg)
    raise ValueError(f"unknown segmentation backend {cfg.backend!r}")


__all__ = ["Segmenter", "build_segmenter"]


class SegmentActor:
    """Ray Data callable class: the segmenter is built once per actor; ``__call__(batch)`` takes ``image``
    (H, W, 3) BGR arrays, ``boxes_xyxy`` (M, 4) and optional ``points_uv`` (M lists of (K, 2)) columns and
    adds ``mask_rle`` (M COCO RLE dicts per image) and ``mask_score`` ((M,) per image); sam2 encodes the
    batch's images ``segmentation.sam2.batch_images`` at a time."""

    def __init__(self, cfg: SegmentationConfig):
        self.segmenter = build_segmenter(cfg)

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        from actors.segment import rle

        pts = batch.get("points_uv")
        items = [(img, b, None if pts is None else pts[i]) for i, (img, b) in enumerate(zip(batch["image"], batch["boxes_xyxy"]))]
        res = self.segmenter.segment_many(items)
        out = {k: v for k, v in batch.items()}
        out["mask_rle"] = np.empty(len(res), dtype=object)
        out["mask_rle"][:] = [rle.encode(m) for m, _ in res]
        out["mask_score"] = np.empty(len(res), dtype=object)
        out["mask_score"][:] = [s for _, s in res]
        return out


__all__ += ["SegmentActor"]
