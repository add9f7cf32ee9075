"""The run folder's writer lock and run epoch.

One writer at a time: ``drivegen run`` (and ``--resume``) and ``drivegen regenerate`` take ``_lock.json``
before they write anything else. The lock records its owner (host, pid, command, start) and a heartbeat the
holder refreshes every ``heartbeat_s``. A second writer is refused with a message naming the first. A lock
is stale, and taken over, when its holder is a dead process on this host or its heartbeat is older than
``stale_after_s`` (a holder on another machine that stopped).

Each lock holder gets the next **run epoch** (also in ``run.json``). Workers carry the epoch of the driver
that started them and ``fence()`` before they commit: a worker left over from a killed driver finds a newer
epoch and stops instead of committing into the resumed run.

Creating the lock is atomic on a local filesystem (``O_CREAT | O_EXCL``; a stale lock is first renamed
away, which only one contender can do). On S3 it is a conditional write (``S3Conditional``): the lock is
created with ``If-None-Match: *``, a stale one is taken over with ``If-Match`` on the ETag that was read,
each heartbeat replaces the holder's own version (``If-Match``) and the release deletes only that version.
Of two writers only one write succeeds, whatever the delays between them; the other is refused naming the
winner. A heartbeat that finds the lock changed marks it ``lost``, and the end of the run (``ensure_held``)
refuses to write its summary, card and exports; workers fence on the run epoch before every commit.
Other object stores (and an S3-compatible server that answers ``NotImplemented``) have no conditional write
drivegen can use: there the lock is written, read back after ``settle_s`` and kept only if it is still ours,
and a warning says that two writers starting within that window could both believe they won.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from generator.runfolder.store import RunStore
from schemas import layout
from schemas.errors import DrivegenError, RunFolderError, from_write_error

log = logging.getLogger("drivegen.runfolder")


class StaleWriterError(DrivegenError):
    """A writer's run epoch is no longer the run's: a newer driver holds the run folder."""


class LockLostError(RunFolderError):
    """The driver's lock on the run folder was taken over by another writer: it writes nothing more."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class LockInfo:
    owner: str
    host: str
    pid: int
    command: str
    epoch: int
    started_unix: float
    heartbeat_unix: float

    def describe(self) -> str:
        age = time.time() - self.heartbeat_unix
        return (f"'{self.command}' (pid {self.pid} on {self.host}, epoch {self.epoch}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started_unix))}, last heartbeat "
                f"{age:.0f} s ago)")


def _lock_info(d) -> LockInfo | None:
    try:
        return LockInfo(**{k: d[k] for k in LockInfo.__dataclass_fields__})
    except (KeyError, TypeError):
        return None


def read_lock(store: RunStore) -> LockInfo | None:
    try:
        d = store.read_json(layout.LOCK)
    except (FileNotFoundError, OSError, ValueError):
        return None
    return _lock_info(d)


class ConditionalWritesUnsupported(Exception):
    """The object store refused a conditional request as not implemented."""


