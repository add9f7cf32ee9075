"""Rebuild a finished run's QA with other templates or another seed, from its saved tables only.

Reads ``perception/frames``, ``perception/projections`` and ``attributes`` of each scene (attributes are
recomputed from ``perception/objects`` when a scene has none) — no model, image or LiDAR file is touched —
runs ``generate_qa`` on batches of scenes and writes each scene's rows with
``generator.writers.parquet.write_qa_shards`` into ``OUT/qa/``. ``OUT`` also gets ``config.yaml`` (the
effective config: seed and template folders included) and ``regenerate.json`` (counts, files, timings).
"""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes import compute_attributes
from generator.attributes.arrays import codes, column, unique_strings
from generator.qa.generate import generate_qa
from generator.qa.templates import TemplateSet
from generator.runfolder import RunFolder, atomic_write_bytes
from schemas.tables import ATTRIBUTES, FRAMES, OBJECTS, PROJECTIONS, read_parquet, to_storage

log = logging.getLogger(__name__)


def use_retaining_memory_pool(decay_ms: int = 5000) -> str:
    """Make Arrow keep freed memory for reuse (jemalloc with a ``decay_ms`` page decay) instead of returning
    it to the OS at once. Regeneration allocates and frees similar large buffers batch after batch; with
    immediate release every batch pays page faults again (measured: about 40 % of generate_qa's CPU time and
    3x the wall time on a shared VM). A process-wide choice: call it from a command's main, not a library.
    Returns the backend now in use."""
    try:
        pool = pa.jemalloc_memory_pool()
        pa.jemalloc_set_decay_ms(decay_ms)
    except (NotImplementedError, pa.ArrowException):  # a pyarrow built without jemalloc: keep the default
        return pa.default_memory_pool().backend_name
    pa.set_memory_pool(pool)
    return pool.backend_name


class RegenerateError(ValueError):
    """A run folder cannot be regenerated; the message names the folder or file and what is missing."""


def run_scenes(run_dir: str | Path) -> list[str]:
    """Scene ids of a run folder: the finished ones (``manifest/*.json``) when the run has manifests, else
    every scene with a ``perception/frames`` file."""
    rf = RunFolder(run_dir)
    manifests = sorted(p for p in rf.path("manifest").glob("*.json") if not p.name.startswith(".")) \
        if rf.path("manifest").is_dir() else []
    if manifests:
        out = []
        for p in manifests:
            try:
                out.append(json.loads(p.read_text())["scene_id"])
            except (OSError, ValueError, KeyError) as err:
                raise RegenerateError(f"{p}: unreadable manifest ({err})") from None
        return sorted(set(out))
    frames_dir = rf.path("perception", "frames")
    if not frames_dir.is_dir():
        raise RegenerateError(f"{run_dir}: not a run folder (no manifest/ and no perception/frames/)")
    out = []
    for p in sorted(frames_dir.glob("*.parquet")):
        if p.name.startswith("."):
            continue
        sid = read_parquet(p, FRAMES, columns=["scene_id"]).column("scene_id")
        if len(sid):
            out.append(sid[0].as_py())
    return sorted(set(out))


# The columns generate_qa reads (regeneration reads only these; the rest of a row is never needed).
QA_INPUT_COLUMNS = {
    "frames": ["scene_id", "frame_index", "timestamp_us", "is_anchor", "city_SE3_ego", "cameras"],
    "projections": ["scene_id", "frame_index", "track_id", "camera", "box2d_proj_xyxy", "mask_rle", "mask_box_xyxy",
                    "visible"],
    "attributes": ["scene_id", "frame_index", "track_id", "class_name", "x_ego_m", "y_ego_m", "z_ego_m",
                   "distance_m", "bearing_deg", "length_m", "width_m", "height_m", "speed_mps"],
}


def _read(path: Path | list[Path], schema: pa.Schema, what: str, columns: list[str] | None = None) -> pa.Table:
    """A run-folder table (one file or several of one kind, in one dataset scan) with ``schema``'s columns
    (or the subset ``columns``), order and exact types (``schemas.tables.read_parquet``)."""
    try:
        return read_parquet(path, schema, columns)
    except (OSError, ValueError, pa.ArrowException) as err:  # ValueError: columns do not match the schema
        raise RegenerateError(f"{what}: cannot read as '{schema.metadata[b'drivegen.schema'].decode()}': "
                              f"{err}") from None


