"""``drivegen score FAMILY --pred PRED TARGET``: score a model's predictions on a label family that drivegen
generated (TARGET: a run folder or the family's export, local path or URI).

Prints the family's metrics and writes them as ``score.json`` into ``--out`` (default: do not write): strict
JSON (a non-finite metric is null), replacing only a ``score.json`` drivegen wrote there.
Malformed predictions (a missing sample, a wrong shape, an unknown label) are listed per item, never a
crash. Exit codes: 0 = scored, 2 = unusable input (the message names the file).
"""
from __future__ import annotations

import argparse
import json
import math

from generator.runfolder import RunStore
from generator.validate.score import scorer, scorer_name, scorer_names
from schemas.errors import InputError
from schemas.families import scorers


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("score", help="score a model's predictions on a generated label family",
                              description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    own = ", ".join(f"{fam.name} = {name}" for name, fam in scorers().items() if fam.name != name)
    p.add_argument("family", type=scorer_name, choices=scorer_names(),
                   help=f"which family's metrics (qa: answers to a run's QA); a family's own name, with '-' or '_', "
                        f"works too ({own})")
    p.add_argument("target", help="run folder or the family's export (path or URI)")
    p.add_argument("--pred", required=True, help="the model's predictions (format: docs/scoring.md and the family's page in docs/families/)")
    p.add_argument("--out", default=None, help="folder to write score.json into")
    p.add_argument("--split", action="append", default=None, help="score only samples of this split (repeatable)")
    for fam in scorers().values():  # the options a family's scorer adds (e.g. drama-x's --bertscore-model)
        fam.score_arguments(p)
    return p


def main(args) -> int:
    fam = scorers().get(args.family)  # None for a core scorer (qa)
    mod = scorer(args.family)
    extra = {}
    for name, other in scorers().items():  # every family's options: given to the family they belong to, or refused
        opts = other.score_options(args)
        if opts and other is not fam:
            raise InputError(f"the options {sorted(opts)} apply to {name}, not {args.family}")
        if other is fam:
            extra = opts
    out = RunStore(args.out) if args.out else None
    if out is not None:
        _check_score_file(out)  # before the work: a user's file is never overwritten
    result = mod.score(args.pred, args.target, splits=args.split, **extra)
    print(mod.to_text(result))
    if out is not None:
        doc = {"format": SCORE_FORMAT, "family": args.family, **_finite(result)}
        out.write_bytes(SCORE_FILE, (json.dumps(doc, indent=2, default=float, allow_nan=False) + "\n").encode())
        print(f"scores: {out.uri_of(SCORE_FILE)}")
    return 0


SCORE_FILE = "score.json"
SCORE_FORMAT = "drivegen-score/1"  # marks a score.json drivegen wrote (the only one it replaces)


def _check_score_file(out) -> None:
    """InputError when ``out`` holds a ``score.json`` that drivegen did not write."""
    if not out.exists(SCORE_FILE):
        return
    try:
        ours = out.read_json(SCORE_FILE).get("format") == SCORE_FORMAT
    except (ValueError, AttributeError, OSError):
        ours = False
    if not ours:
        raise InputError(f"{out.uri_of(SCORE_FILE)} exists and is not a score drivegen wrote: it is left as it is; "
                         "choose another --out", file=out.uri_of(SCORE_FILE))


def _finite(value):
    """``value`` with every non-finite float (a metric over a prediction of 1e300 m) as None: score.json is
    strict JSON, which has no Infinity or NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _finite(value.item())
    return value
