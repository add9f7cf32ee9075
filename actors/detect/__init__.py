"""3D object detection: ``build_detector(cfg) -> Detector``; ``Detector(frames) -> list[Boxes3D]`` (ego frame).

Backends (``DetectionConfig.backend``): ``labels`` (annotations + seeded noise), ``lidar`` (geometric,
weight-free), ``mmdet3d`` (CenterPoint / BEVFusion inference). The pipeline runs it behind its one Ray
wrapper (``generator.pipeline.ray_exec``).
"""
from __future__ import annotations

from actors.detect.base import Detector
from actors.detect.labels import LabelsDetector
from actors.detect.lidar import LidarDetector
from actors.detect.mmdet3d_backend import Mmdet3dDetector
from schemas.config import DetectionConfig


def build_detector(cfg: DetectionConfig) -> Detector:
    """The configured backend, with its model (if any) built once."""
    if cfg.backend == "labels":
        return LabelsDetector(cfg)
    if cfg.backend == "lidar":
        return LidarDetector(cfg)
    if cfg.backend == "mmdet3d":
        return Mmdet3dDetector(cfg)
    raise ValueError(f"unknown detection backend {cfg.backend!r}")


__all__ = ["Detector", "build_detector"]

