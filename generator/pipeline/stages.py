"""The real stages of ``drivegen run``, each a thin wrapper over the pure function that does the work (the first
line of each one's docstring says which). The graph describes itself: ``generator.pipeline.core.describe``
(``drivegen run --describe`` prints it for a config: each stage's needs -> makes, how it runs, what it does).

``cfg.ray.model_stages`` ('auto' | 'actors' | 'tasks') decides where detect/perceive run. The scene object
(calibration, poses, file paths; no sensor data) travels between stages inside ``SceneWork``; LiDAR and
images are read by the stage that needs them, on the node that runs it. After ``perceive`` the frames each
stage skipped are counted: past ``failures.max_failed_frame_share`` of the scene's frames the scene fails.
"""
from __future__ import annotations

import functools
import json
import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from actors.detect import build_detector as new_detector
from actors.segment import build_segmenter as new_segmenter
from generator.attributes import compute_attributes, compute_labels
from generator.perception import detect_scene, perceive_scene
from generator.pipeline.core import Described, Loaded, Questions, SceneWork, Stage, StageEnv
from generator.qa import generate_qa, load_templates, scene_split
from generator.sources import frames_table, source_from_description
from generator.writers.parquet import scene_split_of, write_qa_shards
from generator.writers.wds import write_wds_shards
from schemas import layout
from schemas.config import PipelineConfig
from schemas.errors import DrivegenError
from schemas.families import add_family_counts, declared_output, families
from schemas.tables import ISSUES, write_parquet
from schemas.vocab import MODEL_STAGES, UNLABELLED_ISSUE

log = logging.getLogger("drivegen.pipeline")


class PartialSceneError(DrivegenError):
    """Too many of a scene's frames could not be read or run by one stage."""


# ------------------------------------------------------------------------------------------ load
@functools.lru_cache(maxsize=4)
def cached_source(desc_json: str):
    return source_from_description(json.loads(desc_json))


def load(work: SceneWork, env: StageEnv) -> None:
    """The scene from its log source (source_from_description(...).load_scene) and its frames table."""
    scene = cached_source(json.dumps(work.source, sort_keys=True)).load_scene(work.scene_id)
    work.loaded = Loaded(scene, frames_table(scene))
    work.counts["frames"] = len(scene.frames)
    work.counts["anchors"] = len(scene.anchor_indices)


# ------------------------------------------------------------------------------------------ detect
def build_detector(cfg: PipelineConfig):
    return new_detector(cfg.detection)


def detect(work: SceneWork, env: StageEnv) -> None:
    """3D boxes per frame: generator.perception.detect_scene with the detector (actors.detect)."""
    work.detected = detect_scene(work.loaded.scene, env.model)
    work.counts["detections"] = sum(len(b) for b in work.detected.boxes)


# ------------------------------------------------------------------------------------------ perceive
def build_segmenter(cfg: PipelineConfig):
    return new_segmenter(cfg.segmentation)


def perceive(work: SceneWork, env: StageEnv) -> None:
    """Tracking, segmentation (actors.segment) and the visibility filter: generator.perception.perceive_scene."""
    res = perceive_scene(work.loaded.scene, work.detected, env.cfg, segmenter=env.model)
    work.detected = None  # tracked boxes are in res.objects; no need to carry the raw detections further
    work.perceived = res
    work.counts["objects"] = res.objects.num_rows
    work.counts["tracks"] = len(set(res.objects.column("track_id").to_pylist()) - {-1})
    work.counts["projections"] = res.projections.num_rows
    work.counts["dropped_by_reason"] = dict(res.drop_counts)
    if res.issues:
        work.counts["issues_by_reason"] = dict(Counter(i.reason for i in res.issues))
    check_failed_frames(work, env.cfg)


def check_failed_frames(work: SceneWork, cfg: PipelineConfig) -> None:
    """Count, per stage, the frames it skipped; fail the scene when a stage skipped more than
    ``failures.max_failed_frame_share`` of them (no silent partial scenes). Frames outside the log's annotations
    under the 'labels' backend (reason ``UNLABELLED_ISSUE``) are no failure: they are counted apart
    (``unlabelled_frames``; the run's summary prints them) and keep their questions about the ego."""
    n = max(1, len(work.loaded.scene.frames))
    by_stage: dict[str, set[int]] = {}
    first: dict[str, object] = {}
    unlabelled = {i.frame_index for i in work.perceived.issues if i.reason == UNLABELLED_ISSUE}
    if unlabelled:
        work.counts["unlabelled_frames"] = len(unlabelled)
    for issue in work.perceived.issues:
        if issue.reason == UNLABELLED_ISSUE:
            continue
        by_stage.setdefault(issue.stage, set()).add(issue.frame_index)
        first.setdefault(issue.stage, issue)
    if not by_stage:
        return
    work.counts["failed_frames"] = {st: len(f) for st, f in sorted(by_stage.items())}
    limit = cfg.failures.max_failed_frame_share
    for st, frames in sorted(by_stage.items()):
        if len(frames) / n > limit:
            i = first[st]
            raise PartialSceneError(
                f"stage '{st}' could not read or run {len(frames)} of {n} frames ({len(frames) / n:.0%}, more than "
                f"failures.max_failed_frame_share={limit:g}); first: frame {i.frame_index}"
                f"{' camera ' + i.camera if i.camera else ''}: {i.message}",
                scene=work.scene_id, file=i.file, stage=st)


