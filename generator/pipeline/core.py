"""The executor-independent core of the pipeline: what flows between stages, how a stage is applied to a
scene, and how a finished scene is committed to the run folder exactly once.

The unit of streaming is the scene. Between stages a scene travels as a ``SceneWork``: the scene id, the
description of its log source (not the data: each worker rebuilds the source and loads the scene itself),
the outputs of the stages so far (``data``), per-scene counts for the summary, and the error that stopped
it (if any). A stage is a plain function ``run(work, env)`` that reads earlier outputs from ``work.data`` and
adds its own; the same stages run in-process (``generator.pipeline.local``) or as one streaming Ray
Dataset (``generator.pipeline.ray_exec``).

A stage that raises does not stop the run: the error (stage, file, message) is attached to the scene, later
stages pass the scene through untouched, and the commit step writes ``errors/<scene>-<stage>.parquet``.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import re
import shutil
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from generator.pipeline.store import ATTEMPTS_DIR, RunStore
from generator.runfolder import safe_name
from schemas.config import PipelineConfig
from schemas.tables import ERRORS

PENDING_DIR = "_pending"  # commit intents: files a scene is about to commit (removed once its manifest exists)
MANIFEST_DIR = "manifest"
ERRORS_DIR = "errors"


@dataclass
class SceneWork:
    """One scene on its way through the stages (pickled between Ray stages; holds no sensor data)."""

    scene_id: str
    source: dict  # LogSource.describe(): enough to rebuild the source on any node
    data: dict[str, Any] = field(default_factory=dict)  # stage outputs, by name
    counts: dict[str, Any] = field(default_factory=dict)  # per-scene figures for the manifest and summary
    timings_s: dict[str, float] = field(default_factory=dict)
    error: dict | None = None  # {"stage", "file", "error_type", "message"}

    def encode(self) -> bytes:
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def decode(blob: bytes) -> "SceneWork":
        return pickle.loads(blob)


@dataclass
class StageEnv:
    """What a stage function gets besides the scene: the config, the run folder and its (cached) model."""

    cfg: PipelineConfig
    store: RunStore
    model: Any = None


@dataclass(frozen=True)
class Stage:
    """A pipeline stage.

    ``run(work, env)`` is the per-scene function (it mutates ``work.data``/``work.counts``). ``build(cfg)``,
    when given, makes the stage's model; it runs once per Ray actor (``actor=True``: a model stage on an
    actor pool, GPUs when the cluster has them) or once per worker process for tasks (cached).
    """

    name: str
    run: Callable[[SceneWork, StageEnv], None]
    build: Callable[[PipelineConfig], Any] | None = None
    actor: bool = False
    gpu: bool = False  # the model can use a GPU (requested only when the cluster has GPUs)


def config_key(cfg: PipelineConfig) -> str:
    return hashlib.sha1(cfg.to_yaml().encode()).hexdigest()[:16]


_MODEL_CACHE: dict[tuple[str, str], Any] = {}


def cached_model(stage: Stage, cfg: PipelineConfig) -> Any:
    """The stage's model for tasks: built once per worker process and config."""
    if stage.build is None:
        return None
    key = (stage.name, config_key(cfg))
    if key not in _MODEL_CACHE:
        _MODEL_CACHE[key] = stage.build(cfg)
    return _MODEL_CACHE[key]


def error_record(err: BaseException, stage: str, scene_id: str) -> dict:
    """An ERRORS row for ``err`` raised by ``stage``; DrivegenError's file (and its own stage) are kept."""
    file = getattr(err, "file", None)
    inner = getattr(err, "stage", None)
    message = str(err) or type(err).__name__
    if inner and inner != stage:
        message = f"{message} (in {inner})" if f"stage={inner}" not in message else message
    tb = traceback.extract_tb(err.__traceback__)
    if tb and not getattr(err, "scene", None):  # an unexpected error: say where in the code
        last = tb[-1]
        message = f"{message} (at {Path(last.filename).name}:{last.lineno} in {last.name})"
    return {"scene_id": scene_id, "stage": stage, "file": str(file) if file else None,
            "error_type": type(err).__name__, "message": message}


def mark_attempt(store: RunStore, scene_id: str, stage: str) -> None:
    """Leave an empty marker per stage attempt; the driver counts them to find scenes that keep killing
    their worker (Ray retries exhausted) and records those as failed."""
    store.write_bytes(f"{ATTEMPTS_DIR}/{safe_name(scene_id)}/{stage}.{uuid.uuid4().hex[:12]}", b"")


