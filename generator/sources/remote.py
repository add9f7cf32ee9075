"""Logs on object storage (``s3://``, ``gs://``, any URI pyarrow's filesystems open) read through a bounded node cache.

A log root given as a URI is mirrored file by file into ``<cache dir>/<key of the URI>/``: the tables when the
source opens (once per node: a later open finds them), each sensor file when a scene that uses it is loaded (on
the worker that loads the scene). Everything after that reads local files exactly as for local logs.

The cache (``NodeCache``), in the order its rules apply:

1. a file is downloaded under a temporary name beside its final one and renamed into place once whole, so
   concurrent workers on one node never see half a file (``schemas.layout``-style ``.<name>.<id>.tmp``);
2. its size is checked against the object's: a short download is an error naming the object, never a file;
3. the object's identity (its ETag and version on S3: the content's; elsewhere its size and modification time) is
   recorded beside the file (``.<name>.id``, written after the file); a file already cached is reused only
   when its recorded identity is the object's now (an object replaced by another of the same size is downloaded
   again); using it refreshes its time (least recently used);
4. after each scene the cache is trimmed to ``sources.cache_max_bytes`` by removing the least recently used
   files, never one used in the last ``sources.cache_keep_s`` (a scene in flight on this node keeps its files;
   while many are in flight the bound is exceeded rather than a file pulled from under a reader).

A missing object, an unreachable endpoint, wrong credentials or a bucket that does not exist raise
``SourceError`` naming the URI. A network error is not a missing file: a fetch or a listing that cannot reach the
storage (``UnreachableError``) is tried ``sources.fetch_attempts`` times with a doubling wait (``NodeCache.retry``),
then fails the scene (``--resume`` redoes it), where a missing object is recorded as its frame's problem.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import logging
import os
import shutil
import time
import uuid
from pathlib import Path

import pyarrow.fs as pafs

from generator.types import SourceError
from schemas.config import SourceLimitsConfig

DEFAULT_CACHE_DIR = "~/.cache/drivegen/logs"
# the nuScenes scene index (generator.sources.nuscenes_index) lives in this folder of the cache root, outside the
# size bound of the mirrored files (``NodeCache.trim`` never walks it)
INDEX_DIR = "nuscenes-index"
log = logging.getLogger("drivegen.sources")


class UnreachableError(SourceError):
    """The storage could not be reached, or a download broke off: a network error, never a missing object."""


def is_remote(path) -> bool:
    """True for a URI with a scheme other than file:// (``s3://bucket/logs``)."""
    text = str(path)
    return "://" in text and not text.startswith("file://")


def cache_root(limits) -> Path:
    """The node cache folder: ``sources.cache_dir``, else ``$DRIVEGEN_LOG_CACHE``, else ~/.cache/drivegen/logs."""
    where = getattr(limits, "cache_dir", "") or os.environ.get("DRIVEGEN_LOG_CACHE") or DEFAULT_CACHE_DIR
    return Path(os.path.expanduser(where))


def _is_tmp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def _id_file(local: Path) -> Path:
    """Where the identity of the object a cached file holds is recorded (rule 3)."""
    return local.with_name(f".{local.name}.id")


def _is_id(name: str) -> bool:
    return name.startswith(".") and name.endswith(".id")


def _identity(fh) -> str | None:
    """The identity of an opened object where the store gives one: its ETag and version (S3: a hash of its
    content); None elsewhere (the caller then uses its size and modification time)."""
    try:
        meta = {(k.decode() if isinstance(k, bytes) else k).lower(): (v.decode() if isinstance(v, bytes) else v)
                for k, v in (fh.metadata() or {}).items()}
    except (AttributeError, OSError):
        return None
    if not meta.get("etag"):
        return None
    return f"etag {meta['etag']} version {meta.get('versionid') or '-'} size {fh.size()}"


@functools.lru_cache(maxsize=16)
def _filesystem(root: str):
    """(pyarrow filesystem, its path of ``root``) per ``scheme://bucket``: an S3 client is costly to create, and
    a command reads many images."""
    return pafs.FileSystem.from_uri(root)


def read_log_file(path: str) -> bytes:
    """The bytes of a log file a run's tables name: a local path, or the URI of an object (logs on object storage;
    read directly, for the few files commands open after a run: images of exports, WebDataset and the report).
    OSError (FileNotFoundError for a missing object) names the path."""
    if not is_remote(path):
        with open(path, "rb") as fh:
            return fh.read()
    scheme, _, rest = path.partition("://")
    bucket = rest.split("/", 1)[0]
    try:
        fs, base = _filesystem(f"{scheme}://{bucket}")
        where = base + rest[len(bucket):]  # s3://bucket/key -> bucket/key
        if fs.get_file_info(where).type != pafs.FileType.File:
            raise FileNotFoundError(f"{path} does not exist")
        with fs.open_input_stream(where) as fh:
            return fh.read()
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as err:  # endpoint, credentials, a malformed URI
        raise OSError(f"cannot read {path}: {err}") from None


