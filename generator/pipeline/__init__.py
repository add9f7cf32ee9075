"""The Ray Data pipeline behind ``drivegen run``.

``run(out, ...)`` is the whole command as a function: pick the logs (or generate a few), load the config,
connect to Ray, stream every scene through the stages (``generator.pipeline.stages``), commit each scene's
files exactly once (``generator.pipeline.core``), write ``summary.json`` and the dataset card.

Modules: ``store`` (the run folder on any pyarrow filesystem), ``core`` (SceneWork, stage application,
commit), ``ray_exec`` (the streaming Dataset), ``driver`` (rounds, reconciliation, summary), ``stages``
(the real stages wired to sources/actors/attributes/qa/writers), ``read`` (reading a run's rows back).
"""
from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from generator.pipeline.driver import RunResult, ensure_ray, format_summary, run_pipeline
from generator.pipeline.store import RunStore

__all__ = ["run", "RunResult", "RunStore", "run_pipeline", "ensure_ray", "format_summary", "synth_logs",
           "SYNTH_VERSION", "DEFAULT_SYNTH_SCENES"]

log = logging.getLogger("drivegen.pipeline")

SYNTH_VERSION = "v1.0-drivegen"
DEFAULT_SYNTH_SCENES = 3


def synth_logs(num_scenes: int = DEFAULT_SYNTH_SCENES, seed: int = 0, base: str | os.PathLike | None = None) -> Path:
    """Generated nuScenes-format logs, made once per (seed, count) in a cache folder
    (``$DRIVEGEN_SYNTH_DIR`` or ``~/.cache/drivegen/synth``) so that runs into different run folders read the
    very same input (identical rows). Built under a temporary name and renamed into place."""
    from generator.synth import make_dataset

    base = Path(base or os.environ.get("DRIVEGEN_SYNTH_DIR") or Path.home() / ".cache" / "drivegen" / "synth")
    root = base / f"{SYNTH_VERSION}-seed{seed}-n{num_scenes}"
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


def _warn_if_not_shared(store: RunStore, desc: dict) -> None:
    """On a cluster of several machines every worker writes the run folder and reads the logs itself."""
    import ray

    hosts = {n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}
    if len(hosts) > 1 and store.is_local:
        log.warning("the Ray cluster spans %d machines but the run folder %s is a local path: every machine "
                    "writes its scenes to its own disk unless this path is shared storage (NFS/EFS); "
                    "use a URI such as s3://bucket/run", len(hosts), store.uri)


def _read_config(store: RunStore):
    import yaml

    from schemas.config import parse_config

    where = store.full("config.yaml")
    return parse_config(yaml.safe_load(store.read_bytes("config.yaml")), where=where)


def run(out: str, *, source: str | None = None, data: str | None = None, version: str | None = None,
        config: str | None = None, cfg=None, address: str | None = None, resume: bool = False,
        scenes: int | None = None, seed: int = 0, executor: str = "ray", progress: bool = True,
        verbose: bool = False, stages=None, write=None, finalize=None) -> RunResult:
    """``drivegen run`` as a function (see ``generator.commands.run``). ``cfg`` (a PipelineConfig) overrides
    ``config``; ``stages``/``write``/``finalize`` override the real stages (tests, benchmarks)."""
    from generator.sources import open_source
    from schemas.config import load_config

    store = RunStore(out)
    if resume:
        for name in ("config.yaml", "source.json", "scenes.json"):
            if not store.exists(name):
                raise FileNotFoundError(f"{store.full(name)} is missing: not a drivegen run folder to resume "
                                        f"(start one with drivegen run --out {out})")
        cfg = _read_config(store)
        desc = store.read_json("source.json")
        ids = store.read_json("scenes.json")["scene_ids"]
    else:
        if store.exists("config.yaml") or store.list("manifest"):
            raise FileExistsError(f"{store.uri} already holds a run: finish it with drivegen run --resume {out}, "
                                  "or choose a new --out")
        cfg = cfg if cfg is not None else load_config(config)
        if data is None:
            data, source, version = str(synth_logs(scenes or DEFAULT_SYNTH_SCENES, seed)), "nuscenes", SYNTH_VERSION
        kw = {"version": version} if source == "nuscenes" and version else {}
        src = open_source(source, data, cfg, **kw)
        ids = src.scene_ids()[:scenes] if scenes else src.scene_ids()
        desc = src.describe()
        store.mkdirs("")
        store.write_json("scenes.json", {"scene_ids": ids})
    if stages is None or write is None or finalize is None:
        from generator.pipeline import stages as real

        stages = stages if stages is not None else real.default_stages(cfg)
        write = write or real.write_scene
        finalize = finalize or real.finalize_run
    started = False
    if executor == "ray":
        started = ensure_ray(cfg, address, verbose)
        _warn_if_not_shared(store, desc)
    try:
        return run_pipeline(out, desc, cfg, ids, stages, write, executor=executor, progress=progress,
                            finalize=finalize)
    finally:
        if started:
            import ray

            ray.shutdown()
