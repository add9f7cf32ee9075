"""Reading a run folder back: the committed rows of a table, and a check of the exactly-once invariants."""
from __future__ import annotations

import re

import pyarrow as pa

from generator.pipeline.core import MANIFEST_DIR, PENDING_DIR
from generator.pipeline.store import ATTEMPTS_DIR, STAGING_DIR, TMP_SUFFIX, RunStore

# Layout folders whose files belong to scenes (named <safe scene>[-<k>].<ext>).
SCENE_DIRS = ("perception/frames", "perception/objects", "perception/projections", "attributes", "labels", "qa",
              "wds")


def manifests(store: RunStore) -> list[dict]:
    return [store.read_json(rel) for rel in store.list(MANIFEST_DIR) if rel.endswith(".json")]


def read_table(out: str | RunStore, folder: str = "qa", schema: pa.Schema | None = None) -> pa.Table | None:
    """Rows of ``folder`` ('qa', 'attributes', 'perception/objects', ...) from the files the manifests list:
    only finished scenes, each file once, with the exact types of ``schema`` (default: the schema each
    file's metadata names; ``schemas.tables.read_parquet``). None when no finished scene has such a file."""
    store = out if isinstance(out, RunStore) else RunStore(out)
    prefix = folder.rstrip("/") + "/"
    files = sorted(f["path"] for m in manifests(store) for f in m["files"]
                   if f["path"].startswith(prefix) and f["path"].endswith(".parquet") and "/" not in f["path"][len(prefix):])
    tables = [store.read_parquet(p, schema) for p in files]
    return pa.concat_tables(tables) if tables else None


def check_run(out: str | RunStore) -> list[str]:
    """Problems that would break exactly-once output (empty list = none):
    temporary or staging leftovers, a listed file missing or with another row count, a scene file that no
    manifest lists (a partial scene visible to readers), an unreadable Parquet file."""
    store = out if isinstance(out, RunStore) else RunStore(out)
    problems: list[str] = []
    every = store.list("", recursive=True)
    problems += [f"temporary file left: {p}" for p in every if p.endswith(TMP_SUFFIX)]
    problems += [f"staging/attempt leftovers: {p}" for p in every
                 if p.startswith((STAGING_DIR + "/", ATTEMPTS_DIR + "/", PENDING_DIR + "/"))]
    listed: dict[str, int | None] = {}
    for m in manifests(store):
        for f in m["files"]:
            listed[f["path"]] = f.get("rows")
    present = set(every)
    for path, rows in sorted(listed.items()):
        if path not in present:
            problems.append(f"manifest lists a missing file: {path}")
        elif path.endswith(".parquet"):
            try:
                n = store.read_parquet(path).num_rows
            except Exception as err:  # noqa: BLE001
                problems.append(f"unreadable parquet {path}: {err}")
                continue
            if rows is not None and n != rows:
                problems.append(f"{path}: {n} rows, manifest says {rows}")
    scene_file = re.compile(r"^(%s)/[^/]+$" % "|".join(re.escape(d) for d in SCENE_DIRS))
    for p in sorted(present):
        if scene_file.match(p) and not p.rsplit("/", 1)[-1].startswith(".") and p not in listed:
            problems.append(f"scene file no manifest lists: {p}")
    return problems
