"""``drivegen export drama_x RUN --out DIR``: the run's VRU frames in the DRAMA-X format (one JSON object per
frame: image path, Risk, suggested_action, Pedestrians / Cyclists with box, class, intent pair, relative
position and description), one file per scene under DIR/samples/, the marker DIR/drama_x_export.json last.

RUN and DIR may be local paths or URIs. DIR must be new, empty, or an earlier DRAMA-X export (only its own
files are replaced). Score a model on it with ``drivegen score drama-x --pred PRED.json DIR``.
Exit codes: 0 = exported, 2 = unusable input.
"""
from __future__ import annotations

import argparse
import json

from generator.families.drama_x.export import check_export_folder, image_root, records_from_run, write_export
from generator.runfolder import RunReader, RunStore
from schemas.config import load_config


HELP = "export DRAMA-X-format samples from a finished run"
DEPRECATED_COMMAND = "export_drama"  # its earlier name, a deprecated alias until the next release


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder (path or URI)")
    p.add_argument("--out", required=True, help="export folder to write (path or URI)")
    p.add_argument("--config", default=None, help="pipeline config YAML whose drama_x section to use "
                                                  "(default: RUN/config.yaml)")


def main(args) -> int:
    reader = RunReader(args.run)
    cfg = load_config(args.config).drama_x if args.config else None
    store = RunStore(args.out)
    check_export_folder(store)  # refuse a foreign folder before reading the run
    marker = write_export(store, records_from_run(reader, cfg), source=reader.uri,
                          image_root="" if reader.camera_only else image_root(reader))
    print(json.dumps({k: v for k, v in marker.items() if k != "files"}, indent=2))
    return 0
