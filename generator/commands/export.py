"""``drivegen export NAME ...``: write a paper family's export (NAME: the family's name, e.g. ``stride_qa`` for
STRIDE-QA-Bench, ``intention_drive``, ``drama_x``, ``pie``, or a third-party family's).

Each family's export takes its own options (``drivegen export NAME -h``); a family that declares only its
``exports()`` takes ``RUN [--out DIR] [--config YAML]`` and writes the same files the end of ``drivegen run``
writes into ``RUN/<folder>``. NAME may also be spelled with '-' for '_', or by an export's own name
(``bench``, ``intention``). The commands ``drivegen export_bench``, ``export_intention``, ``export_drama`` and
``export_pie`` are deprecated aliases of ``drivegen export NAME``, removed in the next release.

An export folder (local path or URI) must be new, empty or an earlier export of the same kind: only its own
files are replaced. Exit codes: 0 = exported, 2 = unusable input.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from generator.runfolder import RunReader
from schemas.config import load_config
from schemas.families import command_broken, families


def _doc_parts(doc: str) -> dict:
    """argparse's description (the first paragraph) and epilog (the rest) from a command's docstring."""
    head, _, rest = doc.partition("\n\n")
    return {"description": head, "epilog": rest or None, "formatter_class": argparse.RawDescriptionHelpFormatter}


def _aliases(fam, exps) -> list[str]:
    """The other names ``drivegen export`` takes for ``fam``: its name with '-' for '_', its exports' names."""
    names = [fam.name.replace("_", "-"), *(e.name for e in exps), *(e.name.replace("_", "-") for e in exps)]
    return list(dict.fromkeys(n for n in names if n != fam.name))


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export", help="write a paper family's export (drivegen export NAME -h: its options)",
                              **_doc_parts(__doc__))
    which = p.add_subparsers(dest="export_name", required=True, metavar="NAME")
    taken: set[str] = set()
    for fam in families().values():
        exps = fam.exports()
        ref = fam.export_command()
        if ref is None and not exps:
            continue
        aliases = [a for a in _aliases(fam, exps) if a not in taken and a not in families()]
        try:
            mod = importlib.import_module(ref) if ref is not None else None
            fp = _family_parser(which, fam, mod, exps, aliases)
            if getattr(mod, "DEPRECATED_COMMAND", None):
                _deprecated_alias(subparsers, mod, fam.name)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - a family's broken export breaks only itself
            command_broken(fam.name, f"its export command module {ref!r}", err)
            continue
        taken.update([fam.name, *aliases])
        fp.set_defaults(export_family=fam.name)
    p.epilog = (p.epilog or "") + "\nexports: " + ", ".join(
        f"{name} ({fam.title})" for name, fam in families().items() if name in taken)
    return p


def _family_parser(which, fam, mod, exps, aliases: list[str]) -> argparse.ArgumentParser:
    """``drivegen export <fam.name>``'s parser: the family's own command (``mod``) or the generic one."""
    if mod is not None:
        fp = which.add_parser(fam.name, aliases=aliases, help=mod.HELP, **_doc_parts(mod.__doc__))
        mod.add_arguments(fp)
        fp.set_defaults(export_main=mod.main)
        return fp
    fp = which.add_parser(fam.name, aliases=aliases, help=f"{fam.title}: " + ", ".join(
        f"RUN/{e.folder}" for e in exps), description=f"Write the {fam.title} export of a run folder, the same files "
                                      f"the end of drivegen run writes into RUN/<folder>.")
    fp.add_argument("run", help="run folder (path or URI)")
    fp.add_argument("--out", default=None, help="export folder (path or URI; default: RUN/<the export's folder>)")
    fp.add_argument("--config", default=None,
                    help="pipeline config YAML whose family sections the export uses (default: the run's)")
    if len(exps) > 1:
        fp.add_argument("--export", dest="export_which", choices=[e.name for e in exps], required=True,
                        help="which of its exports")
    fp.set_defaults(export_main=_generic_main)
    return fp


def _deprecated_alias(subparsers, mod, family: str) -> None:
    """The family command's earlier top-level name (``mod.DEPRECATED_COMMAND``, e.g. ``export_bench``): the same
    arguments and code, after one line on stderr naming ``drivegen export <family>``."""
    old = mod.DEPRECATED_COMMAND
    note = f"drivegen {old} is deprecated and will be removed in the next release: use drivegen export {family}"
    dp = subparsers.add_parser(old, help=f"deprecated: use drivegen export {family}", **_doc_parts(mod.__doc__))
    dp.description = f"DEPRECATED: {note}.\n\n{dp.description}"
    mod.add_arguments(dp)

    def main(args) -> int:
        print(note, file=sys.stderr)
        return mod.main(args)

    dp.set_defaults(_main=main, export_family=family)


def main(args) -> int:
    return args.export_main(args)


def _generic_main(args) -> int:
    fam = families()[args.export_family]
    exps = fam.exports()
    exp = next(e for e in exps if e.name == getattr(args, "export_which", exps[0].name))
    reader = RunReader(args.run)
    cfg = load_config(args.config) if args.config else reader.config()
    summary = exp.run(reader, cfg, out=args.out)
    where = args.out or reader.store.uri_of(exp.folder)
    shown = {k: v for k, v in summary.items() if not isinstance(v, (list, dict)) or k == "counts"}
    print(json.dumps(shown, indent=2, default=str))
    print(f"{fam.title} export '{exp.name}': {where}")
    return 0

