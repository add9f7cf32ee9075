"""Rebuild a finished run's QA with other templates or another seed, from its committed tables only.

Reads the committed ``frames``, ``projections``, ``attributes`` and ``labels`` of each scene
(``generator.runfolder.RunReader``: finished scenes only; attributes are recomputed from ``objects`` for a
scene without them, or whose attributes lack a column QA reads: written by an older drivegen) — no model,
image or LiDAR file is touched — runs ``generate_qa`` on batches of scenes and commits each scene's new QA
shards into ``OUT`` exactly like a run commits a scene (staging, intent, manifest). ``OUT`` is a *derived*
run folder: ``run.json`` names the run it came from (its other tables are read from there),
``config.yaml`` is the effective config (seed and template folders included) and
``regenerate.json`` holds counts, files and timings. Both folders may be on any pyarrow filesystem.
"""
from __future__ import annotations

import logging
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from generator.attributes import compute_attributes
from generator.attributes.arrays import codes, column, unique_strings
from generator.qa import generate_qa
from generator.qa.families import reads, selected
from generator.qa.templates import TemplateSet
from generator.qa.video import video_qa
from generator.runfolder import (RunLock, RunReader, RunStore, commit_tables, config_key, make_fence, remove_leftovers)
from schemas import layout
from schemas.errors import RunFolderError
from schemas.families import families
from schemas.tables import ATTRIBUTES, QA, to_storage

log = logging.getLogger(__name__)

REGENERATE_SUMMARY = "regenerate.json"


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


# The columns generate_qa reads (regeneration reads only these; the rest of a row is never needed).
QA_INPUT_COLUMNS = {
    "frames": ["scene_id", "frame_index", "timestamp_us", "is_anchor", "city_SE3_ego", "cameras"],
    "projections": ["scene_id", "frame_index", "track_id", "camera", "box2d_proj_xyxy", "mask_rle", "mask_box_xyxy",
                    "visible"],
    "attributes": ["scene_id", "frame_index", "track_id", "class_name", "instance_token", "x_ego_m", "y_ego_m",
                   "z_ego_m", "distance_m", "bearing_deg", "length_m", "width_m", "height_m", "speed_mps"],
}


