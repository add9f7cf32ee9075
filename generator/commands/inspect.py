"""``drivegen inspect OUT``: what a run folder holds — its summary, finished and failed scenes, and whether
its output is consistent (every manifest-listed file present with its row count, no partial or temporary
file visible). Exit code 0 = consistent, 1 = problems found, 2 = not a run folder."""
from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("inspect", help="summary and consistency check of a run folder",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="run folder (local path or URI)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def main(args) -> int:
    from generator.pipeline.driver import finished_scenes, format_summary, read_errors
    from generator.pipeline.read import check_run
    from generator.pipeline.store import RunStore

    store = RunStore(args.run)
    if not store.exists("config.yaml"):
        print(f"drivegen inspect: error: {store.full('config.yaml')} is missing: not a drivegen run folder",
              file=sys.stderr)
        return 2
    scenes = store.read_json("scenes.json")["scene_ids"] if store.exists("scenes.json") else []
    done = finished_scenes(store)
    errors = read_errors(store)
    problems = check_run(store)
    summary = store.read_json("summary.json") if store.exists("summary.json") else None
    if args.json:
        print(json.dumps({"summary": summary, "finished": sorted(done), "errors": errors, "problems": problems},
                         indent=1, default=str))
    else:
        print(f"run folder: {store.uri}")
        print(f"scenes: {len(done)} finished, {len({e['scene_id'] for e in errors})} failed, "
              f"{max(0, len(scenes) - len(done) - len({e['scene_id'] for e in errors}))} not run, of {len(scenes)}")
        if summary:
            print(format_summary(summary))
        print("consistency: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
        for p in problems[:50]:
            print(f"  {p}")
    return 1 if problems else 0
