"""The end-of-run work of a run (the dataset card's statistics, the families' exports) as per-scene parts and a
small merge, so that it runs on the cluster and the driver never holds a run's rows.

    RUN/parts/<name>/<scene>.json            one committed scene's part of <name>: the builder's record
    RUN/parts/<name>/<scene>.<table>.parquet the Arrow tables a record carries (``"tables"``), one file each
    RUN/parts/<name>/...                     files a builder puts beside its parts (``Part.put``: bench images)

1. ``PartSpec.build(part, cfg, **options)`` is a pure function of one committed scene (``Part.reader``: a reader
   of that scene alone, whose cost does not grow with the run) and the run's config; it returns a JSON-able
   record (Arrow tables under ``"tables"``), or None when the scene has nothing for it.
2. The worker that commits a scene builds its parts right after (``generator.pipeline.core.build_committed_parts``:
   its files are fresh there, and the end of the run reads no scene again); ``build_parts``, at the end of the
   run, builds every part that is still missing or stale: as Ray tasks over batches of scenes when Ray is up, in
   this process otherwise. Each part records a ``key``, the hash of its scene's manifest, of the config and of
   the builder's options: a part whose key matches is done, so a finalize killed midway and run again (``drivegen
   run --resume``) builds only the parts it had not written; a scene committed again, or another config, gets its
   part built again.
   A part's JSON is written last (atomically): a part whose JSON is there is whole.
3. ``read_parts`` yields the parts one at a time in scene order, for the merges (``generator.writers.card.
   merge_stats``, the families' exports): the driver holds their sums, never the run's rows.

Commands that export into another folder or with other options (``drivegen export stride_qa --split val``) build
the same parts in memory, one scene at a time (``stream_parts``), and merge them the same way.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from generator.runfolder.keys import config_key, text_key
from generator.runfolder.reader import RunReader
from generator.runfolder.store import RunStore
from schemas import layout
from schemas.errors import DrivegenError, RunFolderError
from schemas.families import resolve

log = logging.getLogger("drivegen.pipeline")

PARTS_FORMAT = "drivegen-part/1"


@dataclass(frozen=True)
class PartSpec:
    """One kind of per-scene part: ``name`` (its folder under ``parts/``), ``build`` ("module:function",
    imported where the part is built) and the JSON-able ``options`` handed to it (part of the key)."""

    name: str
    build: str
    options: dict = field(default_factory=dict)

    def key_text(self) -> str:
        return json.dumps([self.name, self.build, self.options], sort_keys=True)


@dataclass
class Part:
    """What a builder gets: the scene, a reader of it alone, and ``put`` to store a file beside its part
    (``put(rel, data)``: kept at ``parts/<name>/<rel>`` in a run folder; in memory when streamed)."""

    scene_id: str
    reader: RunReader
    put: Callable[[str, bytes], None]


def part_file(name: str, scene_id: str, table: str | None = None) -> str:
    stem = f"{layout.PARTS_DIR}/{name}/{layout.safe_name(scene_id)}"
    return f"{stem}.{table}.parquet" if table else f"{stem}.json"


def part_key(manifest: dict, cfg_key: str, spec: PartSpec) -> str:
    return text_key(json.dumps(manifest, sort_keys=True) + cfg_key + spec.key_text())


def _build_one(spec: PartSpec, reader: RunReader, scene_id: str, cfg, put) -> dict | None:
    try:
        return resolve(spec.build)(Part(scene_id, reader, put), cfg, **spec.options)
    except DrivegenError:
        raise
    except Exception as err:  # noqa: BLE001 - named with its scene and part, then raised
        raise RunFolderError(f"scene {scene_id}: building its {spec.name} part failed: {type(err).__name__}: {err}",
                             file=reader.store.uri_of(layout.manifest_file(scene_id))) from err


def build_scene_parts(run: str | RunStore, scene_ids: list[str], specs: list[PartSpec]) -> dict[str, int]:
    """Build the missing or stale parts of ``scene_ids`` (a Ray task, the worker that committed the scene, or
    in-process); {"built": n, "kept": n}."""
    store = run if isinstance(run, RunStore) else RunStore(run)
    cfg = RunReader(store, require=False, scenes=[]).config()
    ckey = config_key(cfg)
    out = {"built": 0, "kept": 0}
    for sid in scene_ids:
        # the builders' reader: this scene alone, each table read once for all of them
        one = RunReader(store, require=False, scenes=[sid], keep_tables=True)
        manifest = one.manifest(sid)
        if manifest is None:
            continue
        for spec in specs:
            rel = part_file(spec.name, sid)
            key = part_key(manifest, ckey, spec)
            try:
                if store.read_json(rel).get("key") == key:
                    out["kept"] += 1
                    continue
            except (ValueError, OSError):
                pass  # not built yet (FileNotFoundError), or unreadable: built (again)
            folder = f"{layout.PARTS_DIR}/{spec.name}"
            record = _build_one(spec, one, sid, cfg, lambda r, data, _f=folder: store.write_bytes(f"{_f}/{r}", data))
            tables = {}
            if record is not None:
                for name, t in (record.pop("tables", None) or {}).items():
                    tables[name] = part_file(spec.name, sid, name)
                    store.write_table(tables[name], t)
            # keys in the builder's order (not sorted): a merge that writes records writes them as built
            store.write_bytes(rel, json.dumps({"format": PARTS_FORMAT, "scene_id": sid, "key": key, "record": record,
                                               "tables": tables}, ensure_ascii=False).encode("utf-8"))
            out["built"] += 1
    return out


def _build_chunk(run: str, specs: list[PartSpec], scene_ids: list[str]) -> dict[str, int]:
    return build_scene_parts(run, scene_ids, specs)


def build_parts(store: RunStore, scene_ids: list[str], specs: list[PartSpec], run_tasks=None) -> dict[str, int]:
    """Every spec's part of every scene of ``scene_ids`` (committed scenes), built where it is missing or stale:
    tasks of a few scenes each through ``run_tasks`` (the pipeline's batch executor on Ray,
    ``generator.pipeline.ray_tasks.TaskRunner``: this layer does not import Ray), in this process when it is None.
    Returns {"built": n, "kept": n}."""
    t0 = time.perf_counter()
    totals = {"built": 0, "kept": 0}
    if not specs or not scene_ids:
        return totals
    if run_tasks is not None:
        # ~4 tasks per CPU: balance, little overhead
        size = max(1, min(64, math.ceil(len(scene_ids) / (4 * run_tasks.cpus))))
        chunks = [scene_ids[i:i + size] for i in range(0, len(scene_ids), size)]
        for counts in run_tasks(_build_chunk, chunks, shared=(store.uri, specs)):
            for k, v in counts.items():
                totals[k] += v
    else:
        for i in range(0, len(scene_ids), 64):
            for k, v in build_scene_parts(store.uri, scene_ids[i:i + 64], specs).items():
                totals[k] += v
    log.info("parts of %d scene(s): %d built, %d kept (built as their scenes were committed, or by an earlier "
             "end of the run), in %.1f s", len(scene_ids),
             totals["built"], totals["kept"], time.perf_counter() - t0)
    return totals


def _load(store: RunStore, data: dict) -> dict | None:
    record = data.get("record")
    if record is None:
        return None
    if data.get("tables"):
        record = {**record, "tables": {name: store.read_parquet(rel) for name, rel in data["tables"].items()}}
    return record


def _read_part(store: RunStore, name: str, sid: str) -> dict | None:
    rel = part_file(name, sid)
    try:
        data = store.read_json(rel)
    except (FileNotFoundError, OSError, ValueError) as err:
        raise RunFolderError(f"{store.uri_of(rel)}: the {name} part of scene {sid} is missing or unreadable ({err}); "
                             "run the end of the run again (drivegen run --resume)", file=store.uri_of(rel)) from None
    return _load(store, data)


def read_parts(store: RunStore, name: str, scene_ids: Iterable[str], prefetch: int | None = None
               ) -> Iterator[tuple[str, dict]]:
    """(scene, record) of every scene's part ``name`` that has one, in the order of ``scene_ids``; RunFolderError
    when a part is missing (``build_parts`` first). ``prefetch`` parts are read ahead by threads (a part on object
    storage is a request of tens of milliseconds: read one by one, 100,000 scenes would wait hours), and no
    more: memory holds that many parts, not the run's. Default: 16 on object storage, 4 on a local disk (where a
    read is a fraction of a millisecond, and each reading thread keeps its own allocator heap: 16 threads
    raise the process's memory by tens of MiB for no speed)."""
    if prefetch is None:
        prefetch = 4 if store.is_local else 16
    ids = iter(scene_ids)
    with ThreadPoolExecutor(max_workers=max(1, prefetch)) as pool:
        window: deque = deque()
        for sid in ids:
            window.append((sid, pool.submit(_read_part, store, name, sid)))
            if len(window) >= prefetch:
                break
        while window:
            sid, fut = window.popleft()
            nxt = next(ids, None)
            if nxt is not None:
                window.append((nxt, pool.submit(_read_part, store, name, nxt)))
            record = fut.result()
            if record is not None:
                yield sid, record


