"""Perception of a whole scene in one call for tests: the configured detector (built here), then
``generator.perception.perceive_scene`` on its detections (the pipeline runs the two as separate stages)."""
from __future__ import annotations

from actors.detect import build_detector
from generator.perception import PerceptionResult, detect_scene, perceive_scene


def perceive(scene, cfg, segmenter=None) -> PerceptionResult:
    return perceive_scene(scene, detect_scene(scene, build_detector(cfg.detection)), cfg, segmenter)
