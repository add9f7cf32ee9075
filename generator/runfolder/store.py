"""``RunStore``: the run folder on any filesystem pyarrow supports (local path, ``file://``, ``s3://``, ``gs://``).

The one place that touches a run folder's bytes. Every write is atomic, so a reader sees either nothing or the
whole file. On a local filesystem (and any other one pyarrow opens) a file is written under a temporary name
(``schemas.layout.tmp_name``) and moved into place: a ``rename`` after an fsync. On object stores (S3, GCS) an
object appears only once its upload completes, so a file is uploaded under its own name: a temporary name would
add a copy and a delete per file (S3 has no rename) and leave a name to clean up when a writer is killed. S3 is
opened with ``allow_delayed_open``, so a file smaller than a multipart part is one PutObject, not three requests.
The manifest is what makes a scene visible (``generator.runfolder.commit``). Paths inside the store are relative
and '/'-separated (``schemas.layout``).

**What drivegen may delete** (the one rule, ``RunStore.deletable``; every delete goes through it): a path it
wrote, relative to the folder, that stays inside it: no empty, ``.`` or ``..`` part, not absolute, and, on a
local disk, reached through no link (a link in the folder may lead anywhere: it is never followed, and never
deleted). Whatever a marker file (a manifest, an intent, ``publish.json``, ``report.json``...) lists, a path
that breaks the rule is refused with a RunFolderError naming it, and nothing outside the folder is touched.
Listing does not follow links either: a link is listed as an entry of its own (``links`` names them).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from schemas.errors import DrivegenError, RunFolderError, from_write_error
from schemas.layout import STAGING_DIR, tmp_name
from schemas.tables import read_parquet, write_parquet


class RunStore:
    """A run folder addressed by a local path or a URI; picklable (rebuilt from the URI on each worker)."""

    def __init__(self, uri: str | os.PathLike):
        uri = str(uri)
        try:
            if "://" in uri:
                self.fs, base = pafs.FileSystem.from_uri(_with_delayed_open(uri))
            else:
                self.fs, base = pafs.LocalFileSystem(), os.path.abspath(uri)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as err:
            raise RunFolderError(f"cannot open the run folder {uri}: {err}") from None
        self.uri = uri if "://" in uri else base
        self.base = base.rstrip("/") or "/"
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        # an upload under the file's own name is atomic (the object appears when it completes)
        self.uploads_atomic = isinstance(self.fs, _OBJECT_STORES)
        self._made: set[str] = set()  # folders this object created or found (no create_dir call each write)

    def __reduce__(self):
        return (RunStore, (self.uri,))

    def __repr__(self) -> str:
        return f"RunStore({self.uri!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, RunStore) and (self.uri, self.base) == (other.uri, other.base)

    def __hash__(self) -> int:
        return hash(self.base)

    # ---- paths
    def full(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

    def uri_of(self, rel: str) -> str:
        """The URI (or local path) of ``rel`` inside this folder, openable as a RunStore of its own: what messages
        name (``s3://bucket/run/x``; ``full`` is the filesystem's path, without the scheme). A query of the
        folder's URI (``?endpoint_override=...``) stays at the end."""
        if "://" not in self.uri:
            return os.path.join(self.base, rel)
        head, sep, query = self.uri.partition("?")
        return f"{head.rstrip('/')}/{rel}{sep}{query}" if rel else self.uri

    @property
    def local_root(self) -> Path | None:
        """The run folder as a local path when it lives on the local filesystem, else None."""
        return Path(self.base) if self.is_local else None

    # ---- reading
    def exists(self, rel: str) -> bool:
        if self.is_local:
            return os.path.exists(self.full(rel))
        return self.fs.get_file_info(self.full(rel)).type != pafs.FileType.NotFound

    def is_dir(self, rel: str = "") -> bool:
        return self.fs.get_file_info(self.full(rel)).type == pafs.FileType.Directory

    def size(self, rel: str) -> int | None:
        info = self.fs.get_file_info(self.full(rel))
        return None if info.type == pafs.FileType.NotFound else info.size

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.full(rel)) as fh:
            return fh.read()

    def read_json(self, rel: str):
        return json.loads(self.read_bytes(rel))

    def list(self, rel_dir: str, recursive: bool = False) -> list[str]:
        """Relative paths of the files under ``rel_dir`` (sorted; [] when it does not exist). On a local disk
        every entry that is not a folder (a link too, whatever it points to), never descending into a link."""
        if self.is_local:
            return sorted(rel for rel, _ in self._local_entries(rel_dir, recursive))
        sel = pafs.FileSelector(self.full(rel_dir), allow_not_found=True, recursive=recursive)
        n = len(self.base) + 1
        return sorted(i.path[n:] for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File)

    def links(self, rel_dir: str = "") -> list[str]:
        """The links under ``rel_dir`` (local disks; object stores have none): entries ``list`` gives that are
        never drivegen's (it writes no link) and that no delete follows."""
        if not self.is_local:
            return []
        return sorted(rel for rel, link in self._local_entries(rel_dir, True) if link)

    def _local_entries(self, rel_dir: str, recursive: bool) -> list[tuple[str, bool]]:
        """(relative path, is a link) of every entry under ``rel_dir`` that is not a folder; links not followed."""
        n = len(self.base) + 1
        out: list[tuple[str, bool]] = []
        stack = [self.full(rel_dir)]
        while stack:
            try:
                it = os.scandir(stack.pop())
            except (FileNotFoundError, NotADirectoryError):
                continue
            with it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        if recursive:
                            stack.append(e.path)
                    else:
                        out.append((e.path[n:], e.is_symlink()))
        return out

    def list_dirs(self, rel_dir: str) -> list[str]:
        """Relative paths of the folders directly under ``rel_dir`` (sorted)."""
        sel = pafs.FileSelector(self.full(rel_dir), allow_not_found=True, recursive=False)
        n = len(self.base) + 1
        return sorted(i.path[n:] for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.Directory)

    def is_empty(self) -> bool:
        """True when the folder does not exist or holds nothing."""
        if not self.exists(""):
            return True
        sel = pafs.FileSelector(self.base, allow_not_found=True, recursive=False)
        return not self.fs.get_file_info(sel)

    def read_parquet(self, rel: str | list[str], schema: pa.Schema | None = None,
                     columns: list[str] | None = None) -> pa.Table:
        """Tables written by ``write_table`` (one file or a list), with their declared types
        (``schemas.tables.read_parquet``)."""
        target = [self.full(r) for r in rel] if isinstance(rel, list) else self.full(rel)
        return read_parquet(target, schema=schema, columns=columns, filesystem=self.fs)

    # ---- writing (always atomic)
    def mkdirs(self, rel_dir: str) -> None:
        if rel_dir in self._made:
            return
        try:
            self.fs.create_dir(self.full(rel_dir), recursive=True)
        except (PermissionError, OSError) as err:
            raise self._write_error(rel_dir, err) from None
        self._made.add(rel_dir)

    def _write_error(self, rel: str, err: OSError) -> DrivegenError:
        return from_write_error(self.uri_of(rel), err)  # refused, unwritable folder or storage out of reach

    def write_bytes(self, rel: str, data: bytes, durable: bool = True) -> None:
        """Write ``data`` at ``rel``: temporary name, then move into place (fsynced first unless
        ``durable=False``: a file that need not survive a power cut)."""
        parent = str(PurePosixPath(rel).parent)
        parent = "" if parent in ("", ".") else parent
        self.mkdirs(parent)
        tmp = self._write_name(rel)
        if self.is_local and not os.path.isdir(self.full(parent)):  # removed since it was made (by another writer)
            self._made.discard(parent)
            self.mkdirs(parent)
        try:
            if self.is_local:  # fsync so a crash right after the rename cannot leave an empty file
                with open(self.full(tmp), "wb") as fh:
                    fh.write(data)
                    if durable:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.replace(self.full(tmp), self.full(rel))  # what fs.move does locally, without its wrapping
            else:
                with self.fs.open_output_stream(self.full(tmp)) as fh:
                    fh.write(data)
                if tmp != rel:
                    self.fs.move(self.full(tmp), self.full(rel))
        except OSError as err:  # read-only filesystem, permissions, a full disk: name the file
            self._delete_tmp(tmp, rel)
            raise self._write_error(rel, err) from None
        except BaseException:
            self._delete_tmp(tmp, rel)
            raise

    def write_json(self, rel: str, obj, durable: bool = True) -> None:
        self.write_bytes(rel, (json.dumps(obj, indent=1, sort_keys=True, default=_json_default) + "\n").encode(),
                         durable)

    def write_table(self, rel: str, table: pa.Table, compression: str = "zstd") -> None:
        """Write ``table`` as Parquet at ``rel`` (``schemas.tables.write_parquet``), atomically."""
        buf = io.BytesIO()
        write_parquet(buf, table, compression=compression)
        self.write_bytes(rel, buf.getvalue())

    def commit_file(self, local: Path, rel: str, synced: bool = False) -> None:
        """Move a finished local file into the store at ``rel`` (rename when local, upload otherwise);
        ``synced``: its writer already fsynced it."""
        if self.is_local:
            dst = Path(self.full(rel))
            parent = str(PurePosixPath(rel).parent)
            if parent not in self._made:
                dst.parent.mkdir(parents=True, exist_ok=True)
                self._made.add(parent)
            if not synced:
                with open(local, "rb") as fh:
                    os.fsync(fh.fileno())
            os.replace(local, dst)  # staging lives inside the run folder: same filesystem, atomic
        else:
            parent = str(PurePosixPath(rel).parent)
            if parent not in ("", "."):
                self.mkdirs(parent)
            tmp = self._write_name(rel)
            try:
                with open(local, "rb") as src, self.fs.open_output_stream(self.full(tmp)) as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
                if tmp != rel:
                    self.fs.move(self.full(tmp), self.full(rel))
            except BaseException:
                self._delete_tmp(tmp, rel)
                raise

    def copy(self, src_rel: str, dst_rel: str) -> None:
        """Copy the file ``src_rel`` to ``dst_rel`` inside the store without its bytes passing through this process
        where the filesystem allows: a hard link on a local disk (a copy where links are refused), the store's own
        copy on object storage (S3's CopyObject). Atomic: the copy appears under its name whole."""
        parent = str(PurePosixPath(dst_rel).parent)
        self.mkdirs("" if parent in ("", ".") else parent)
        tmp = self._write_name(dst_rel)
        try:
            if self.is_local:
                if os.path.exists(self.full(dst_rel)) and os.path.samefile(self.full(src_rel), self.full(dst_rel)):
                    return  # already a link to it (renaming a link onto its own file would leave the link behind)
                try:
                    os.link(self.full(src_rel), self.full(tmp))
                except OSError:
                    shutil.copyfile(self.full(src_rel), self.full(tmp))
                os.replace(self.full(tmp), self.full(dst_rel))
            else:
                self.fs.copy_file(self.full(src_rel), self.full(tmp))
                if tmp != dst_rel:
                    self.fs.move(self.full(tmp), self.full(dst_rel))
        except OSError as err:
            self._delete_tmp(tmp, dst_rel)
            raise self._write_error(dst_rel, err) from None

    # ---- deleting: the one rule (module docstring)
    def deletable(self, rel, marker: str | None = None) -> str:
        """``rel`` when drivegen may delete it (module docstring: inside this folder, reached through no link, not
        a link itself); RunFolderError naming it otherwise (``marker``: the file that listed it, named too)."""
        why = _outside(rel)
        if why is None and self.is_local:
            why = self._through_link(rel)
        if why is None:
            return rel
        where = f" (listed in {self.uri_of(marker)})" if marker else ""
        raise RunFolderError(f"refusing to delete {rel!r} of {self.uri}{where}: {why}; drivegen deletes only files "
                             "it wrote inside the folder it owns (was the listing edited by hand?)",
                             file=self.uri_of(marker) if marker else self.uri)

    def _through_link(self, rel: str) -> str | None:
        """Why deleting ``rel`` of a local folder would follow or remove a link (None: it would not)."""
        path = self.base
        for part in rel.split("/"):
            path = os.path.join(path, part)
            try:
                mode = os.lstat(path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return None  # nothing there to delete
            except OSError as err:
                return f"cannot check {path}: {err.strerror or err}"
            if stat.S_ISLNK(mode):
                return f"{path} is a link (to {os.readlink(path)}), which drivegen never follows or deletes"
        return None

    def delete(self, rel: str, marker: str | None = None) -> None:
        """Delete the file ``rel`` (a missing one is no error), by the rule of ``deletable``."""
        self._delete_quiet(self.deletable(rel, marker))

    def delete_dir(self, rel_dir: str) -> None:
        """Delete the folder ``rel_dir`` and what it holds, by the rule of ``deletable``; a link inside it is
        removed as a link, never followed."""
        self.deletable(rel_dir)
        self._made = {d for d in self._made if not (d == rel_dir or d.startswith(rel_dir + "/"))}
        try:
            if self.is_local:
                shutil.rmtree(self.full(rel_dir))  # on Linux by file descriptors: links inside are not followed
            else:
                self.fs.delete_dir(self.full(rel_dir))
        except (FileNotFoundError, OSError):
            pass

    def remove_if_empty(self) -> bool:
        """Remove the folder itself when it holds nothing (local disks; an object store has no empty folders);
        True when it is gone."""
        if self.is_local:
            try:
                os.rmdir(self.base)
            except FileNotFoundError:
                pass
            except OSError:  # not empty, or not ours to remove
                return False
        return not self.exists("")

    def _write_name(self, rel: str) -> str:
        """The name a file of ``rel`` is written under: ``rel`` itself on object storage (an upload appears whole),
        a temporary name moved into place elsewhere."""
        return rel if self.uploads_atomic else tmp_name(rel)

    def _delete_tmp(self, tmp: str, rel: str) -> None:
        """After a failed write: its temporary file goes; a failed upload under the file's own name left none
        (an earlier file of that name stays as it was)."""
        if tmp != rel:
            self._delete_quiet(tmp)

    def _delete_quiet(self, rel: str) -> None:
        try:
            if self.is_local:
                os.unlink(self.full(rel))
            else:
                self.fs.delete_file(self.full(rel))
        except (FileNotFoundError, OSError):
            pass

    # ---- staging: local folders where files are built before they are committed
    def staging_dir(self, name: str) -> Path:
        """A fresh local folder ``<name>.<uuid>`` to build files in before committing them: inside the run
        folder (``.staging/``) when it is local, so the commit is a rename on the same filesystem; in the
        temp dir otherwise (the commit uploads)."""
        if self.is_local:
            d = Path(self.full(STAGING_DIR)) / f"{name}.{uuid.uuid4().hex}"
            d.mkdir(parents=True)
            return d
        return Path(tempfile.mkdtemp(prefix=f"drivegen-{name}-"))

    def release_staging(self, d: Path, tidy: bool = True) -> None:
        """Remove a folder ``staging_dir`` made (and, ``tidy``, ``.staging`` itself once it is empty; a
        writer of many scenes in a row keeps it and removes it at its end)."""
        shutil.rmtree(d, ignore_errors=True)
        if tidy and self.is_local and d.parent == Path(self.full(STAGING_DIR)):
            try:
                d.parent.rmdir()
            except OSError:  # other scenes are being staged
                pass

    def commit_tree(self, local_dir: Path, rel_dir: str = "") -> list[str]:
        """Commit every file under ``local_dir`` to ``rel_dir/<its relative path>``; returns the paths."""
        out = []
        for p in sorted(local_dir.rglob("*")):
            if p.is_file():
                rel = p.relative_to(local_dir).as_posix()
                rel = f"{rel_dir}/{rel}" if rel_dir else rel
                self.commit_file(p, rel)
                out.append(rel)
        return out


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _outside(rel) -> str | None:
    """Why ``rel`` is not a path inside a folder (None when it is): not a relative '/'-separated path of named
    parts (an empty, ``.`` or ``..`` part, absolute, a NUL)."""
    if not isinstance(rel, str) or not rel:
        return "not a path"
    if rel.startswith("/") or "\x00" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
        return "it leaves the folder (an absolute path, or an empty, '.' or '..' part)"
    return None


# Filesystems whose uploads appear whole or not at all (GCS only where pyarrow was built with it).
_OBJECT_STORES = tuple(getattr(pafs, name) for name in ("S3FileSystem", "GcsFileSystem") if hasattr(pafs, name))


def _with_delayed_open(uri: str) -> str:
    """``uri`` with ``allow_delayed_open=true`` when it is an S3 URI that does not set it: pyarrow then uploads a
    file smaller than a multipart part with one PutObject when it is closed (without it: create, upload a part,
    complete; measured on moto's server)."""
    scheme, _, rest = uri.partition("://")
    if scheme != "s3" or "allow_delayed_open=" in rest:
        return uri
    return f"{uri}{'&' if '?' in rest else '?'}allow_delayed_open=true"
