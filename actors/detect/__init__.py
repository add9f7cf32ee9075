"""3D object detection: ``build_detector(cfg) -> Detector``; ``Detector(frames) -> list[Boxes3D]`` (ego frame).

Backends (``DetectionConfig.backend``): ``labels`` (annotations + seeded noise), ``lidar`` (geometric,
weight-free), ``mmdet3d`` (CenterPoint / BEVFusion inference). ``DetectActor`` is the Ray Data callable.
"""
from __future__ import annotations

from actors.detect.base import Detector
from schemas.config import DetectionConfig


def build_detector(cfg: DetectionConfig) -> Detector:
    """The configured backend, with its model (if any) built once."""
    if cfg.backend == "labels":
        from actors.detect.labels import LabelsDetector

        return LabelsDetector(cfg)
    if cfg.backend == "lidar":
        from actors.detect.lidar import LidarDetector

        return LidarDetector(cfg)
    if cfg.backend == "mmdet3d":
        from actors.detect.mmdet3d_backend import Mmdet3dDetector

        return Mmdet3dDetector(cfg)
    raise ValueError(f"unknown detection backend {cfg.backend!r}")


__all__ = ["Detector", "build_detector"]


class DetectActor:
    """Ray Data callable class: the detector is built once per actor; ``__call__(batch)`` takes a ``frame``
    column (``Frame`` objects) and adds ``boxes`` (one ``Boxes3D`` per frame), batching the frames through
    the backend (mmdet3d: ``detection.mmdet3d.batch_size`` per forward pass). Use with
    ``ds.map_batches(DetectActor, fn_constructor_args=(cfg.detection,), batch_format="numpy", compute=...)``."""

    def __init__(self, cfg: DetectionConfig):
        self.detector = build_detector(cfg)

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        boxes = self.detector(list(batch["frame"]))
        out = dict(batch)
        out["boxes"] = np.empty(len(boxes), dtype=object)
        out["boxes"][:] = boxes
        return out


__all__ += ["DetectActor"]
