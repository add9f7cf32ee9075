"""Helpers for tests/test_validate*.py: a run folder made by running perception per scene.

Layout as ``generator.runfolder`` (source.json, config.yaml, perception/{frames,objects,projections}/<scene>.parquet)
written with ``atomic_write_table`` in the writers' storage types, from ``generator.perception.perceive_scene``.
Much cheaper than ``drivegen run`` (no QA, card or WebDataset writers), so a noise sweep stays fast; one test
uses the real pipeline's run folder.
"""
from __future__ import annotations

import json
from pathlib import Path

from generator.perception import perceive_scene
from generator.runfolder import RunFolder, atomic_write_bytes, atomic_write_table
from generator.sources import frames_table
from generator.writers.parquet import storage_schema
from schemas.config import PipelineConfig, parse_config
from schemas.tables import FRAMES, OBJECTS, PROJECTIONS, check_schema


def make_run_folder(out: Path, source, cfg: PipelineConfig, scene_ids: list[str] | None = None) -> Path:
    rf = RunFolder(out)
    atomic_write_bytes(rf.path("source.json"), json.dumps(source.describe()).encode())
    atomic_write_bytes(rf.path("config.yaml"), cfg.to_yaml().encode())
    for sid in scene_ids or source.scene_ids():
        scene = source.load_scene(sid)
        res = perceive_scene(scene, cfg)
        for name, table, schema in (("objects", res.objects, OBJECTS), ("frames", frames_table(scene), FRAMES),
                                    ("projections", res.projections, PROJECTIONS)):
            # stored as the pipeline's writers do: variable-size lists (pyarrow 25 cannot read back null
            # fixed-size lists); readers cast back to the schema
            atomic_write_table(rf.perception(name, sid), check_schema(table, schema).cast(storage_schema(schema)))
    return out


def noise_config(level: float, seed: int = 0, backend: str = "labels") -> PipelineConfig:
    """Labels backend with every kind of noise scaled by ``level`` (0 = the exact labels, scores 1)."""
    noise = {"center_m": 0.5 * level, "size_frac": 0.1 * level, "yaw_rad": 0.2 * level,
             "velocity_mps": 0.5 * level, "drop_prob": 0.15 * level, "false_positives_per_frame": 2.0 * level,
             "score_min": 0.5 if level else 1.0, "seed": seed}
    return parse_config({"detection": {"backend": backend, "labels": noise}})
