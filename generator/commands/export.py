"""``drivegen export NAME RUN [--out DIR]``: write one of the registered paper families' exports of a run
folder (NAME: e.g. ``bench`` for STRIDE-QA-Bench, ``intention`` for Intention-Drive, or a third-party
family's), the same files the end of ``drivegen run`` writes into ``RUN/<folder>``.

DIR (local path or URI) must be new, empty or an earlier export of the same kind: only its own files are
replaced. Without ``--out`` the export is written into the run folder. A family's own export command
(``drivegen export_bench``, ...) offers its extra options. Exit codes: 0 = exported, 2 = unusable input.
"""
from __future__ import annotations

import argparse
import json

from generator.runfolder import RunReader
from schemas.config import load_config
from schemas.families import exports


def _exports() -> dict:
    return {exp.name: (fam, exp) for fam, exp in exports()}


def add_parser(subparsers) -> argparse.ArgumentParser:
    known = _exports()
    p = subparsers.add_parser("export", help="write a paper family's export of a run folder",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n\n", 1)[1] + "\nexports: " + ", ".join(
                                  f"{name} ({fam.title})" for name, (fam, _) in known.items()))
    p.add_argument("name", choices=sorted(known), help="which export")
    p.add_argument("run", help="run folder (path or URI)")
    p.add_argument("--out", default=None, help="export folder (path or URI; default: RUN/<the export's folder>)")
    p.add_argument("--config", default=None,
                   help="pipeline config YAML whose family sections the export uses (default: the run's)")
    return p


def main(args) -> int:
    fam, exp = _exports()[args.name]
    reader = RunReader(args.run)
    cfg = load_config(args.config) if args.config else reader.config()
    summary = exp.run(reader, cfg, out=args.out)
    where = args.out or reader.store.uri_of(exp.folder)
    shown = {k: v for k, v in summary.items() if not isinstance(v, (list, dict)) or k == "counts"}
    print(json.dumps(shown, indent=2, default=str))
    print(f"{fam.title} export '{exp.name}': {where}")
    return 0
