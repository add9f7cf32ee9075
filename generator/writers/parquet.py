"""QA rows -> size-bounded Parquet shards named by split and scene (``OUT/qa/<split>-<safe scene>-<k:05d>.parquet``).

A scene belongs to one split (``generator.qa.scene_split``), which leads its shards' names, so one split's
rows are one glob (``qa/train-*.parquet``, ``schemas.layout.split_glob``): what the dataset card's
``data_files`` name, and what ``datasets`` infers from the names alone.

A scene's shards are its whole QA set: rewriting a scene (``regenerate``) writes shards 0..n-1 under
temporary names, renames each into place atomically, then removes that scene's stale shards numbered
n and above, so readers never see a half-written file and never see rows from an older run mixed in.
The files are plain Parquet readable by ``pyarrow``, ``pandas`` and
``datasets.load_dataset("parquet", data_files=...)``, with the ``schemas.tables.QA`` columns and schema
metadata, except that fixed-size lists (boxes ``[4]``, RLE ``size [2]``) are stored as variable-size
lists, like every drivegen table (``schemas.tables.write_parquet``: pyarrow 25 cannot read back null
fixed-size lists). ``read_qa(paths)`` (``schemas.tables.read_parquet``) gives the exact QA types back.
"""
from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from schemas.config import WriterConfig
from schemas.layout import TABLES, check_split, scene_file
from schemas.tables import QA, check_schema, compact_dictionaries, read_parquet, to_storage, write_parquet
from schemas.tables import storage_schema  # noqa: F401  (re-exported: the one implementation is in schemas)
from schemas.vocab import QA_SPLITS

QA_DIR = TABLES["qa"].folder
QA_STORED = storage_schema(QA)  # the QA columns as shards store them


def qa_shard_path(out_dir: str | os.PathLike, scene_id: str, k: int, split: str) -> Path:
    """``out_dir/qa/<split>-<safe scene>-<k:05d>.parquet`` (``out_dir`` is the run folder root)."""
    return Path(out_dir) / scene_file("qa", scene_id, k, split)


def scene_split_of(table: pa.Table, scene_id: str) -> str | None:
    """The one split of a scene's QA rows (None for no rows); ValueError naming the scene when its rows
    carry several splits, none, or one outside ``schemas.vocab.QA_SPLITS``."""
    if table.num_rows == 0:
        return None
    splits = pc.unique(table.column("split")).to_pylist()
    if len(splits) != 1 or splits[0] not in QA_SPLITS:
        raise ValueError(f"QA rows of scene '{scene_id}' carry splits {splits}; a scene's rows must all carry one "
                         f"of {list(QA_SPLITS)} (its shards are named by it)")
    return check_split(splits[0], f"QA rows of scene '{scene_id}'")


def numbered_files(path_of: Callable[[int], Path]) -> list[Path]:
    """Existing files ``path_of(0), path_of(1), ...`` up to the first missing number. A scene's shards are
    numbered contiguously from 0, so this costs one stat per shard, not a scan of the whole folder."""
    out = []
    for k in itertools.count():
        p = path_of(k)
        if not p.exists():
            return out
        out.append(p)


def scene_qa_shards(out_dir: str | os.PathLike, scene_id: str, split: str | None = None) -> list[Path]:
    """The scene's existing QA shards in shard order: ``<split>-<stem>-00000``, ``-00001``, ... probed until
    the first missing number (a scene's shards are always numbered contiguously from 0, see
    ``write_qa_shards``), so the cost does not grow with the number of scenes in the folder. Every split of
    ``schemas.vocab.QA_SPLITS`` is probed unless ``split`` is given."""
    return [p for sp in ([split] if split else QA_SPLITS)
            for p in numbered_files(lambda k, sp=sp: qa_shard_path(out_dir, scene_id, k, sp))]


def all_qa_shards(out_dir: str | os.PathLike) -> list[Path]:
    """Every committed QA shard of a run folder, sorted by name (temporary files excluded)."""
    d = Path(out_dir) / QA_DIR
    return sorted(p for p in d.glob("*.parquet") if not p.name.startswith(".")) if d.is_dir() else []


def read_qa(paths) -> pa.Table:
    """QA shards (a path, a folder or a list of paths) as one table with the exact ``schemas.tables.QA``
    types."""
    return read_parquet(list(paths) if isinstance(paths, (list, tuple)) else paths, QA)


def _footer_bytes(schema: pa.Schema, compression: str) -> int:
    """Size of an empty Parquet file with ``schema``: the fixed cost (footer, schema, metadata) of a shard."""
    key = (schema.serialize().to_pybytes(), compression)
    if key not in _FOOTER_CACHE:
        _FOOTER_CACHE[key] = _empty_file_bytes(schema, compression)
    return _FOOTER_CACHE[key]


_FOOTER_CACHE: dict[tuple[bytes, str], int] = {}


def _empty_file_bytes(schema: pa.Schema, compression: str) -> int:
    sink = pa.BufferOutputStream()
    write_parquet(sink, schema.empty_table(), compression=compression)
    return sink.getvalue().size


