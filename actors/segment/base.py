"""The segmenter interface: one image with all its box prompts in, one mask and quality score per box out."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from generator.types import CropMasks
from schemas.config import SegmentationConfig


def check_prompts(image: np.ndarray, boxes_xyxy: np.ndarray, points_uv) -> tuple[np.ndarray, list[np.ndarray]]:
    """Validate shapes; returns (boxes (M, 4) float64, points: M arrays (K_m, 2))."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"image must be (H, W, 3) BGR, got shape {image.shape}")
    b = np.asarray(boxes_xyxy, dtype=np.float64).reshape(-1, 4)
    if points_uv is None:
        pts = [np.zeros((0, 2)) for _ in range(len(b))]
    else:
        pts = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in points_uv]
        if len(pts) != len(b):
            raise ValueError(f"{len(b)} boxes but {len(pts)} point sets; give one (K, 2) array per box")
    return b, pts


class Segmenter(ABC):
    """``segmenter(image (H, W, 3) uint8 BGR, boxes_xyxy (M, 4) pixels, points_uv: M arrays (K, 2) or None)
    -> (masks (M, H, W) bool, scores (M,) float in [0, 1])``. The score is the mask's quality estimate
    (SAM 2: its predicted IoU; cpu backend: see ``actors.segment.cpu``)."""

    name = "base"

    def __init__(self, cfg: SegmentationConfig):
        self.cfg = cfg

    @abstractmethod
    def __call__(self, image: np.ndarray, boxes_xyxy: np.ndarray, points_uv=None) -> tuple[np.ndarray, np.ndarray]:
        ...

    def segment_many(self, items: list[tuple]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Several images: ``items`` = [(image, boxes_xyxy, points_uv), ...]. Backends may batch."""
        return [self(*it) for it in items]

    def segment_crops(self, items: list[tuple]) -> list[tuple[CropMasks, np.ndarray]]:
        """``segment_many`` with each image's masks as ``CropMasks`` (what perception keeps). Here cut from the
        dense masks; a backend that draws its masks in crops gives them as they are."""
        return [(CropMasks.from_dense(m), s) for m, s in self.segment_many(items)]
