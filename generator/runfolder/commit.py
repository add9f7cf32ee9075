"""The write side of a run folder: committing a scene's files exactly once, error rows, leftovers.

The protocol (the reader's one rule is its other half: a file belongs to the run exactly when a manifest
lists it, ``generator.runfolder.reader``):

1. a worker builds all of a scene's files in a private staging folder (``RunStore.staging_dir``), named
   as the layout says (``schemas.layout.scene_file``);
2. ``commit_scene``: intent ``_pending/<scene>.json`` (files about to appear, and any files of an earlier
   commit) -> an earlier manifest of the scene is removed (the scene is unfinished while it is rewritten)
   -> each file moved into place atomically -> earlier files this commit does not produce are removed ->
   ``manifest/<scene>.json`` (files, row counts, figures, config key, run epoch) -> the intent and the
   scene's old error rows go. Before the first move and before the manifest the writer's epoch is checked
   against the run's (``fence``): a worker left over from a killed driver cannot commit into a resumed run.
3. a crash anywhere before the manifest leaves the scene unfinished and invisible to readers; the next
   attempt overwrites the same names and removes what the intent lists, so the final files and rows are the
   same as after a clean run.

Commands delete only what they made: files named by an intent, their own temporary names
(``schemas.layout.is_tmp_name``), their staging folders and attempt markers.
"""
from __future__ import annotations

import itertools
import os
import re
import time
import uuid
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from generator.runfolder.reader import RunReader
from generator.runfolder.store import RunStore
from generator.writers.parquet import QA_STORED, scene_split_of, write_bounded, write_qa_shards
from schemas import layout
from schemas.config import WriterConfig
from schemas.errors import RunFolderError
from schemas.families import exports as family_exports
from schemas.tables import ERRORS, QA, check_schema, write_parquet

# ------------------------------------------------------------------------------------------ commit
def _file_rows(path: Path) -> int | None:
    return pq.ParquetFile(path).metadata.num_rows if path.suffix == ".parquet" else None


def staged_entries(staging: Path, rows: dict[str, int] | None = None) -> list[dict]:
    """Manifest entries (path, rows, bytes) of the files under a staging folder (``rows``: counts the writer
    already knows, by relative path; the others are read from the Parquet footers)."""
    rows = rows or {}
    out = []
    for p in sorted(q for q in staging.rglob("*") if q.is_file()):
        rel = p.relative_to(staging).as_posix()
        out.append({"path": rel, "rows": rows[rel] if rel in rows else _file_rows(p), "bytes": p.stat().st_size})
    return out


def commit_scene(store: RunStore, scene_id: str, staging: Path, *, counts: dict | None = None,
                 timings_s: dict | None = None, config: str | None = None, epoch: int | None = None,
                 fence: Callable[[], None] | None = None, extra: dict | None = None, synced: bool = False,
                 rows: dict[str, int] | None = None) -> dict:
    """Commit the files built under ``staging`` (run-folder layout) as scene ``scene_id``; see the module
    docstring for the order. ``fence()`` raises when this writer may no longer commit; ``synced``: the
    staged files are already fsynced; ``rows``: their row counts when the writer knows them. Returns the
    manifest."""
    entries = staged_entries(staging, rows)
    return commit_files(store, scene_id, [(staging / e["path"], e) for e in entries], counts=counts,
                        timings_s=timings_s, config=config, epoch=epoch, fence=fence, extra=extra, synced=synced)


def commit_files(store: RunStore, scene_id: str, files: list[tuple[Path, dict]], *, counts: dict | None = None,
                 timings_s: dict | None = None, config: str | None = None, epoch: int | None = None,
                 fence: Callable[[], None] | None = None, extra: dict | None = None, synced: bool = False) -> dict:
    """The commit itself: ``files`` are (local file, manifest entry with its ``path`` in the layout) pairs,
    each moved to its path under the intent (see the module docstring)."""
    entries = [e for _, e in files]
    new_paths = {e["path"] for e in entries}
    pending_rel = f"{layout.PENDING_DIR}/{layout.safe_name(scene_id)}.json"
    manifest_rel = layout.manifest_file(scene_id)
    old_paths: set[str] = set()
    if store.exists(pending_rel):  # an earlier attempt got this far and died
        old_paths |= set(listed_files(store, pending_rel))
    if store.exists(manifest_rel):  # a re-commit (regenerate into the same folder): the scene goes unfinished
        old_paths |= set(listed_files(store, manifest_rel))
    if fence is not None:
        fence()
    # the intent need not survive a power cut (it is gone once the manifest exists); the manifest must
    store.write_json(pending_rel, {"scene_id": scene_id, "files": sorted(new_paths | old_paths)}, durable=False)
    if old_paths:
        store.delete(manifest_rel)
    for local, e in files:
        store.commit_file(local, e["path"], synced=synced)
    for rel in sorted(old_paths - new_paths):
        store.delete(rel)
    manifest = {"scene_id": scene_id, "files": entries, "counts": counts or {},
                "timings_s": {k: round(v, 4) for k, v in (timings_s or {}).items()},
                "config": config, "epoch": epoch, "finished_unix": time.time(), **(extra or {})}
    if fence is not None:
        fence()
    store.write_json(manifest_rel, manifest)
    store.delete(pending_rel)
    clear_errors(store, scene_id)
    return manifest


