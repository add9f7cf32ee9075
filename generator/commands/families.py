"""``drivegen families``: the registered paper families (built in, then installed plugins) with what each adds:
its config section, QA families, exports, scorer and commands; then every family that could not be loaded,
with its error (it is left out: its settings, exports, scorer and commands are refused naming it; everything
else works). Exit codes: 0 = every family loaded, 1 = some could not be."""
from __future__ import annotations

import argparse

from schemas.families import broken_families, families, scorers


def add_parser(subparsers) -> argparse.ArgumentParser:
    return subparsers.add_parser("families", help="list the paper families, and those that could not be loaded",
                                 description=__doc__)


def main(args) -> int:
    score_names = {id(f): n for n, f in scorers().items()}
    for fam in families().values():
        parts = [f"config section {fam.config_section}" if fam.config_section else "no settings",
                 f"QA {', '.join(fam.qa_names)}" if fam.qa_names else "",
                 _export(fam),
                 f"score {score_names[id(fam)]}" if id(fam) in score_names else "",
                 f"commands {', '.join(c.rsplit('.', 1)[-1] for c in fam.commands())}" if fam.commands() else ""]
        print(f"{fam.name}: {fam.title}; " + "; ".join(p for p in parts if p))
    broken = broken_families()
    for b in broken:
        print(f"BROKEN {b.line()}")
    print(f"{len(families())} paper families loaded" + (f", {len(broken)} could not be loaded" if broken else ""))
    return 1 if broken else 0


def _export(fam) -> str:
    """``export NAME`` (``drivegen export NAME``) and the run-folder folders its exports write, if it has one."""
    if fam.export_command() is None and not fam.exports():
        return ""
    folders = ", ".join(f"RUN/{e.folder}" for e in fam.exports())
    return f"export {fam.name}" + (f" (end of a run: {folders})" if folders else "")
