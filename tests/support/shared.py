"""Inputs built once per test run, not once per pytest-xdist worker.

A session fixture runs once in each worker process that uses it: on three workers, the generated logs and the
in-process reference runs were built up to three times (seconds of CPU each, on a suite that is CPU-bound). A
fixture that only writes files builds them with ``built_once`` instead: the first worker to ask builds them into
a folder of the test run's shared temporary root (pytest-xdist gives each worker a subfolder of it) while holding
an exclusive lock on the folder's lock file; the others wait on the lock and then read what it built. The
finished folder carries a marker written last, so a build that failed or was interrupted is started over by the
next worker to ask (and fails there the same way, naming its cause). Tests read these folders and never change
them (a test that changes a run copies it first), as they did when each worker had its own."""
from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import Callable

BUILT = ".built"  # the marker, written once the build returned


def shared_root(tmp_path_factory) -> Path:
    """The test run's temporary root that every worker sees: the parent of a worker's own base folder under
    pytest-xdist, the base folder itself in one process."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``shared-<name>`` of the run's shared root, filled by ``build(folder)`` in the first process
    that asks for it (an empty folder is passed) and returned as it is to every later one."""
    root = shared_root(tmp_path_factory)
    folder = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also when build raises
        if not (folder / BUILT).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a build that failed or was killed midway
            folder.mkdir(parents=True)
            build(folder)
            (folder / BUILT).write_text("")
    return folder