def rollback_pending(store: RunStore, scene_id: str) -> None:
    """After a failed commit: remove the files the scene's intent names (when no manifest was written)."""
    pending_rel = f"{layout.PENDING_DIR}/{layout.safe_name(scene_id)}.json"
    if store.exists(pending_rel) and not store.exists(layout.manifest_file(scene_id)):
        for rel in listed_files(store, pending_rel):
            store.delete(rel)
        store.delete(pending_rel)


# folders no scene's files are committed into: an intent or manifest naming a file there is not drivegen's
_NOT_SCENE_FOLDERS = (layout.MANIFEST_DIR, layout.PENDING_DIR, layout.ATTEMPTS_DIR, layout.STAGING_DIR,
                      layout.ERRORS_DIR)


def listed_files(store: RunStore, rel: str) -> list[str]:
    """The scene files the intent or manifest at ``rel`` lists, each checked before anything is deleted: a path
    a commit can write (in a folder, not a bookkeeping one) that the store may delete (``RunStore.deletable``:
    inside the run folder, through no link); RunFolderError naming ``rel`` and the entry otherwise."""
    data = store.read_json(rel)
    entries = data.get("files", []) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise RunFolderError(f"{store.uri_of(rel)}: not a drivegen intent or manifest (no list of files)",
                             file=store.uri_of(rel))
    out = []
    for e in entries:
        path = e.get("path") if isinstance(e, dict) else e
        store.deletable(path, rel)
        if "/" not in path or path.split("/", 1)[0] in _NOT_SCENE_FOLDERS:
            raise RunFolderError(f"{store.uri_of(rel)} lists {path!r}, which no scene's commit writes: drivegen "
                                 "deletes only the files it committed (was it edited by hand?)", file=store.uri_of(rel))
        out.append(path)
    return out


def commit_tables(store: RunStore, scene_id: str, tables: dict[str, pa.Table], *, compression: str = "snappy",
                  writer_cfg=None, counts: dict | None = None, config: str | None = None,
                  epoch: int | None = None, fence: Callable[[], None] | None = None, tidy: bool = True,
                  split: str | None = None) -> dict:
    """Commit one scene's tables by layout name ({'frames': ..., 'qa': ...}) in one step: each written to a
    staging folder (QA as size-bounded shards, ``generator.writers.parquet.write_qa_shards``), then
    ``commit_scene``. For writers of run folders other than ``drivegen run`` (regenerate, tests, benches);
    ``tidy=False`` keeps the ``.staging`` folder for the next scene (the writer removes it at its end).
    ``split``: the scene's split, which names its files of the tables stored by split (``schemas.layout``);
    default the one its QA rows carry. ValueError naming the scene when such a table has neither, or when
    the two differ."""
    if store.is_local and set(tables) == {"qa"}:  # shards written beside their final names: no staging folder
        return _commit_qa_in_place(store, scene_id, tables["qa"], writer_cfg, counts=counts, config=config,
                                   epoch=epoch, fence=fence)
    rows_split = scene_split_of(tables["qa"], scene_id) if "qa" in tables else None
    if split is not None and rows_split not in (None, split):
        raise ValueError(f"commit_tables(scene '{scene_id}'): split {split!r} given, its QA rows carry "
                         f"{rows_split!r}: a scene is in one split")
    split = split or rows_split
    by_split = sorted(n for n in tables if n != "qa" and layout.TABLES[n].by_split)
    if by_split and split is None:
        raise ValueError(f"commit_tables(scene '{scene_id}'): {', '.join(by_split)} are stored by split and the "
                         "scene has no QA rows to take it from: give its split")
    staging = store.staging_dir(layout.safe_name(scene_id))
    try:
        rows: dict[str, int] = {}
        synced = True
        for name, table in tables.items():
            if name == "qa":  # fsynced by the shard writer, row counts known
                for p in write_qa_shards(table, staging, scene_id, writer_cfg):
                    rows[p.relative_to(staging).as_posix()] = pq.ParquetFile(p).metadata.num_rows
                continue
            synced = False
            path = staging / layout.scene_file(name, scene_id, split=split)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_parquet(path, table, compression=compression)
        return commit_scene(store, scene_id, staging, counts=counts, config=config, epoch=epoch, fence=fence,
                            synced=synced)
    except BaseException:
        rollback_pending(store, scene_id)
        raise
    finally:
        store.release_staging(staging, tidy)


