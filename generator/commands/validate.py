"""``drivegen validate RUN``: detection and tracking metrics of a run against its labelled logs.

Writes ``validate/report.md`` and ``validate/report.json`` into the run folder (or ``--out``) and prints
the Markdown. Exit codes: 0 = done and every requested gate met, 1 = a gate not met, 2 = unusable input
(message on stderr says which input and what to do).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from generator.runfolder import RunReader, RunStore
from generator.types import DrivegenError
from generator.validate.report import to_json, to_markdown
from schemas import layout
from schemas.config import ReportConfig

log = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "validate", help="detection/tracking metrics (nuScenes devkit) of a run against labelled logs",
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("run", help="finished run folder (local path or URI)")
    p.add_argument("--logs", default=None,
                   help="the labelled logs (nuScenes dataroot or AV2 folder); default: the one in RUN/source.json")
    p.add_argument("--out", default=None, help="write report.md/report.json here instead of RUN/validate/")
    p.add_argument("--scenes", nargs="+", default=None, help="only these scene ids")
    p.add_argument("--tracking-thresholds", type=int, default=40,
                   help="recall thresholds AMOTA averages over (devkit: 40; cost is linear in it)")
    p.add_argument("--workers", type=int, default=None,
                   help="processes for per-class tracking evaluation (default: min(classes, CPUs))")
    p.add_argument("--keep-empty-predictions", action="store_true",
                   help="score predicted boxes with no LiDAR point in them (the devkit's convention for submissions, "
                        "num_pts -1); by default the devkit's zero-point filter removes them like empty GT boxes")
    p.add_argument("--no-tracking", action="store_true", help="detection metrics only (skips TrackingEval)")
    p.add_argument("--no-label-agreement", action="store_true",
                   help="skip re-running attributes and QA on the labels")
    p.add_argument("--min-map", type=float, default=None, help="fail (exit 1) when mAP is below")
    p.add_argument("--min-nds", type=float, default=None, help="fail when NDS is below")
    p.add_argument("--min-amota", type=float, default=None, help="fail when AMOTA is below")
    p.add_argument("--max-idsw", type=int, default=None, help="fail when ID switches exceed")
    p.add_argument("--min-label-agreement", type=float, default=None,
                   help="fail when the share of QA answers within tolerance is below")
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown report")
    return p


def main(args) -> int:
    os.environ.setdefault("TQDM_DISABLE", "1")  # the devkit's GT loader draws progress bars
    # lazy: generator.validate.run loads nuscenes, scipy, which this module needs only here
    from generator.validate.run import ValidateOptions, validate_run

    if args.tracking_thresholds < 2:
        print("drivegen validate: error: --tracking-thresholds must be at least 2", file=sys.stderr)
        return 2
    gates = {"min_map": args.min_map, "min_nds": args.min_nds, "min_amota": args.min_amota,
             "max_idsw": args.max_idsw, "min_label_agreement": args.min_label_agreement}
    if args.no_tracking and (args.min_amota is not None or args.max_idsw is not None):
        print("drivegen validate: error: --min-amota/--max-idsw need tracking metrics; drop --no-tracking",
              file=sys.stderr)
        return 2
    if args.min_label_agreement is not None and args.no_label_agreement:
        print("drivegen validate: error: --min-label-agreement needs the label agreement; drop "
              "--no-label-agreement", file=sys.stderr)
        return 2
    opts = ValidateOptions(logs=args.logs, scenes=args.scenes, tracking_thresholds=args.tracking_thresholds,
                           workers=args.workers, tracking=not args.no_tracking,
                           label_agreement=not args.no_label_agreement,
                           keep_empty_predictions=args.keep_empty_predictions,
                           gates={k: v for k, v in gates.items() if v is not None})
    try:
        RunReader(args.run).require_3d("drivegen validate")
        report = validate_run(args.run, opts)
    except DrivegenError as err:
        print(f"drivegen validate: error: {err}", file=sys.stderr)
        return 2
    md = to_markdown(report)
    store, prefix = (RunStore(args.out), "") if args.out else (RunStore(args.run), "validate/")
    store.mkdirs(prefix.rstrip("/"))
    store.write_bytes(f"{prefix}report.md", md.encode())
    store.write_bytes(f"{prefix}report.json", to_json(report).encode())
    if not args.quiet:
        print(md)
    log.info("wrote %s", store.uri_of(f"{prefix}report.md"))
    gaps = report.get("perception_gaps") or {}
    if gaps.get("scored_failed_frames"):
        print(f"drivegen validate: {gaps['scored_failed_frames']} scored frame(s) have no predictions because "
              "perception failed on them (the run's issues/ table; first: "
              + ", ".join(f"{e['scene_id']} frame {e['frame_index']} ({e['reason']})" for e in gaps["examples"][:3])
              + "): their objects are scored as missed, so this run is not a pass; fix the inputs and run "
              "`drivegen run --resume`, or validate only the other scenes with --scenes", file=sys.stderr)
    if not args.out:
        _refresh_run_views(args.run)
    if not report["passed"]:
        failed = [f"{k} ({v['metric']} = {v['value']:.4g}, threshold {v['threshold']})"
                  for k, v in report["gates"].items() if not v["ok"]]
        print("drivegen validate: gates not met: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


def _refresh_run_views(run: str) -> None:
    """Rewrite what shows the run's validation, where the run has it: the dataset card (``README.md``) and the
    HTML report (``report/``, with the settings it was built with), so both carry the figures just written. A
    failure is a warning: the validation report itself is written."""
    # lazy: generator.pipeline.exports loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.exports import write_run_card
    # lazy: generator.report loads cv2, jinja2, pycocotools, which this module needs only here
    from generator.report import build_report
    # lazy: generator.report.site loads cv2, jinja2, pycocotools, which this module needs only here
    from generator.report.site import MARKER

    reader = RunReader(run)
    views = []
    if reader.store.exists(layout.CARD):
        views.append(("dataset card", layout.CARD, lambda: write_run_card(reader, reader.summary())))
    marker = f"{layout.REPORT_DIR}/{MARKER}"

    def report():
        built_with = ReportConfig.model_validate(reader.store.read_json(marker).get("config") or {})
        build_report(reader, reader.store.uri_of(layout.REPORT_DIR), built_with)

    if reader.store.exists(marker):
        views.append(("report", f"{layout.REPORT_DIR}/index.html", report))
    for what, path, write in views:
        try:
            write()
            log.info("%s %s updated with the validation figures", what, reader.store.uri_of(path))
        except Exception as err:  # noqa: BLE001 - the report is written; a stale view is reported, not fatal
            print(f"drivegen validate: warning: the {what} {reader.store.uri_of(path)} was not updated: "
                  f"{type(err).__name__}: {err}", file=sys.stderr)