def cached_object(uri: str, limits=None) -> Path:
    """The object ``uri`` as a local file in the node cache (``RemoteRoot`` of its folder; ``limits``: the
    ``SourceLimitsConfig``, default its defaults): for a reader that needs a file path (a map mask) where the
    outputs name the object. SourceError names it."""
    if limits is None:
        limits = SourceLimitsConfig()
    folder, _, name = str(uri).rpartition("/")
    return RemoteRoot(folder, limits).local(name)


class NodeCache:
    """Files of remote log roots on this node's disk, bounded by ``max_bytes`` (see the module docstring).

    ``trim`` walks the whole cache folder, which holds up to ``max_bytes`` of sweeps and images: it does so only
    when this process's running count (the last walk's total plus what it fetched since) passes the bound, or
    ``WALK_EVERY_S`` after its last walk (other workers on the node fetch too), not after every scene."""

    WALK_EVERY_S = 60.0

    def __init__(self, root: Path, max_bytes: int, keep_s: float, attempts: int = 1, backoff_s: float = 0.0):
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        self.keep_s = float(keep_s)
        self.attempts, self.backoff_s = max(1, int(attempts)), float(backoff_s)
        self._known: int | None = None  # bytes in the cache as far as this process knows (None: never walked)
        self._walked = 0.0  # time.monotonic() of the last walk

    def retry(self, once, uri: str, stage: str = "read"):
        """``once()``, where an ``UnreachableError`` (a network error) is tried again ``attempts`` times in all,
        waiting ``backoff_s`` and then twice as long each time; then ``UnreachableError`` names the object, the
        error and the attempts. Any other error (a missing object) is raised at once. Fetches and listings alike."""
        wait, waited = self.backoff_s, 0.0
        for attempt in itertools.count(1):
            try:
                return once()
            except UnreachableError as err:
                if attempt >= self.attempts:
                    tries = f" ({attempt} attempts over {waited:.0f} s)" if attempt > 1 else ""
                    raise UnreachableError(f"{err.message}{tries}: a network error, not a missing file; the scene "
                                           "fails and drivegen run --resume redoes it once the storage can be "
                                           "reached", file=uri, stage=stage) from None
                log.warning("%s; trying again in %.1f s (attempt %d of %d)", err.message, wait, attempt + 1,
                            self.attempts)
                time.sleep(wait)
                waited += wait
                wait *= 2

    def fetch(self, fs, remote: str, local: Path, uri: str) -> Path:
        """``remote`` (a path on ``fs``; ``uri`` names it in errors) as the local file ``local``, network errors
        tried again (``retry``). A missing object is a SourceError at once."""
        return self.retry(lambda: self._fetch_once(fs, remote, local, uri), uri)

    def _fetch_once(self, fs, remote: str, local: Path, uri: str) -> Path:
        try:
            src = fs.open_input_file(remote)  # one request on S3 (HEAD): its size and identity, no byte read yet
            size = src.size()
            ident = _identity(src) or f"size {size} mtime_ns {fs.get_file_info(remote).mtime_ns}"
        except (FileNotFoundError, IsADirectoryError):
            raise SourceError(f"{uri} does not exist", file=uri, stage="read") from None
        except OSError as err:
            raise UnreachableError(f"cannot reach {uri}: {err}", file=uri, stage="read") from None
        with src:
            try:
                if _id_file(local).read_text() == ident and local.stat().st_size == size:
                    os.utime(local)  # used now: the last to be evicted
                    return local
            except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
                pass
            local.parent.mkdir(parents=True, exist_ok=True)
            tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:12]}.tmp")
            try:
                with open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
                got = tmp.stat().st_size
                if got != size:
                    raise UnreachableError(f"{uri}: downloaded {got} of its {size} bytes (the connection broke "
                                           "or the object changed)", file=uri, stage="read")
                os.replace(tmp, local)
                # the identity after the file: a reader between the two sees another identity and downloads again,
                # never an old file under a new identity
                tmp.write_text(ident)
                os.replace(tmp, _id_file(local))
                if self._known is not None:
                    self._known += got
            except OSError as err:
                raise UnreachableError(f"cannot read {uri}: {err}", file=uri, stage="read") from None
            finally:
                tmp.unlink(missing_ok=True)
        return local

    def trim(self) -> list[Path]:
        """Remove least recently used files until the cache holds at most ``max_bytes`` (rule 4); returns them.
        Skipped (nothing removed) while the running count is within the bound and the last walk is recent."""
        if (self._known is not None and self._known <= self.max_bytes
                and time.monotonic() - self._walked < self.WALK_EVERY_S):
            return []
        self._walked = time.monotonic()
        files, total = [], 0
        for dirpath, dirs, names in os.walk(self.root):
            if dirpath == str(self.root):
                dirs[:] = [d for d in dirs if d != INDEX_DIR]
            for name in names:
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:  # removed by another worker meanwhile
                    continue
                total += st.st_size
                if not _is_tmp(name) and not _is_id(name):
                    files.append((st.st_mtime, st.st_size, p))
        removed: list[Path] = []
        self._known = total
        if total <= self.max_bytes:
            return removed
        now = time.time()
        for mtime, size, p in sorted(files):
            if total <= self.max_bytes or now - mtime < self.keep_s:
                break
            p.unlink(missing_ok=True)
            _id_file(p).unlink(missing_ok=True)
            total -= size
            removed.append(p)
        self._known = total
        return removed


