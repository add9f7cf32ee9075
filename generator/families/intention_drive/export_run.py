"""The Intention-Drive export of a run folder (``RUN/intention`` at the end of a run when ``intention.export``,
or ``drivegen export_intention``): the planning samples and their objects (``export``), committed into a
folder drivegen owns (``generator.pipeline.exports``).
"""
from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass

from generator.pipeline.exports import check_owned_folder, release_staging, replace_owned_folder, staging
from generator.runfolder import RunReader, RunStore
from schemas.config import PipelineConfig

log = logging.getLogger("drivegen.pipeline")

INTENTION_DIR = "intention"


def intention_tables(reader: RunReader, cfg: PipelineConfig | None = None, splits: list[str] | None = None,
                     maps: dict | None = None):
    """Yield each finished scene's Intention-Drive export tables (``generator.families.intention_drive.export``);
    ``maps``: each scene's drivable map (``road_maps``)."""
    from generator.families.intention_drive.export import read_run_scene

    cfg = cfg or reader.config()
    for sid in reader.scene_ids():
        out = read_run_scene(reader, sid, cfg, splits, maps)
        if out is not None:
            yield out


def export_intention(run: str | RunReader, out: str | None = None, cfg: PipelineConfig | None = None,
                     splits: list[str] | None = None, source=None) -> dict:
    """Write a run folder's Intention-Drive export (``generator.families.intention_drive.export``) into ``out`` (any
    filesystem; default ``RUN/intention``); a folder is replaced only when it is an earlier such export.
    Returns the summary (``export_summary.json``). ``source``: the run's logs, already opened (default: opened
    again from ``source.json`` for their maps)."""
    import pyarrow as pa

    from generator.families.intention_drive.export import (EXPORT_FORMAT, EXPORT_SUMMARY, OBJECTS_FILE, SAMPLES_FILE,
                                                    road_maps)
    from generator.families.intention_drive.tables import INTENTION_OBJECTS, INTENTION_SAMPLES
    from schemas.tables import write_parquet

    reader = run if isinstance(run, RunReader) else RunReader(run)
    cfg = cfg or reader.config()
    maps, road_note = road_maps(source or reader.source(), reader.scene_ids()) if cfg.intention.road_edges else \
        ({}, "intention.road_edges is off")
    parts = list(intention_tables(reader, cfg, splits, maps))
    samples = pa.concat_tables([p[0] for p in parts]) if parts else INTENTION_SAMPLES.empty_table()
    objects = pa.concat_tables([p[1] for p in parts]) if parts else INTENTION_OBJECTS.empty_table()
    target = RunStore(out) if out is not None else reader.store
    rel_dir = "" if out is not None else INTENTION_DIR
    check_owned_folder(target, rel_dir, EXPORT_SUMMARY, EXPORT_FORMAT)
    built = staging(target, "intention", beside=out is not None)
    try:
        write_parquet(built / SAMPLES_FILE, samples)
        write_parquet(built / OBJECTS_FILE, objects)
        kinds = Counter(samples.column("kind").to_pylist())
        summary = {"format": EXPORT_FORMAT, "run": reader.uri, "samples": samples.num_rows,
                   "keyframes": samples.group_by(["scene_id", "frame_index"]).aggregate([]).num_rows,
                   "objects": objects.num_rows, "by_kind": dict(sorted(kinds.items())),
                   "splits": dict(sorted(Counter(samples.column("split").to_pylist()).items())),
                   "road_edges": {"samples_with_map": samples.num_rows - samples.column("map_path").null_count,
                                  "maps": sorted({m["kind"] for m in maps.values()}),
                                  **({"note": road_note} if road_note else {})},
                   "files": [SAMPLES_FILE, OBJECTS_FILE],
                   # what the samples were made with: the scorer classifies and checks with the same
                   "config": {"labels": cfg.labels.model_dump(mode="json"),
                              "intention": cfg.intention.model_dump(mode="json"),
                              "ego": cfg.ego.model_dump(mode="json")}}
        if not samples.num_rows:
            summary["why_empty"] = ("the run has no ego_intention QA rows (is 'ego_intention' in qa.families, and "
                                    "do keyframes have 3 s of log after them?)")
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
