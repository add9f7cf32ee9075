"""``drivegen inspect OUT``: what a run folder holds — its summary, finished and failed scenes, and whether
its output is consistent: every manifest-listed file present with its row count, no partial or temporary
file visible, no shard a reader would skip, every scene made with the run's config and source. Exit code
0 = consistent, 1 = problems found, 2 = not a run folder."""
from __future__ import annotations

import argparse
import json

from generator.runfolder import RunReader, read_lock


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("inspect", help="summary and consistency check of a run folder",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="run folder (local path or URI)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def main(args) -> int:
    # lazy: generator.pipeline.driver loads pycocotools, scipy, which this module needs only here
    from generator.pipeline.driver import format_summary

    reader = RunReader(args.run)
    scenes = reader.planned_scenes()
    done = reader.scene_ids()
    errors = reader.errors()
    failed = {e["scene_id"] for e in errors}
    problems = reader.check()
    summary = reader.summary()
    lock = read_lock(reader.store)
    if args.json:
        print(json.dumps({"summary": summary.to_json() if summary else None, "finished": done, "errors": errors, "problems": problems,
                          "lock": lock.__dict__ if lock else None}, indent=1, default=str))
    else:
        print(f"run folder: {reader.uri}")
        if reader.parent is not None:
            print(f"regenerated from: {reader.parent.uri}")
        print(f"scenes: {len(done)} finished, {len(failed)} failed, "
              f"{max(0, len(scenes) - len(done) - len(failed))} not run, of {len(scenes) or len(done)}")
        if lock is not None:
            print(f"lock: held by {lock.describe()}")
        if summary:
            print(format_summary(summary))
        print("consistency: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
        for p in problems[:50]:
            print(f"  {p}")
    return 1 if problems else 0
