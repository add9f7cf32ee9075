"""``drivegen export_bench RUN [--out DIR]``: the run's ego-spatiotemporal scene groups as STRIDE-QA-Bench
files (annotation_files/strideqa_bench_t{0..3}.json, annotation_sheet.csv, images/), which the public
toolkit's inference and evaluator read unchanged:

    python -m strideqa_bench.inference.models.<model> --annotation-dir DIR/annotation_files --image-folder DIR ...
    python -m strideqa_bench.benchmark --annotation-dir DIR/annotation_files --input-dir PRED --output-dir PRED

Exit codes: 0 = exported (possibly zero groups, see export_summary.json), 2 = unusable input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export_bench", help="export STRIDE-QA-Bench files from a finished run",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("run", help="run folder (local path)")
    p.add_argument("--out", default=None, help="bench folder to write (default: RUN/bench)")
    p.add_argument("--config", default=None, help="pipeline config YAML (default: RUN/config.yaml)")
    p.add_argument("--split", action="append", default=None,
                   help="use only QA rows of this split (repeatable; e.g. --split val for a held-out bench)")
    p.add_argument("--image-root", default=None, help="folder that relative image paths are relative to")
    return p


def main(args) -> int:
    from generator.types import DrivegenError
    from generator.writers.bench_export import export_bench
    from schemas.config import ConfigError, load_config

    run = Path(args.run)
    if not (run / "attributes").is_dir():
        print(f"drivegen export_bench: error: {run} is not a run folder (no attributes/ inside); "
              "pass the --out folder of a finished `drivegen run`", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args.config) if args.config else None
        summary = export_bench(run, args.out, cfg=cfg, splits=args.split, image_root=args.image_root)
    except (ConfigError, DrivegenError) as err:
        print(f"drivegen export_bench: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0
