"""The stages as ONE streaming Ray Dataset.

Rows are scenes: the input holds one row per scene (``scene_id``) in one block per scene, built by
``from_items`` from ids only; each stage maps a block of one scene to the next (``work``: the pickled
``SceneWork``, no sensor data: workers load frames from the log source themselves). Nothing is
materialised: the driver iterates the last stage's small summary rows as scenes finish.

Resources (``cfg.ray``):
* CPU stages are stateless Ray tasks (``map_batches`` with a function, ``cpu_stage_num_cpus`` each, at most
  ``scenes_in_flight`` at a time). Consecutive CPU stages run as ONE task per scene (``segments``,
  ``_task_segment``), with the scene's start before them and its write/commit after them: the scene's work is
  pickled only where a model stage (an actor) takes it over. With the CPU backends a scene is one task.
* Model stages (``Stage.actor``: detection with mmdet3d, segmentation with sam2) are actor pools of
  ``actor_pool_size`` callable-class actors that build their model once; they ask for ``actor_num_gpus``
  GPUs each when the cluster has GPUs and for fractional CPUs (``actor_num_cpus``, default 0.5) so actor
  pools can never hold every CPU and starve the read/CPU stages (Ray Data hangs on 2 CPUs otherwise).
  ``stage_actors.<stage>`` sizes one stage's pool apart (more actors for the slower model, fractional GPUs
  so several share a device); ``plan_resources`` fits it all to the cluster. Pools are elastic: from their
  minimum (always placeable) up to ``max_size`` (default: the GPUs the other stages leave), Ray Data adding
  actors while scenes queue and removing idle ones, so a stage holds GPUs only while it uses them.
  A batch is one scene: its frames (tens to hundreds) are what the model batches on the device
  (``detection.mmdet3d.batch_size``, ``segmentation.sam2.batch_images``).
* Ray retries a task whose worker died ``max_retries`` times (actors: restarted, their calls retried as
  often); a block that still fails is skipped (``max_errored_blocks=-1``) so the other scenes finish, and the
  driver records that scene as failed (see ``generator.pipeline.driver``).
"""
from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import ray

from actors.device import device_note, resolve_device
from generator.pipeline.core import SceneFinish, SceneWork, Stage, StageEnv, apply_stage, cached_model, settle_heap
from generator.pipeline.metrics import ActorMetrics
from generator.runfolder import RunStore
from schemas.config import PipelineConfig

log = logging.getLogger("drivegen.pipeline")


def fit_threads() -> int:
    """Size OpenCV's thread pool to the CPUs Ray gave this worker's task or actor, as Ray sizes OpenMP's (and
    with it Arrow's and torch's) through ``OMP_NUM_THREADS``: OpenCV keeps its own pool of one thread per core
    of the node, so a 1-CPU task decoding or blurring images would take the cores of the tasks beside it (on 2
    CPUs it borrowed the second core while one worker ran, and lost it when two did). Returns the count."""
    n = os.environ.get("OMP_NUM_THREADS", "")
    if not n.isdigit():
        return 0
    import cv2  # cv2: about a second to import; only where images are read or drawn

    n = max(1, int(n))
    if cv2.getNumThreads() != n:
        cv2.setNumThreads(n)
    return n


def _task_segment(batch: dict, stages: list[Stage], cfg: PipelineConfig, store: RunStore,
                  begin: tuple[dict, int | None] | None = None, finish: SceneFinish | None = None) -> dict:
    """Consecutive CPU stages as ONE task per scene: the scene's work is unpickled once (or, with ``begin`` =
    (source, epoch), started here from its id), goes through ``stages`` in this process, and is pickled once
    for the next model stage, or, with ``finish``, finished here (written, committed, its end-of-run parts
    built) into its summary row. Only model stages (actors) hand a scene over between processes."""
    fit_threads()
    settle_heap()
    if begin is not None:
        works = [SceneWork(str(s), *begin) for s in batch["scene_id"]]
    else:
        works = [SceneWork.decode(b) for b in batch["work"]]
    for st in stages:
        env = StageEnv(cfg, store, cached_model(st, cfg))
        works = [apply_stage(st, w, env) for w in works]
    if finish is not None:
        rows = [finish(w, cfg, store) for w in works]
        return {k: np.array([r[k] for r in rows], dtype=object) for k in ("scene_id", "status", "info")}
    return {"scene_id": np.array([w.scene_id for w in works], dtype=object),
            "work": np.array([w.encode() for w in works], dtype=object)}


