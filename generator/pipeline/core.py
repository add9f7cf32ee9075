"""The executor-independent core of the pipeline: what flows between stages (typed), how a stage is applied
to a scene, and how a finished scene is committed to the run folder exactly once.

The unit of streaming is the scene. Between stages a scene travels as a ``SceneWork``: the scene id, the
description of its log source (not the data: each worker rebuilds the source and loads the scene itself),
the run epoch of the driver that started it, one typed output per stage so far (``loaded``, ``detected``,
``perceived``, ``described``, ``questions``), per-scene counts for the summary, and the ``StageError``
that stopped it (if any). A ``Stage`` names the outputs it needs and the one it makes; ``run(work, env)``
reads the former and sets the latter. The same stages run in-process (``driver._run_local``) or as one
streaming Ray Dataset (``ray_exec``).

A stage that raises does not stop the run: the error (stage, file, message) is attached to the scene, later
stages pass the scene through untouched, and the commit step writes ``errors/<scene>-<stage>.parquet``.
"""
from __future__ import annotations

import json
import logging
import pickle
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
import gc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from generator.perception import Detections, PerceptionResult
from generator.runfolder import RunStore, commit_scene, config_key, make_fence, rollback_pending, write_error
from generator.runfolder import StaleWriterError
from generator.runfolder.commit import mark_attempt
from generator.runfolder.parts import build_scene_parts
from generator.types import Scene
from schemas.config import PipelineConfig
from schemas.layout import safe_name

log = logging.getLogger("drivegen.pipeline")


# ------------------------------------------------------------------------------------------ stage outputs
@dataclass
class Loaded:
    """load: the scene (calibration, poses, file paths; no sensor data) and its FRAMES table."""

    scene: Scene
    frames: pa.Table


@dataclass
class Described:
    """attributes: ATTRIBUTES and LABELS, plus the tables label families derive (by layout name)."""

    attributes: pa.Table
    labels: pa.Table
    family_tables: dict[str, pa.Table] = field(default_factory=dict)


@dataclass
class Questions:
    """qa: the scene's QA rows (``schemas.tables.QA``)."""

    qa: pa.Table


@dataclass
class StageError:
    """Why a scene stopped: one ERRORS row (``schemas.tables.ERRORS``)."""

    scene_id: str | None
    stage: str
    file: str | None
    error_type: str
    message: str
    attempt: int | None = None

    def row(self) -> dict:
        return asdict(self)

    @classmethod
    def from_exception(cls, err: BaseException, stage: str, scene_id: str) -> "StageError":
        """The row for ``err`` raised by ``stage``; a DrivegenError's file (and its own stage) are kept, an
        unexpected error says where in the code it happened."""
        file = getattr(err, "file", None)
        inner = getattr(err, "stage", None)
        message = getattr(err, "message", None) or str(err) or type(err).__name__  # scene and file have columns
        if inner and inner != stage and f"stage={inner}" not in message:
            message = f"{message} (in {inner})"
        tb = traceback.extract_tb(err.__traceback__)
        if tb and not getattr(err, "scene", None):
            last = tb[-1]
            message = f"{message} (at {Path(last.filename).name}:{last.lineno} in {last.name})"
        return cls(scene_id, stage, str(file) if file else None, type(err).__name__, message)

    @classmethod
    def from_row(cls, row: dict) -> "StageError":
        return cls(**{f.name: row.get(f.name) for f in fields(cls)})


OUTPUTS = ("loaded", "detected", "perceived", "described", "questions", "video")


@dataclass
class SceneWork:
    """One scene on its way through the stages (pickled between Ray stages; holds no sensor data)."""

    scene_id: str
    source: dict  # LogSource.describe(): enough to rebuild the source on any node
    epoch: int | None = None  # the run epoch of the driver that started it (commits are fenced by it)
    loaded: Loaded | None = None
    detected: Detections | None = None
    perceived: PerceptionResult | None = None
    described: Described | None = None
    questions: Questions | None = None
    video: Any = None  # camera-only sources: generator.pipeline.video.Video (instead of loaded ... questions)
    counts: dict[str, Any] = field(default_factory=dict)  # per-scene figures for the manifest and summary
    timings_s: dict[str, float] = field(default_factory=dict)
    # [first start, last end] of each stage in wall-clock seconds (Unix time): when a model actor worked on
    # this scene, for busy shares across processes (bench/gpu.py); written to the manifest
    spans_unix: dict[str, list[float]] = field(default_factory=dict)
    manifest_info: dict[str, Any] = field(default_factory=dict)  # more for the manifest (a video's clip)
    error: StageError | None = None

    def need(self, name: str, stage: str):
        value = getattr(self, name)
        if value is None:
            raise RuntimeError(f"stage '{stage}' needs the '{name}' output, which no earlier stage made for scene "
                               f"'{self.scene_id}' (check the stage list)")
        return value

    def clear(self) -> None:
        for name in OUTPUTS:
            setattr(self, name, None)

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

    ``run(work, env)`` reads the outputs named in ``needs`` and sets the one named ``makes`` (and
    ``work.counts``). ``build(cfg)``, when given, makes the stage's model; it runs once per Ray actor
    (``actor=True``: a model stage on an actor pool, GPUs when the cluster has them) or once per worker
    process for tasks (cached).
    """

    name: str
    run: Callable[[SceneWork, StageEnv], None]
    needs: tuple[str, ...] = ()
    makes: str | None = None
    build: Callable[[PipelineConfig], Any] | None = None
    actor: bool = False
    gpu: bool = False  # the model can use a GPU (requested only when the cluster has GPUs)

    def does(self) -> str:
        """What the stage does: the first line of its ``run`` function's docstring (the pure function it wraps)."""
        return ((self.run.__doc__ or "").strip().splitlines() or [""])[0]

    def resources(self, cfg: PipelineConfig) -> str:
        """How it runs under Ray with ``cfg.ray``: a task of ``cpu_stage_num_cpus`` CPUs, or an actor pool (its
        size, CPUs and GPUs per actor; GPUs only when the cluster has them). In-process: one after another."""
        rc = cfg.ray
        if not self.actor:
            return f"task, {rc.cpu_stage_num_cpus:g} CPU"
        own = rc.stage_actors.get(self.name)
        size = (own.pool_size if own is not None and own.pool_size else None) or rc.actor_pool_size
        gpus = f", {rc.actor_num_gpus:g} GPU when the cluster has GPUs" if self.gpu else ""
        return f"actor pool of {size}, {rc.actor_num_cpus:g} CPU{gpus}"


