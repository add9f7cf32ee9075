"""``drivegen report RUN [--out DIR]``: the run folder as a static HTML site (open DIR/index.html in a browser,
from ``file://`` or any static host). DIR defaults to RUN/report, or ./<run name>-report when RUN is remote.
Exit codes: 0 = written, 2 = not a run folder or DIR is a folder that is not a drivegen report."""
from __future__ import annotations

import argparse

from generator.commands.args import positive_int, seed
from generator.runfolder import RunReader


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="static HTML report of a run folder (summary, plots, sample browser)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="run folder (local path or URI)")
    p.add_argument("--out", default=None, help="report folder (default: RUN/report; ./<name>-report for a remote RUN)")
    p.add_argument("--seed", type=seed, default=None, help="seed of the sample browser (default: the run's report.seed)")

    p.add_argument("--samples-per-family", type=positive_int, default=None,
                   help="QA rows shown per family (default: the run's report.samples_per_family)")
    return p


def main(args) -> int:
    # lazy: generator.report loads cv2, jinja2, pycocotools, which this module needs only here
    from generator.report import build_report

    reader = RunReader(args.run)
    cfg = reader.config().report
    if args.seed is not None:
        cfg.seed = args.seed
    if args.samples_per_family is not None:
        cfg.samples_per_family = args.samples_per_family
    res = build_report(reader, args.out, cfg)
    print(res.line())
    return 0