def _write_tmp(tmp: Path, table: pa.Table, compression: str, statistics: bool | list[str] = True,
               compact: bool = True, fsync: bool = True) -> int:
    """Write ``table`` to the temporary file ``tmp``, fsync it (``fsync``), return its size in bytes."""
    write_parquet(tmp, table, compression=compression, compact=compact, write_statistics=statistics)
    if not fsync:
        return os.stat(tmp).st_size
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
        return os.fstat(fh.fileno()).st_size


def write_bounded(table: pa.Table, paths: Iterator[Path], max_rows: int, max_bytes: int,
                  compression: str = "zstd", statistics: bool | list[str] = True, fsync: bool = True,
                  rows_out: list[int] | None = None) -> list[Path]:
    """Write contiguous runs of ``table`` to successive ``paths``; each file holds at most ``max_rows``
    rows and at most ``max_bytes`` bytes on disk (a single row too large for the bound gets a file of its
    own). Each file is written under a temporary name, fsynced (``fsync``; a staging folder whose files are
fsynced when committed passes False) and renamed into place. ``statistics``:
    Parquet min/max statistics for all columns (True), none, or the named ones. ``rows_out``: gets each
    file's row count.

    The first guess of rows per file is the byte budget left after the fixed Parquet footer over the
    table's mean in-memory row size; a run whose Arrow size or written file exceeds the bound is halved
    and retried (rows differ in size: long questions, many groundings).
    """
    n = table.num_rows
    if n == 0:
        return []
    # once here, so sizes are those of the stored types and of this table's own dictionaries (a slice of a
    # batch shares the batch's); a single file needs nothing more, several are compacted one by one. One chunk
    # per column, as write_parquet's: the bytes depend on the rows, not on how the table was put together
    table = compact_dictionaries(to_storage(table).combine_chunks())
    budget = max(1, max_bytes - _footer_bytes(table.schema, compression))
    step = int(max(1, min(max_rows, budget // max(1.0, table.nbytes / n))))
    written: list[Path] = []
    off = 0
    while off < n:
        length = min(step, n - off)
        while length > 1 and table.slice(off, length).nbytes > budget:
            length //= 2
        path = next(paths)
        while True:
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
            try:
                size = _write_tmp(tmp, table.slice(off, length), compression, statistics, compact=length < n,
                                  fsync=fsync)
                if size <= max_bytes or length == 1:
                    break
            except BaseException:
                tmp.unlink(missing_ok=True)  # a failed write leaves no temporary file behind
                raise
            tmp.unlink()
            length //= 2
        os.replace(tmp, path)
        written.append(path)
        if rows_out is not None:
            rows_out.append(length)
        off += length
    return written


def write_qa_shards(table: pa.Table, out_dir: str | os.PathLike, scene_id: str,
                    cfg: WriterConfig | None = None, fsync: bool = True) -> list[Path]:
    """Write one scene's QA rows as shards ``out_dir/qa/<split>-<safe scene>-<k:05d>.parquet``, k = 0, 1, ...

    ``out_dir`` is the run folder root. ``table`` follows ``schemas.tables.QA`` (cast with
    ``check_schema``; a mismatch raises ValueError naming the scene), or is already in its stored form
    (``to_storage(qa)``: a caller that splits one batch into scenes casts once), and every row must carry
    ``scene_id == scene_id`` and one split (``scene_split_of``). Shards hold at most ``cfg.parquet_max_rows`` rows and
    ``cfg.parquet_max_bytes`` bytes on disk; rows keep their order. The scene's stale shards numbered
    past the new count, and those under another split, are removed afterwards; an empty table leaves the
    scene with no shards.
    ``fsync=False`` for a staging folder (the commit fsyncs each file as it moves it into place).
    Returns the written paths in shard order.
    """
    cfg = cfg or WriterConfig()
    if not table.schema.equals(QA_STORED, check_metadata=True):
        table = check_schema(table, QA, where=f"QA rows of scene '{scene_id}'")
    if table.num_rows:
        scenes = pc.unique(table.column("scene_id")).to_pylist()
        if scenes != [scene_id]:
            raise ValueError(f"write_qa_shards(scene '{scene_id}'): table holds rows of scenes {scenes}; "
                             "write one scene at a time")
    split = scene_split_of(table, scene_id)
    qa_dir = Path(out_dir) / QA_DIR
    qa_dir.mkdir(parents=True, exist_ok=True)
    old = scene_qa_shards(out_dir, scene_id)
    paths = (qa_shard_path(out_dir, scene_id, k, split) for k in itertools.count())
    # write_bounded removes its own temporary file on failure: no scan of the (possibly huge) qa/ folder
    written = write_bounded(table, paths, cfg.parquet_max_rows, cfg.parquet_max_bytes, cfg.compression,
                            statistics=list(cfg.qa_statistics_columns), fsync=fsync)
    # stale shards of an earlier, longer write (or one under another split): removed from the highest number
    # down, so an interrupted cleanup still leaves the numbers contiguous from 0
    keep = set(written)
    for p in reversed(old):
        if p not in keep:
            p.unlink(missing_ok=True)
    return written
