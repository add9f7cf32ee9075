"""``drivegen export intention_drive RUN [--out DIR]``: the run's Intention-Drive planning samples (one per
ego_intention instruction: images, instruction levels, past states, logged waypoints, success predicate) and
the objects a trajectory is checked against, as Parquet (docs/families/intention-drive.md). ``drivegen run`` writes
the same into RUN/intention when ``writers.intention_export`` is on.

RUN and DIR may be local paths or URIs. DIR must be new, empty, or an earlier such export (only its own files
are replaced). Score a planner on it with ``drivegen score intention --pred PRED DIR``. Exit codes: 0 =
exported (possibly zero samples: the summary says why), 2 = unusable input.
"""
from __future__ import annotations

import argparse
import json

from generator.runfolder import RunReader
from schemas.config import load_config


HELP = "export Intention-Drive planning samples from a finished run"
DEPRECATED_COMMAND = "export_intention"  # its earlier name, a deprecated alias until the next release


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder (path or URI)")
    p.add_argument("--out", default=None, help="export folder to write (default: RUN/intention)")
    p.add_argument("--config", default=None, help="pipeline config YAML whose intention section to use "
                                                  "(default: RUN/config.yaml)")
    p.add_argument("--split", action="append", default=None, help="only samples of this split (repeatable)")


def main(args) -> int:
    # lazy: generator.families.intention_drive.export_run loads pycocotools, scipy, which this module needs only here
    from generator.families.intention_drive.export_run import export_intention

    reader = RunReader(args.run).require_3d("drivegen export intention_drive")
    cfg = load_config(args.config) if args.config else None
    summary = export_intention(reader, args.out, cfg=cfg, splits=args.split)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("files", "config")}, indent=2))
    return 0
