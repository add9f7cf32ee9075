"""The PIE/JAAD benchmark export: the samples of ``generator.families.pie.attributes`` as one Parquet file per task and
split, which a PIE/JAAD model's data loader can be pointed at, plus ``export_summary.json``::

    OUT/action/{train,val,test,unsplit}.parquet    action prediction samples (crossing in 1-3 s)
    OUT/risk/{train,val,test,unsplit}.parquet      event risk samples (6 classes, 0 = image centre)
    OUT/export_summary.json                        format, source, config, counts, files, per-video errors

Columns: ``schemas.tables.PIE_SAMPLES`` (docs/families/pie.md). Videos outside the split lists
go to ``unsplit``.

The files are written through a run-folder store (``generator.runfolder.RunStore``: atomic, any filesystem),
passed in by the caller since this layer sits below the run folder. A non-empty target that is not an earlier
PIE export is refused; an earlier export's files are replaced and those it listed that this one does not
write are deleted (nothing else is touched). The summary is written last.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import KeyIndex, codes, column, to_numpy
from generator.attributes.ego import ego_states
from generator.families.pie.attributes import build_samples, jaad_tables_from_log, log_config, path_entry, sample_counts
from generator.writers.owned import owned_files
from generator.families.pie.tables import PIE_SAMPLES as SAMPLES
from generator.qa.generate import scene_split
from generator.sources import front_camera_images
from schemas.errors import InputError

EXPORT_FORMAT = "drivegen-pie/1"  # marks a folder as a drivegen PIE export (replaced only if it is one)
EXPORT_SUMMARY = "export_summary.json"
UNSPLIT = "unsplit"


def split_tables(samples: pa.Table) -> dict[str, pa.Table]:
    """``{"<task>/<split>.parquet": rows}`` of the samples, sorted by pedestrian and frame."""
    out: dict[str, pa.Table] = {}
    split = pc.fill_null(samples.column("split"), UNSPLIT)
    for task in sorted(set(samples.column("task").to_pylist())):
        for s in sorted(set(split.to_pylist())):
            m = pc.and_(pc.equal(samples.column("task"), task), pc.equal(split, s))
            t = samples.filter(m)
            if t.num_rows:
                out[f"{task}/{s}.parquet"] = t.sort_by([("video_id", "ascending"), ("ped_id", "ascending"),
                                                        ("end_frame", "ascending")])
    return out


def previous_export(store) -> list[str]:
    """The files an earlier PIE export in ``store`` listed ([] when the folder is new or empty); raises
    ``RunFolderError`` when the folder holds something else (``generator.writers.owned``)."""
    return owned_files(store, "", EXPORT_SUMMARY, EXPORT_FORMAT, what="an earlier PIE export")


def write_pie_export(store, samples: pa.Table, info: dict | None = None) -> dict:
    """Write the export into ``store`` (a ``RunStore``); returns the summary written."""
    old = previous_export(store)
    tables = split_tables(samples)
    files = []
    counts: dict[str, dict[str, int]] = {}
    for rel, t in tables.items():
        store.write_table(rel, t)
        files.append(rel)
        task, split = rel[:-len(".parquet")].split("/")
        counts.setdefault(task, {})[split] = t.num_rows
    summary = {"format": EXPORT_FORMAT, **(info or {}), "samples": counts, "files": files + [EXPORT_SUMMARY]}
    for rel in sorted(set(old) - set(files) - {EXPORT_SUMMARY}):
        if "/" in rel and not rel.startswith(("/", "..")) and ".." not in rel.split("/"):
            store.delete(rel)
    store.write_json(EXPORT_SUMMARY, summary)
    return summary


def samples_from_run(reader, cfg=None) -> tuple[pa.Table, dict]:
    """The PIE tasks of a 3D-log run folder (``reader``: a ``generator.runfolder.RunReader``; this layer sits
    below it): every scene is a video seen through its front camera (``types.front_camera``), every tracked
    pedestrian a behavioural one whose crossing event is the first frame it stands in the ego's path
    (``generator.families.pie.attributes.path_entry``), the benchmark's windows at the log's frame rate
    (``log_config``). ``image_paths`` are the front camera's images of the window's frames, ``split`` the QA
    split of the scene. Returns (samples, info for the summary); ``cfg``: a PieConfig (default: the run's)."""
    run_cfg = reader.config()
    cfg = cfg or run_cfg.pie
    if reader.camera_only:
        return _samples_from_video_run(reader, cfg, run_cfg.pie)
    frames, objects = reader.read_table("frames"), reader.read_table("objects")
    projections = reader.read_table("projections", columns=["scene_id", "frame_index", "track_id", "camera",
                                                             "box2d_proj_xyxy"])
    if frames is None or objects is None:
        return pa.Table.from_pylist([], schema=SAMPLES), {"why_empty": "the run has no frames or objects"}
    ego = ego_states(frames)
    scenes = ego.scenes.to_pylist()
    splits = dict(zip(scenes, scene_split(scenes, run_cfg.qa.val_fraction)))
    o = np.lexsort((ego.t_s, ego.scene_code))
    step = np.diff(ego.t_s[o])[np.diff(ego.scene_code[o]) == 0]  # frame intervals within scenes
    fps = float(1.0 / np.median(step)) if len(step) else 1.0
    lcfg = log_config(cfg, round(fps, 3))
    entries = path_entry(frames, objects, lcfg, run_cfg.ego, ego)
    front = front_camera_images(frames, run_cfg.qa.front_camera)
    samples, reasons = build_samples(*jaad_tables_from_log(projections, entries, front, splits), lcfg)
    if samples.num_rows:  # the log's own images instead of JAAD's extracted-frame layout; no video
        fr = samples.column("frames").combine_chunks()
        sc = codes(pc.take(samples.column("video_id"), pc.list_parent_indices(fr)), ego.scenes)
        img = KeyIndex((codes(column(front, "scene_id"), ego.scenes) << 32)
                       | to_numpy(column(front, "frame_index"), np.int64)).find(
            (sc << 32) | to_numpy(pc.list_flatten(fr), np.int64))
        paths = pc.if_else(pa.array(img >= 0), pc.take(column(front, "image_path"), pa.array(np.maximum(img, 0))),
                           pa.scalar(None, pa.string()))
        typ = samples.schema.field("image_paths").type
        samples = samples.set_column(samples.schema.get_field_index("image_paths"), "image_paths",
                                     pa.ListArray.from_arrays(fr.offsets, paths, type=typ))
        samples = samples.set_column(samples.schema.get_field_index("video_path"), "video_path",
                                     pa.nulls(samples.num_rows, pa.string()))
    info = {"source": {"kind": "run", "run": reader.uri, "scenes": len(scenes), "frame_rate_hz": fps,
                       "pedestrians": entries.num_rows,
                       "entering_the_path": int(pc.sum(pc.greater_equal(entries.column("event_frame"), 0)).as_py()
                                                or 0)},
            "config": lcfg.model_dump(mode="json"), "counts": sample_counts(samples), "pedestrians": reasons,
            "errors": []}
    if cfg.profile != lcfg.profile:  # never dropped silently: the summary and the command say it
        info["profile_note"] = (f"pie.profile: {cfg.profile} applies to JAAD videos only: 3D logs are cut by the "
                                f"paper's profile at their own frame rate ({lcfg.profile}, log_config)")
    return samples, info


def _samples_from_video_run(reader, cfg, run_pie) -> tuple[pa.Table, dict]:
    """The samples a camera-only run (``drivegen run --source jaad``) stored per video, as they are: their
    ``image_paths`` name the frames the run extracted. A ``pie:`` config other than the run's is refused (the
    samples were cut with the run's)."""
    if cfg.model_dump() != run_pie.model_dump():
        raise InputError(f"{reader.uri} is a camera-only run whose PIE samples were cut with its own pie: config; "
                         "export it without --config, or run the videos again with the new one")
    samples = reader.read_table("pie_samples")
    if samples is None:
        samples = SAMPLES.empty_table()
    src = reader.source()
    info = {"source": {"kind": "jaad", "run": reader.uri, "data": src.get("root"), "videos": len(reader.scene_ids()),
                       "split_variant": cfg.split_variant},
            "config": cfg.model_dump(mode="json"), "counts": sample_counts(samples),
            "errors": [{"video": e.get("scene_id"), "file": e.get("file"), "message": e.get("message")}
                       for e in reader.errors()]}
    if not samples.num_rows:
        info["why_empty"] = "no finished video of the run has a sample"
    return samples, info