def _commit_qa_in_place(store: RunStore, scene_id: str, table: pa.Table, writer_cfg, **kw) -> dict:
    """A scene's QA shards written under temporary names in ``qa/`` itself (fsynced, row counts known), then
    committed (renamed to their shard names under the intent): what ``commit_tables`` does through a staging
    folder, without creating and removing one per scene (regeneration commits thousands in a row)."""
    cfg = writer_cfg or WriterConfig()
    if not table.schema.equals(QA_STORED, check_metadata=True):
        table = check_schema(table, QA, where=f"QA rows of scene '{scene_id}'")
    base = Path(store.full(layout.TABLES["qa"].folder))
    if "qa" not in store._made:
        base.mkdir(parents=True, exist_ok=True)
        store._made.add("qa")
    split = scene_split_of(table, scene_id)
    tmps = (Path(store.full(layout.tmp_name(layout.scene_file("qa", scene_id, k, split)))) for k in itertools.count())
    rows: list[int] = []
    written = write_bounded(table, tmps, cfg.parquet_max_rows, cfg.parquet_max_bytes, cfg.compression,
                            statistics=list(cfg.qa_statistics_columns), rows_out=rows)
    files = [(p, {"path": layout.scene_file("qa", scene_id, k, split), "rows": n, "bytes": p.stat().st_size})
             for k, (p, n) in enumerate(zip(written, rows))]
    try:
        return commit_files(store, scene_id, files, synced=True, **kw)
    except BaseException:
        rollback_pending(store, scene_id)
        raise
    finally:
        for p, _ in files:
            p.unlink(missing_ok=True)  # the ones not moved (a failed commit)


# ------------------------------------------------------------------------------------------ errors
def write_error(store: RunStore, error: dict, attempt: int | None = None) -> str:
    """Write one ERRORS row as ``errors/<scene>-<stage>.parquet``; returns its relative path."""
    row = {**{k: error.get(k) for k in ERRORS.names}, "attempt": attempt if attempt is not None else error.get("attempt")}
    rel = layout.error_file(error.get("scene_id"), error["stage"])
    store.write_table(rel, pa.Table.from_pylist([row], schema=ERRORS))
    return rel


def clear_errors(store: RunStore, scene_id: str) -> None:
    """Remove the scene's error rows (``errors/<safe>-<stage>.parquet``; stage names are [a-z_])."""
    pat = re.compile(rf"^{re.escape(layout.safe_name(scene_id))}-[a-z_]+\.parquet$")
    if store.is_local and not os.path.isdir(store.full(layout.ERRORS_DIR)):
        return
    for rel in store.list(layout.ERRORS_DIR):
        if pat.match(rel.rsplit("/", 1)[-1]):
            store.delete(rel)


# ------------------------------------------------------------------------------------------ attempts
def mark_attempt(store: RunStore, scene_id: str, stage: str) -> None:
    """An empty marker per stage attempt; the driver counts them to find scenes that keep killing their
    worker (Ray's retries exhausted) and records those as failed."""
    store.write_bytes(f"{layout.ATTEMPTS_DIR}/{layout.safe_name(scene_id)}/{stage}.{uuid.uuid4().hex[:12]}", b"")


