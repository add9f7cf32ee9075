"""A nuScenes-format table set as a scene index: converted once into Arrow files sliced by scene, so that no
process holds the whole set.

``nuscenes.NuScenes`` loads every table of a set into each process that opens it, at about 3.3x the tables' JSON
(real trainval, about 7,700 rows per scene: some 8 GiB per process). drivegen converts a set once instead:

- ``scenes.arrow``: one row per scene, in the scene table's order: its name, token and record (JSON), its
  sample and annotation counts, its map and its log's vehicle. The driver reads this file only.
- ``rows.arrow``: an Arrow IPC file with one record batch per scene (the same order), zstd-compressed, holding
  every row the scene reaches: its samples, their sample_data (keyframes and sweeps) with their ego poses,
  calibrated sensors and sensors, its annotations with their instances, categories, attributes and visibility
  levels, its log and the maps that list the log. Columns: ``table``, ``row`` (the row's position in its
  table), ``token``, ``record`` (the row's JSON text as the table file has it). A row several scenes reach (a
  calibrated sensor of a log's scenes, a category) is in each of their batches; each table's rows keep the
  table's order.

A worker reads the one batch of a scene it loads (those bytes only: ``SceneIndex.tables``) and rebuilds the
devkit's own view of that scene (``scene_devkit``): a ``NuScenes`` over the scene's rows, de-normalised by the
devkit's ``__make_reverse_index__`` (``sample.data``, ``sample.anns``, ``category_name``, ``channel``,
``sensor_modality``, ``log.map_token``), so ``get`` and ``box_velocity`` answer as the devkit over the whole set
does; tests/sources/test_nuscenes_index.py compares every scene's records with it. What depends on the whole table is
kept by ``row``: an instance's position there is drivegen's track id.

Where: ``<log cache>/nuscenes-index/<key>/`` (the log cache is ``sources.cache_dir``, else $DRIVEGEN_LOG_CACHE,
else ~/.cache/drivegen/logs; its size bound does not apply to the index). ``key`` is a digest of the index format
and of the 13 tables' bytes: an edited table is a new index, a copy of a set finds the old one. Hashing reads the
set once; the key of a table folder is remembered by its files' identity (device, inode, size, modification and
change times) in ``<index root>/keys/``, so a later open (each worker's) stats 13 files and reads one small file.

Conversion, once per set and node (``convert``): each table is read one record at a time, the record's text
spilled to a temporary Arrow file and only its keys kept in memory (about a tenth of the JSON); the scene of
each row is a chain of Arrow lookups; then each scene's batch is written in order. Converters that start
together (a node's workers opening a new set) take a lock per key: one converts, the others wait and read. The
index is written under a temporary name and renamed into place whole. A set of more than ``CHILD_BYTES`` of JSON
is converted in a child process (its log lines relayed, its errors raised here as they were there): its peak
is 2.4x (850 scenes at trainval density) to 3.9x (2,000 minimal scenes) the JSON, and the allocators of the
process that converts keep much of what it freed, which would stay in a run's driver for the whole run
(``bench/scale.py --minimal --counts 200``, a 34 MB set: the driver's peak 455 MiB converting in-process, 285 MiB
with the conversion in a child, 284 MiB with the index already there).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import logging.handlers
import multiprocessing
import os
import re
import shutil
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.sources.remote import INDEX_DIR, cache_root
from generator.types import SourceError

log = logging.getLogger("drivegen.sources")

FORMAT = "drivegen-nuscenes-index/2"
# the devkit's tables (``NuScenes.table_names``), in its order
TABLES = ("category", "attribute", "visibility", "instance", "sensor", "calibrated_sensor", "ego_pose", "log",
          "scene", "sample", "sample_data", "sample_annotation", "map")
# the string fields each table's rows are joined on, and the list-of-strings ones
KEYS = {"scene": ("log_token",), "sample": ("scene_token",),
        "sample_data": ("sample_token", "ego_pose_token", "calibrated_sensor_token"),
        "sample_annotation": ("sample_token", "instance_token", "visibility_token"),
        "instance": ("category_token",), "calibrated_sensor": ("sensor_token",), "map": ("filename", "category"),
        "log": ("vehicle",)}
LIST_KEYS = {"sample_annotation": "attribute_tokens", "map": "log_tokens"}
MAP_RESOLUTION_M = 0.1  # the devkit's default ``map_resolution``: the one ``NuScenes(...)`` gives its map masks
SCENES_FILE, ROWS_FILE, META_FILE = "scenes.arrow", "rows.arrow", "meta.json"
ROWS_SCHEMA = pa.schema([("table", pa.dictionary(pa.int8(), pa.string())), ("row", pa.int64()),
                         ("token", pa.string()), ("record", pa.string())])
_TABLE_TYPE = ROWS_SCHEMA.field("table").type
_CHUNK_CHARS = 1 << 22  # JSON read per step
_SPILL_ROWS = 1 << 16  # records per batch of a table's temporary file
_WRITE_ROWS = 1 << 18  # rows gathered per step of the output
_WS = re.compile(r"[ \t\n\r]*")
CHILD_BYTES = 16 << 20  # tables' JSON above which a set is converted in a child process (module docstring)


def index_root(limits) -> Path:
    """The folder of this node's scene indexes (``<log cache>/nuscenes-index``)."""
    return cache_root(limits) / INDEX_DIR


