"""A detector's quality on labelled logs, with ``drivegen validate``'s own scoring (nuscenes-devkit).

``write_run_folder(out, source, cfg, scenes, tracked=True)`` writes the perception tables of a run folder
(``source.json``, ``config.yaml``, committed ``perception/{frames,objects,projections}`` per scene) for
labelled scenes, much cheaper than ``drivegen run`` (no QA, card or
WebDataset writers): ``tracked`` runs the whole perception (``generator.perception.perceive_scene``:
detect, track, segment), ``tracked=False`` writes the detector's own boxes (no tracker, no projections),
which scores the detector alone. ``detection_metrics(out)`` is ``validate_run``'s detection section.

``frames_with_lidar(scene)`` keeps the frames whose LiDAR file exists (the AV2 excerpt has sweeps for 2
of its 156 annotated timestamps): only those are scored, since validation scores a run's perceived frames.

Used by ``bench/detection.py``, the detection-quality tests and ``tests/support/validate.py``.
"""
from __future__ import annotations

import os
from pathlib import Path

from actors.detect import build_detector
from generator.qa import scene_split
from generator.runfolder import RunStore, commit_tables, config_key
from generator.sources import frames_table
from generator.types import Scene
from schemas.config import PipelineConfig
from schemas.tables import PROJECTIONS


def frames_with_lidar(scene: Scene) -> Scene:
    """The scene with only the frames whose LiDAR sweep file exists (no anchors: nothing is asked of QA)."""
    frames = [f for f in scene.frames if f.lidar_path and os.path.isfile(f.lidar_path)]
    return Scene(scene.scene_id, scene.source, scene.log_name, frames, [], scene.front_camera)


def write_run_folder(out, source, cfg: PipelineConfig, scenes: list[Scene] | None = None, tracked: bool = True,
                     detector=None) -> Path:
    """A run folder of ``scenes`` (default: every scene of ``source``), committed scene by scene like the
    pipeline commits them (``generator.runfolder.commit_tables``); see the module docstring."""
    # lazy: generator.perception loads pycocotools, scipy, which this module needs only here
    from generator.perception import detect_scene, objects_table, perceive_scene

    store = RunStore(out)
    store.write_json("source.json", source.describe())
    store.write_bytes("config.yaml", cfg.to_yaml().encode())
    if scenes is None:
        scenes = [source.load_scene(sid) for sid in source.scene_ids()]
    detector = detector or build_detector(cfg.detection)
    for scene in scenes:
        detections = detect_scene(scene, detector)
        if tracked:
            res = perceive_scene(scene, detections, cfg)
            objects, projections = res.objects, res.projections
        else:
            objects = objects_table(scene, detections.boxes, cfg.detection.backend)
            projections = PROJECTIONS.empty_table()
        commit_tables(store, scene.scene_id, {"objects": objects, "frames": frames_table(scene),
                                              "projections": projections}, config=config_key(cfg),
                      split=scene_split([scene.scene_id], cfg.qa.val_fraction)[0])
    return Path(out)


def detection_metrics(run) -> dict:
    """``drivegen validate``'s detection section of a run folder (mAP, mAOE, ..., per class, false positives)."""
    # lazy: generator.validate.run loads nuscenes, scipy, which this module needs only here
    from generator.validate.run import ValidateOptions, validate_run

    return validate_run(str(run), ValidateOptions(tracking=False, label_agreement=False))["detection"]
