"""``drivegen regenerate RUN_DIR [--templates DIR ...] [--seed N] [--out OUT]``: rebuild a finished run's QA
with other templates or another seed from its saved perception and attribute tables (no models, no images)."""
from __future__ import annotations

import argparse
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
    if args.seed is not None:
        cfg.qa.seed = args.seed
    cfg.qa.template_dirs = [*cfg.qa.template_dirs, *[str(Path(d).resolve()) for d in args.templates]]
    out = Path(args.out) if args.out else run_dir / "regenerated"
    use_retaining_memory_pool()
    try:
        templates = load_templates(cfg)
        summary = regenerate(run_dir, out, cfg, templates, batch_scenes=args.batch_scenes)
    except (TemplateError, RegenerateError) as err:
        print(f"drivegen regenerate: {err}", file=sys.stderr)
        return 2
    fam = " ".join(f"{k}={v}" for k, v in summary["by_family"].items())
    print(f"regenerated {summary['qa']} QA for {summary['scenes']} scenes ({fam}) with {summary['templates']} "
          f"templates, seed {summary['seed']} -> {out}/qa ({len(summary['shards'])} shards) in "
          f"{summary['wall_s']:.2f} s")
    return 0
