"""``drivegen export pie (--data JAAD_DIR | --run RUN) --out DIR``: the PIE/JAAD benchmark samples of a JAAD folder,
or of a drivegen run over 3D logs (action prediction 1-3 s before the crossing event, event risk regions 3 s
ahead) as Parquet per task and split, plus export_summary.json; score a model's predictions on it with
``drivegen score pie --pred PRED DIR``.

From a run (nuScenes-format, AV2 or generated logs), each scene is a video seen through its front camera and
each tracked pedestrian a behavioural one whose crossing event is the first frame it stands where the ego is
going to drive (``pie.path_*``); windows keep the benchmark's seconds at the log's frame rate.

JAAD_DIR holds annotations/, annotations_attributes/, annotations_vehicle/ (annotations_traffic/, split_ids/
and clips/ when present). A video whose annotations cannot be used (broken XML, a box outside the image; a
track with a gap only with ``pie.track_gap: error``) is left out and named in the summary's "errors"; the others
are exported. DIR may be a
local path or a URI and must be new, empty or an earlier PIE export (only its own files are replaced).
Exit codes: 0 = exported, 2 = unusable input (no JAAD folder, no usable video, a foreign --out).
"""
from __future__ import annotations

import argparse
import json

from generator.families.pie.attributes import build_samples, sample_counts
from generator.families.pie.export import previous_export, samples_from_run, write_pie_export
from generator.runfolder import RunReader, RunStore
from generator.sources.jaad import read_jaad
from schemas.config import load_config
from schemas.errors import SourceError


HELP = "export PIE/JAAD benchmark samples from a JAAD folder or a run"
DEPRECATED_COMMAND = "export_pie"  # its earlier name, a deprecated alias until the next release


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="JAAD folder (annotations/, annotations_attributes/, ...)")
    src.add_argument("--run", help="a drivegen run folder over 3D logs (path or URI)")
    p.add_argument("--out", required=True, help="export folder to write (path or URI)")
    p.add_argument("--config", default=None, help="pipeline config YAML (its 'pie:' section is used)")
    p.add_argument("--video", action="append", default=None, help="export only this video id (repeatable)")
    p.add_argument("--require-clips", action="store_true",
                   help="a video without its clips/<video>.mp4 is an error (left out)")


def main(args) -> int:
    cfg = load_config(args.config).pie
    store = RunStore(args.out)
    previous_export(store)  # refuse a foreign --out before any work
    if args.run:
        return _from_run(args, store, cfg if args.config else None)
    tables = read_jaad(args.data, cfg, video_ids=args.video, require_clips=args.require_clips)
    if tables.videos.num_rows == 0:
        why = f": {tables.errors[0]}" if tables.errors else ""
        raise SourceError(f"no usable JAAD video in {args.data}{why}", file=str(args.data))
    samples, reasons = build_samples(tables.videos, tables.boxes, tables.pedestrians, tables.vehicle, cfg)
    info = {"source": {"kind": "jaad", "data": str(args.data), "videos": tables.videos.num_rows,
                       "split_variant": cfg.split_variant},
            "config": cfg.model_dump(mode="json"),
            "counts": sample_counts(samples), "pedestrians": reasons,
            "errors": [{"video": e.scene, "file": e.file, "message": e.message} for e in tables.errors]}
    summary = write_pie_export(store, samples, info)
    shown = {k: summary[k] for k in ("format", "source", "samples", "counts") if k in summary}
    shown["errors"] = len(summary["errors"])
    print(json.dumps(shown, indent=2))
    for e in tables.errors:
        print(f"skipped {e}")
    print(f"export: {store.uri_of('')}")
    return 0


def _from_run(args, store, cfg) -> int:
    samples, info = samples_from_run(RunReader(args.run), cfg)
    summary = write_pie_export(store, samples, info)
    shown = {k: summary[k] for k in ("format", "source", "samples", "counts") if k in summary}
    print(json.dumps(shown, indent=2))
    if info.get("profile_note"):
        print(f"note: {info['profile_note']}")
    if samples.num_rows == 0:
        print(f"no PIE sample: {info.get('why_empty') or 'no tracked pedestrian has a window in the front camera'}")
    print(f"export: {store.uri_of('')}")
    return 0
