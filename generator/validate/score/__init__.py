"""Scorers of models on what drivegen generates: ``drivegen score FAMILY --pred PRED TARGET``.

Each family's scorer is one module here exposing

- ``NAME``: the family name on the command line (``drivegen score NAME``);
- ``HELP``: one line for ``drivegen score -h``;
- ``score(pred_path: str, target: str, **options) -> dict``: the metrics (JSON-serialisable). ``target`` is a
  run folder or that family's export (local path or URI). Malformed predictions are reported per item in
  ``result["problems"]`` (never a crash); unusable input (no target, unreadable prediction file) raises
  ``schemas.errors.InputError``;
- ``to_text(result: dict) -> str``: the human summary the command prints.

Registering a scorer is one line in ``SCORERS`` below (module path, imported on use so a broken or heavy
module costs nothing to the other scorers' users).
"""
from __future__ import annotations

import importlib

SCORERS: dict[str, str] = {
    "intention": "generator.validate.score.intention",
    "pie": "generator.validate.score.pie",
    "drama-x": "generator.validate.score.drama_x",
}


def scorer(name: str):
    """The scorer module registered as ``name``."""
    from schemas.errors import InputError

    if name not in SCORERS:
        raise InputError(f"unknown scorer {name!r}; available: {sorted(SCORERS)}")
    return importlib.import_module(SCORERS[name])
