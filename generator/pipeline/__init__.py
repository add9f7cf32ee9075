"""The Ray Data pipeline behind ``drivegen run``.

``run(out, ...)`` is the whole command as a function: check every input (config, templates, logs) before
anything is written, take the run folder's lock, describe the run (``config.yaml``, ``source.json``,
``scenes.json``, ``run.json``), connect to Ray, stream every scene through the stages
(``generator.pipeline.stages``), commit each scene's files exactly once (``generator.runfolder``), write
``summary.json``, the dataset card and the bench export (``generator.pipeline.exports``).

Modules: ``core`` (typed SceneWork, stage application, finishing a scene), ``ray_connect`` (joining a cluster
or starting the embedded Ray, authentication), ``ray_exec`` (the streaming Dataset), ``driver`` (rounds,
reconciliation, summary), ``stages`` (the real stages wired to
sources/actors/attributes/qa/writers), ``exports`` (card, bench), ``regenerate``. The run folder itself
(layout, reader, commit, lock) is ``generator.runfolder``.
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

from generator.pipeline import exports, stages as real, video
from generator.pipeline.core import describe
from generator.pipeline.driver import RunResult, format_summary, run_pipeline
from generator.pipeline.ray_connect import LOOPBACK, check_ray, cluster_hosts, ensure_ray, settle_metrics, stop_ray
from generator.qa import check_families, load_templates
from generator.runfolder import RunLock, RunReader, RunStore, clear_run, config_key, source_key
from generator.sources import CAMERA_ONLY_KINDS, open_source
from schemas import layout
from schemas.config import load_config
from schemas.errors import ConfigError, InputError, RunFolderError, SourceError
from schemas.files import file_problem

__all__ = ["run", "RunResult", "RunStore", "run_pipeline", "ensure_ray", "format_summary", "synth_logs",
           "SYNTH_VERSION", "DEFAULT_SYNTH_SCENES", "describe_stages"]

log = logging.getLogger("drivegen.pipeline")

SYNTH_VERSION = "v1.0-drivegen"
# part of the generated-log cache's folder name: bump it when the generated logs change (2: faces and licence
# plates painted for the anonymisation measurement; 3: pull-over scenes), so a cache made by older code is not read as current
SYNTH_CACHE_REVISION = 3
DEFAULT_SYNTH_SCENES = 3


def synth_cache_name(seed: int, num_scenes: int) -> str:
    """Folder name of the cached generated logs of (seed, count) under the cache folder."""
    return f"{SYNTH_VERSION}-r{SYNTH_CACHE_REVISION}-seed{seed}-n{num_scenes}"


def synth_logs(num_scenes: int = DEFAULT_SYNTH_SCENES, seed: int = 0, base: str | os.PathLike | None = None) -> Path:
    """Generated nuScenes-format logs, made once per (seed, count) in a cache folder
    (``$DRIVEGEN_SYNTH_DIR`` or ``~/.cache/drivegen/synth``) so that runs into different run folders read the
    very same input (identical rows). Built under a temporary name and renamed into place."""
    from generator.synth import make_dataset  # lazy: generator.synth loads cv2, which this module needs only here

    base = Path(base or os.environ.get("DRIVEGEN_SYNTH_DIR") or Path.home() / ".cache" / "drivegen" / "synth")
    root = base / synth_cache_name(seed, num_scenes)
    if (root / ".complete").exists():
        return root
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".{root.name}.{uuid.uuid4().hex}.tmp"
    log.info("generating %d scene(s) (seed %d) into %s", num_scenes, seed, root)
    try:
        make_dataset(tmp, num_scenes=num_scenes, seed=seed, version=SYNTH_VERSION)
        (tmp / ".complete").touch()
        try:
            os.rename(tmp, root)
        except OSError:  # another process finished first: use its copy
            if not (root / ".complete").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def describe_stages(config: str | None = None, source: str | None = None) -> str:
    """The stages a run with this config (a YAML path; None: the defaults) and source kind would stream, described
    by the stages themselves (``generator.pipeline.core.describe``): ``drivegen run --describe``."""
    cfg = load_config(config)
    stages = video.stages(cfg) if source in CAMERA_ONLY_KINDS else real.default_stages(cfg)
    return describe(stages, cfg)


def _warn_if_not_shared(store: RunStore, desc: dict) -> None:
    """On a cluster of several machines every worker writes the run folder and reads the logs itself."""
    hosts = cluster_hosts()
    if len(hosts) > 1 and store.is_local:
        log.warning("the Ray cluster spans %d machines but the run folder %s is a local path: every machine "
                    "writes its scenes to its own disk unless this path is shared storage (NFS/EFS); "
                    "use a URI such as s3://bucket/run", len(hosts), store.uri)


# A run's shards hold at least this many rows / samples: below, a scene becomes thousands of files whose
# footers and headers outweigh their data (writers.parquet_max_rows: 1 wrote 4,442 shards for one scene).
MIN_SHARD_ROWS = {"parquet_max_rows": 100, "wds_max_samples": 10}


def check_inputs(cfg) -> None:
    """Everything about a config that can fail a run, checked before any work or any write: the templates
    (``qa.template_dirs`` exist and parse), the QA families (registered), the shard sizes (``MIN_SHARD_ROWS``)
    and the model files given (``_check_model_files``). Raises an InputError."""
    for name, floor in MIN_SHARD_ROWS.items():
        value = getattr(cfg.writers, name)
        if value < floor:
            raise ConfigError(f"field 'writers.{name}': {value} is below {floor}: every scene would be split into "
                              f"shards of {value} row(s) each, thousands of files per scene; give at least {floor}")
    check_families(cfg)
    load_templates(cfg)
    _check_model_files(cfg)


def _check_model_files(cfg) -> None:
    """A model's config or checkpoint path that is there but no regular file (a FIFO would block its actor
    forever) refused naming the field; one that is not there is left to the nodes that load it (a cluster's
    workers may hold files the driver does not)."""
    given = []
    if cfg.detection.backend == "mmdet3d":
        given += [("detection.mmdet3d.config", cfg.detection.mmdet3d.config),
                  ("detection.mmdet3d.checkpoint", cfg.detection.mmdet3d.checkpoint)]
    if cfg.segmentation.backend == "sam2":
        given += [("segmentation.sam2.checkpoint", cfg.segmentation.sam2.checkpoint)]
    for field, path in given:
        problem = file_problem(path) if path and "://" not in path else None
        if problem not in (None, "missing"):
            raise ConfigError(f"field '{field}': {path} is {problem}: a model file must be a regular file")


def _check_unchanged(reader: RunReader, force: bool) -> None:
    """--resume refuses a run whose config.yaml or source.json changed since it started (the manifests
    would then describe a mixed dataset), unless ``force``."""
    state = reader.run_state
    changed = []
    cfg = reader.config()
    if state.get("config_key") and state["config_key"] != config_key(cfg):
        changed.append(f"{layout.CONFIG} (run started with config {state['config_key']}, it is now {config_key(cfg)})")
    src = reader.source()
    if state.get("source_key") and src is not None and state["source_key"] != source_key(src):
        changed.append(f"{layout.SOURCE} (recorded {state['source_key']}, now {source_key(src)})")
    if changed and not force:
        raise RunFolderError(f"{reader.uri}: {' and '.join(changed)} changed since the run started; restore them, "
                             "or resume with --force to continue with the edited files (the finished scenes keep "
                             "the old ones: `drivegen inspect` will report a mixed config)", file=reader.uri)
    if changed:
        log.warning("resuming with changed %s (--force)", ", ".join(c.split(" ")[0] for c in changed))


def with_logs_ego(cfg, src):
    """``cfg`` with its ``ego`` section set to the body of the vehicle of the logs ``src`` (a ``LogSource``) reads
    (``LogSource.ego_body``: a Renault Zoe for nuScenes, a Ford Fusion Hybrid for Argoverse 2, the generated logs'
    ego for theirs) when the config does not set one itself; ``config.yaml`` then records it, so that a resumed
    run, a regeneration and the scorers use the same body. ``cfg`` itself is not changed."""
    body = src.ego_body()
    if body is None or "ego" in cfg.model_fields_set:
        return cfg
    return cfg.model_copy(update={"ego": body})


def run(out: str, *, source: str | None = None, data: str | None = None, version: str | None = None,
        config: str | None = None, cfg=None, address: str | None = None, resume: bool = False, force: bool = False,
        overwrite: bool = False,
        scenes: int | None = None, seed: int = 0, executor: str = "ray", progress: bool = True,
        verbose: bool = False, stages=None, write=None, finalize=None, command: str = "drivegen run",
        report=None, started_at: float | None = None, metrics_port: int | None = None,
        metrics_host: str = LOOPBACK) -> RunResult:
    """``drivegen run`` as a function (see ``generator.commands.run``). ``cfg`` (a PipelineConfig) overrides
    ``config``; ``stages``/``write``/``finalize`` override the real stages (tests, benchmarks); ``report(store)``
    writes the HTML report at the end (``run_pipeline``); ``started_at`` (``time.perf_counter()`` when the command
    started; default: now) is where the summary's wall time starts.

    Order: inputs are checked (config, templates, logs) -> the lock is taken (before anything is written) ->
    a new run refuses a folder that holds anything (``overwrite``: but a finished run drivegen made, whose files
    it deletes first); a resumed one refuses a changed config or source ->
    the run is described -> Ray -> the scenes stream -> summary, card, bench export -> the lock is released.
    """
    started_at = time.perf_counter() if started_at is None else started_at
    timings: dict[str, float] = {}
    if scenes is not None and scenes < 1:
        raise InputError(f"--scenes must be at least 1, got {scenes}")
    store = RunStore(out)
    if resume and not store.exists(""):
        raise RunFolderError(f"{store.uri} does not exist: nothing to resume", file=store.uri)
    src = None  # the opened logs of a new run (a resumed run reads its description)
    if not resume:  # every input checked before the run folder is touched
        cfg = cfg if cfg is not None else load_config(config)
        check_inputs(cfg)
        if executor == "ray":  # the authentication, the metrics port, the cluster (before the folder is made)
            check_ray(cfg, address, metrics_port, metrics_host)
        t = time.perf_counter()
        if data is None:
            data, source, version = str(synth_logs(scenes or DEFAULT_SYNTH_SCENES, seed)), "nuscenes", SYNTH_VERSION
        kw = {"version": version} if source == "nuscenes" and version else {}
        src = open_source(source, data, cfg, **kw)
        timings["logs"] = round(time.perf_counter() - t, 3)
        ids = src.scene_ids()[:scenes] if scenes else src.scene_ids()
        desc = src.describe()
        cfg = with_logs_ego(cfg, src)
        _check_names(ids, str(desc.get("dataroot") or desc.get("root") or data))
    with RunLock(store, f"{command} --out {out}" + (" --resume" if resume else "")) as lock:
        reader = RunReader(store, require=False)
        if resume:
            if not reader.is_run_folder():
                raise RunFolderError(f"{store.uri} is not a drivegen run folder to resume (no {layout.CONFIG}); "
                                     f"start one with drivegen run --out {out}", file=store.uri)
            for name in (layout.CONFIG, layout.SOURCE, layout.SCENES):
                if not store.exists(name):
                    raise RunFolderError(f"{store.uri_of(name)} is missing: the run cannot be resumed",
                                         file=store.uri_of(name))
            _check_unchanged(reader, force)
            cfg, desc, ids, work = reader.config(), reader.source(), reader.planned_scenes(), reader.planned_work()
            check_inputs(cfg)
            if executor == "ray":
                check_ray(cfg, address, metrics_port, metrics_host)
        else:
            others = [p for p in store.list("", recursive=True) if p != layout.LOCK]
            if others and reader.is_run_folder():
                unfinished = _unfinished(reader)
                if unfinished or not overwrite:
                    state = (f"an unfinished run ({unfinished} scene(s) not done): finish it with drivegen run --resume "
                             f"{out}" if unfinished else f"a finished run: replace it with drivegen run --overwrite --out {out}")
                    raise RunFolderError(f"{store.uri} already holds {state}, or choose a new --out", file=store.uri)
                n = clear_run(store)
                log.warning("--overwrite: deleted the %d file(s) of the finished run in %s", n, store.uri)
                reader = RunReader(store, require=False)
                others = []
            if others:
                raise RunFolderError(f"{store.uri} is not empty and not a drivegen run folder ({len(others)} file(s), "
                                     f"e.g. {others[0]}); choose a new or empty --out folder", file=store.uri)
            store.write_bytes(layout.CONFIG, cfg.to_yaml().encode())
            store.write_json(layout.SOURCE, desc)
            est = src.work_estimates()
            work = {s: est[s] for s in ids if s in est}
            store.write_json(layout.SCENES, {"scene_ids": ids, "work_estimate": work})
        state = dict(reader.run_state) if resume else {"format": "drivegen-run/1", "created_unix": time.time(),
                                                        "parent": None}
        state.update(epoch=lock.epoch, config_key=config_key(cfg), source_key=source_key(desc))
        store.write_json(layout.RUN_STATE, state)
        part_specs: list = []  # the end-of-run parts a scene's worker builds once it is committed
        camera_only = (desc or {}).get("kind") in CAMERA_ONLY_KINDS
        if camera_only:  # videos: the camera stages
            stages = stages if stages is not None else video.stages(cfg)
            write = write or video.write_video
        elif stages is None or write is None or finalize is None:
            stages = stages if stages is not None else real.default_stages(cfg)
            write = write or real.write_scene
        if finalize is None:  # the run's own end: its parts are built scene by scene as they are committed
            part_specs = exports.finalize_parts(cfg, camera_only)
            if executor == "ray":  # the card, exports and report read every scene's parts: a Ray task does it
                finalize, report = _on_ray(video.finalize if camera_only else exports.finalize_run, report, cfg)
            else:
                finalize = video.finalize if camera_only else functools.partial(exports.finalize_run, source=src)
        finalize = _still_described(finalize, lock)
        started = False
        if executor == "ray":
            t = time.perf_counter()
            started = ensure_ray(cfg, address, verbose, metrics_port, metrics_host)
            timings["ray_start"] = round(time.perf_counter() - t, 3)
            _warn_if_not_shared(store, desc)
        try:
            result = run_pipeline(store, desc, cfg, ids, stages, write, epoch=lock.epoch, executor=executor,
                                  progress=progress, finalize=finalize, work=work, report=report, timings=timings,
                                  started_at=started_at, part_specs=tuple(part_specs))
            if executor == "ray":  # a cluster's metrics endpoints outlive this driver
                settle_metrics(cfg, address)
            return result
        finally:
            stop_ray(started)


def _on_ray(finalize, report, cfg):
    """``finalize(store, summary)`` and ``report(store)`` (when given) each as one Ray task
    (``generator.pipeline.ray_tasks.one_task``): the end of the run reads every scene's parts and draws the
    card's and the report's figures, which would raise the driver's memory above its plateau while the scenes
    stream; the summary the task fills is copied back into the driver's."""
    from generator.pipeline.ray_tasks import one_task  # ray: imported only where a run uses it

    task = one_task(functools.partial(exports.summary_filled_by, finalize), cfg.ray)

    def finalize_on_ray(store: RunStore, summary) -> None:
        vars(summary).update(vars(task(store, summary)))

    return finalize_on_ray, (one_task(report, cfg.ray) if report is not None else None)


