"""The lane-keeping export: every scene's committed ``lane_offsets`` table (its part, written with the scene)
merged into one ``offsets.parquet``, one scene at a time (never the whole run in memory), and
``export_summary.json``. Written into ``RUN/lane_keeping`` at the end of ``drivegen run`` or anywhere with
``drivegen export lane_keeping RUN --out DIR``."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from drivegen_lane_keeping import FAMILY
from drivegen_lane_keeping.derive import LANE_OFFSETS
from generator.families.api import (RunReader, RunStore, check_owned_folder, release_staging, replace_owned_folder,
                                    staging)

FOLDER = "lane_keeping"
FORMAT = "drivegen-lane-keeping/1"
SUMMARY = "export_summary.json"
OFFSETS = "offsets.parquet"


def write(run, cfg=None, out: str | None = None) -> dict:
    reader = run if isinstance(run, RunReader) else RunReader(run)
    cfg = cfg or reader.config()
    target = RunStore(out) if out is not None else reader.store
    rel_dir = "" if out is not None else FOLDER
    check_owned_folder(target, rel_dir, SUMMARY, FORMAT, in_run_folder=out is None)
    built = staging(target, FOLDER, beside=out is not None)
    try:
        rows = scenes = 0
        with pq.ParquetWriter(built / OFFSETS, LANE_OFFSETS) as w:
            for sid in reader.scene_ids():
                part = reader.read_scene("lane_offsets", sid)
                if part is not None and part.num_rows:
                    w.write_table(part.select(LANE_OFFSETS.names).cast(LANE_OFFSETS))
                    rows, scenes = rows + part.num_rows, scenes + 1
        summary = {"format": FORMAT, "folder": FOLDER, "rows": rows, "scenes": scenes,
                   "horizon_s": FAMILY.settings(cfg).horizon_s, "files": [OFFSETS]}
        (built / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
        replace_owned_folder(target, rel_dir, built, SUMMARY, FORMAT, in_run_folder=out is None)
    finally:
        release_staging(target, built)
    return summary
