"""3D object detection: ``build_detector(cfg) -> Detector``; ``Detector(frames) -> list[Boxes3D]`` (ego frame).

Backends (``DetectionConfig.backend``): ``labels`` (annotations + seeded noise), ``lidar`` (geometric,
weight-free), ``mmdet3d`` (CenterPoint / BEVFusion inference). The pipeline runs it behind its one Ray
wrapper (``generator.pipeline.ray_exec``).
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