def count_attempts(store: RunStore, scene_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rel in store.list(f"{ATTEMPTS_DIR}/{safe_name(scene_id)}"):
        stage = rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        counts[stage] = counts.get(stage, 0) + 1
    return counts


def apply_stage(stage: Stage, work: SceneWork, env: StageEnv, mark: bool = True) -> SceneWork:
    """Run one stage on one scene; an exception becomes the scene's error and drops its data."""
    if work.error is not None:
        return work
    if mark:
        mark_attempt(env.store, work.scene_id, stage.name)
    t0 = time.perf_counter()
    try:
        stage.run(work, env)
    except Exception as err:  # noqa: BLE001 - any failure of one scene is recorded, the run goes on
        work.error = error_record(err, stage.name, work.scene_id)
        work.data.clear()
    work.timings_s[stage.name] = work.timings_s.get(stage.name, 0.0) + time.perf_counter() - t0
    return work


# --------------------------------------------------------------------------------------------- commit
def _file_rows(path: Path) -> int | None:
    if path.suffix == ".parquet":
        return pq.ParquetFile(path).metadata.num_rows
    return None


def scene_file_pattern(scene_id: str) -> re.Pattern:
    """Names a scene owns inside a layout folder: ``<safe>.<ext>`` or ``<safe>-<k digits>.<ext>``."""
    return re.compile(rf"^{re.escape(safe_name(scene_id))}(-\d+)?\.[A-Za-z0-9.]+$")


def commit_scene(store: RunStore, work: SceneWork, staging: Path, cfg: PipelineConfig) -> dict:
    """Commit the files a worker built under ``staging`` (run-folder layout) for one finished scene.

    Order: intent (``_pending/<scene>.json``: files about to appear) -> each file moved into place
    atomically -> files of an earlier unfinished attempt that this one did not produce are removed ->
    ``manifest/<scene>.json`` (files, row counts, figures) -> the intent and any old error rows go.
    A crash anywhere before the manifest leaves the scene unfinished; the next attempt overwrites the same
    names and removes leftovers, so the final set of files and rows is the same as after a clean run.
    Returns the manifest.
    """
    key = safe_name(work.scene_id)
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    entries = []
    for p in files:
        rel = p.relative_to(staging).as_posix()
        entries.append({"path": rel, "rows": _file_rows(p), "bytes": p.stat().st_size})
    new_paths = {e["path"] for e in entries}
    pending_rel = f"{PENDING_DIR}/{key}.json"
    old_paths: set[str] = set()
    if store.exists(pending_rel):  # an earlier attempt got this far and died
        old_paths = set(store.read_json(pending_rel).get("files", []))
    store.write_json(pending_rel, {"scene_id": work.scene_id, "files": sorted(new_paths | old_paths)})
    for e in entries:
        store.commit_file(staging / e["path"], e["path"])
    for rel in sorted(old_paths - new_paths):
        store.delete(rel)
    manifest = {"scene_id": work.scene_id, "files": entries, "counts": work.counts,
                "timings_s": {k: round(v, 4) for k, v in work.timings_s.items()},
                "config": config_key(cfg), "finished_unix": time.time()}
    store.write_json(f"{MANIFEST_DIR}/{key}.json", manifest)
    store.delete(pending_rel)
    clear_errors(store, work.scene_id)
    return manifest


def clear_errors(store: RunStore, scene_id: str) -> None:
    """Remove the scene's error rows (``errors/<safe>-<stage>.parquet``; stage names are [a-z_])."""
    pat = re.compile(rf"^{re.escape(safe_name(scene_id))}-[a-z_]+\.parquet$")
    for rel in store.list(ERRORS_DIR):
        if pat.match(rel.rsplit("/", 1)[-1]):
            store.delete(rel)


def write_error(store: RunStore, error: dict, attempt: int | None = None) -> str:
    """Write one ERRORS row as ``errors/<scene>-<stage>.parquet``; returns its relative path."""
    row = {**error, "attempt": attempt}
    table = pa.Table.from_pylist([row], schema=ERRORS)
    rel = f"{ERRORS_DIR}/{safe_name(error['scene_id'] or 'run')}-{error['stage']}.parquet"
    store.write_table(rel, table)
    return rel


def rollback_pending(store: RunStore, scene_id: str) -> None:
    """After a failed commit: remove the files the scene's intent names (no manifest was written)."""
    pending_rel = f"{PENDING_DIR}/{safe_name(scene_id)}.json"
    if store.exists(pending_rel) and not store.exists(f"{MANIFEST_DIR}/{safe_name(scene_id)}.json"):
        for rel in store.read_json(pending_rel).get("files", []):
            store.delete(rel)
        store.delete(pending_rel)


def finish_scene(work: SceneWork, env: StageEnv, write: Callable[[SceneWork, StageEnv, Path], None],
                 stage_name: str = "write") -> dict:
    """The last step of every scene, on the worker that finished it: ``write`` builds the scene's files in
    a staging folder, ``commit_scene`` puts them in place; a failed scene gets its ERRORS row instead.
    Returns the small summary row the driver sees: scene_id, status ('ok'|'failed'), info (JSON)."""
    if work.error is None:
        mark_attempt(env.store, work.scene_id, stage_name)
        t0 = time.perf_counter()
        staging = env.store.staging_dir(safe_name(work.scene_id))
        try:
            write(work, env, staging)
            work.timings_s[stage_name] = time.perf_counter() - t0
            manifest = commit_scene(env.store, work, staging, env.cfg)
            return {"scene_id": work.scene_id, "status": "ok",
                    "info": json.dumps({"counts": manifest["counts"], "timings_s": manifest["timings_s"],
                                        "files": len(manifest["files"])}, default=_jsonable)}
        except Exception as err:  # noqa: BLE001
            rollback_pending(env.store, work.scene_id)
            work.error = error_record(err, stage_name, work.scene_id)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    write_error(env.store, work.error)
    return {"scene_id": work.scene_id, "status": "failed", "info": json.dumps({"error": work.error})}


def _jsonable(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(type(o).__name__)
