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
away, which only one contender can do). Object stores have no create-if-absent through pyarrow: there the
lock is written, read back after ``settle_s`` and kept only if it is still ours (two writers starting within
that window can both believe they won; the run epochs still keep their commits apart).
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from generator.runfolder.store import RunStore
from schemas import layout
from schemas.errors import DrivegenError, RunFolderError


class StaleWriterError(DrivegenError):
    """A writer's run epoch is no longer the run's: a newer driver holds the run folder."""


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


def read_lock(store: RunStore) -> LockInfo | None:
    try:
        d = store.read_json(layout.LOCK)
    except (FileNotFoundError, OSError, ValueError):
        return None
    try:
        return LockInfo(**{k: d[k] for k in LockInfo.__dataclass_fields__})
    except (KeyError, TypeError):
        return None


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
                                 file=store.full(layout.LOCK))
        epoch = max(current_epoch(store), held.epoch if held else 0) + 1
        if store.is_local:
            self._create_local(held, epoch)
        else:
            store.write_json(layout.LOCK, self._info(epoch))
            time.sleep(self.settle_s)
            now = read_lock(store)
            if now is None or now.owner != self.owner:
                raise RunFolderError(f"{store.uri}: another writer took the lock at the same time"
                                     + (f": {now.describe()}" if now else ""), file=store.full(layout.LOCK))
        self.epoch = epoch
        # heartbeats left half-written by a killed holder; from now on this writer's heartbeat writes these
        # names (``remove_leftovers`` leaves them alone), so they are cleared here, before it starts
        for rel in store.list(""):
            if layout.is_lock_tmp_name(rel):
                store.delete(rel)
        self._thread = threading.Thread(target=self._beat, name="drivegen-lock-heartbeat", daemon=True)
        self._thread.start()
        return epoch

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
            raise RunFolderError(f"cannot write {path}: {err.strerror or err}; give an --out folder you can write to",
                                 file=path) from None
        with os.fdopen(fd, "w") as fh:
            json.dump(self._info(epoch), fh)
            fh.flush()
            os.fsync(fh.fileno())

    # ---- holding
    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                now = read_lock(self.store)
                if now is None or now.owner != self.owner:
                    self.lost = True
                    return
                self.store.write_json(layout.LOCK, {**self._info(self.epoch), "started_unix": self._started})
            except Exception:  # noqa: BLE001 - a missed heartbeat is retried; staleness needs many
                pass

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        now = read_lock(self.store)
        if now is not None and now.owner == self.owner:
            self.store.delete(layout.LOCK)

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
