"""The Intention-Drive export of a run folder (``RUN/intention`` at the end of a run when ``intention.export``,
or ``drivegen export intention_drive``): the planning samples and their objects (``export``), committed into a
folder drivegen owns (``generator.pipeline.exports``).
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass

import pyarrow.compute as pc

from generator.families.intention_drive.export import (
    EXPORT_FORMAT, EXPORT_SUMMARY, OBJECTS_FILE, SAMPLES_FILE, read_run_scene, road_maps
)
from generator.families.intention_drive.tables import INTENTION_OBJECTS, INTENTION_SAMPLES
from generator.runfolder import (RunReader, RunStore, check_owned_folder, release_staging, replace_owned_folder,
                                 staging)
from generator.runfolder.parts import PartSpec, read_parts, stream_parts
from schemas.config import PipelineConfig
from schemas.tables import ParquetStream

log = logging.getLogger("drivegen.pipeline")

INTENTION_DIR = "intention"


INTENTION_PART = "intention"  # its per-scene parts: RUN/parts/intention/ (generator.runfolder.parts)
INTENTION_PART_BUILDER = "generator.families.intention_drive.export_run:intention_part"


def intention_part(part, cfg: PipelineConfig, splits: list[str] | None = None) -> dict | None:
    """One scene's part of the export (``generator.runfolder.parts``): its planning samples and objects
    (``tables``), the kind of its drivable map and, when the logs cannot give maps, why; None for a scene without
    ego_intention QA rows."""
    maps, note = ({}, "intention.road_edges is off")
    if cfg.intention.road_edges:
        src = part.reader.source()
        if src:
            from generator.pipeline.stages import cached_source  # the logs a worker opened once for its scenes

            try:
                src = cached_source(json.dumps(src, sort_keys=True))
            except Exception:  # noqa: BLE001 - road_maps says why, from the description
                pass
        maps, note = road_maps(src, [part.scene_id])
    out = read_run_scene(part.reader, part.scene_id, cfg, splits, maps)
    if out is None:
        return None
    samples, objects = out
    return {"tables": {"samples": samples, "objects": objects},
            "maps": sorted({m["kind"] for m in maps.values()}), "note": note}


def _summarize(samples, objects, agg: dict) -> None:
    """Add one scene's export tables to the summary's figures ``agg``."""
    agg["samples"] += samples.num_rows
    # a part holds one scene: its keyframes are its distinct frames, counted without an Acero plan (~4 ms a part,
    # most of the driver's merge); tables of several scenes are grouped by both keys
    if pc.count_distinct(samples.column("scene_id")).as_py() <= 1:
        agg["keyframes"] += pc.count_distinct(samples.column("frame_index")).as_py()
    else:
        agg["keyframes"] += samples.group_by(["scene_id", "frame_index"]).aggregate([]).num_rows
    agg["objects"] += objects.num_rows
    agg["with_map"] += samples.num_rows - samples.column("map_path").null_count
    agg["kinds"].update(samples.column("kind").to_pylist())
    agg["splits"].update(samples.column("split").to_pylist())


def export_intention(run: str | RunReader, out: str | None = None, cfg: PipelineConfig | None = None,
                     splits: list[str] | None = None, parts: bool = False) -> dict:
    """Write a run folder's Intention-Drive export (``generator.families.intention_drive.export``) into ``out`` (any
    filesystem; default ``RUN/intention``); a folder is replaced only when it is an earlier such export.
    Returns the summary (``export_summary.json``). ``parts``: merge the scenes' parts the end of the run built
    (``generator.runfolder.parts``); otherwise each scene's part is built here, one scene at a time (its logs,
    for their maps, opened once in this process). Either way the files are written as a stream: memory holds one
    row group, not the export."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    cfg = cfg or reader.config()
    agg = {"samples": 0, "keyframes": 0, "objects": 0, "with_map": 0, "kinds": Counter(), "splits": Counter(),
           "maps": set(), "note": None if cfg.intention.road_edges else "intention.road_edges is off"}
    found = read_parts(reader.store, INTENTION_PART, reader.scene_ids()) if parts else \
        stream_parts(reader, PartSpec(INTENTION_PART, INTENTION_PART_BUILDER, {"splits": splits}), cfg)

    def scene_tables():
        for _, rec in found:
            agg["maps"].update(rec["maps"])
            agg["note"] = agg["note"] or rec["note"]
            yield rec["tables"]["samples"], rec["tables"]["objects"]

    target = RunStore(out) if out is not None else reader.store
    rel_dir = "" if out is not None else INTENTION_DIR
    check_owned_folder(target, rel_dir, EXPORT_SUMMARY, EXPORT_FORMAT)
    built = staging(target, "intention", beside=out is not None)
    try:
        with ParquetStream(built / SAMPLES_FILE, INTENTION_SAMPLES.empty_table()) as samples_out, \
                ParquetStream(built / OBJECTS_FILE, INTENTION_OBJECTS.empty_table()) as objects_out:
            for samples, objects in scene_tables():
                _summarize(samples, objects, agg)
                samples_out.add(samples)
                objects_out.add(objects)
        summary = {"format": EXPORT_FORMAT, "run": reader.uri, "samples": agg["samples"],
                   "keyframes": agg["keyframes"], "objects": agg["objects"],
                   "by_kind": dict(sorted(agg["kinds"].items())),
                   "splits": dict(sorted(agg["splits"].items())),
                   "road_edges": {"samples_with_map": agg["with_map"], "maps": sorted(agg["maps"]),
                                  **({"note": agg["note"]} if agg["note"] else {})},
                   "files": [SAMPLES_FILE, OBJECTS_FILE],
                   # what the samples were made with: the scorer classifies and checks with the same
                   "config": {"labels": cfg.labels.model_dump(mode="json"),
                              "intention": cfg.intention.model_dump(mode="json"),
                              "ego": cfg.ego.model_dump(mode="json")}}
        if not agg["samples"]:
            summary["why_empty"] = ("the run has no ego_intention QA rows (is 'ego_intention' in qa.families, do "
                                    "keyframes have 3 s of log after them, and are their objects known: not frames "
                                    "outside the logs' annotations?)")
        (built / EXPORT_SUMMARY).write_text(json.dumps(summary, indent=2))
        replace_owned_folder(target, rel_dir, built, EXPORT_SUMMARY, EXPORT_FORMAT)
    finally:
        release_staging(target, built)
    return summary




@dataclass(frozen=True)
class IntentionSummary:
    """The run summary's Intention-Drive entry: what the end of the run exported to ``intention/``."""

    samples: int
    keyframes: int
    why_empty: str | None = None

    @classmethod
    def of(cls, export: dict | None) -> "IntentionSummary | None":
        if not export:
            return None
        return cls(int(export.get("samples", 0)), int(export.get("keyframes", 0)), export.get("why_empty"))

    def to_json(self) -> dict:
        return {"samples": self.samples, "keyframes": self.keyframes,
                **({"why_empty": self.why_empty} if self.why_empty else {})}

    def lines(self) -> list[str]:
        return [f"Intention-Drive export: {self.samples} planning samples at {self.keyframes} keyframes "
                f"({INTENTION_DIR}/)" + (f": {self.why_empty}" if self.why_empty else "")]