class S3Conditional:
    """Conditional object writes on S3 (AWS, and the S3-compatible servers that implement them): create if absent
    (``If-None-Match: *``), replace or delete only the version read (``If-Match`` on its ETag). Through boto3,
    which reads the same AWS environment as pyarrow's S3 (``AWS_ENDPOINT_URL``, credentials, region); a run
    folder URI's ``endpoint_override``/``scheme``/``region`` query parameters are honoured as pyarrow does.
    Each method returns None when the condition failed (another writer got there first)."""

    _LOST = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")

    def __init__(self, store: RunStore):
        import boto3  # here: only object-store runs need it, and it costs ~0.3 s to import

        q = {k: v[-1] for k, v in parse_qs(urlsplit(store.uri).query).items()}
        kw = {}
        if q.get("endpoint_override"):
            kw["endpoint_url"] = f"{q.get('scheme', 'https')}://{q['endpoint_override']}"
        if q.get("region"):
            kw["region_name"] = q["region"]
        self.client = boto3.client("s3", **kw)
        self.bucket, _, prefix = store.base.partition("/")
        self.prefix = prefix.strip("/")
        self.uri = store.uri

    def _key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _call(self, what: str, rel: str, **kw):
        from botocore.exceptions import BotoCoreError, ClientError  # botocore: only for a run folder's lock on S3

        try:
            return getattr(self.client, what)(Bucket=self.bucket, Key=self._key(rel), **kw)
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", ""))
            status = str(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
            if code in self._LOST or status in self._LOST:
                return None
            if code == "NoSuchKey" or status == "404":
                raise FileNotFoundError(f"{self.uri}/{rel}") from None
            if code == "NotImplemented" or status == "501":
                raise ConditionalWritesUnsupported(f"{self.uri}: {err}") from None
            raise RunFolderError(f"cannot write {self.uri}/{rel} ({what}): {err}", file=f"{self.uri}/{rel}") from None
        except BotoCoreError as err:  # endpoint unreachable, no credentials
            raise RunFolderError(f"cannot reach {self.uri}/{rel}: {err}", file=f"{self.uri}/{rel}") from None

    def read_json(self, rel: str) -> tuple[dict | None, str | None]:
        """(the object's JSON, its ETag); (None, None) when it does not exist."""
        try:
            r = self._call("get_object", rel)
        except FileNotFoundError:
            return None, None
        try:
            return json.loads(r["Body"].read()), r["ETag"]
        except ValueError:
            return {}, r["ETag"]

    def create(self, rel: str, obj) -> str | None:
        r = self._call("put_object", rel, Body=json.dumps(obj).encode(), IfNoneMatch="*")
        return None if r is None else r["ETag"]

    def replace(self, rel: str, obj, etag: str) -> str | None:
        r = self._call("put_object", rel, Body=json.dumps(obj).encode(), IfMatch=etag)
        return None if r is None else r["ETag"]

    def delete(self, rel: str, etag: str) -> bool:
        try:
            return self._call("delete_object", rel, IfMatch=etag) is not None
        except FileNotFoundError:
            return False


def conditional_store(store: RunStore) -> S3Conditional | None:
    """The conditional writes of ``store`` when it is on S3, else None (local: O_EXCL; other stores: none)."""
    return S3Conditional(store) if store.uri.startswith("s3://") else None


def current_epoch(store: RunStore) -> int:
    """The run's epoch: the lock holder's while one holds it, else the last one in ``run.json`` (0: none)."""
    info = read_lock(store)
    if info is not None:
        return info.epoch
    try:
        return int(store.read_json(layout.RUN_STATE).get("epoch", 0))
    except (FileNotFoundError, OSError, ValueError):
        return 0


def make_fence(store: RunStore, epoch: int | None):
    """A ``fence()`` for ``commit_scene``: raises StaleWriterError when the run folder's epoch is not
    ``epoch`` any more. None (no epoch: tests, one-off writers) never fences."""
    if epoch is None:
        return None

    def fence() -> None:
        now = current_epoch(store)
        if now != epoch:
            raise StaleWriterError(f"this worker belongs to run epoch {epoch} of {store.uri}, which is now at epoch "
                                   f"{now} (the run was resumed by another driver); not committing")
    return fence


STALE_AFTER_S = 60.0  # a lock without a heartbeat for this long is taken over


def is_stale(info: LockInfo, stale_after_s: float = STALE_AFTER_S) -> bool:
    """Whether the lock's holder is gone: a dead pid on this host, or no heartbeat for ``stale_after_s``."""
    if info.host == socket.gethostname() and not _pid_alive(info.pid):
        return True
    return time.time() - info.heartbeat_unix > stale_after_s


def live_lock(store: RunStore) -> LockInfo | None:
    """The lock of a writer still at work on ``store`` (its run is being written), None when there is none."""
    info = read_lock(store)
    return info if info is not None and not is_stale(info) else None


class RunLock:
    """``with RunLock(store, "drivegen run") as lock: ... lock.epoch ...``"""

    def __init__(self, store: RunStore, command: str, heartbeat_s: float = 5.0, stale_after_s: float = STALE_AFTER_S,
                 settle_s: float = 0.5):
        self.store = store
        self.command = command
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.settle_s = settle_s
        self.owner = uuid.uuid4().hex
        self.epoch: int | None = None
        self.lost = False
        self._cond: S3Conditional | None = None  # conditional writes (S3) and the ETag of this writer's lock
        self._etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.time()

    # ---- acquiring
    def _info(self, epoch: int) -> dict:
        return {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "command": self.command,
                "epoch": epoch, "started_unix": self._started, "heartbeat_unix": time.time()}

    def is_stale(self, info: LockInfo) -> bool:
        return is_stale(info, self.stale_after_s)

    def acquire(self) -> int:
        """Take the lock (or refuse with RunFolderError naming the holder); returns this writer's epoch."""
        store = self.store
        store.mkdirs("")
        held = read_lock(store)
        if held is not None and not self.is_stale(held):
            raise RunFolderError(f"{store.uri} is being written by {held.describe()}; wait for it to finish, or "
                                 f"stop it (a lock whose holder died is taken over after {self.stale_after_s:.0f} s)",
                                 file=store.uri_of(layout.LOCK))
        epoch = max(current_epoch(store), held.epoch if held else 0) + 1
        if store.is_local:
            self._create_local(held, epoch)
        elif not self._create_conditional(held, epoch):
            self._create_settled(epoch)
        self.epoch = epoch
        # heartbeats left half-written by a killed holder; from now on this writer's heartbeat writes these
        # names (``remove_leftovers`` leaves them alone), so they are cleared here, before it starts
        for rel in store.list(""):
            if layout.is_lock_tmp_name(rel):
                store.delete(rel)
        self._thread = threading.Thread(target=self._beat, name="drivegen-lock-heartbeat", daemon=True)
        self._thread.start()
        return epoch

    def _create_conditional(self, held: LockInfo | None, epoch: int) -> bool:
        """Take the lock with one conditional write (S3). False when the store cannot do that."""
        try:
            cond = conditional_store(self.store)
            if cond is None:
                return False
            if held is None:
                etag = cond.create(layout.LOCK, self._info(epoch))
            else:  # stale: replace exactly the version judged stale, nothing written since
                seen, seen_etag = cond.read_json(layout.LOCK)
                etag = (cond.replace(layout.LOCK, self._info(epoch), seen_etag)
                        if seen_etag and _lock_info(seen) == held else None)
        except ConditionalWritesUnsupported as err:
            log.warning("%s has no conditional writes (%s): the lock is written and read back after %.1f s; two "
                        "writers starting within that time could both believe they hold it", self.store.uri, err,
                        self.settle_s)
            return False
        if etag is None:
            raise self._raced()
        self._cond, self._etag = cond, etag
        return True

    def _create_settled(self, epoch: int) -> None:
        """Object stores without conditional writes: write, wait ``settle_s``, keep the lock if it is still ours."""
        store = self.store
        store.write_json(layout.LOCK, self._info(epoch))
        time.sleep(self.settle_s)
        now = read_lock(store)
        if now is None or now.owner != self.owner:
            raise self._raced(now)

    def _raced(self, now: LockInfo | None = None) -> RunFolderError:
        """The error of a writer that lost the race for the lock, naming the winner (``now``: as read)."""
        now = now or read_lock(self.store)
        return RunFolderError(f"{self.store.uri}: another writer took the lock at the same time"
                              + (f": {now.describe()}" if now else ""), file=self.store.uri_of(layout.LOCK))

    def _create_local(self, held: LockInfo | None, epoch: int) -> None:
        path = self.store.full(layout.LOCK)
        if held is not None:  # stale: move it aside; of several contenders only one rename succeeds
            try:
                os.rename(path, f"{path}.{uuid.uuid4().hex}.stale")
            except FileNotFoundError:
                pass
            for p in os.listdir(os.path.dirname(path)):
                if p.startswith(os.path.basename(path) + ".") and p.endswith(".stale"):
                    try:
                        os.remove(os.path.join(os.path.dirname(path), p))
                    except OSError:
                        pass
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            now = read_lock(self.store)
            raise RunFolderError(f"{self.store.uri} is being written by "
                                 f"{now.describe() if now else 'another writer'}", file=path) from None
        except OSError as err:  # read-only filesystem, permissions, a full disk
            raise from_write_error(path, err) from None
        with os.fdopen(fd, "w") as fh:
            json.dump(self._info(epoch), fh)
            fh.flush()
            os.fsync(fh.fileno())

    # ---- holding
    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                if self._cond is not None:  # replace our own version only: a changed lock is someone else's
                    etag = self._cond.replace(layout.LOCK, {**self._info(self.epoch), "started_unix": self._started},
                                              self._etag)
                    if etag is None:
                        self.lost = True
                        return
                    self._etag = etag
                    continue
                now = read_lock(self.store)
                if now is None or now.owner != self.owner:
                    self.lost = True
                    return
                self.store.write_json(layout.LOCK, {**self._info(self.epoch), "started_unix": self._started})
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried; staleness needs many
                pass

    def ensure_held(self) -> None:
        """Raise RunFolderError when this writer no longer holds the lock (another writer took it over)."""
        now = read_lock(self.store)
        if self.lost or now is None or now.owner != self.owner:
            self.lost = True
            raise LockLostError(f"{self.store.uri}: this writer (epoch {self.epoch}) lost the run folder's lock"
                                 + (f" to {now.describe()}" if now else "")
                                 + "; its scenes already committed stay, nothing more is written",
                                 file=self.store.uri_of(layout.LOCK))

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._cond is not None:
            try:
                self._cond.delete(layout.LOCK, self._etag)  # our version only
            except (RunFolderError, ConditionalWritesUnsupported) as err:
                log.warning("could not remove the lock %s: %s", self.store.uri_of(layout.LOCK), err)
            return
        now = read_lock(self.store)
        if now is not None and now.owner == self.owner:
            self.store.delete(layout.LOCK)

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