# ------------------------------------------------------------------------------------------ reading JSON
def _records(path: Path):
    """``(row, record, text)`` for each element of the JSON array in ``path``, one at a time (``text``: the
    element's JSON as the file has it). SourceError naming the file and the position when it is no array."""
    dec = json.JSONDecoder()
    with open(path, encoding="utf-8") as fh:
        buf, pos, eof, done = "", 0, False, 0  # done: characters dropped from the front of buf

        def fill() -> bool:
            nonlocal buf, pos, eof, done
            if eof:
                return False
            chunk = fh.read(_CHUNK_CHARS)
            eof = not chunk
            done += pos
            buf, pos = buf[pos:] + chunk, 0
            return bool(chunk)

        def bad(what: str):
            return SourceError(f"nuScenes tables could not be loaded: {path.name} is not a JSON array of records "
                               f"({what} at character {done + pos})", file=str(path), stage="open")

        def skip() -> bool:  # whitespace; False at the end of the file
            nonlocal pos
            while True:
                pos = _WS.match(buf, pos).end()
                if pos < len(buf) or not fill():
                    return pos < len(buf)

        if not skip() or buf[pos] != "[":
            raise bad("no opening [")
        pos += 1
        row = 0
        while True:
            if not skip():
                raise bad("no closing ]")
            if buf[pos] == "]":
                pos += 1
                if skip():
                    raise bad("text after the closing ]")
                return
            if row:
                if buf[pos] != ",":
                    raise bad(f"no ',' after record {row - 1}")
                pos += 1
                if not skip():
                    raise bad("no closing ]")
            while True:
                try:
                    rec, end = dec.raw_decode(buf, pos)
                    if end < len(buf) or eof:
                        break
                except json.JSONDecodeError as err:
                    if eof:
                        raise bad(f"record {row}: {err.msg}") from None
                fill()  # the record may go on in the next chunk (or end exactly where this one does)
            yield row, rec, buf[pos:end]
            pos = end
            row += 1
            if pos > _CHUNK_CHARS:
                done += pos
                buf, pos = buf[pos:], 0