def segments(stages: list[Stage]) -> list[list[Stage]]:
    """``stages`` cut into runs of consecutive CPU (task) stages and single model (actor) stages, in order."""
    out: list[list[Stage]] = []
    for st in stages:
        if st.actor or not out or out[-1][-1].actor:
            out.append([st])
        else:
            out[-1].append(st)
    return out


def with_model_device(cfg: PipelineConfig, device: str) -> PipelineConfig:
    """``cfg`` with ``device`` for every model backend whose config says 'auto' (explicit devices are kept)."""
    cfg = cfg.model_copy(deep=True)
    for mc in (cfg.detection.mmdet3d, cfg.segmentation.sam2):
        if mc.device == "auto":
            mc.device = device
    return cfg


class _ActorStage:
    """A model stage on an actor: the model is built once, in ``__init__``, on the device resolved from the
    GPUs Ray assigned this actor (``actors.device.resolve_device``)."""

    def __init__(self, stage: Stage, cfg: PipelineConfig, store: RunStore):
        fit_threads()
        self.stage = stage
        self.gpu_ids = list(ray.get_gpu_ids())
        self.device = resolve_device("auto", self.gpu_ids)
        note = device_note(self.gpu_ids, self.device)
        if note:
            log.warning("stage %s: %s", stage.name, note)
        cfg = with_model_device(cfg, self.device)
        self.env = StageEnv(cfg, store, stage.build(cfg) if stage.build else None)
        self.metrics = ActorMetrics(stage.name)

    def __call__(self, batch: dict) -> dict:
        t0 = time.perf_counter()
        works = [apply_stage(self.stage, SceneWork.decode(b), self.env).encode() for b in batch["work"]]
        self.metrics.record(time.perf_counter() - t0)
        return {"scene_id": batch["scene_id"], "work": np.array(works, dtype=object)}


def cluster_gpus() -> float:
    return float(ray.cluster_resources().get("GPU", 0.0))


@dataclass(frozen=True)
class ActorPool:
    """One model stage's actor pool: how many actors (``size`` at least, always placeable; up to ``max_size``
    while scenes queue for it and the cluster has room: Ray Data's autoscaling pool), and the CPUs and GPUs each
    asks for (0 GPUs: a CPU actor)."""

    size: int
    cpus: float
    gpus: float
    max_size: int = 0  # 0: size (a fixed pool)

    @property
    def bounds(self) -> tuple[int, int]:
        return self.size, max(self.size, self.max_size)


@dataclass(frozen=True)
class Resources:
    """What each map worker asks for, fitted to the cluster (see ``plan_resources``)."""

    task_cpus: float
    actors: dict[str, ActorPool]  # by model stage name
    notes: tuple[str, ...] = ()


def gpus_pack(shares: list[float], gpus: float) -> bool:
    """Can actors asking for ``shares`` GPUs each be placed on ``gpus`` GPUs? Ray places a fractional request
    on one device and a request of k >= 1 on k whole devices, so this is bin packing (first fit, largest
    first) into ``floor(gpus)`` devices of capacity 1 (one device of capacity ``gpus`` when below 1)."""
    bins = [1.0] * int(gpus) if gpus >= 1 else [gpus]
    for g in sorted(shares, reverse=True):
        if g >= 1:
            free = [i for i, b in enumerate(bins) if b >= 1 - 1e-9]
            if len(free) < int(g):
                return False
            for i in free[:int(g)]:
                bins[i] = 0.0
            continue
        for i, b in enumerate(bins):
            if b >= g - 1e-9:
                bins[i] = b - g
                break
        else:
            return False
    return True


