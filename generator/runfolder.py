"""The run folder: what ``drivegen run`` writes and what ``regenerate``/``validate``/``--resume`` read back.

Layout (every per-scene file is named by scene id, written under a temporary name and renamed into place):

    OUT/config.yaml                         the PipelineConfig the run used
    OUT/source.json                         how to rebuild the log source (kind, dataroot, version, ...)
    OUT/scenes.json                         {"scene_ids": [...]}: the scenes of the run (``--resume`` reads it)
    OUT/perception/frames/<scene>.parquet   schemas.tables.FRAMES
    OUT/perception/objects/<scene>.parquet  schemas.tables.OBJECTS (detections after tracking)
    OUT/perception/projections/<scene>.parquet  schemas.tables.PROJECTIONS (masks, visibility decisions)
    OUT/attributes/<scene>.parquet          schemas.tables.ATTRIBUTES
    OUT/labels/<scene>.parquet              schemas.tables.LABELS
    OUT/qa/<scene>-<k>.parquet              schemas.tables.QA, size-bounded shards
    OUT/wds/<scene>-<k>.tar                 WebDataset shards
    OUT/errors/<scene>-<stage>.parquet      schemas.tables.ERRORS
    OUT/manifest/<scene>.json               written last for a finished scene: files + row counts
    OUT/bench/                              STRIDE-QA-Bench export
    OUT/card/                               dataset card, stats.json, histograms
    OUT/summary.json                        end-of-run summary

While a run is going (removed when it ends; see ``generator.pipeline``): ``OUT/_pending/<scene>.json``
(files a scene is committing), ``OUT/_attempts/`` (stage attempt markers), ``OUT/.staging/`` (per-scene
folders the workers build files in). A scene is finished exactly when ``manifest/<scene>.json`` exists;
read a run's rows with ``generator.pipeline.read.read_table`` (manifest-listed files only).
"""
from __future__ import annotations

import itertools
import os
import re
import uuid
from pathlib import Path
from typing import Callable

import pyarrow as pa

from schemas.tables import write_parquet

PERCEPTION_TABLES = ("frames", "objects", "projections")

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(scene_id: str) -> str:
    """A scene id as a file-name stem (stable, filesystem-safe)."""
    return _SAFE.sub("_", scene_id)


class RunFolder:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def perception(self, table: str, scene_id: str) -> Path:
        return self.path("perception", table, f"{safe_name(scene_id)}.parquet")

    def attributes(self, scene_id: str) -> Path:
        return self.path("attributes", f"{safe_name(scene_id)}.parquet")

    def labels(self, scene_id: str) -> Path:
        return self.path("labels", f"{safe_name(scene_id)}.parquet")

    def manifest(self, scene_id: str) -> Path:
        return self.path("manifest", f"{safe_name(scene_id)}.json")

    def errors(self, scene_id: str, stage: str) -> Path:
        return self.path("errors", f"{safe_name(scene_id)}-{stage}.parquet")


def numbered_files(path_of: Callable[[int], Path]) -> list[Path]:
    """Existing files ``path_of(0), path_of(1), ...`` up to the first missing number. A scene's shards are
    numbered contiguously from 0, so this costs one stat per shard, not a scan of the whole folder."""
    out = []
    for k in itertools.count():
        p = path_of(k)
        if not p.exists():
            return out
        out.append(p)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either nothing or the whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_table(path: Path, table: pa.Table, compression: str = "zstd") -> None:
    """Write a Parquet file atomically (temporary name, fsync, rename) with ``schemas.tables.write_parquet``
    (fixed-size lists stored as lists); read it back with ``schemas.tables.read_parquet``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    write_parquet(tmp, table, compression=compression)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
