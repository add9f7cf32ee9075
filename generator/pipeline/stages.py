"""The real stages of ``drivegen run``, each a thin wrapper over the pure function that does the work.

    load        source_from_description(...).load_scene(id); frames_table          (task)
    detect      actors.detect.build_detector(cfg.detection) over the scene's frames  (actor pool for mmdet3d)
    perceive    generator.perception.perceive_scene with those detections: tracking,
                segmentation (actors.segment), visibility filter                     (actor pool for sam2)
    attributes  generator.attributes.compute_attributes / compute_labels           (task)
    qa          generator.qa.generate_qa with the templates loaded once per process  (task)
    write       per-scene files into a staging folder (Parquet tables, QA shards,
                WebDataset shards), committed by generator.pipeline.core            (task)

``cfg.ray.model_stages`` ('auto' | 'actors' | 'tasks') decides where detect/perceive run. The scene object
(calibration, poses, file paths; no sensor data) travels between stages inside ``SceneWork``; LiDAR and
images are read by the stage that needs them, on the node that runs it.
"""
from __future__ import annotations

import functools
import json
import logging
from collections import Counter
from pathlib import Path

import pyarrow as pa

from generator.pipeline.core import SceneWork, Stage, StageEnv
from generator.pipeline.store import RunStore
from generator.runfolder import RunFolder, atomic_write_table
from schemas.config import PipelineConfig

log = logging.getLogger("drivegen.pipeline")


# ------------------------------------------------------------------------------------------ load
@functools.lru_cache(maxsize=4)
def _source(desc_json: str):
    from generator.sources import source_from_description

    return source_from_description(json.loads(desc_json))


def load(work: SceneWork, env: StageEnv) -> None:
    from generator.sources import frames_table

    scene = _source(json.dumps(work.source, sort_keys=True)).load_scene(work.scene_id)
    work.data["scene"] = scene
    work.data["frames"] = frames_table(scene)
    work.counts["frames"] = len(scene.frames)
    work.counts["anchors"] = len(scene.anchor_indices)


# ------------------------------------------------------------------------------------------ detect
def build_detector(cfg: PipelineConfig):
    from actors.detect import build_detector as build

    return build(cfg.detection)


def detect(work: SceneWork, env: StageEnv) -> None:
    from generator.perception import detect_frames

    issues: list[dict] = []
    work.data["detections"] = detect_frames(work.data["scene"], env.model, issues)
    work.data["issues"] = issues
    work.counts["detections"] = sum(len(b) for b in work.data["detections"])


class _Precomputed:
    """A detector that answers with the detect stage's boxes (so perceive_scene does not detect again)."""

    def __init__(self, frames, boxes):
        self._by_token = {f.token: b for f, b in zip(frames, boxes)}

    def __call__(self, frames):
        return [self._by_token[f.token] for f in frames]


# ------------------------------------------------------------------------------------------ perceive
def build_segmenter(cfg: PipelineConfig):
    from actors.segment import build_segmenter as build

    return build(cfg.segmentation)


def perceive(work: SceneWork, env: StageEnv) -> None:
    from generator.perception import perceive_scene

    scene = work.data["scene"]
    dets = work.data.pop("detections")
    res = perceive_scene(scene, env.cfg, detector=_Precomputed(scene.frames, dets), segmenter=env.model)
    work.data["objects"] = res.objects
    work.data["projections"] = res.projections
    issues = work.data.get("issues", []) + list(res.issues)
    work.counts["objects"] = res.objects.num_rows
    work.counts["tracks"] = len(set(res.objects.column("track_id").to_pylist()) - {-1})
    work.counts["projections"] = res.projections.num_rows
    work.counts["dropped_by_reason"] = dict(res.drop_counts)
    if issues:
        work.counts["issues_by_reason"] = dict(Counter(i["reason"] for i in issues))
        work.data["issues"] = issues


# ------------------------------------------------------------------------------------------ attributes, QA
def attributes(work: SceneWork, env: StageEnv) -> None:
    from generator.attributes import compute_attributes, compute_labels

    attrs = compute_attributes(work.data["objects"], work.data["frames"])
    work.data["attributes"] = attrs
    work.data["labels"] = compute_labels(work.data["objects"], work.data["frames"], attrs)


def build_templates(cfg: PipelineConfig):
    from generator.qa import load_templates

    return load_templates(cfg)