def load_scenes(run: str | RunReader, scene_ids: list[str], extra: dict[str, list[str]] | None = None
                ) -> tuple[pa.Table, pa.Table, pa.Table, dict[str, pa.Table]]:
    """(frames, attributes, projections, {other table: rows}) of several finished scenes, concatenated: the
    columns ``generate_qa`` reads (``QA_INPUT_COLUMNS``, and ``extra``: the tables and columns the selected
    families read, ``generator.qa.reads``; a family's ``attributes`` columns are added to the shared ones), typed
    as in the schemas. RunFolderError names a scene that is not finished or lacks a table."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    extra = dict(extra or {})
    att_cols = list(dict.fromkeys(QA_INPUT_COLUMNS["attributes"] + list(extra.pop("attributes", []))))
    finished = set(reader.scene_ids())
    missing = [s for s in scene_ids if s not in finished]
    if missing:
        raise RunFolderError(f"scene(s) {missing[:5]} are not finished scenes of {reader.uri}", file=reader.uri)
    tables = {}
    for name in ("frames", "projections"):
        have = set(reader.scenes_with(name, scene_ids))
        lacking = [s for s in scene_ids if s not in have]
        if lacking:
            raise RunFolderError(f"scene {lacking[0]}: its manifest lists no {layout.TABLES[name].folder} file "
                                 f"in {reader.uri}", file=reader.uri)
        tables[name] = reader.read_table(name, scene_ids, QA_INPUT_COLUMNS[name])
    have_att = reader.scenes_with("attributes", scene_ids)
    try:
        parts = [reader.read_table("attributes", have_att, att_cols)] if have_att else []
    except RunFolderError:  # attributes written before a column QA reads existed: recomputed from objects below
        older = set(_lacking_columns(reader, "attributes", have_att, att_cols))
        if not older:
            raise
        have_att = [s for s in have_att if s not in older]
        parts = [reader.read_table("attributes", have_att, att_cols)] if have_att else []
    for sid in scene_ids:
        if sid in have_att:
            continue
        objects = reader.read_scene("objects", sid)
        if objects is None:
            raise RunFolderError(f"scene {sid}: neither attributes nor perception/objects are committed in "
                                 f"{reader.uri}", file=reader.uri)
        frames = reader.read_scene("frames", sid)
        parts.append(compute_attributes(objects, frames, reader.config().ego).select(att_cols))
    attributes = pa.concat_tables(parts) if parts else ATTRIBUTES.empty_table()
    others = {name: reader.read_table(name, scene_ids, cols) for name, cols in extra.items()}
    return tables["frames"], attributes, tables["projections"], {k: v for k, v in others.items() if v is not None}


def _lacking_columns(reader: RunReader, table: str, scene_ids: list[str], columns: list[str]) -> list[str]:
    """The scenes whose committed ``table`` file lacks one of ``columns`` (written by an older drivegen)."""
    owner = reader.table_owner(table)
    out = []
    for sid in scene_ids:
        for f in reader.files(table, [sid]):
            have = set(pq.read_schema(owner.store.full(f), filesystem=owner.store.fs).names)
            if not set(columns) <= have:
                out.append(sid)
                break
    return out


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


def regenerate_batch(run: str, out: str, cfg, templates: TemplateSet, scene_ids: list[str],
                     epoch: int | None = None) -> dict:
    """One unit of regeneration, in-process or as a Ray task: read the scenes' tables, ``generate_qa`` on
    them together, commit each scene's shards into ``out`` (fenced by ``epoch``). Returns {"qa",
    "by_family", "shards" (relative to ``out``), "scenes", wall and CPU seconds per step ("read_s",
    "read_cpu_s", ...) and "cpu_s" in all}."""
    # lazy: generator.pipeline.stages loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.stages import qa_counts

    reader, store = RunReader(run), RunStore(out)
    fence = make_fence(store, epoch)
    key = config_key(cfg)
    res: dict = {k: 0.0 for k in _TIMING_KEYS}
    c0 = time.process_time()
    t, c = time.perf_counter(), time.process_time()
    if reader.camera_only:
        videos = {s: _video_tables(reader, s) for s in scene_ids}
    else:
        frames, attributes, projections, others = load_scenes(reader, scene_ids, reads(selected(cfg.qa.families)))
    res["read_s"], res["read_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    qa = (_video_qa(videos, cfg, templates, reader) if reader.camera_only
          else generate_qa(frames, attributes, projections, cfg, templates, **others))
    res["generate_s"], res["generate_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    stored = to_storage(qa)  # cast once per batch, not per scene slice (much dearer)
    per_scene = split_by_scene(stored)
    files: list[str] = []
    for s in scene_ids:
        part = per_scene[s] if s in per_scene else stored.schema.empty_table()
        m = commit_tables(store, s, {"qa": part}, writer_cfg=cfg.writers, counts=qa_counts(part), config=key,
                          epoch=epoch, fence=fence, tidy=False)
        files += [f["path"] for f in m["files"]]
    res["write_s"], res["write_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    res["cpu_s"] = time.process_time() - c0
    fam = pc.value_counts(qa.column("family")).to_pylist() if qa.num_rows else []
    res.update(scenes=len(scene_ids), qa=qa.num_rows, by_family={d["values"]: int(d["counts"]) for d in fam},
               shards=files)
    return res


def _video_tables(reader: RunReader, vid: str) -> dict:
    """What a video's QA is built from, read back from the run folder: its 2D boxes, every registered family's
    tables (``schemas.families``), its split (its QA shards' names) and its extracted frames (its manifest)."""
    # lazy: generator.pipeline.video loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.video import video_media

    derived = {}
    for fam in families().values():
        for t in fam.tables():
            table = reader.read_scene(t.name, vid)
            if table is not None:
                derived[t.name] = table
    split = None
    for f in reader.files("qa", [vid]):
        split = f.rsplit("/", 1)[-1].split("-", 1)[0]
    images, _ = video_media(reader, vid)
    return {"boxes": reader.read_scene("video_boxes", vid), "derived": derived, "split": split, "images": images}


def _video_qa(videos: dict, cfg, templates: TemplateSet, reader: RunReader) -> pa.Table:
    """The QA of a camera-only run's videos (``generator.qa.video``) from their stored tables and 2D boxes."""
    # lazy: generator.pipeline.video loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.video import video_settings

    fps = float(video_settings(cfg).fps)
    parts = []
    for vid, v in videos.items():
        if v["boxes"] is None:
            raise RunFolderError(f"video {vid}: its manifest lists no video_boxes/ file in {reader.uri} "
                                 "(a camera-only run written before drivegen kept its boxes: run it again)",
                                 file=reader.uri)
        parts.append(video_qa(vid, v["derived"], v["boxes"], cfg, templates, split=v["split"],
                              images=v["images"] or None, fps=fps))
    return pa.concat_tables(parts) if parts else QA.empty_table()


def _ray_batch(run, out, cfg, templates, epoch, scene_ids) -> dict:
    use_retaining_memory_pool()  # a worker process of its own: same allocator as a command's main
    return regenerate_batch(run, out, cfg, templates, scene_ids, epoch)


def _claim_out(store: RunStore, run: RunReader) -> None:
    """``out`` may be empty or an earlier regeneration of the same run (its scenes are re-committed);
    anything else is refused."""
    others = [p for p in store.list("", recursive=True) if p != layout.LOCK]
    if not others:
        return
    state = RunReader(store, require=False).run_state
    if state.get("parent") == run.uri:
        return
    what = "a run folder of its own" if RunReader(store, require=False).is_run_folder() else "not empty"
    raise RunFolderError(f"--out {store.uri} is {what} and not a regeneration of {run.uri} ({len(others)} file(s), "
                         f"e.g. {others[0]}); choose a new or empty folder", file=store.uri)


def regenerate(run: str, out: str, cfg, templates: TemplateSet, batch_scenes: int = 64,
               scene_ids: list[str] | None = None, executor: str = "local", progress: bool = False) -> dict:
    """Regenerate the QA of the run folder ``run`` into ``out`` (see module doc). Returns a summary dict.

    ``executor`` 'local': batches one after another in this process; 'ray': batches as Ray tasks on the
    cluster Ray is connected to (``generator.pipeline.ray_connect.ensure_ray``); both folders must be reachable
    from every node (one machine, shared storage or object storage). The shards are the same either way.
    CPU seconds in the summary are this process's (local) or the sum over the tasks (ray)."""
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    reader = RunReader(run)
    store = RunStore(out)
    if store.base == reader.store.base and type(store.fs) is type(reader.store.fs):
        raise RunFolderError(f"--out {out} is the run folder itself: its manifests list the original QA shards; "
                             "write regenerated QA to another folder", file=store.uri)
    scenes = reader.scene_ids() if scene_ids is None else list(scene_ids)
    batches = [scenes[k:k + max(1, batch_scenes)] for k in range(0, len(scenes), max(1, batch_scenes))]
    with RunLock(store, f"drivegen regenerate {run} --out {out}") as lock:
        _claim_out(store, reader)
        remove_leftovers(store)
        store.write_bytes(layout.CONFIG, cfg.to_yaml().encode())
        store.write_json(layout.RUN_STATE, {"format": "drivegen-run/1", "parent": reader.uri, "tables": ["qa"],
                                            "epoch": lock.epoch, "config_key": config_key(cfg),
                                            "created_unix": time.time()})
        t0 = time.perf_counter()
        bar = None
        if progress and scenes:
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
                # ray: only where Ray runs (in-process regenerations never import it)
                from generator.pipeline.ray_tasks import run_tasks

                results = run_tasks(_ray_batch, batches, cfg.ray, shared=(reader.uri, store.uri, cfg, templates,
                                                                          lock.epoch), done=done)
            else:
                results = []
                for batch in batches:
                    results.append(regenerate_batch(reader.uri, store.uri, cfg, templates, batch, lock.epoch))
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
        summary = {"run_dir": reader.uri, "out_dir": store.uri, "scenes": len(scenes), "qa": total,
                   "by_family": dict(sorted(by_family.items())), "seed": cfg.qa.seed,
                   "template_files": templates.files, "templates": len(templates),
                   "shards": [f for r in results for f in r["shards"]], "executor": executor,
                   "wall_s": round(wall, 3), **{k: round(v, 3) for k, v in times.items()},
                   "qa_per_s": round(total / wall, 1) if wall > 0 else None}
        store.write_json(REGENERATE_SUMMARY, summary)
        remove_leftovers(store)
    return summary