class _Table:
    """One table read for conversion: its tokens and join keys (Arrow, in memory), its records' text spilled to
    ``spill`` (an Arrow file, memory-mapped back when it is read)."""

    def __init__(self, name: str, path: Path, spill: Path):
        self.name, self.path, self.spill = name, path, spill
        keys, listed = KEYS.get(name, ()), LIST_KEYS.get(name)
        tokens: list = []
        cols: dict[str, list] = {k: [] for k in keys}
        lists: list = []
        texts: list[str] = []
        chunks: dict[str, list] = {"token": [], **{k: [] for k in keys}, "list": []}
        schema = pa.schema([("record", pa.string())])
        self.rows = 0

        def flush(writer) -> None:
            chunks["token"].append(pa.array(tokens, pa.string()))
            for k in keys:
                chunks[k].append(pa.array(cols[k], pa.string()))
                cols[k].clear()
            if listed:
                chunks["list"].append(pa.array(lists, pa.list_(pa.string())))
                lists.clear()
            writer.write_batch(pa.record_batch([pa.array(texts, pa.string())], schema=schema))
            tokens.clear()
            texts.clear()

        with pa.ipc.new_file(str(spill), schema) as writer:
            for row, rec, text in _records(path):
                if not isinstance(rec, dict) or not isinstance(rec.get("token"), str):
                    raise SourceError(f"nuScenes tables could not be loaded: row {row} of {path.name} is not a "
                                      f"record with a token (field 'token')", file=str(path), stage="open")
                tokens.append(rec["token"])
                for k in keys:
                    v = rec.get(k)
                    cols[k].append(v if isinstance(v, str) else None)
                if listed:
                    v = rec.get(listed)
                    lists.append([x for x in v if isinstance(x, str)] if isinstance(v, list) else None)
                texts.append(text)
                if len(texts) >= _SPILL_ROWS:
                    flush(writer)
                self.rows = row + 1
            flush(writer)
        self.token = pa.chunked_array(chunks["token"], pa.string()).combine_chunks()
        self.keys = {k: pa.chunked_array(chunks[k], pa.string()).combine_chunks() for k in keys}
        self.listed = pa.chunked_array(chunks["list"], pa.list_(pa.string())).combine_chunks() if listed else None
        self._check_unique()

    def _check_unique(self) -> None:
        enc = pc.dictionary_encode(self.token)
        if len(enc.dictionary) == len(self.token):
            return
        idx = enc.indices.to_numpy()
        order = np.argsort(idx, kind="stable")
        same = np.flatnonzero(idx[order][1:] == idx[order][:-1])[0]
        a, b = int(order[same]), int(order[same + 1])
        raise SourceError(f"nuScenes tables could not be loaded: token {self.token[a].as_py()!r} is in rows {a} and "
                          f"{b} of {self.path.name} (field 'token'): a reference to it would be ambiguous",
                          file=str(self.path), stage="open")

    def records(self) -> pa.ChunkedArray:
        return pa.ipc.open_file(pa.memory_map(str(self.spill))).read_all().column("record")


