"""The run folder on any filesystem pyarrow supports (local path, ``file://``, ``s3://``, ``gs://``, ...).

``RunStore`` is the one place that touches the run folder's storage. Its rules make output exactly-once:

* Every file is written under a temporary name (``.<name>.<uuid>.tmp``) and moved into place, so a reader
  sees either nothing or the whole file. On a local filesystem the move is an atomic ``rename``; on object
  stores (S3/GCS), where an object only appears once its upload completes, the move is copy+delete and the
  manifest (below) is what makes a scene visible.
* A scene's files are named by scene id only, so a retried or resumed scene rewrites the same names
  rather than adding new ones; files of an earlier attempt that the new attempt does not produce are removed.
* ``manifest/<scene>.json`` is written last: a scene is finished exactly when its manifest exists, and the
  manifest lists the scene's files with row counts. Readers (``read_table``) read only listed files.

Paths inside the store are relative, '/'-separated (the layout of ``generator.runfolder``).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs

from schemas.tables import read_parquet, write_parquet

TMP_SUFFIX = ".tmp"
STAGING_DIR = ".staging"  # local-filesystem staging area inside the run folder (same device: rename is atomic)
ATTEMPTS_DIR = "_attempts"  # per scene and stage attempt markers (see generator.pipeline.driver)


def _tmp_name(rel: str) -> str:
    p = PurePosixPath(rel)
    return str(p.with_name(f".{p.name}.{uuid.uuid4().hex}{TMP_SUFFIX}"))


class RunStore:
    """A run folder addressed by a local path or a URI; picklable (rebuilt from the URI on each worker)."""

    def __init__(self, uri: str | os.PathLike):
        uri = str(uri)
        if "://" in uri:
            self.fs, base = pafs.FileSystem.from_uri(uri)
        else:
            self.fs, base = pafs.LocalFileSystem(), os.path.abspath(uri)
        self.uri = uri if "://" in uri else base
        self.base = base.rstrip("/") or "/"
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)

    def __reduce__(self):
        return (RunStore, (self.uri,))

    def __repr__(self) -> str:
        return f"RunStore({self.uri!r})"

    # ---- paths
    def full(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    @property
    def local_root(self) -> Path | None:
        """The run folder as a local path when it lives on the local filesystem, else None."""
        return Path(self.base) if self.is_local else None

    # ---- reading
    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.full(rel)).type != pafs.FileType.NotFound

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.full(rel)) as fh:
            return fh.read()

    def read_json(self, rel: str):
        return json.loads(self.read_bytes(rel))

    def list(self, rel_dir: str, recursive: bool = False) -> list[str]:
        """Relative paths of the plain files under ``rel_dir`` (sorted; [] when it does not exist)."""
        sel = pafs.FileSelector(self.full(rel_dir), allow_not_found=True, recursive=recursive)
        n = len(self.base) + 1
        return sorted(i.path[n:] for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File)

    def read_parquet(self, rel: str, schema: pa.Schema | None = None, columns: list[str] | None = None) -> pa.Table:
        """A table written by ``write_table``, with its declared types (``schemas.tables.read_parquet``)."""
        return read_parquet(self.full(rel), schema=schema, columns=columns, filesystem=self.fs)

    # ---- writing (always atomic)
    def mkdirs(self, rel_dir: str) -> None:
        self.fs.create_dir(self.full(rel_dir), recursive=True)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write ``data`` at ``rel``: temporary name, then move into place."""
        parent = str(PurePosixPath(rel).parent)
        if parent not in ("", "."):
            self.mkdirs(parent)
        tmp = _tmp_name(rel)
        try:
            if self.is_local:  # fsync so a crash right after the rename cannot leave an empty file
                with open(self.full(tmp), "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            else:
                with self.fs.open_output_stream(self.full(tmp)) as fh:
                    fh.write(data)
            self.fs.move(self.full(tmp), self.full(rel))
        except BaseException:
            self._delete_quiet(tmp)
            raise

    def write_json(self, rel: str, obj) -> None:
        self.write_bytes(rel, (json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n").encode())

    def write_table(self, rel: str, table: pa.Table, compression: str = "zstd") -> None:
        """Write ``table`` as Parquet at ``rel`` (``schemas.tables.write_parquet``), atomically."""
        buf = io.BytesIO()
        write_parquet(buf, table, compression=compression)
        self.write_bytes(rel, buf.getvalue())

    def commit_file(self, local: Path, rel: str) -> None:
        """Move a finished local file into the store at ``rel`` (rename when local, upload otherwise)."""
        if self.is_local:
            dst = Path(self.full(rel))
            dst.parent.mkdir(parents=True, exist_ok=True)
            with open(local, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(local, dst)  # staging lives inside the run folder: same filesystem, atomic
        else:
            parent = str(PurePosixPath(rel).parent)
            if parent not in ("", "."):
                self.mkdirs(parent)
            tmp = _tmp_name(rel)
            try:
                with open(local, "rb") as src, self.fs.open_output_stream(self.full(tmp)) as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
                self.fs.move(self.full(tmp), self.full(rel))
            except BaseException:
                self._delete_quiet(tmp)
                raise

    def delete(self, rel: str) -> None:
        self._delete_quiet(rel)

    def delete_dir(self, rel_dir: str) -> None:
        try:
            self.fs.delete_dir(self.full(rel_dir))
        except (FileNotFoundError, OSError):
            pass

    def _delete_quiet(self, rel: str) -> None:
        try:
            self.fs.delete_file(self.full(rel))
        except (FileNotFoundError, OSError):
            pass

    # ---- staging and cleanup
    def staging_dir(self, scene_key: str) -> Path:
        """A fresh local directory where a worker builds one scene's files before committing them."""
        if self.is_local:
            d = Path(self.full(STAGING_DIR)) / f"{scene_key}.{uuid.uuid4().hex}"
            d.mkdir(parents=True)
            return d
        return Path(tempfile.mkdtemp(prefix=f"drivegen-{scene_key}-"))

    def cleanup_leftovers(self) -> list[str]:
        """Remove what killed workers can leave behind: temporary files and staging folders.

        Only safe when no worker of this run is alive (the driver calls it before and after a run).
        Returns the removed temporary files.
        """
        self.delete_dir(STAGING_DIR)
        removed = [p for p in self.list("", recursive=True) if p.endswith(TMP_SUFFIX)]
        for p in removed:
            self._delete_quiet(p)
        return removed


def _json_default(o):
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
