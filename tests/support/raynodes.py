"""Ray nodes a test starts with ``ray start``, and stopping exactly those. ``ray stop`` stops every Ray process of
the user on the machine (another engineer's cluster, another test's): a test's nodes are started with their own
``RAY_TMPDIR`` (Ray's temporary folder: sessions, sockets, the address file ``--address auto`` reads) and
``stop_own`` stops the processes whose environment holds it, with their children (Ray's workers and agents).

    python tests/support/raynodes.py RAY_TMPDIR      # what a test's ``ray stop`` shim runs
"""
from __future__ import annotations

import os
import socket
import sys

import psutil


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (never Ray's defaults: the kernel picks from its ephemeral range)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_of(ray_tmpdir: str) -> list[psutil.Process]:
    """The processes whose environment has ``RAY_TMPDIR=ray_tmpdir`` (every process ``ray start`` and the drivers
    of that shell started, and the workers they spawned), with their children, this process excluded."""
    found: dict[int, psutil.Process] = {}
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            if p.environ().get("RAY_TMPDIR") == ray_tmpdir:
                found[p.pid] = p
                found.update((c.pid, c) for c in p.children(recursive=True))
        except psutil.Error:
            continue
    found.pop(os.getpid(), None)
    return list(found.values())


def stop_own(ray_tmpdir: str, grace_s: float = 15.0) -> int:
    """SIGTERM to the processes of ``processes_of(ray_tmpdir)``, SIGKILL to those left after ``grace_s``;
    returns how many there were."""
    procs = processes_of(ray_tmpdir)
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


if __name__ == "__main__":
    print(f"stopped {stop_own(sys.argv[1])} Ray process(es) of RAY_TMPDIR={sys.argv[1]}")
