"""Instance masks for the projected 3D boxes: ``build_segmenter(cfg) -> Segmenter``.

Backends (``SegmentationConfig.backend``): ``sam2`` (SAM 2.1 with box prompts, torch-only preprocessing)
and ``cpu`` (weight-free: the object's LiDAR points in the image closed with OpenCV morphology).
Masks are stored as COCO RLE (``actors.segment.rle``).
"""
from __future__ import annotations

from actors.segment.base import Segmenter
from actors.segment.cpu import CpuSegmenter
from actors.segment.sam2_backend import Sam2Segmenter
from schemas.config import SegmentationConfig


def reads_pixels(cfg: SegmentationConfig) -> bool:
    """Whether the backend looks at the image's pixels: the ``cpu`` backend without GrabCut reads only the
    image's size (its masks come from the LiDAR points), so its callers need not decode the image."""
    return not (cfg.backend == "cpu" and cfg.cpu.grabcut_iterations == 0)


def build_segmenter(cfg: SegmentationConfig) -> Segmenter:
    if cfg.backend == "cpu":
        return CpuSegmenter(cfg)
    if cfg.backend == "sam2":
        return Sam2Segmenter(cfg)
    raise ValueError(f"unknown segmentation backend {cfg.backend!r}")


__all__ = ["Segmenter", "build_segmenter", "reads_pixels"]

