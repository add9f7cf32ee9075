"""``drivegen regenerate RUN [--templates DIR ...] [--seed N] [--out OUT] [--workers N | --address A]``:
rebuild a finished run's QA with other templates or another seed from its committed perception, attribute and
label tables (no models, no images); in this process, or as Ray tasks (one per batch of scenes) on local Ray or
a cluster. RUN and OUT may be local paths or URIs (s3://, gs://, ...)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from generator.commands.args import positive_int, seed
from generator.qa import load_templates
from generator.runfolder import RunReader
from schemas.config import load_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("regenerate", help="rebuild a run's QA with other templates/seed (no models)",
                              description=__doc__)
    p.add_argument("run_dir", metavar="RUN", help="a finished run folder (drivegen run --out), path or URI")
    p.add_argument("--templates", metavar="DIR", nargs="+", action="extend", default=[],
                   help="template folders or files added after the run's own (same template id replaces; a file "
                        "with 'replace: true' drops its family's earlier templates)")
    p.add_argument("--seed", type=seed, default=None, help="template/pair sampling seed (default: the run's qa.seed)")
    p.add_argument("--out", metavar="OUT", default=None,
                   help="output run folder (default RUN/regenerated); it reads RUN's other tables")
    p.add_argument("--config", default=None, help="config YAML to use instead of RUN/config.yaml")
    p.add_argument("--batch-scenes", type=positive_int, default=64, help="scenes generated together (memory vs speed)")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="1: batches one after another in this process (default); N > 1: batches as Ray tasks on "
                        "an embedded local Ray with N CPUs")
    p.add_argument("--address", default=None,
                   help="join this Ray cluster (or set RAY_ADDRESS) and run the batches there; RUN and --out "
                        "must be reachable from every node (shared or object storage)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(args) -> int:
    # lazy: generator.pipeline.regenerate loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.ray_connect import ensure_ray, stop_ray
    from generator.pipeline.regenerate import regenerate, use_retaining_memory_pool

    reader = RunReader(args.run_dir)
    cfg = load_config(args.config) if args.config else reader.config()
    if args.seed is not None:
        cfg.qa.seed = args.seed
    cfg.qa.template_dirs = [*cfg.qa.template_dirs, *[str(Path(d).resolve()) for d in args.templates]]
    out = args.out or reader.store.uri_of("regenerated")
    use_retaining_memory_pool()
    address = args.address or os.environ.get("RAY_ADDRESS")
    executor = "ray" if (address or args.workers > 1) else "local"
    templates = load_templates(cfg)
    started = False
    try:
        if executor == "ray":
            if not address:
                cfg.ray.num_cpus = args.workers
            started = ensure_ray(cfg, address)
        summary = regenerate(reader.uri, out, cfg, templates, batch_scenes=args.batch_scenes, executor=executor,
                             progress=not args.no_progress)
    finally:
        stop_ray(started)
    fam = " ".join(f"{k}={v}" for k, v in summary["by_family"].items())
    print(f"regenerated {summary['qa']} QA for {summary['scenes']} scenes ({fam}) with {summary['templates']} "
          f"templates, seed {summary['seed']} -> {summary['out_dir']}/qa ({len(summary['shards'])} shards) in "
          f"{summary['wall_s']:.2f} s ({executor}; {summary['cpu_s']:.2f} CPU s)")
    return 0