def load_scene_tables(run_dir: str | Path, scene_id: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(frames, attributes, projections) of one scene of a run folder."""
    rf = RunFolder(run_dir)
    paths = {t: rf.perception(t, scene_id) for t in ("frames", "projections", "objects")}
    for t in ("frames", "projections"):
        if not paths[t].exists():
            raise RegenerateError(f"scene {scene_id}: missing {paths[t]}")
    frames = _read(paths["frames"], FRAMES, f"scene {scene_id}")
    projections = _read(paths["projections"], PROJECTIONS, f"scene {scene_id}")
    att = rf.attributes(scene_id)
    if att.exists():
        attributes = _read(att, ATTRIBUTES, f"scene {scene_id}")
    elif paths["objects"].exists():
        attributes = compute_attributes(_read(paths["objects"], OBJECTS, f"scene {scene_id}"), frames)
    else:
        raise RegenerateError(f"scene {scene_id}: neither {att} nor {paths['objects']} exists")
    return frames, attributes, projections


def _read_many(paths: list[Path], schema: pa.Schema, what: str) -> pa.Table:
    """The QA input columns of several files of one table kind in one dataset scan (much less per-file
    overhead than one read per file; ``read_parquet`` reads them one by one when their stored types differ)."""
    return _read(paths, schema, f"{what} ({len(paths)} files from {paths[0].parent})", QA_INPUT_COLUMNS[what])


def load_scenes(run_dir: str | Path, scene_ids: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(frames, attributes, projections) of several scenes of a run folder, concatenated: the columns
    ``generate_qa`` reads (``QA_INPUT_COLUMNS``), typed as in the schemas."""
    rf = RunFolder(run_dir)
    for sid in scene_ids:
        for t in ("frames", "projections"):
            if not rf.perception(t, sid).exists():
                raise RegenerateError(f"scene {sid}: missing {rf.perception(t, sid)}")
    frames = _read_many([rf.perception("frames", s) for s in scene_ids], FRAMES, "frames")
    projections = _read_many([rf.perception("projections", s) for s in scene_ids], PROJECTIONS, "projections")
    with_att = [s for s in scene_ids if rf.attributes(s).exists()]
    parts = [_read_many([rf.attributes(s) for s in with_att], ATTRIBUTES, "attributes")] if with_att else []
    have = set(with_att)
    for sid in scene_ids:
        if sid in have:
            continue
        att = load_scene_tables(run_dir, sid)[1]  # recomputed from perception/objects
        parts.append(att.select(QA_INPUT_COLUMNS["attributes"]))
    return frames, pa.concat_tables(parts) if parts else ATTRIBUTES.empty_table(), projections


def split_by_scene(qa: pa.Table) -> dict[str, pa.Table]:
    """Zero-copy slices of a QA table whose rows are grouped by scene (generate_qa's order)."""
    if qa.num_rows == 0:
        return {}
    scenes = unique_strings(qa.column("scene_id"))
    sc = codes(column(qa, "scene_id"), scenes)
    if np.any(np.diff(sc) < 0):
        raise ValueError("QA rows are not grouped by scene")
    bounds = np.searchsorted(sc, np.arange(len(scenes) + 1))
    return {s: qa.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
            for i, s in enumerate(scenes.to_pylist())}


_TIMING_KEYS = ("read_s", "generate_s", "write_s", "read_cpu_s", "generate_cpu_s", "write_cpu_s", "cpu_s")


def regenerate_batch(run_dir: str | Path, out_dir: str | Path, cfg, templates: TemplateSet,
                     scene_ids: list[str]) -> dict:
    """One unit of regeneration, in-process or as a Ray task: read the scenes' tables, ``generate_qa`` on
    them together, write each scene's shards. Returns {"qa", "by_family", "shards" (relative to
    ``out_dir``), "scenes", wall and CPU seconds per step ("read_s", "read_cpu_s", ...) and "cpu_s" in all}."""
    from generator.writers.parquet import write_qa_shards

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    out: dict = {k: 0.0 for k in _TIMING_KEYS}
    c0 = time.process_time()
    t, c = time.perf_counter(), time.process_time()
    frames, attributes, projections = load_scenes(run_dir, scene_ids)
    out["read_s"], out["read_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    qa = generate_qa(frames, attributes, projections, cfg, templates)
    out["generate_s"], out["generate_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    per_scene = split_by_scene(to_storage(qa))  # cast once per batch, not per scene slice (much dearer)
    files: list[str] = []
    for s in scene_ids:
        part = per_scene.get(s, qa.schema.empty_table())
        files += [str(p.relative_to(out_dir)) for p in write_qa_shards(part, out_dir, s, cfg.writers)]
    out["write_s"], out["write_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    out["cpu_s"] = time.process_time() - c0
    fam = pc.value_counts(qa.column("family")).to_pylist() if qa.num_rows else []
    out.update(scenes=len(scene_ids), qa=qa.num_rows, by_family={d["values"]: int(d["counts"]) for d in fam},
               shards=files)
    return out


def _ray_batch(run_dir, out_dir, cfg, templates, scene_ids) -> dict:
    use_retaining_memory_pool()  # a worker process of its own: same allocator as a command's main
    return regenerate_batch(run_dir, out_dir, cfg, templates, scene_ids)


def _run_batches_on_ray(run_dir, out_dir, cfg, templates, batches: list[list[str]], done) -> list[dict]:
    """``regenerate_batch`` of every batch as Ray tasks (one CPU each, at most twice the cluster's CPUs in
    flight), results in batch order; ``done(result)`` is called as each finishes. A failed task raises its
    error (a RegenerateError stays one)."""
    import ray

    task = ray.remote(num_cpus=1, max_retries=cfg.ray.max_retries)(_ray_batch)
    refs = [ray.put(x) for x in (str(run_dir), str(out_dir), cfg, templates)]
    in_flight = max(1, int(2 * ray.cluster_resources().get("CPU", 1)))
    results: list[dict | None] = [None] * len(batches)
    pending: dict = {}
    todo = iter(enumerate(batches))
    while True:
        for k, batch in todo:
            pending[task.remote(*refs, batch)] = k
            if len(pending) >= in_flight:
                break
        if not pending:
            break
        ready, _ = ray.wait(list(pending), num_returns=1)
        k = pending.pop(ready[0])
        try:
            results[k] = ray.get(ready[0])
        except ray.exceptions.RayTaskError as err:  # the task's own error, not Ray's wrapper around it
            for ref in pending:
                ray.cancel(ref)
            cause = getattr(err, "cause", None)
            raise (cause if isinstance(cause, Exception) else err) from None
        done(results[k])
    return results


def regenerate(run_dir: str | Path, out_dir: str | Path, cfg, templates: TemplateSet,
               batch_scenes: int = 64, scene_ids: list[str] | None = None, executor: str = "local",
               progress: bool = False) -> dict:
    """Regenerate the QA of ``run_dir`` into ``out_dir`` (see module doc). Returns a summary dict.

    ``executor`` 'local': batches one after another in this process; 'ray': batches as Ray tasks on the
    cluster Ray is connected to (``generator.pipeline.driver.ensure_ray``), which must see ``run_dir`` and
    ``out_dir`` at the same paths (one machine, or a shared filesystem). The shards are the same either
    way. CPU seconds in the summary are this process's (local) or the sum over the tasks (ray)."""
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    if out_dir.resolve() == run_dir.resolve():
        raise RegenerateError(f"--out {out_dir} is the run folder itself: its manifests list the original QA "
                              "shards; write regenerated QA to another folder")
    scenes = run_scenes(run_dir) if scene_ids is None else list(scene_ids)
    batches = [scenes[k:k + max(1, batch_scenes)] for k in range(0, len(scenes), max(1, batch_scenes))]
    t0 = time.perf_counter()
    bar = None
    if progress and scenes:
        from tqdm import tqdm

        bar = tqdm(total=len(scenes), unit="scene", desc="regenerate", file=sys.stderr, dynamic_ncols=True)
    finished = {"scenes": 0, "qa": 0}

    def done(r: dict) -> None:
        finished["scenes"] += r["scenes"]
        finished["qa"] += r["qa"]
        if bar is not None:
            bar.set_postfix(qa=finished["qa"], refresh=False)
            bar.update(r["scenes"])
        log.info("regenerate: %d/%d scenes, %d QA so far", finished["scenes"], len(scenes), finished["qa"])

    try:
        if executor == "ray":
            results = _run_batches_on_ray(run_dir, out_dir, cfg, templates, batches, done)
        else:
            results = []
            for batch in batches:
                results.append(regenerate_batch(run_dir, out_dir, cfg, templates, batch))
                done(results[-1])
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t0
    total = sum(r["qa"] for r in results)
    by_family: dict[str, int] = {}
    for r in results:
        for fam, n in r["by_family"].items():
            by_family[fam] = by_family.get(fam, 0) + n
    times = {k: sum(r[k] for r in results) for k in _TIMING_KEYS}
    summary = {"run_dir": str(run_dir), "out_dir": str(out_dir), "scenes": len(scenes), "qa": total,
               "by_family": dict(sorted(by_family.items())), "seed": cfg.qa.seed,
               "template_files": templates.files, "templates": len(templates),
               "shards": [f for r in results for f in r["shards"]], "executor": executor,
               "wall_s": round(wall, 3), **{k: round(v, 3) for k, v in times.items()},
               "qa_per_s": round(total / wall, 1) if wall > 0 else None}
    atomic_write_bytes(out_dir / "config.yaml", cfg.to_yaml().encode())
    atomic_write_bytes(out_dir / "regenerate.json", json.dumps(summary, indent=2).encode())
    return summary
