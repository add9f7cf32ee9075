"""``drivegen run``: logs -> detection -> tracking -> segmentation -> visibility -> attributes -> QA ->
writers, as one streaming Ray Dataset (see ``generator.pipeline``).

    drivegen run --out OUT                                    # a few generated scenes, embedded local Ray
    drivegen run --out OUT --source av2 --data LOGS           # your logs (nuscenes: --version V)
    drivegen run --out OUT --source jaad --data JAAD          # camera-only JAAD videos (PIE samples, intent)
    drivegen run --out s3://bucket/run --address auto ...     # join a Ray cluster (or set RAY_ADDRESS)
    drivegen run --resume OUT                                 # finish an interrupted run
    drivegen run --out OUT --overwrite                        # replace a finished run drivegen made in OUT

Ends by writing the HTML report (``drivegen report``) into OUT/report/ (``report.on_run: false`` skips it) and
printing its path.

Exit codes: 0 = every scene finished, 1 = some scene failed (see OUT/errors/ and OUT/summary.json) or the
card/bench export or the report failed, 2 = unusable input (message names the file and what to do) or a
Ray cluster that cannot be joined (its address and why: unreachable, authentication, version mismatch).
"""
from __future__ import annotations

import argparse
import logging
import sys

from generator.commands.args import port_number, positive_int, seed
from generator.runfolder import RunReader
from schemas import layout

log = logging.getLogger("drivegen.run")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("run", help="generate a QA dataset from driving logs (Ray Data pipeline)",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--out", default=None, help="run folder: local path or URI (file://, s3://, gs://, ...)")
    p.add_argument("--source", choices=("nuscenes", "av2", "jaad"), default=None,
                   help="log format of --data (default without --data: generated nuScenes-format logs; jaad: "
                        "camera-only videos: each paper family's video labels, see generator.pipeline.video)")
    p.add_argument("--data", default=None, help="the logs: a nuScenes dataroot, an AV2 folder (of logs, or one log) or "
                   "a JAAD folder (annotations/, clips/), local or a URI such as s3://bucket/nuscenes (read through "
                   "each node's cache: sources.cache_dir)")
    p.add_argument("--version", default=None, help="nuScenes table version (default: the only one present)")
    p.add_argument("--config", default=None, help="pipeline config YAML (default: built-in paper defaults)")
    p.add_argument("--address", default=None,
                   help="join this Ray cluster ('auto', host:port; default: RAY_ADDRESS, else embedded Ray)")
    p.add_argument("--resume", nargs="?", const=True, default=None, metavar="OUT",
                   help="finish an interrupted run: reads OUT/config.yaml, OUT/source.json, OUT/scenes.json "
                        "and skips scenes that have a manifest")
    p.add_argument("--overwrite", action="store_true",
                   help="OUT holds a finished run: delete its files and run again (a folder holding files drivegen "
                        "did not write, or an unfinished run, is refused)")
    p.add_argument("--force", action="store_true",
                   help="with --resume: continue although config.yaml or source.json changed since the run started")
    p.add_argument("--scenes", type=positive_int, default=None, metavar="N",
                   help="only the first N scenes (generated logs: how many to generate, default 3)")
    p.add_argument("--seed", type=seed, default=0, help="seed of the generated logs")
    p.add_argument("--local", action="store_true", help="run the same stages in this process, without Ray")
    p.add_argument("--describe", action="store_true",
                   help="print the stages a run with this --config and --source streams (needs -> makes, how each "
                        "runs, what it does) and exit without running")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--metrics-port", type=port_number, default=None, metavar="PORT",
                   help="serve the embedded Ray's live metrics (Prometheus text: drivegen's counters, Ray Data's, and "
                        "the node's CPU, memory, disk, network and per-process figures) on http://HOST:PORT/metrics; "
                        "a port in use is refused before anything is written")
    p.add_argument("--metrics-host", choices=("127.0.0.1", "0.0.0.0"), default="127.0.0.1",
                   help="where --metrics-port listens: 127.0.0.1 (default: this machine only, as the whole embedded "
                        "Ray) or 0.0.0.0 (every interface, for a Prometheus elsewhere: the embedded Ray then listens "
                        "on every interface, its control ports behind its token, the metrics without authentication)")
    return p




def _fail(msg: str) -> int:
    print(f"drivegen run: error: {msg}", file=sys.stderr)
    return 2


def main(args) -> int:
    # lazy: generator.pipeline loads pycocotools, scipy, which this module needs only here
    from generator.pipeline import RunStore, describe_stages, format_summary, run

    if args.describe:
        print(describe_stages(args.config, args.source), end="")
        return 0
    out = args.out
    if isinstance(args.resume, str):
        if out and out != args.resume:
            return _fail(f"--resume {args.resume} and --out {out} name different run folders")
        out = args.resume
    if not out:
        return _fail("give --out OUT (or --resume OUT)")
    resume = args.resume is not None
    if resume and (args.config or args.source or args.data or args.version):
        return _fail("--resume reuses the run's own config.yaml and source.json; drop --config/--source/--data/--version")
    if args.force and not resume:
        return _fail("--force goes with --resume")
    if args.overwrite and resume:
        return _fail("--overwrite starts the run again; --resume finishes it: choose one")
    if args.data and not args.source:
        return _fail("--data needs --source nuscenes|av2|jaad")
    if args.source and not args.data:
        return _fail(f"--source {args.source} needs --data PATH (the logs)")
    if args.metrics_port and args.local:
        return _fail("--metrics-port serves the embedded Ray's metrics; --local runs without Ray")
    if args.metrics_host != "127.0.0.1" and not args.metrics_port:
        return _fail("--metrics-host goes with --metrics-port")
    result = run(out, source=args.source, data=args.data, version=args.version, config=args.config,
                 address=args.address, resume=resume, force=args.force, overwrite=args.overwrite,
                 scenes=args.scenes, seed=args.seed,
                 executor="local" if args.local else "ray", progress=not args.no_progress,
                 verbose=getattr(args, "verbose", False), report=write_report, started_at=args.started_at,
                 metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    print(format_summary(result.summary))
    print(f"summary: {RunStore(out).uri_of('summary.json')}")
    if result.report_line:
        print(result.report_line)
    if result.report_error:
        print(f"drivegen run: the report could not be written: {result.report_error} (write it with "
              f"`drivegen report {out} --out DIR`)", file=sys.stderr)
    return result.exit_code


def write_report(store) -> str | None:
    """End of a run: the HTML report (``drivegen report``) in the run folder (``OUT/report``, on whatever
    filesystem OUT is; ``drivegen report OUT`` makes a local copy of a remote run's) when ``report.on_run`` and
    a scene finished. Returns its one-line description (None when none is due); raises ``DrivegenError`` when it
    could not be written (the run's data stay as they are)."""
    # lazy: generator.report loads cv2, jinja2, pycocotools, which this module needs only here
    from generator.report import build_report

    reader = RunReader(store)
    if not reader.config().report.on_run or not reader.scene_ids():
        return None
    return build_report(reader, reader.store.uri_of(layout.REPORT_DIR), parts=True).line()  # finalize built them