def count_attempts(store: RunStore, scene_id: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rel in store.list(f"{layout.ATTEMPTS_DIR}/{layout.safe_name(scene_id)}"):
        stage = rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        counts[stage] = counts.get(stage, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------ leftovers
def remove_leftovers(store: RunStore) -> list[str]:
    """Remove what killed writers of THIS run folder can leave behind, and nothing else: scenes half
    committed (their intent's files), drivegen's own temporary names wherever they are in the folder,
    staging folders and attempt markers. Only safe while holding the run's lock. Returns what was removed."""
    removed: list[str] = []
    for rel in store.list(layout.PENDING_DIR):
        scene = store.read_json(rel).get("scene_id")
        if scene is not None and not store.exists(layout.manifest_file(scene)):
            removed += listed_files(store, rel)
            rollback_pending(store, scene)
        else:
            store.delete(rel)
    # the whole folder, as the reader's check does: a killed writer's temporary name can be anywhere drivegen
    # writes (a scene's tables, the end-of-run parts and their images, the report), and none is a user's
    for rel in store.list("", recursive=True):
        if layout.is_leftover_tmp_name(rel) and not rel.startswith(layout.STAGING_DIR + "/"):
            store.delete(rel)
            removed.append(rel)
    for rel in store.list_dirs(layout.STAGING_DIR):
        store.delete_dir(rel)
        removed.append(rel + "/")
    if not store.list(layout.STAGING_DIR, recursive=True):
        store.delete_dir(layout.STAGING_DIR)
    store.delete_dir(layout.ATTEMPTS_DIR)
    if not store.list(layout.PENDING_DIR):
        store.delete_dir(layout.PENDING_DIR)
    return removed


# Folders a run folder holds that drivegen made as a whole (each of its files is drivegen's): the
# bookkeeping, the end-of-run work's per-scene parts, the card's figures, the report and the validation report.
# A family's export folder is one too (``schemas.families``: ``Export.folder``).
_RUN_FOLDERS = (layout.MANIFEST_DIR, layout.ERRORS_DIR, layout.PENDING_DIR, layout.ATTEMPTS_DIR,
                layout.STAGING_DIR, layout.PARTS_DIR, layout.CARD_DIR, layout.REPORT_DIR, layout.VALIDATE_DIR)


def run_files(store: RunStore) -> tuple[list[str], list[str]]:
    """(drivegen's files, other files) of a run folder: drivegen's are the run's own files at its root
    (``layout.RUN_FILES``), every file a manifest lists, the files of its own folders (``_RUN_FOLDERS``, the
    families' export folders) and drivegen's temporary names; anything else (a file a user put beside
    the tables, a stray file in a table folder, a link anywhere: never followed) is not."""
    listed = {f["path"] for m in RunReader(store, require=False).manifests() for f in m.get("files", [])}
    folders = tuple(f"{d}/" for d in (*_RUN_FOLDERS, *sorted({e.folder for _, e in family_exports()})))
    ours, other = [], []
    links = set(store.links(""))  # never drivegen's: it writes no link, and deletes none
    for rel in store.list("", recursive=True):
        if rel in links:
            other.append(rel)
        elif rel in layout.RUN_FILES or rel in listed or rel.startswith(folders) or layout.is_tmp_name(rel):
            ours.append(rel)
        else:
            other.append(rel)
    return ours, other


def clear_run(store: RunStore) -> int:
    """Delete a finished run's files (``run_files``; the caller holds its lock, which stays), for
    ``drivegen run --overwrite``. RunFolderError naming one when the folder holds files drivegen did not
    write: nothing is deleted then. Returns how many files were deleted."""
    ours, other = run_files(store)
    if other:
        raise RunFolderError(f"{store.uri} holds {len(other)} file(s) drivegen did not write (e.g. "
                             f"{_shown(store, other[0])}): --overwrite deletes only a run's own files, and a new run "
                             "needs an empty folder; move them or choose a new --out", file=store.uri_of(other[0]))
    return _delete_run_files(store, ours)


def clean_run(store: RunStore) -> tuple[int, list[str]]:
    """Delete a run folder's own files (``run_files``, the rule of ``clear_run``; the caller holds its lock, which
    stays) and keep every other one (a user's notes, a link: never followed), for ``drivegen clean``: (how many
    files were deleted, the files kept)."""
    ours, other = run_files(store)
    return _delete_run_files(store, ours), other


def _delete_run_files(store: RunStore, ours: list[str]) -> int:
    """Delete ``ours`` (all but the lock), then drivegen's folders that are left empty."""
    gone = [rel for rel in ours if rel != layout.LOCK]
    for rel in gone:
        store.delete(rel)
    for d in (*_RUN_FOLDERS, *{t.folder for t in layout.TABLES.values()}, "perception", layout.IMAGES_DIR,
              *sorted({e.folder for _, e in family_exports()})):
        if store.exists(d) and not store.list(d, recursive=True):  # a folder still holding a kept file stays
            store.delete_dir(d)
    return len(gone)


def _shown(store: RunStore, rel: str) -> str:
    """``rel`` as a message names it: a link with where it leads."""
    full = store.full(rel)
    return f"{rel} (a link to {os.readlink(full)})" if store.is_local and os.path.islink(full) else rel