# ------------------------------------------------------------------------------------------ attributes, QA
def attributes(work: SceneWork, env: StageEnv) -> None:
    """Attributes and labels (generator.attributes), then every registered paper family's derive over them.
    """
    objects, frames = work.perceived.objects, work.loaded.frames
    attrs = compute_attributes(objects, frames, env.cfg.ego)
    labels = compute_labels(objects, frames, attrs, env.cfg.labels)
    scene = {"frames": frames, "objects": objects, "attributes": attrs, "labels": labels,
             "projections": work.perceived.projections}
    derived: dict = {}
    for fam in families().values():
        tables = declared_output(fam, fam.derive(scene, env.cfg), "derive")
        derived.update(tables)
        add_family_counts(work.counts, fam.name, fam.counts(tables, env.cfg))
    work.described = Described(attrs, labels, derived)


def build_templates(cfg: PipelineConfig):
    return load_templates(cfg)


def qa(work: SceneWork, env: StageEnv) -> None:
    """The QA rows: generator.qa.generate_qa with the templates loaded once per process."""
    issues = issues_table(work.scene_id, work.perceived.issues) if work.perceived.issues else None
    table = generate_qa(work.loaded.frames, work.described.attributes, work.perceived.projections, env.cfg, env.model,
                        labels=work.described.labels, objects=work.perceived.objects, issues=issues,
                        **work.described.family_tables)
    work.questions = Questions(table)
    work.counts.update(qa_counts(table))


def qa_counts(table: pa.Table) -> dict:
    """QA figures of a scene for its manifest: total, per family and per kind."""
    out: dict = {"qa": table.num_rows, "qa_by_family": {}}
    if table.num_rows:
        out["qa_by_family"] = {d["values"]: int(d["counts"]) for d in pc.value_counts(table.column("family")).to_pylist()}
        out["qa_by_kind"] = {d["values"]: int(d["counts"]) for d in pc.value_counts(table.column("kind")).to_pylist()}
    return out


# ------------------------------------------------------------------------------------------ write
def issues_table(scene_id: str, issues) -> pa.Table:
    rows = [{"scene_id": scene_id, "frame_index": i.frame_index, "stage": i.stage, "reason": i.reason,
             "camera": i.camera, "file": i.file, "message": i.message} for i in issues]
    return pa.Table.from_pylist(rows, schema=ISSUES)


def write_scene(work: SceneWork, env: StageEnv, staging: Path) -> None:
    """Every per-scene file of the run-folder layout (``schemas.layout``), built under ``staging``."""
    cfg, sid = env.cfg, work.scene_id
    comp = cfg.writers.cache_compression
    loaded, perceived = work.need("loaded", "write"), work.need("perceived", "write")
    described, questions = work.need("described", "write"), work.need("questions", "write")
    tables = {"frames": loaded.frames, "objects": perceived.objects, "projections": perceived.projections,
              "attributes": described.attributes, "labels": described.labels, **described.family_tables}
    if perceived.issues:
        tables["issues"] = issues_table(sid, perceived.issues)
        work.counts["issues"] = len(perceived.issues)
    # the scene's split names its files of the tables stored by split: the one its QA rows carry, the hashed
    # split of the config for a scene without QA rows (generator.qa.scene_split, what generate_qa gives its rows)
    split = scene_split_of(questions.qa, sid) or scene_split([sid], cfg.qa.val_fraction)[0]
    for name, table in tables.items():
        path = staging / layout.scene_file(name, sid, split=split)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet(path, table, compression=comp)
    write_qa_shards(questions.qa, staging, sid, cfg.writers, fsync=False)  # fsynced as they are committed
    if cfg.writers.webdataset and questions.qa.num_rows:
        # lazy: generator.writers.anonymize loads cv2, which this module needs only here
        from generator.writers.anonymize import ScenePublisher

        publish = ScenePublisher.from_tables(sid, loaded.frames, perceived.objects, cfg.anonymize)
        write_wds_shards(questions.qa, staging, sid, cfg.writers, publish=publish)


# ------------------------------------------------------------------------------------------ assembly
def _as_actor(backend_is_model: bool, cfg: PipelineConfig) -> bool:
    mode = cfg.ray.model_stages
    return mode == "actors" or (mode == "auto" and backend_is_model)


def default_stages(cfg: PipelineConfig) -> list[Stage]:
    det_model = cfg.detection.backend == "mmdet3d"
    seg_model = cfg.segmentation.backend == "sam2"
    return [
        Stage("load", load, makes="loaded"),
        Stage(MODEL_STAGES[0], detect, needs=("loaded",), makes="detected", build=build_detector,
              actor=_as_actor(det_model, cfg), gpu=det_model),
        Stage(MODEL_STAGES[1], perceive, needs=("loaded", "detected"), makes="perceived", build=build_segmenter,
              actor=_as_actor(seg_model, cfg), gpu=seg_model),
        Stage("attributes", attributes, needs=("loaded", "perceived"), makes="described"),
        Stage("qa", qa, needs=("loaded", "perceived", "described"), makes="questions", build=build_templates),
    ]