def plan_resources(rc, stages: list[Stage], cluster_cpus: float, cluster_gpus_: float) -> Resources:
    """``cfg.ray`` fitted to the cluster so the pipeline can always make progress. Each model stage's pool comes
    from ``ray.stage_actors.<stage>`` over the defaults (``actor_pool_size``, ``actor_num_gpus``,
    ``actor_num_cpus``); GPU shares only where the cluster has GPUs and the stage can use one. Then:

    * the GPU actors must all be placeable (``gpus_pack``), or Ray Data would wait forever for an actor that
      cannot be placed: pools shrink one actor at a time, the stage asking for the most GPUs first; if one
      actor per stage still does not fit, the stages share the GPUs (an equal fraction each);
    * actor pools must leave room for at least one CPU task (the read and CPU stages): otherwise Ray Data
      waits forever (actors hold every CPU, the read never runs). Actor CPUs are scaled down to fit, and
      the task CPUs too when even that is not enough (a 1-CPU machine).
    """
    notes = []
    actors = [st for st in stages if st.actor]
    size, cpus, gpus = {}, {}, {}
    for st in actors:
        own = rc.stage_actors.get(st.name)
        size[st.name] = (own and (own.pool_size or own.min_size)) or rc.actor_pool_size
        cpus[st.name] = (own and own.num_cpus) or rc.actor_num_cpus
        share = own.num_gpus if own is not None and own.num_gpus is not None else rc.actor_num_gpus
        gpus[st.name] = share if (st.gpu and cluster_gpus_ > 0) else 0.0
    on_gpu = [n for n in gpus if gpus[n] > 0]

    def placeable() -> bool:
        return gpus_pack([gpus[n] for n in on_gpu for _ in range(size[n])], cluster_gpus_)

    asked = dict(size)
    while on_gpu and not placeable() and any(size[n] > 1 for n in on_gpu):
        n = max((n for n in on_gpu if size[n] > 1), key=lambda n: (size[n] * gpus[n], size[n]))
        size[n] -= 1
    for n in on_gpu:
        if size[n] < asked[n]:
            notes.append(f"GPU actor pool of stage '{n}' reduced from {asked[n]} to {size[n]} actor(s): "
                         f"{cluster_gpus_:g} GPU(s) cannot hold every model stage's actors at their GPU shares")
    if on_gpu and not placeable():
        per_device = -(-len(on_gpu) // max(1, int(cluster_gpus_)))  # ceil: actors on the busiest device
        share = min(1.0, cluster_gpus_) / per_device
        for n in on_gpu:
            if gpus[n] > share:
                notes.append(f"stage '{n}': its actor shares a GPU ({share:.2f} GPU instead of {gpus[n]:g}): "
                             f"{len(on_gpu)} model stage(s) on {cluster_gpus_:g} GPU(s)")
                gpus[n] = share
    task_cpus = rc.cpu_stage_num_cpus
    held = sum(size[n] * cpus[n] for n in size)
    if held and cluster_cpus > 0 and cluster_cpus - held < task_cpus:
        task_cpus = min(task_cpus, max(0.25, cluster_cpus / 2))
        scale = (cluster_cpus - task_cpus) / held
        for n in cpus:
            cpus[n] = max(0.01, cpus[n] * scale)
        notes.append(f"{sum(size.values())} model actor(s) asking for {held:g} CPU would leave no CPU for the read "
                     f"and CPU stages on {cluster_cpus:g} CPUs: actors get {scale:.2f} of what they ask, "
                     f"tasks {task_cpus:g}")
    return Resources(task_cpus, {n: ActorPool(size[n], cpus[n], gpus[n], _max_size(rc, n, size, gpus, cluster_gpus_))
                                 for n in size}, tuple(notes))


def _max_size(rc, name: str, size: dict[str, int], gpus: dict[str, float], cluster_gpus_: float) -> int:
    """The most actors stage ``name``'s pool may grow to: ``stage_actors.<stage>.max_size``; a fixed
    ``pool_size``; else, on GPUs, as many as the GPUs the other stages' minimum pools leave hold at its share;
    else (a CPU actor stage: the CPUs belong to the tasks) its minimum."""
    own = rc.stage_actors.get(name)
    if own is not None and own.max_size:
        return max(size[name], own.max_size)
    if (own is not None and own.pool_size) or not gpus[name]:
        return size[name]
    others = sum(size[m] * gpus[m] for m in size if m != name and gpus[m])
    return max(size[name], int((cluster_gpus_ - others) / gpus[name] + 1e-9))


def build_dataset(scene_ids: list[str], source: dict, stages: list[Stage], finish: SceneFinish,
                  cfg: PipelineConfig, store: RunStore, epoch: int | None = None) -> "ray.data.Dataset":
    """The lazy Dataset: scenes -> stages -> ``finish`` (write, commit, the scene's end-of-run parts) -> summary
    rows (scene_id, status, info)."""
    with warnings.catch_warnings():
        # Retry limits (max_retries / max_restarts / max_task_retries) have no named parameter in Ray 2.60;
        # they still go through ``**ray_remote_args``, which warns about its removal in 2.64 (pinned 2.60).
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated", category=DeprecationWarning)
        return _build(scene_ids, source, stages, finish, cfg, store, epoch)


def _build(scene_ids, source, stages, finish, cfg, store, epoch):
    rc = cfg.ray
    res = plan_resources(rc, stages, float(ray.cluster_resources().get("CPU", 0.0)), cluster_gpus())
    for note in res.notes:
        log.warning(note)
    gpu_stages = [st.name for st in stages if st.actor and st.gpu]
    if gpu_stages and not any(res.actors[n].gpus for n in gpu_stages):
        log.warning("the cluster has no GPUs: model stage(s) %s run as CPU actor pools (%s)", ", ".join(gpu_stages),
                    ", ".join(f"{n}: {res.actors[n].size} actor(s)" for n in gpu_stages))
    parts = segments(stages)
    if not parts or parts[0][0].actor:  # the scene starts in a task before a first model stage ...
        parts.insert(0, [])
    if parts[-1] and parts[-1][0].actor:  # ... and is written in one after a last one
        parts.append([])
    # Ray Data reserves a share of the cluster for each operator so that none starves another (model pools
    # beside CPU tasks). A plan of one operator (the CPU backends: a scene is one task) has nothing to protect,
    # and there the reservation held the second task back about 1 s and each later one about 0.1 s on 2 CPUs
    # (bench/pipeline.py). Without a reservation, Ray Data's downstream-capacity backpressure compares the bytes
    # of the summary rows waiting for the driver with the bytes the driver holds (a few hundred each): it held
    # back the next scene for up to 2.3 s while a worker sat idle (ray-data.log: "Backpressure change"). The
    # run's memory is bounded by ``ray.scenes_in_flight`` instead. Both are set before the Dataset is made: it
    # takes a copy of the context.
    one_operator = len(parts) == 1
    ctx = ray.data.DataContext.get_current()
    ctx.op_resource_reservation_enabled = not one_operator
    ctx.downstream_capacity_backpressure_ratio = (
        None if one_operator else ray.data.context.DEFAULT_DOWNSTREAM_CAPACITY_BACKPRESSURE_RATIO)
    ds = ray.data.from_items([{"scene_id": s} for s in scene_ids], override_num_blocks=max(1, len(scene_ids)))
    in_flight = max(1, min(rc.scenes_in_flight, len(scene_ids)))
    task_args = dict(batch_size=1, batch_format="numpy", num_cpus=res.task_cpus,
                     compute=ray.data.TaskPoolStrategy(size=in_flight), max_retries=rc.max_retries)
    for i, seg in enumerate(parts):
        if seg and seg[0].actor:
            st = seg[0]
            pool = res.actors[st.name]
            ds = ds.map_batches(
                _ActorStage, fn_constructor_kwargs={"stage": st, "cfg": cfg, "store": store}, batch_size=1,
                batch_format="numpy", compute=ray.data.ActorPoolStrategy(min_size=pool.bounds[0], max_size=pool.bounds[1]),
                num_cpus=pool.cpus, num_gpus=pool.gpus,
                max_restarts=-1, max_task_retries=rc.max_retries)
        else:
            ds = ds.map_batches(_task_segment, fn_kwargs={
                "stages": seg, "cfg": cfg, "store": store, "begin": (source, epoch) if i == 0 else None,
                "finish": finish if i == len(parts) - 1 else None}, **task_args)
    return ds


def configure_data_context(progress_bars: bool) -> None:
    import ray.data  # its import configures Ray Data's loggers; adjust them afterwards

    # Ray Data logs to its log file in Ray's temp folder (kept as is) and to the console at INFO; keep the console to errors.
    level = logging.INFO if progress_bars else logging.ERROR
    for handler in logging.getLogger("ray.data").handlers:
        if type(handler).__name__ == "PlainRayHandler":
            handler.setLevel(level)
    if not progress_bars:  # the driver shows its own progress over finished scenes; skip Ray's notice
        # ray: only where Ray runs (in-process runs and most commands never start it)
        from ray.util.debug import log_once

        log_once("ray_data_progress_manager_disabled")
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = progress_bars
    ctx.print_on_execution_start = progress_bars
    ctx.max_errored_blocks = -1  # a scene whose retries are exhausted is skipped; the driver records it
    ctx.execution_options.preserve_order = False
    ctx.raise_original_map_exception = True


def iter_summaries(ds: "ray.data.Dataset") -> Iterator[dict]:
    for row in ds.iter_rows():
        yield {"scene_id": str(row["scene_id"]), "status": str(row["status"]), "info": str(row["info"])}
