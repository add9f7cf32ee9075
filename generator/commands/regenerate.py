"""``drivegen regenerate RUN_DIR [--templates DIR ...] [--seed N] [--out OUT] [--workers N | --address A]``:
rebuild a finished run's QA with other templates or another seed from its saved perception and attribute tables
(no models, no images); in this process, or as Ray tasks (one per batch of scenes) on local Ray or a cluster."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from schemas.config import ConfigError, load_config


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("regenerate", help="rebuild a run's QA with other templates/seed (no models)",
                              description=__doc__)
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run folder (drivegen run --out)")
    p.add_argument("--templates", metavar="DIR", nargs="+", action="extend", default=[],
                   help="template folders or files added after the run's own (same template id replaces; a file "
                        "with 'replace: true' drops its family's earlier templates)")
    p.add_argument("--seed", type=int, default=None, help="template/pair sampling seed (default: the run's qa.seed)")
    p.add_argument("--out", metavar="OUT", default=None,
                   help="output folder (default RUN_DIR/regenerated); QA shards go to OUT/qa/")
    p.add_argument("--config", default=None, help="config YAML to use instead of RUN_DIR/config.yaml")
    p.add_argument("--batch-scenes", type=int, default=64, help="scenes generated together (memory vs speed)")
    p.add_argument("--workers", type=int, default=1,
                   help="1: batches one after another in this process (default); N > 1: batches as Ray tasks on "
                        "an embedded local Ray with N CPUs")
    p.add_argument("--address", default=None,
                   help="join this Ray cluster (or set RAY_ADDRESS) and run the batches there; RUN_DIR and --out "
                        "must be at the same paths on every node")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(args) -> int:
    from generator.qa import TemplateError, load_templates
    from generator.qa.regenerate import RegenerateError, regenerate, use_retaining_memory_pool

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"drivegen regenerate: {run_dir} is not a folder", file=sys.stderr)
        return 2
    cfg_path = Path(args.config) if args.config else run_dir / "config.yaml"
    try:
        cfg = load_config(cfg_path if cfg_path.exists() else None)
    except ConfigError as err:
        print(f"drivegen regenerate: {err}", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"drivegen regenerate: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    if args.seed is not None:
        cfg.qa.seed = args.seed
    cfg.qa.template_dirs = [*cfg.qa.template_dirs, *[str(Path(d).resolve()) for d in args.templates]]
    out = Path(args.out) if args.out else run_dir / "regenerated"
    use_retaining_memory_pool()
    address = args.address or os.environ.get("RAY_ADDRESS")
    executor = "ray" if (address or args.workers > 1) else "local"
    started = False
    try:
        templates = load_templates(cfg)
        if executor == "ray":
            from generator.pipeline.driver import ensure_ray

            if not address:
                cfg.ray.num_cpus = args.workers
            started = ensure_ray(cfg, address)
        summary = regenerate(run_dir, out, cfg, templates, batch_scenes=args.batch_scenes, executor=executor,
                             progress=not args.no_progress)
    except (TemplateError, RegenerateError) as err:
        print(f"drivegen regenerate: {err}", file=sys.stderr)
        return 2
    finally:
        if started:
            import ray

            ray.shutdown()
    fam = " ".join(f"{k}={v}" for k, v in summary["by_family"].items())
    print(f"regenerated {summary['qa']} QA for {summary['scenes']} scenes ({fam}) with {summary['templates']} "
          f"templates, seed {summary['seed']} -> {out}/qa ({len(summary['shards'])} shards) in "
          f"{summary['wall_s']:.2f} s ({executor}; {summary['cpu_s']:.2f} CPU s)")
    return 0
