"""``drivegen export stride_qa RUN [--out DIR]``: the run's ego-spatiotemporal scene groups as STRIDE-QA-Bench
files (annotation_files/strideqa_bench_t{0..3}.json, annotation_sheet.csv, images/), which the public
toolkit's inference and evaluator read unchanged:

    python -m strideqa_bench.inference.models.<model> --annotation-dir DIR/annotation_files --image-folder DIR ...
    python -m strideqa_bench.benchmark --annotation-dir DIR/annotation_files --input-dir PRED --output-dir PRED

RUN and DIR may be local paths or URIs. DIR must be new, empty, or an earlier export (only its own files are
replaced). Exit codes: 0 = exported (possibly zero groups: the summary says why), 2 = unusable input.
"""
from __future__ import annotations

import argparse
import json

from generator.runfolder import RunReader
from schemas.config import load_config


HELP = "export STRIDE-QA-Bench files from a finished run"
DEPRECATED_COMMAND = "export_bench"  # its earlier name, a deprecated alias until the next release


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run folder (path or URI)")
    p.add_argument("--out", default=None, help="bench folder to write (default: RUN/bench)")
    p.add_argument("--config", default=None, help="pipeline config YAML (default: RUN/config.yaml)")
    p.add_argument("--split", action="append", default=None,
                   help="use only QA rows of this split (repeatable; e.g. --split val for a held-out bench)")
    p.add_argument("--image-root", default=None, help="folder that relative image paths are relative to")


def main(args) -> int:
    # lazy: generator.families.stride_qa.export loads pandas, pycocotools, scipy, which this module needs only here
    from generator.families.stride_qa.export import export_bench

    reader = RunReader(args.run).require_3d("drivegen export stride_qa")
    cfg = load_config(args.config) if args.config else None
    summary = export_bench(reader, args.out, cfg=cfg, splits=args.split, image_root=args.image_root)
    shown = {k: v for k, v in summary.items() if k != "files"}
    print(json.dumps(shown, indent=2))
    return 0