def stream_parts(reader: RunReader, spec: PartSpec, cfg, scene_ids: Iterable[str] | None = None,
                 put: Callable[[str, bytes], None] | None = None) -> Iterator[tuple[str, dict]]:
    """(scene, record) of ``spec``'s part of each scene, built now in this process one scene at a time and not
    stored (an export into another folder, or with other options than the run's); ``put`` receives the files a
    builder puts (default: dropped)."""
    for sid in (reader.scene_ids() if scene_ids is None else scene_ids):
        one = RunReader(reader.store, require=False, scenes=[sid])
        record = _build_one(spec, one, sid, cfg, put or (lambda rel, data: None))
        if record is not None:
            yield sid, record


REPORT_PART = "report"  # the HTML report's per-scene figures (``generator.report.collect.report_part``)


def report_spec(cfg) -> PartSpec:
    """The spec of the report's per-scene figures under the report config ``cfg`` (its sample's seed and size
    are part of the key): the end of a run builds them, ``generator.report.collect`` merges them."""
    return PartSpec(REPORT_PART, "generator.report.collect:report_part",
                    {"seed": int(cfg.seed), "samples_per_family": int(cfg.samples_per_family)})


def remove_parts(store: RunStore, name: str) -> None:
    """Forget every part ``name`` (their folder): the next end of the run builds them again."""
    store.delete_dir(f"{layout.PARTS_DIR}/{name}")


__all__ = ["PARTS_FORMAT", "REPORT_PART", "Part", "PartSpec", "build_parts", "build_scene_parts", "part_file",
           "read_parts", "remove_parts", "report_spec", "stream_parts"]