def _pos(keys, tokens: pa.Array) -> np.ndarray:
    """The row in ``tokens`` of each key (int64; -1 where it is not there)."""
    return pc.index_in(keys, value_set=tokens).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _via(pos: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values[pos]``, -1 where ``pos`` is -1."""
    return np.where(pos >= 0, values[np.maximum(pos, 0)] if len(values) else -1, -1)


def _pairs(rows: np.ndarray, scenes: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (scene, row) pairs where both are known, sorted by scene then row."""
    ok = (rows >= 0) & (scenes >= 0)
    key = np.unique(scenes[ok].astype(np.int64) * max(n_rows, 1) + rows[ok])
    return key // max(n_rows, 1), key % max(n_rows, 1)


def _assign(t: dict[str, _Table]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each table's (scene, row) pairs: which scenes reach which rows."""
    n_scenes = t["scene"].rows
    scene_ix = np.arange(n_scenes, dtype=np.int64)
    sample_scene = _pos(t["sample"].keys["scene_token"], t["scene"].token)
    sd, ann = t["sample_data"], t["sample_annotation"]
    sd_scene = _via(_pos(sd.keys["sample_token"], t["sample"].token), sample_scene)
    ann_scene = _via(_pos(ann.keys["sample_token"], t["sample"].token), sample_scene)
    out = {"scene": (scene_ix, scene_ix),
           "sample": _pairs(np.arange(t["sample"].rows), sample_scene, t["sample"].rows),
           "sample_data": _pairs(np.arange(sd.rows), sd_scene, sd.rows),
           "sample_annotation": _pairs(np.arange(ann.rows), ann_scene, ann.rows),
           "ego_pose": _pairs(_pos(sd.keys["ego_pose_token"], t["ego_pose"].token), sd_scene, t["ego_pose"].rows),
           "calibrated_sensor": _pairs(_pos(sd.keys["calibrated_sensor_token"], t["calibrated_sensor"].token),
                                       sd_scene, t["calibrated_sensor"].rows),
           "instance": _pairs(_pos(ann.keys["instance_token"], t["instance"].token), ann_scene, t["instance"].rows),
           "visibility": _pairs(_pos(ann.keys["visibility_token"], t["visibility"].token), ann_scene,
                                t["visibility"].rows)}
    cs_scene, cs_row = out["calibrated_sensor"]
    out["sensor"] = _pairs(_via(cs_row, _pos(t["calibrated_sensor"].keys["sensor_token"], t["sensor"].token)),
                           cs_scene, t["sensor"].rows)
    inst_scene, inst_row = out["instance"]
    out["category"] = _pairs(_via(inst_row, _pos(t["instance"].keys["category_token"], t["category"].token)),
                             inst_scene, t["category"].rows)
    attrs = ann.listed
    flat, parent = pc.list_flatten(attrs), pc.list_parent_indices(attrs).to_numpy().astype(np.int64)
    out["attribute"] = _pairs(_pos(flat, t["attribute"].token), ann_scene[parent], t["attribute"].rows)
    scene_log = _pos(t["scene"].keys["log_token"], t["log"].token)
    out["log"] = _pairs(scene_log, scene_ix, t["log"].rows)
    maps = t["map"].listed
    flat, parent = pc.list_flatten(maps), pc.list_parent_indices(maps).to_numpy().astype(np.int64)
    listed = pa.table({"log": _pos(flat, t["log"].token), "map": parent})
    joined = listed.join(pa.table({"log": scene_log, "scene": scene_ix}), "log", join_type="inner")
    out["map"] = _pairs(joined.column("map").to_numpy(), joined.column("scene").to_numpy(), t["map"].rows)
    return out


# ------------------------------------------------------------------------------------------ converting
def convert(table_root: Path, dest: Path) -> dict:
    """Write the scene index of the tables in ``table_root`` into the folder ``dest`` (created; see the module
    docstring). Returns its ``meta.json``. SourceError naming the table file when a table is missing or is no
    JSON array of records with unique tokens."""
    t0 = time.perf_counter()
    dest.mkdir(parents=True)
    spill = dest / "spill"
    spill.mkdir()
    tables: dict[str, _Table] = {}
    for name in TABLES:
        path = table_root / f"{name}.json"
        if not path.is_file():
            raise SourceError(f"nuScenes tables could not be loaded: {name}.json is missing", file=str(path),
                              stage="open")
        tables[name] = _Table(name, path, spill / f"{name}.arrow")
        log.info("scene index: %s.json read (%d rows)", name, tables[name].rows)
    pairs = _assign(tables)
    n_scenes = tables["scene"].rows
    counts = np.zeros(n_scenes, np.int64)
    for scenes, _ in pairs.values():
        counts += np.bincount(scenes, minlength=n_scenes)
    records = {name: tables[name].records() for name in TABLES}
    with pa.OSFile(str(dest / ROWS_FILE), "wb") as sink, \
            pa.ipc.new_file(sink, ROWS_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        s0 = 0
        while s0 < n_scenes:  # scenes in steps of about _WRITE_ROWS rows: what is gathered at once stays bounded
            s1 = s0 + max(1, int(np.searchsorted(np.cumsum(counts[s0:]), _WRITE_ROWS, side="right")))
            parts, order_key = [], []
            for ti, name in enumerate(TABLES):
                scenes, rows = pairs[name]
                lo, hi = np.searchsorted(scenes, [s0, s1])
                take = pa.array(rows[lo:hi])
                parts.append(pa.table({
                    "table": pa.DictionaryArray.from_arrays(pa.array(np.full(hi - lo, ti, np.int8)),
                                                            pa.array(TABLES, pa.string())),
                    "row": take, "token": tables[name].token.take(take), "record": records[name].take(take)}))
                order_key.append(scenes[lo:hi])
            chunk = pa.concat_tables(parts)
            chunk = chunk.take(pa.array(np.argsort(np.concatenate(order_key), kind="stable")))  # by scene, table, row
            at = 0
            for s in range(s0, s1):
                n = int(counts[s])
                part = chunk.slice(at, n).combine_chunks()
                writer.write_batch(pa.record_batch([c.chunk(0) if c.num_chunks else pa.array([], c.type)
                                                    for c in part.columns], schema=ROWS_SCHEMA))
                at += n
            log.info("scene index: %d of %d scenes written", s1, n_scenes)
            s0 = s1
    del records
    scene, maps = tables["scene"], tables["map"]
    map_scene, map_row = pairs["map"]
    first_map = np.full(n_scenes, -1, np.int64)
    first_map[map_scene[::-1]] = map_row[::-1]  # pairs are sorted by row within a scene: the first one wins
    ann_scene, _ = pairs["sample_annotation"]
    scene_log = _pos(scene.keys["log_token"], tables["log"].token)
    vehicle = tables["log"].keys["vehicle"]
    scene_records = scene.records().to_pylist()
    nbr = [rec.get("nbr_samples") if isinstance(rec, dict) else None for rec in map(json.loads, scene_records)]
    pick = lambda col: pa.array([col[i].as_py() if i >= 0 else None for i in first_map], pa.string())  # noqa: E731
    out = pa.table({
        "name": pa.array([json.loads(r).get("name") for r in scene_records], pa.string()),
        "token": scene.token, "record": pa.array(scene_records, pa.string()),
        "nbr_samples": pa.array([v if isinstance(v, int) and not isinstance(v, bool) else None for v in nbr],
                                pa.int64()),
        "annotations": pa.array(np.bincount(ann_scene, minlength=n_scenes).astype(np.int64)),
        "map_filename": pick(maps.keys["filename"]), "map_category": pick(maps.keys["category"]),
        "vehicle": pa.array([vehicle[i].as_py() if i >= 0 else None for i in scene_log], pa.string()),
        "rows": pa.array(counts)})
    with pa.ipc.new_file(str(dest / SCENES_FILE), out.schema) as writer:
        writer.write_table(out)
    shutil.rmtree(spill)
    meta = {"format": FORMAT, "scenes": n_scenes, "tables": {n: tables[n].rows for n in TABLES},
            "rows": int(counts.sum()), "seconds": round(time.perf_counter() - t0, 3)}
    (dest / META_FILE).write_text(json.dumps(meta, indent=1))
    return meta


# ------------------------------------------------------------------------------------------ keys and the cache
def _identity(table_root: Path) -> str:
    """The table files' identity (path, device, inode, size, modification and change times), as a digest."""
    h = hashlib.blake2b(str(table_root.resolve()).encode(), digest_size=16)
    for name in TABLES:
        path = table_root / f"{name}.json"
        try:
            st = path.stat()
        except FileNotFoundError:
            raise SourceError(f"nuScenes tables could not be loaded: {name}.json is missing", file=str(path),
                              stage="open") from None
        h.update(f"{name}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


def content_key(table_root: Path) -> str:
    """The index key of the tables in ``table_root``: a digest of the format and of each table's bytes."""
    h = hashlib.blake2b(FORMAT.encode(), digest_size=20)
    for name in TABLES:
        h.update(f"\n{name}\n".encode())
        with open(table_root / f"{name}.json", "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def ensure_index(table_root: Path, root: Path) -> Path:
    """The folder of the scene index of ``table_root`` under ``root``, converted first when this node has none."""
    table_root = Path(table_root)
    (root / "keys").mkdir(parents=True, exist_ok=True)
    memo = root / "keys" / _identity(table_root)
    key = memo.read_text().strip() if memo.is_file() else ""
    if not key:
        key = content_key(table_root)
    path = root / key
    if not (path / META_FILE).is_file():
        (root / "locks").mkdir(exist_ok=True)
        with open(root / "locks" / f"{key}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one converter per key; the others wait here, then find it done
            if not (path / META_FILE).is_file():
                tmp = root / f".{key}.{uuid.uuid4().hex[:12]}.tmp"
                log.info("converting the nuScenes tables of %s into a scene index at %s (once per table set)",
                         table_root, path)
                if path.exists():  # no meta.json (written last): a partial copy; the lock keeps converters out
                    log.warning("removing %s: a scene index without %s", path, META_FILE)
                    shutil.rmtree(path)
                try:
                    # meta.json written last: a folder renamed into place is whole
                    meta = convert_in_child(table_root, tmp) if _json_bytes(table_root) > CHILD_BYTES \
                        else convert(table_root, tmp)
                    os.rename(tmp, path)
                    log.info("scene index of %s: %d scenes, %d rows, %.1f s", table_root, meta["scenes"],
                             meta["rows"], meta["seconds"])
                except OSError:
                    if not (path / META_FILE).is_file():  # not there first by another node's converter
                        raise
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    if not memo.is_file():
        _write_atomic(memo, key)
    return path


def _json_bytes(table_root: Path) -> int:
    return sum(p.stat().st_size for p in (table_root / f"{n}.json" for n in TABLES) if p.is_file())


class _Relog(logging.Handler):
    """Hands a record the child logged to this process's logger of the same name."""

    def emit(self, record: logging.LogRecord) -> None:
        logging.getLogger(record.name).handle(record)


def _child_logging(queue, level: int) -> None:
    top = logging.getLogger("drivegen")
    top.handlers[:] = [logging.handlers.QueueHandler(queue)]
    top.setLevel(level)
    top.propagate = False


def _convert_reporting(table_root: Path, dest: Path) -> dict:
    """``convert`` in the child: its meta, or its SourceError's fields (an exception's own fields do not
    survive pickling)."""
    try:
        return {"meta": convert(table_root, dest)}
    except SourceError as err:
        return {"error": err.message, "file": err.file, "stage": err.stage}


def convert_in_child(table_root: Path, dest: Path) -> dict:
    """``convert`` in a child process (spawned: a fresh interpreter), so that this one keeps none of its memory;
    the child's log lines are logged here, its SourceError raised here with the same fields."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    relay = logging.handlers.QueueListener(queue, _Relog())
    relay.start()
    try:
        with ProcessPoolExecutor(1, mp_context=ctx, initializer=_child_logging,
                                 initargs=(queue, log.getEffectiveLevel())) as pool:
            out = pool.submit(_convert_reporting, table_root, dest).result()
    except BrokenProcessPool:
        raise SourceError(f"nuScenes tables could not be loaded: the process converting {table_root} into a scene "
                          f"index ended before it finished (killed, or out of memory? the conversion may need up to "
                          f"{4 * _json_bytes(table_root) / 2**30:.1f} GiB)", file=str(table_root),
                          stage="open") from None
    finally:
        relay.stop()
    if "error" in out:
        raise SourceError(out["error"], file=out["file"], stage=out["stage"])
    return out["meta"]


def _open_rows(path: Path) -> pa.NativeFile:
    """The rows file, read with positioned reads (not memory-mapped: a mapping would keep every scene's pages a
    worker ever read in its resident memory)."""
    return pa.OSFile(str(path))


class SceneIndex:
    """An opened scene index: ``scenes`` (the scene list, read whole) and each scene's rows (``tables``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with pa.OSFile(str(self.path / SCENES_FILE)) as fh:
            self.scenes = pa.ipc.open_file(fh).read_all()
        self._rows = pa.ipc.open_file(_open_rows(self.path / ROWS_FILE))

    @classmethod
    def open(cls, table_root: Path, limits) -> "SceneIndex":
        return cls(ensure_index(Path(table_root), index_root(limits)))

    def batch(self, i: int) -> pa.RecordBatch:
        """The rows of scene ``i`` (its position in the scene table)."""
        return self._rows.get_batch(i)

    def tables(self, i: int) -> tuple[dict[str, list[dict]], dict[str, dict[str, int]]]:
        """Scene ``i``'s rows as the devkit reads them: ``({table: [record, ...]}, {table: {token: row}})``, the
        records in table order, ``row`` their positions in the whole tables."""
        b = self.batch(i)
        names = b.column("table").indices.to_numpy(zero_copy_only=False)
        cuts = np.flatnonzero(np.diff(names)) + 1
        starts, ends = np.r_[0, cuts], np.r_[cuts, len(names)]
        text, token, row = b.column("record"), b.column("token"), b.column("row")
        out = {name: [] for name in TABLES}
        rows: dict[str, dict[str, int]] = {name: {} for name in TABLES}
        for a, e in zip(starts.tolist(), ends.tolist()):
            if a == e:
                continue
            name = TABLES[int(names[a])]
            out[name] = json.loads("[" + ",".join(text.slice(a, e - a).to_pylist()) + "]")
            rows[name] = dict(zip(token.slice(a, e - a).to_pylist(), row.slice(a, e - a).to_pylist()))
        return out, rows


def scene_devkit(tables: dict[str, list[dict]], dataroot, version: str):
    """A ``nuscenes.NuScenes`` over one scene's rows (``SceneIndex.tables``), indexed and de-normalised by the
    devkit's own ``__make_reverse_index__``. The devkit reads tables only from files: its state is set here as its
    ``__init__`` sets it (tables, map masks at the default resolution), without the whole set's files."""
    from nuscenes import NuScenes  # the devkit: imported where it is used (heavy)
    # nuscenes-devkit: seconds to import (it pulls matplotlib); only to read or score nuScenes
    from nuscenes.utils.map_mask import MapMask

    nusc = NuScenes.__new__(NuScenes)
    nusc.version, nusc.dataroot, nusc.verbose = version, str(dataroot), False
    nusc.table_names = list(TABLES)
    for name in TABLES:
        setattr(nusc, name, tables[name])
    for rec in nusc.map:
        rec["mask"] = MapMask(os.path.join(str(dataroot), rec["filename"]), resolution=MAP_RESOLUTION_M)
    nusc.__make_reverse_index__(False)
    return nusc
