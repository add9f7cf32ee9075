"""The detector interface shared by every backend."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from generator.types import Boxes3D, Frame
from schemas.config import DetectionConfig


class Detector(ABC):
    """``detector(frames) -> one Boxes3D per frame`` in that frame's ego frame (centre at the box's
    geometric centre, classes over the nuScenes detection classes, score in [0, 1], velocity (vx, vy)
    in the ego frame where the backend estimates one, NaN otherwise; ``track_id`` -1)."""

    name: str = "base"
    exact: bool = False
    """whether the boxes are the truth (``labels`` without noise): the tracker then only gives identities"""

    def __init__(self, cfg: DetectionConfig):
        self.cfg = cfg

    @abstractmethod
    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        ...

    def _postfilter(self, boxes: Boxes3D) -> Boxes3D:
        """Apply the config's score threshold and class list."""
        keep = (boxes.score >= self.cfg.score_threshold) & np.isin(boxes.class_name.astype(str), self.cfg.classes)
        return boxes.subset(np.nonzero(keep)[0])
