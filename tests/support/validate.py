"""Helpers for tests/validate/test_validate*.py: a run folder made by running perception per scene.

The layout and commit protocol are the pipeline's (``generator.runfolder.commit_tables``: staged files, a
manifest per scene), from ``generator.perception.detect_scene`` / ``perceive_scene``. Much cheaper than
``drivegen run`` (no QA, card or WebDataset writers), so a noise sweep stays fast; one test uses the real
pipeline's run folder.
"""
from __future__ import annotations

from pathlib import Path

from generator.validate.detection_quality import write_run_folder
from schemas.config import PipelineConfig, parse_config


def make_run_folder(out: Path, source, cfg: PipelineConfig, scene_ids: list[str] | None = None) -> Path:
    """Perception (detect, track, segment) of ``scene_ids`` (default: all) committed as a run folder."""
    return write_run_folder(out, source, cfg, [source.load_scene(sid) for sid in scene_ids or source.scene_ids()])


def noise_config(level: float, seed: int = 0, backend: str = "labels", tracking_mode: str = "kalman") -> PipelineConfig:
    """Labels backend with every kind of noise scaled by ``level`` (0 = the exact labels, scores 1).
    ``tracking_mode='greedy'`` keeps one-frame false positives as tracks (the Kalman tracker confirms a track
    only after several hits, so it drops them)."""
    noise = {"center_m": 0.5 * level, "size_frac": 0.1 * level, "yaw_rad": 0.2 * level,
             "velocity_mps": 0.5 * level, "drop_prob": 0.15 * level, "false_positives_per_frame": 2.0 * level,
             "score_min": 0.5 if level else 1.0, "seed": seed}
    return parse_config({"detection": {"backend": backend, "labels": noise}, "tracking": {"mode": tracking_mode}})
