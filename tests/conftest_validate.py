"""Helpers for tests/test_validate*.py: a run folder made by running perception per scene.

Layout as ``generator.runfolder`` (source.json, config.yaml, perception/{frames,objects}/<scene>.parquet),
written with ``atomic_write_table``, plus perception/projections. Uses ``generator.perception.perceive_scene``
when present, else
detect (``actors.detect``) + ``actors.track.track_scene`` and the OBJECTS/FRAMES rows built here.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa

from generator.runfolder import RunFolder, atomic_write_bytes, atomic_write_table
from generator.types import Boxes3D, Scene
from schemas.config import PipelineConfig
from generator.sources import frames_table
from generator.writers.parquet import storage_schema
from schemas.tables import FRAMES, OBJECTS, PROJECTIONS, check_schema


def _objects_rows(scene: Scene, tracked: list[Boxes3D], backend: str) -> pa.Table:
    cols = {k: [] for k in OBJECTS.names}
    for fr, b in zip(scene.frames, tracked):
        n = len(b)
        if not n:
            continue
        T = fr.city_SE3_ego
        cg = T.transform_points(b.center_m)
        yaw_g = b.yaw_rad + T.yaw_rad
        vg = b.velocity_mps @ T.rotation[:2, :2].T
        cols["scene_id"] += [scene.scene_id] * n
        cols["frame_index"] += [fr.frame_index] * n
        cols["timestamp_us"] += [fr.timestamp_us] * n
        cols["track_id"] += b.track_id.tolist()
        cols["class_name"] += [str(c) for c in b.class_name]
        cols["score"] += b.score.tolist()
        cols["center_ego_m"] += b.center_m.tolist()
        cols["size_lwh_m"] += b.size_lwh_m.tolist()
        cols["yaw_ego_rad"] += b.yaw_rad.tolist()
        cols["center_global_m"] += cg.tolist()
        cols["yaw_global_rad"] += yaw_g.tolist()
        cols["velocity_ego_mps"] += b.velocity_mps.tolist()
        cols["velocity_global_mps"] += vg.tolist()
        cols["num_lidar_pts"] += b.num_lidar_pts.tolist()
        cols["instance_token"] += [str(t) for t in b.instance_token]
        cols["source"] += [backend] * n
    return pa.Table.from_pydict(cols, schema=OBJECTS)


def _projections_rows(scene: Scene, tracked: list[Boxes3D]) -> pa.Table:
    """Stand-in for the segmentation + visibility stages: a tracked box is visible in a camera when its
    projected 2D box is in the image and at least 16 px^2 (no masks)."""
    from generator.projection import project_boxes

    rows = []
    for fr, b in zip(scene.frames, tracked):
        for name, cam in fr.cameras.items():
            xyxy, depth, inside = project_boxes(b, cam)
            area = np.nan_to_num((xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1]))
            for k in np.flatnonzero(inside):
                vis = bool(area[k] >= 16.0)
                rows.append({"scene_id": scene.scene_id, "frame_index": fr.frame_index, "track_id": int(b.track_id[k]),
                             "camera": name, "box2d_proj_xyxy": xyxy[k].tolist(), "depth_m": float(depth[k]),
                             # no nulls in fixed-size list fields: pyarrow 25 cannot read those back
                             "mask_rle": {"size": [cam.height_px, cam.width_px], "counts": ""},
                             "mask_box_xyxy": xyxy[k].tolist(), "mask_score": None, "box_iou": None,
                             "coverage": None, "visible": vis, "drop_reason": None if vis else "small"})
    return pa.Table.from_pylist(rows, schema=PROJECTIONS)


def perceive(scene: Scene, cfg: PipelineConfig) -> dict[str, pa.Table]:
    """objects, frames and projections tables of one scene."""
    try:
        from generator.perception import perceive_scene  # the pipeline's own stage, once it exists
    except ImportError:
        perceive_scene = None
    if perceive_scene is not None:
        res = perceive_scene(scene, cfg)
        return {"objects": res.objects, "frames": frames_table(scene), "projections": res.projections}
    from actors.detect.labels import LabelsDetector
    from actors.track.pubtracker import track_scene

    if cfg.detection.backend != "labels":
        raise NotImplementedError("without generator.perception only the labels backend is wired here")
    dets = LabelsDetector(cfg.detection)(scene.frames)
    tracked = track_scene(scene.timestamps_us, dets, cfg.tracking, [f.city_SE3_ego for f in scene.frames])
    return {"objects": _objects_rows(scene, tracked, cfg.detection.backend), "frames": frames_table(scene),
            "projections": _projections_rows(scene, tracked)}


def make_run_folder(out: Path, source, cfg: PipelineConfig, scene_ids: list[str] | None = None) -> Path:
    rf = RunFolder(out)
    atomic_write_bytes(rf.path("source.json"), json.dumps(source.describe()).encode())
    atomic_write_bytes(rf.path("config.yaml"), cfg.to_yaml().encode())
    for sid in scene_ids or source.scene_ids():
        scene = source.load_scene(sid)
        tables = perceive(scene, cfg)
        for name, schema in (("objects", OBJECTS), ("frames", FRAMES), ("projections", PROJECTIONS)):
            if name in tables:  # stored as the pipeline's writers do (variable-size lists, see writers.parquet)
                t = check_schema(tables[name], schema)
                atomic_write_table(rf.perception(name, sid), t.cast(storage_schema(schema)))
    return out


def noise_config(level: float, seed: int = 0, backend: str = "labels") -> PipelineConfig:
    """Labels backend with noise scaled by ``level`` (0 = exact labels)."""
    from schemas.config import parse_config

    noise = {"center_m": 0.5 * level, "size_frac": 0.1 * level, "yaw_rad": 0.2 * level,
             "velocity_mps": 0.5 * level, "drop_prob": 0.15 * level, "false_positives_per_frame": 2.0 * level,
             "score_min": 0.5 if level else 1.0, "seed": seed}
    return parse_config({"detection": {"backend": backend, "labels": noise}})


def sweep_levels() -> np.ndarray:
    return np.array([0.0, 0.5, 1.0, 2.0])
