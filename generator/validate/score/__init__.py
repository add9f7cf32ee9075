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
import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from generator.runfolder import RunStore
from schemas.errors import InputError
from schemas.families import broken_named, scorers
from schemas.files import check_regular_file

CORE_SCORERS = {"qa": "generator.validate.score.qa"}
"""scorers of no paper family: ``qa`` scores answers to any run's QA shards"""


def scorer_names() -> list[str]:
    """Every name ``drivegen score`` takes: the core's and the registered paper families'."""
    return sorted(set(CORE_SCORERS) | set(scorers()))


def scorer_aliases() -> dict[str, str]:
    """{other name: scorer name}: a family's scorer is also named by the family's ``name`` (``stride_qa``, the name
    ``drivegen export`` takes), with '-' or '_' alike (``stride-qa``, ``drama_x``)."""
    out = {}
    for name, fam in scorers().items():
        for alias in (fam.name, fam.name.replace("_", "-"), name.replace("-", "_")):
            out.setdefault(alias, name)
    return {alias: name for alias, name in out.items() if alias != name and alias not in CORE_SCORERS}


def scorer_name(name: str) -> str:
    """The scorer's name for ``name`` (``scorer_aliases``); ``name`` itself when it is no alias."""
    return scorer_aliases().get(name, name)


def scorer(name: str):
    """The scorer module registered for ``drivegen score <name>`` (imported now; ``name`` or an alias of it)."""
    name = scorer_name(name)
    if name in CORE_SCORERS:
        return importlib.import_module(CORE_SCORERS[name])
    known = scorers()
    if name not in known:
        broken = broken_named(name)
        if broken is not None:
            raise InputError(f"scorer {name!r} is unavailable: its paper family {broken.line()} could not be loaded")
        raise InputError(f"unknown scorer {name!r}; available: {scorer_names()}")
    return importlib.import_module(known[name].scorer())


def _json(text: str):
    """JSON as predictions read it: an integer too long for any float becomes infinity (a non-finite value each
    scorer reports per item) instead of overflowing later."""
    return json.loads(text, parse_int=lambda s: int(s) if len(s) <= 18 else float(s))


MAX_JSON_PREDICTION_BYTES = 64 << 20
"""A JSON prediction file is parsed whole, at about eight times its size in memory (a 109 MB file peaked at 819
MB): larger predictions come as JSON Lines or Parquet, which ``read_predictions(stream=True)`` reads a record at
a time."""
MAX_PREDICTION_BYTES = 4 << 30  # JSON Lines or Parquet: millions of answers; a file past this is no predictions


def read_predictions(path: str, stream: bool = False):
    """The content of a prediction file, a local path or a URI: Parquet (recognised by its magic bytes) as a
    list of row dicts, JSON Lines (``.jsonl``) as a list, JSON as the parsed value; each scorer checks the shape
    it expects. ``stream``: Parquet and JSON Lines as an iterator of their records instead (read a batch or a
    line at a time, never whole). ``InputError`` naming the file when it is missing, unreadable, not a regular
    file, or larger than ``MAX_PREDICTION_BYTES`` (``MAX_JSON_PREDICTION_BYTES`` for JSON, parsed whole)."""
    path = str(path)
    folder, name = path.rstrip("/").rsplit("/", 1) if "://" in path else os.path.split(os.path.abspath(path))
    if "://" not in path:  # a FIFO would block, a symlink loop is not a missing file
        check_regular_file(path, "prediction file")
    store = RunStore(folder)
    try:
        size = store.size(name)
        if size is None:
            raise InputError(f"prediction file {path} does not exist", file=path)
        with store.fs.open_input_stream(store.full(name)) as fh:
            magic = fh.read(4)
    except OSError as err:
        raise InputError(f"cannot read the prediction file {path}: {err}", file=path) from None
    parquet, lines = magic == b"PAR1", name.endswith(".jsonl")
    limit = MAX_PREDICTION_BYTES if parquet or lines else MAX_JSON_PREDICTION_BYTES
    if size > limit:
        raise InputError(f"prediction file {path} is {size:,} bytes, more than {limit:,}"
                         + ("" if parquet or lines else " for a JSON file, which is parsed whole: give larger "
                            "predictions as JSON Lines (.jsonl) or Parquet, read a record at a time"), file=path)
    records = _records(store, name, path, parquet, lines) if parquet or lines else None
    if records is not None:
        return records if stream else list(records)
    try:
        text = store.read_bytes(name).decode("utf-8")
        return _json(text)
    except OSError as err:
        raise InputError(f"cannot read the prediction file {path}: {err}", file=path) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: predictions are neither Parquet nor JSON ({str(err)[:200]})", file=path) from None
    except RecursionError:
        raise InputError(f"{path}: the JSON is nested too deeply to be predictions", file=path) from None


def _records(store, name: str, path: str, parquet: bool, lines: bool):
    """The records of a Parquet or JSON Lines prediction file, read a batch or a line at a time (a generator: the
    file is opened when the first record is asked for)."""
    try:
        with store.fs.open_input_file(store.full(name)) as fh:
            if parquet:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=8192):
                    yield from batch.to_pylist()
                return
            for n, line in enumerate(io.TextIOWrapper(io.BufferedReader(fh), encoding="utf-8"), 1):
                if line.strip():
                    try:
                        yield _json(line)
                    except ValueError as err:
                        raise InputError(f"{path}: line {n} is not JSON ({str(err)[:200]})", file=path) from None
    except (pa.ArrowException, OSError) as err:
        what = "unreadable Parquet predictions in" if parquet else "cannot read the prediction file"
        raise InputError(f"{what} {path}: {err}", file=path) from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: predictions are neither Parquet nor JSON ({str(err)[:200]})", file=path) from None
    except RecursionError:
        raise InputError(f"{path}: the JSON is nested too deeply to be predictions", file=path) from None