def check_graph(stages: list[Stage], given: tuple[str, ...] = ()) -> None:
    """Every stage's ``needs`` is made by a stage before it (or ``given``), and no two stages make the same
    output; ValueError naming the stage otherwise."""
    made = set(given)
    for stage in stages:
        missing = [n for n in stage.needs if n not in made]
        if missing:
            raise ValueError(f"stage {stage.name!r} needs {', '.join(missing)}, which no stage before it makes "
                             f"(made so far: {', '.join(sorted(made)) or 'nothing'})")
        if stage.makes is not None:
            if stage.makes in made:
                raise ValueError(f"stage {stage.name!r} makes {stage.makes!r}, which a stage before it makes already")
            made.add(stage.makes)


def describe(stages: list[Stage], cfg: PipelineConfig) -> str:
    """The stage graph as text, read from the stages themselves (NeMo Curator's ``Pipeline.describe``): per stage
    its needs -> makes, what it does and how it runs; then the write step every scene ends with."""
    check_graph(stages)
    rows = [("stage", "needs -> makes", "runs as", "does")]
    for s in stages:
        rows.append((s.name, f"{', '.join(s.needs) or '-'} -> {s.makes or '-'}", s.resources(cfg), s.does()))
    rows.append(("write", "(all) -> run folder", f"task, {cfg.ray.cpu_stage_num_cpus:g} CPU",
                 "The scene's files built in a staging folder, committed once (generator.runfolder.commit_scene)."))
    widths = [max(len(r[k]) for r in rows) for k in range(3)]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows)
    return (table + "\nOn Ray, consecutive task stages run as one task per scene (generator.pipeline.ray_exec); "
            "with --local every stage runs in this process.\n")


_MODEL_CACHE: dict[tuple[str, str], Any] = {}


def cached_model(stage: Stage, cfg: PipelineConfig) -> Any:
    """The stage's model for tasks: built once per worker process and config."""
    if stage.build is None:
        return None
    key = (stage.name, config_key(cfg))
    if key not in _MODEL_CACHE:
        _MODEL_CACHE[key] = stage.build(cfg)
    return _MODEL_CACHE[key]


_SCENES_BEGUN = [0]  # scenes (or tasks) this process has begun: see settle_heap


def settle_heap() -> bool:
    """Called as a process begins each scene (or each task of scenes). At the second, once per process, what
    the process holds then (imports, cached models and sources, templates: objects that live as long as it) is
    moved out of the garbage collector's sight (``gc.collect()``, then ``gc.freeze()``): Python's full
    collections otherwise walk those hundreds of thousands of objects again and again as each scene allocates
    (measured: 70-80 ms a generated scene, about 0.5 ms after). The collection first frees the first scene's
    garbage, which is never frozen; frozen objects are still freed when nothing refers to them (only cycles
    among them stay). Returns True for the call that froze."""
    _SCENES_BEGUN[0] += 1
    if _SCENES_BEGUN[0] != 2:
        return False
    gc.collect()
    gc.freeze()
    return True