def qa(work: SceneWork, env: StageEnv) -> None:
    import pyarrow.compute as pc

    from generator.qa import generate_qa

    table = generate_qa(work.data["frames"], work.data["attributes"], work.data["projections"], env.cfg, env.model)
    work.data["qa"] = table
    fam = table.column("family").value_counts().to_pylist() if table.num_rows else []
    work.counts["qa_by_family"] = {d["values"]: int(d["counts"]) for d in fam}
    work.counts["qa"] = table.num_rows
    if table.num_rows:
        work.counts["qa_by_kind"] = {d["values"]: int(d["counts"])
                                     for d in pc.value_counts(table.column("kind")).to_pylist()}


# ------------------------------------------------------------------------------------------ write
def _write_parquet(path: Path, table: pa.Table, compression: str) -> None:
    atomic_write_table(path, table, compression=compression)  # storage types: schemas.tables.write_parquet


def write_scene(work: SceneWork, env: StageEnv, staging: Path) -> None:
    """Every per-scene file of the run-folder layout (``generator.runfolder``), built under ``staging``."""
    from generator.writers.parquet import write_qa_shards

    cfg, sid, rf = env.cfg, work.scene_id, RunFolder(staging)
    comp = cfg.writers.cache_compression
    _write_parquet(rf.perception("frames", sid), work.data["frames"], comp)
    _write_parquet(rf.perception("objects", sid), work.data["objects"], comp)
    _write_parquet(rf.perception("projections", sid), work.data["projections"], comp)
    _write_parquet(rf.attributes(sid), work.data["attributes"], comp)
    _write_parquet(rf.labels(sid), work.data["labels"], comp)
    write_qa_shards(work.data["qa"], staging, sid, cfg.writers)
    if cfg.writers.webdataset and work.data["qa"].num_rows:
        from generator.writers.wds import write_wds_shards

        write_wds_shards(work.data["qa"], staging, sid, cfg.writers)
    if work.data.get("issues"):
        work.counts["issues"] = len(work.data["issues"])


# ------------------------------------------------------------------------------------------ assembly
def _as_actor(backend_is_model: bool, cfg: PipelineConfig) -> bool:
    mode = cfg.ray.model_stages
    return mode == "actors" or (mode == "auto" and backend_is_model)


def default_stages(cfg: PipelineConfig) -> list[Stage]:
    det_model = cfg.detection.backend == "mmdet3d"
    seg_model = cfg.segmentation.backend == "sam2"
    return [
        Stage("load", load),
        Stage("detect", detect, build=build_detector, actor=_as_actor(det_model, cfg), gpu=det_model),
        Stage("perceive", perceive, build=build_segmenter, actor=_as_actor(seg_model, cfg), gpu=seg_model),
        Stage("attributes", attributes),
        Stage("qa", qa, build=build_templates),
    ]


def finalize_run(store: RunStore, summary: dict) -> None:
    """Dataset card over the committed QA shards (``card/``) and the STRIDE-QA-Bench export (``bench/``)."""
    import tempfile

    cfg_text = store.read_bytes("config.yaml")
    import yaml

    from schemas.config import parse_config

    cfg = parse_config(yaml.safe_load(cfg_text))
    if not cfg.writers.card:
        return
    try:
        from generator.writers.card import write_card
    except ImportError:
        log.info("no dataset card writer installed; skipping the card")
        return
    import pyarrow.dataset as pads

    from generator.pipeline.read import manifests

    files = sorted(f["path"] for m in manifests(store) for f in m["files"]
                   if f["path"].startswith("qa/") and f["path"].endswith(".parquet"))
    if not files:
        return
    dataset = pads.dataset([store.full(p) for p in files], format="parquet", filesystem=store.fs)
    errors = Counter(e["stage"] for e in summary["errors"])
    extra = {"visibility_drops": summary["objects_dropped"], "errors": dict(errors),
             "scenes": summary["scenes"], "frames": summary["frames"], "objects": summary["objects"]}
    with tempfile.TemporaryDirectory(prefix="drivegen-card-") as tmp:
        write_card(dataset, tmp, extra=extra)
        for p in sorted(Path(tmp).rglob("*")):
            if p.is_file():
                store.commit_file(p, p.relative_to(tmp).as_posix())
    if cfg.writers.bench_export:
        _export_bench(store, cfg, summary)


def _export_bench(store: RunStore, cfg: PipelineConfig, summary: dict) -> None:
    """STRIDE-QA-Bench files (``bench/``) from the committed scenes; the exporter reads a local folder."""
    root = store.local_root
    if root is None:
        log.info("run folder is not local: export the bench later with `drivegen export_bench` on a local copy")
        return
    from generator.writers.bench_export import export_bench

    result = export_bench(root, cfg=cfg)
    summary["bench_export"] = {k: result[k] for k in ("groups", "questions") if k in result}
