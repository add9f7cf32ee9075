"""``drivegen score FAMILY --pred PRED TARGET``: score a model's predictions on a label family that drivegen
generated (TARGET: a run folder or the family's export, local path or URI).

Prints the family's metrics and writes them as ``score.json`` into ``--out`` (default: do not write).
Malformed predictions (a missing sample, a wrong shape, an unknown label) are listed per item, never a
crash. Exit codes: 0 = scored, 2 = unusable input (the message names the file).
"""
from __future__ import annotations

import argparse
import json


def add_parser(subparsers) -> argparse.ArgumentParser:
    from schemas.families import scorers

    p = subparsers.add_parser("score", help="score a model's predictions on a generated label family",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("family", choices=sorted(scorers()), help="which family's metrics")
    p.add_argument("target", help="run folder or the family's export (path or URI)")
    p.add_argument("--pred", required=True, help="the model's predictions (format: README, the family's section)")
    p.add_argument("--out", default=None, help="folder to write score.json into")
    p.add_argument("--split", action="append", default=None, help="score only samples of this split (repeatable)")
    for fam in scorers().values():  # the options a family's scorer adds (e.g. drama-x's --bertscore-model)
        fam.score_arguments(p)
    return p


def main(args) -> int:
    from generator.runfolder import RunStore
    from generator.validate.score import scorer
    from schemas.errors import InputError
    from schemas.families import scorers

    fam = scorers()[args.family]
    mod = scorer(args.family)
    extra = {}
    for name, other in scorers().items():  # every family's options: given to the family they belong to, or refused
        opts = other.score_options(args)
        if opts and other is not fam:
            raise InputError(f"the options {sorted(opts)} apply to {name}, not {args.family}")
        if other is fam:
            extra = opts
    result = mod.score(args.pred, args.target, splits=args.split, **extra)
    print(mod.to_text(result))
    if args.out:
        out = RunStore(args.out)
        out.write_bytes("score.json", (json.dumps(result, indent=2, default=float) + "\n").encode())
        print(f"scores: {out.uri_of('score.json')}")
    return 0