class RemoteRoot:
    """A log root at ``uri`` mirrored into the node cache: ``local(rel)`` is the file ``uri/rel`` on this node."""

    def __init__(self, uri: str, limits):
        self.uri = str(uri).rstrip("/")
        try:
            self.fs, self.base = pafs.FileSystem.from_uri(self.uri)
        except (OSError, ValueError) as err:  # unknown scheme, malformed URI, no credentials provider
            raise SourceError(f"cannot open {self.uri}: {err}", file=self.uri, stage="open") from None
        self.base = self.base.rstrip("/")
        root = cache_root(limits)
        self.cache = NodeCache(root, limits.cache_max_bytes, limits.cache_keep_s,
                               getattr(limits, "fetch_attempts", 1), getattr(limits, "fetch_backoff_s", 0.0))
        self.mirror = root / hashlib.sha1(self.uri.encode()).hexdigest()[:16]

    def uri_of(self, local) -> str:
        """The object a mirrored local path stands for (the path itself when it is not in the mirror)."""
        try:
            rel = Path(local).relative_to(self.mirror).as_posix()
        except ValueError:
            return str(local)
        return f"{self.uri}/{rel}"

    def local(self, rel: str) -> Path:
        """The file ``uri/rel`` on this node, downloaded when it is not cached (SourceError names the object)."""
        return self.cache.fetch(self.fs, f"{self.base}/{rel}", self.mirror / rel, f"{self.uri}/{rel}")

    def folder(self, rel: str) -> Path:
        """Every file under ``uri/rel`` (e.g. a nuScenes version's tables), on this node; SourceError when
        there are none or the storage cannot be reached."""
        for f in self.list(rel):
            self.local(f)
        return self.mirror / rel

    def list(self, rel: str = "", allow_empty: bool = False) -> list[str]:
        """Every file under ``uri/rel`` (the root by default), relative to the root, from one recursive listing;
        SourceError when there are none (``allow_empty``: [] instead) or the storage cannot be reached (endpoint
        down, credentials refused, no such bucket)."""
        where = f"{self.uri}/{rel}".rstrip("/")
        sel = pafs.FileSelector(f"{self.base}/{rel}".rstrip("/"), allow_not_found=True, recursive=True)

        def once():
            try:
                return self.fs.get_file_info(sel)
            except OSError as err:  # a network error: tried again as a fetch is
                raise UnreachableError(f"cannot list {where}: {err}", file=where, stage="open") from None

        infos = self.cache.retry(once, where, stage="open")
        files = sorted(i.path[len(self.base) + 1:] for i in infos if i.type == pafs.FileType.File)
        if not files and not allow_empty:
            raise SourceError(f"{where} holds no files: is the URI the logs' root?", file=where, stage="open")
        return files

    def fetch_all(self, rels) -> None:
        """Files into the cache; a missing object is left absent, for the source's file checks to record as the
        frame's problem (as a missing local file is). Storage that cannot be reached raises ``UnreachableError``
        (after the retries), which fails the scene: a network error must not become a frame issue that says
        'missing' about an object that exists."""
        for rel in rels:
            try:
                self.local(rel)
            except UnreachableError:
                raise
            except SourceError:
                pass

    def loaded(self, scene):
        """A scene loaded from the mirror: its tables will name files by URI (``Scene.files_at``), so do its
        load issues; then the cache is trimmed (this scene's files were just used: they stay)."""
        scene.files_at = (str(self.mirror), self.uri)
        scene.issues = [dataclasses.replace(i, file=scene.shown_path(i.file or "") or i.file) for i in scene.issues]
        self.cache.trim()
        return scene

    def named(self, err: SourceError) -> SourceError:
        """``err`` naming the object instead of its cached copy."""
        if err.file is None or not str(err.file).startswith(str(self.mirror)):
            return err
        return type(err)(err.message, scene=err.scene, file=self.uri_of(err.file), stage=err.stage)  # kind kept