def apply_stage(stage: Stage, work: SceneWork, env: StageEnv, mark: bool = True) -> SceneWork:
    """Run one stage on one scene; an exception becomes the scene's error and drops its outputs."""
    if work.error is not None:
        return work
    if mark:
        fence = make_fence(env.store, work.epoch)
        try:
            if fence is not None:
                fence()  # a worker of a driver that is gone writes nothing, not even an attempt marker
        except StaleWriterError as err:  # and works no more: finish_scene reports the scene as stale
            work.error = StageError.from_exception(err, stage.name, work.scene_id)
            work.clear()
            return work
        mark_attempt(env.store, work.scene_id, stage.name)
    t0, wall0 = time.perf_counter(), time.time()
    try:
        for name in stage.needs:
            work.need(name, stage.name)
        stage.run(work, env)
        if stage.makes is not None:
            work.need(stage.makes, stage.name)
    except Exception as err:  # noqa: BLE001 - any failure of one scene is recorded, the run goes on
        work.error = StageError.from_exception(err, stage.name, work.scene_id)
        work.clear()
    work.timings_s[stage.name] = work.timings_s.get(stage.name, 0.0) + time.perf_counter() - t0
    work.spans_unix[stage.name] = [work.spans_unix.get(stage.name, [wall0])[0], time.time()]
    return work


# --------------------------------------------------------------------------------------------- commit
def finish_scene(work: SceneWork, env: StageEnv, write: Callable[[SceneWork, StageEnv, Path], None],
                 stage_name: str = "write", part_specs: tuple = ()) -> dict:
    """The last step of every scene, on the worker that finished it: ``write`` builds the scene's files in
    a staging folder, ``generator.runfolder.commit_scene`` puts them in place (fenced by the run epoch), then the
    scene's end-of-run parts ``part_specs`` are built (``build_committed_parts``); a failed scene gets its
    ERRORS row instead. Returns the small summary row the driver sees: scene_id, status ('ok'|'failed'|'stale'),
    info (JSON)."""
    fence = make_fence(env.store, work.epoch)
    try:
        if fence is not None:
            fence()  # a worker of a driver that is gone writes nothing, not even an attempt marker
    except StaleWriterError as err:
        return {"scene_id": work.scene_id, "status": "stale", "info": json.dumps({"error": str(err)})}
    if work.error is None:
        mark_attempt(env.store, work.scene_id, stage_name)
        t0, wall0 = time.perf_counter(), time.time()
        staging = env.store.staging_dir(f"{work.epoch or 0}-{_short(work.scene_id)}")
        try:
            write(work, env, staging)
            work.timings_s[stage_name] = time.perf_counter() - t0
            work.spans_unix[stage_name] = [wall0, time.time()]
            spans = {k: [round(a, 4), round(b, 4)] for k, (a, b) in work.spans_unix.items()}
            manifest = commit_scene(env.store, work.scene_id, staging, counts=work.counts, timings_s=work.timings_s,
                                    config=config_key(env.cfg), epoch=work.epoch, fence=fence,
                                    extra={**work.manifest_info, "stage_spans_unix": spans})
            build_committed_parts(env.store, work.scene_id, part_specs)
            return {"scene_id": work.scene_id, "status": "ok",
                    "info": json.dumps({"counts": manifest["counts"], "timings_s": manifest["timings_s"],
                                        "files": len(manifest["files"])}, default=_jsonable)}
        except StaleWriterError as err:  # a newer driver owns the run: leave everything to it
            return {"scene_id": work.scene_id, "status": "stale", "info": json.dumps({"error": str(err)})}
        except Exception as err:  # noqa: BLE001
            rollback_pending(env.store, work.scene_id)
            work.error = StageError.from_exception(err, stage_name, work.scene_id)
        finally:
            env.store.release_staging(staging)
    try:
        if fence is not None:
            fence()
    except StaleWriterError as err:
        return {"scene_id": work.scene_id, "status": "stale", "info": json.dumps({"error": str(err)})}
    write_error(env.store, work.error.row())
    return {"scene_id": work.scene_id, "status": "failed", "info": json.dumps({"error": work.error.row()})}


@dataclass(frozen=True)
class SceneFinish:
    """How a scene ends on the worker that ran its last stage (``finish_scene``): ``write(work, env, staging)``
    builds its files; once they are committed, the end-of-run parts ``part_specs`` (``generator.runfolder.parts``)
    are built from them. What a driver hands its executor for the end of every scene."""

    write: Callable[[SceneWork, StageEnv, Path], None]
    part_specs: tuple = ()

    def __call__(self, work: SceneWork, cfg: PipelineConfig, store: RunStore) -> dict:
        """``finish_scene`` of ``work``: its summary row."""
        return finish_scene(work, StageEnv(cfg, store), self.write, part_specs=self.part_specs)


def build_committed_parts(store: RunStore, scene_id: str, part_specs: tuple) -> None:
    """The end-of-run parts (``generator.runfolder.parts``) of a scene just committed, built by the worker that
    wrote it while its files are fresh, so that the end of the run only merges (it builds what is missing or
    stale, keyed by the scene's manifest). Never fails the committed scene: a part that cannot be built here is
    logged and left to the end of the run, which builds it again and names its error."""
    if not part_specs:
        return
    try:
        build_scene_parts(store, [scene_id], list(part_specs))
    except Exception as err:  # noqa: BLE001 - the scene stays committed; the end of the run retries and reports
        log.warning("scene %s: its end-of-run parts were not built with it (%s: %s); the end of the run builds "
                    "them", scene_id, type(err).__name__, str(err).splitlines()[0][:300] if str(err) else "")


def _short(scene_id: str) -> str:
    return safe_name(scene_id)[:80]


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(type(o).__name__)
