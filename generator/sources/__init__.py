"""Log sources: open a set of driving logs, rebuild a source from its description, frames/scenes as Arrow.

``open_source('nuscenes', dataroot, cfg, version=..., scenes=...)`` / ``open_source('av2', root, cfg)``.
``cfg`` may be a whole ``PipelineConfig`` (its ``keyframes`` and ``sources`` sections are used, and its
detection backend decides whether frames must carry annotations), a ``KeyframeConfig`` or a dict of one
(sanity bounds then at their defaults, annotations not required).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from generator.sources.base import LogSource
from generator.types import Scene, SourceError
from schemas import tables
from schemas.config import KeyframeConfig, SourceLimitsConfig

KINDS = ("nuscenes", "av2")


def _keyframe_cfg(cfg) -> KeyframeConfig:
    if cfg is None:
        return KeyframeConfig()
    if isinstance(cfg, KeyframeConfig):
        return cfg
    if hasattr(cfg, "keyframes") and isinstance(cfg.keyframes, KeyframeConfig):
        return cfg.keyframes
    if isinstance(cfg, dict):
        return KeyframeConfig.model_validate(cfg)
    raise TypeError(f"cfg must be a KeyframeConfig, a PipelineConfig or a dict, got {type(cfg).__name__}")


def _limits_cfg(cfg) -> SourceLimitsConfig:
    limits = getattr(cfg, "sources", None)
    return limits if isinstance(limits, SourceLimitsConfig) else SourceLimitsConfig()


def _labels_required(cfg) -> bool:
    """The 'labels' detection backend turns a log's annotations into detections: a log without them would
    finish "ok" with no objects and no QA, so its scenes must fail when they load."""
    return getattr(getattr(cfg, "detection", None), "backend", None) == "labels"


def _detect_version(dataroot: Path) -> str:
    """The single table folder (``<dataroot>/<version>/scene.json``) under a nuScenes dataroot."""
    found = sorted(p.parent.name for p in dataroot.glob("*/scene.json"))
    if len(found) != 1:
        raise SourceError(f"cannot tell the nuScenes version: table folders with scene.json: {found or 'none'}; "
                          f"pass version=", file=str(dataroot), stage="open")
    return found[0]


def open_source(kind: str, path, cfg=None, **kw) -> LogSource:
    """Open logs of ``kind`` ('nuscenes' | 'av2') at ``path``.

    nuscenes: ``path`` is the dataroot; keywords ``version`` (default: the only table folder present),
    ``scenes`` (names or tokens), ``check_files``, ``max_sweeps``. av2: ``path`` is a folder of logs or
    one log folder; keywords ``check_files``, ``max_sweeps``. ``max_sweeps``: earlier LiDAR sweeps listed per
    frame (``Frame.lidar_sweeps``, default 10).
    Both: ``limits`` (a ``SourceLimitsConfig``, default ``cfg.sources``); av2: ``require_labels`` (default:
    ``cfg``'s detection backend is 'labels'; nuScenes samples always carry their annotation list).
    """
    kf = _keyframe_cfg(cfg)
    limits = kw.pop("limits", None) or _limits_cfg(cfg)
    if kind == "nuscenes":
        from generator.sources.nuscenes import NuScenesSource

        version = kw.pop("version", None) or _detect_version(Path(path))
        return NuScenesSource(path, version=version, cfg=kf, limits=limits, **kw)
    if kind == "av2":
        from generator.sources.av2 import AV2Source

        require_labels = kw.pop("require_labels", _labels_required(cfg))
        check_files = kw.pop("check_files", True)
        unknown = sorted(set(kw) - {"max_sweeps"})
        if unknown:
            raise TypeError(f"av2 source takes no options {unknown}")
        return AV2Source(path, cfg=kf, limits=limits, require_labels=require_labels, check_files=check_files, **kw)
    raise ValueError(f"unknown source kind {kind!r}; known: {list(KINDS)}")


def source_from_description(desc: dict) -> LogSource:
    """Rebuild a source from ``LogSource.describe()`` (e.g. on a Ray worker): keyframes, sanity bounds
    (a description without them, from before they existed, gets the defaults) and options."""
    d = dict(desc)
    kind = d.pop("kind", None)
    cfg = KeyframeConfig.model_validate(d.pop("keyframes", None) or {})
    d["limits"] = SourceLimitsConfig.model_validate(d.pop("limits", None) or {})
    if kind == "nuscenes":
        return open_source("nuscenes", d.pop("dataroot"), cfg, **d)
    if kind == "av2":
        return open_source("av2", d.pop("root"), cfg, **d)
    raise ValueError(f"cannot rebuild a source from description with kind {kind!r}: {desc}")


def _mat_column(mats: np.ndarray, width: int) -> pa.FixedSizeListArray:
    flat = np.ascontiguousarray(mats, dtype=np.float64).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float64()), width)


def frames_table(scene: Scene) -> pa.Table:
    """One row per frame of ``scene`` (schema ``schemas.tables.FRAMES``)."""
    fr = scene.frames
    cams = [[{"name": name, "image_path": f.image_paths.get(name, ""), "width_px": c.width_px,
              "height_px": c.height_px, "K": c.K.reshape(-1).tolist(),
              "ego_SE3_cam": c.ego_SE3_cam.as_matrix().reshape(-1).tolist()} for name, c in f.cameras.items()]
            for f in fr]
    cols = {
        "scene_id": pa.array([scene.scene_id] * len(fr), pa.string()),
        "frame_index": pa.array([f.frame_index for f in fr], pa.int32()),
        "timestamp_us": pa.array([f.timestamp_us for f in fr], pa.int64()),
        "token": pa.array([f.token for f in fr], pa.string()),
        "is_anchor": pa.array([bool(f.is_anchor) for f in fr], pa.bool_()),
        "city_SE3_ego": _mat_column(np.array([f.city_SE3_ego.as_matrix() for f in fr]).reshape(-1, 16), 16),
        "ego_SE3_lidar": _mat_column(np.array([f.ego_SE3_lidar.as_matrix() for f in fr]).reshape(-1, 16), 16),
        "lidar_path": pa.array([f.lidar_path for f in fr], pa.string()),
        "lidar_format": pa.array([f.lidar_format for f in fr], pa.string()),
        "cameras": pa.array(cams, tables.FRAMES.field("cameras").type),
    }
    return tables.check_schema(pa.table(cols), tables.FRAMES, f"frames of scene {scene.scene_id}")


def scenes_table(scenes: list[Scene]) -> pa.Table:
    """One row per scene (schema ``schemas.tables.SCENES``)."""
    def duration(s: Scene) -> float:
        ts = s.timestamps_us
        return float(ts[-1] - ts[0]) / 1e6 if len(ts) else 0.0

    cols = {
        "scene_id": pa.array([s.scene_id for s in scenes], pa.string()),
        "source": pa.array([s.source for s in scenes], pa.string()),
        "log_name": pa.array([s.log_name for s in scenes], pa.string()),
        "num_frames": pa.array([len(s.frames) for s in scenes], pa.int32()),
        "num_anchors": pa.array([len(s.anchor_indices) for s in scenes], pa.int32()),
        "duration_s": pa.array([duration(s) for s in scenes], pa.float64()),
        "frame_interval_s": pa.array([s.frame_interval_s for s in scenes], pa.float64()),
    }
    return tables.check_schema(pa.table(cols), tables.SCENES, "scenes")


__all__ = ["LogSource", "open_source", "source_from_description", "frames_table", "scenes_table", "KINDS"]
