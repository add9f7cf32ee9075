"""``drivegen clean OUT``: delete a run folder's own files (what ``make clean`` runs), by the rule of ``drivegen run
--overwrite`` (``generator.runfolder.commit.run_files``): the run's files at its root, the files its manifests
list, its own folders and temporary names. Anything else stays (a user's notes, a file in a table folder no
manifest lists, a link: never followed); OUT itself goes once empty.

Refused, with nothing deleted: OUT is not a drivegen run folder (no ``run.json`` that drivegen wrote), or a run
is writing it (its lock is held). Exit codes: 0 = cleaned (or nothing there), 2 = refused.
"""
from __future__ import annotations

import argparse

from generator.runfolder import RunLock, RunReader, RunStore, clean_run
from schemas import layout
from schemas.errors import RunFolderError


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("clean", help="delete a run folder's own files, keeping any other",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("out", help="the run folder (path or URI)")
    return p


def main(args) -> int:
    store = RunStore(args.out)
    if not store.exists(""):
        print(f"{store.uri}: nothing there to clean")
        return 0
    state = RunReader(store, require=False).run_state  # {} when there is none
    if not (isinstance(state, dict) and str(state.get("format", "")).startswith("drivegen-run/")):
        raise RunFolderError(f"{store.uri} is not a drivegen run folder (no {layout.RUN_STATE} that drivegen run "
                             "wrote): left as it is", file=store.uri)
    with RunLock(store, f"drivegen clean {args.out}"):
        deleted, kept = clean_run(store)
    store.remove_if_empty()
    kept_line = (f"; kept {len(kept)} file(s) drivegen did not write: {', '.join(kept[:5])}"
                 f"{' ...' if len(kept) > 5 else ''}") if kept else ""
    print(f"cleaned {store.uri}: deleted the run's {deleted} file(s){kept_line}")
    return 0