def _still_described(finalize, lock: RunLock):
    """``finalize`` preceded by two checks: this driver still holds the run folder's lock (``lock.ensure_held``:
    a writer that lost it writes no card or export over the other's), and the run's description (config.yaml,
    run.json) is still there: a file deleted while the run went on (another client of the bucket) leaves rows
    nothing describes, and the run must not end with exit 0. A check's error is the run's finalize error
    (exit 1)."""
    def run_finalize(store: RunStore, summary) -> None:
        lock.ensure_held()
        gone = [name for name in (layout.CONFIG, layout.RUN_STATE) if not store.exists(name)]
        if gone:
            raise RunFolderError(f"{' and '.join(gone)} disappeared from {store.uri} while the run was going: the "
                                 "folder no longer says how its rows were made; restore the file(s), then check the "
                                 "folder with drivegen inspect", file=store.uri_of(gone[0]))
        if finalize is not None:
            finalize(store, summary)

    return run_finalize


def _unfinished(reader: RunReader) -> int:
    """How many of a run folder's planned scenes have neither a manifest nor an error row (0: it ended), or 1
    when it never wrote its summary (it was killed before its end)."""
    planned = reader.planned_scenes()
    done = set(reader.scene_ids()) | {e.get("scene_id") for e in reader.errors()}
    missing = sum(s not in done for s in planned)
    return missing or int(reader.summary() is None)


def _check_names(ids: list[str], where: str | None = None) -> None:
    """Refuse, before the run folder is touched, scene ids that cannot name the run's files: two that map to one
    file name, or one too long for a file name (``layout.MAX_SCENE_NAME_CHARS``). ``where``: the logs."""
    too_long = [sid for sid in ids if len(layout.safe_name(sid)) > layout.MAX_SCENE_NAME_CHARS]
    if too_long:
        sid = too_long[0]
        raise SourceError(f"{len(too_long)} scene id(s) too long to name the run's files, e.g. one of {len(sid):,} "
                          f"characters starting {sid[:60]!r}: at most {layout.MAX_SCENE_NAME_CHARS} characters "
                          "(file names hold 255 bytes); rename the scene in the logs", file=where)
    by_name: dict[str, list[str]] = {}
    for sid in ids:
        by_name.setdefault(layout.safe_name(sid), []).append(sid)
    clash = {k: v for k, v in by_name.items() if len(v) > 1}
    if clash:
        raise SourceError(f"scene ids that map to the same file names (or repeat): {clash}; rename them", file=where)
