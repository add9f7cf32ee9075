"""Scorers of models on what drivegen generates: ``drivegen score FAMILY --pred PRED TARGET``.

Each paper family's scorer is one module of its package (``schemas.families``: ``PaperFamily.scorer``), and
``CORE_SCORERS`` are the core's (``qa``: answers to any run's QA shards); each module exposes

- ``NAME``: the family name on the command line (``drivegen score NAME``);
- ``HELP``: one line for ``drivegen score -h``;
- ``score(pred_path: str, target: str, **options) -> dict``: the metrics (JSON-serialisable). ``target`` is a
  run folder or that family's export (local path or URI). Malformed predictions are reported per item in
  ``result["problems"]`` (never a crash); unusable input (no target, unreadable prediction file) raises
  ``schemas.errors.InputError``;
- ``to_text(result: dict) -> str``: the human summary the command prints.

The module is imported on use, so a broken or heavy scorer costs nothing to the other scorers' users.
"""
from __future__ import annotations

import importlib

CORE_SCORERS = {"qa": "generator.validate.score.qa"}
"""scorers of no paper family: ``qa`` scores answers to any run's QA shards"""


def scorer_names() -> list[str]:
    """Every name ``drivegen score`` takes: the core's and the registered paper families'."""
    from schemas.families import scorers

    return sorted(set(CORE_SCORERS) | set(scorers()))


def scorer(name: str):
    """The scorer module registered for ``drivegen score <name>`` (imported now)."""
    from schemas.errors import InputError
    from schemas.families import scorers

    if name in CORE_SCORERS:
        return importlib.import_module(CORE_SCORERS[name])
    known = scorers()
    if name not in known:
        raise InputError(f"unknown scorer {name!r}; available: {scorer_names()}")
    return importlib.import_module(known[name].scorer())


def _json(text: str):
    """JSON as predictions read it: an integer too long for any float becomes infinity (a non-finite value each
    scorer reports per item) instead of overflowing later."""
    import json

    return json.loads(text, parse_int=lambda s: int(s) if len(s) <= 18 else float(s))


def read_predictions(path: str):
    """The content of a prediction file, a local path or a URI: Parquet (recognised by its magic bytes) as a
    list of row dicts, JSON Lines (``.jsonl``) as a list, JSON as the parsed value; each scorer checks the shape
    it expects. ``InputError`` naming the file when it is missing or unreadable."""
    import io
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from generator.runfolder import RunStore
    from schemas.errors import InputError

    path = str(path)
    folder, name = path.rstrip("/").rsplit("/", 1) if "://" in path else os.path.split(os.path.abspath(path))
    if "://" not in path:  # a FIFO would block, a symlink loop is not a missing file
        from schemas.files import check_regular_file

        check_regular_file(path, "prediction file")
    store = RunStore(folder)
    if not store.exists(name):
        raise InputError(f"prediction file {path} does not exist", file=path)
    try:
        data = store.read_bytes(name)
    except OSError as err:
        raise InputError(f"cannot read the prediction file {path}: {err}", file=path) from None
    if data[:4] == b"PAR1":
        try:
            return pq.read_table(io.BytesIO(data)).to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise InputError(f"unreadable Parquet predictions in {path}: {err}", file=path) from None
    try:
        text = data.decode("utf-8")
        if name.endswith(".jsonl"):
            return [_json(line) for line in text.splitlines() if line.strip()]
        return _json(text)
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: predictions are neither Parquet nor JSON ({str(err)[:200]})", file=path) from None
    except RecursionError:
        raise InputError(f"{path}: the JSON is nested too deeply to be predictions", file=path) from None
