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
    from generator.validate.score import SCORERS

    p = subparsers.add_parser("score", help="score a model's predictions on a generated label family",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("family", choices=sorted(SCORERS), help="which family's metrics")
    p.add_argument("target", help="run folder or the family's export (path or URI)")
    p.add_argument("--pred", required=True, help="the model's predictions (format: README, the family's section)")
    p.add_argument("--out", default=None, help="folder to write score.json into")
    p.add_argument("--split", action="append", default=None, help="score only samples of this split (repeatable)")
    p.add_argument("--bertscore-model", default=None,
                   help="drama-x: a local BERT-style model folder for the paper's action metric (BERTScore F1 through "
                        "bert-score, extra 'bertscore'); without it the action score is exact-vocabulary accuracy "
                        "and token F1")
    p.add_argument("--bertscore-layers", type=int, default=None,
                   help="drama-x: the model layer BERTScore reads (default: bert-score's choice for the model)")
    return p


def main(args) -> int:
    from generator.runfolder import RunStore
    from generator.validate.score import scorer

    import sys

    mod = scorer(args.family)
    extra = {}
    if args.bertscore_model or args.bertscore_layers is not None:
        if args.family != "drama-x":
            print(f"drivegen score: error: --bertscore-model/--bertscore-layers apply to drama-x, not {args.family}",
                  file=sys.stderr)
            return 2
        if not args.bertscore_model:
            print("drivegen score: error: --bertscore-layers needs --bertscore-model", file=sys.stderr)
            return 2
        extra = {"bertscore_model": args.bertscore_model, "bertscore_num_layers": args.bertscore_layers}
    result = mod.score(args.pred, args.target, splits=args.split, **extra)
    print(mod.to_text(result))
    if args.out:
        out = RunStore(args.out)
        out.write_bytes("score.json", (json.dumps(result, indent=2, default=float) + "\n").encode())
        print(f"scores: {out.uri_of('score.json')}")
    return 0
