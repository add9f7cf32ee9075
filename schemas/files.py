"""Checks on a local file drivegen is asked to read (a config, a prediction file, a log's table or annotation),
before it is opened: a FIFO or a device would block the command forever or never end, a symlink loop is not "a
missing file", and a file larger than any such file can be is refused before it is read whole."""
from __future__ import annotations

import errno
import os
import stat

from schemas.errors import InputError


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "not a regular file")


def file_problem(path: str | os.PathLike) -> str | None:
    """What keeps ``path`` from being read as a regular file (after its symlinks): 'missing', 'a symlink loop
    ...', 'a FIFO (named pipe)', 'a folder', ...; None when it is a regular file."""
    try:
        mode = os.stat(os.fspath(path)).st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop (its links never reach a file)"
        if err.errno == errno.ENAMETOOLONG:
            return "a name too long for the filesystem"
        return f"unreadable ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else _kind(mode)


def check_regular_file(path: str | os.PathLike, what: str, max_bytes: int | None = None) -> int:
    """The size of ``path`` in bytes; InputError naming ``what`` and the path unless it is a regular file (after
    its symlinks): missing, a symlink loop, a folder, a FIFO, a socket or a device each get their own message;
    and, with ``max_bytes``, unless it holds at most that many bytes."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist", file=p) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{what} {p} is a symlink loop (its links never reach a file)", file=p) from None
        raise InputError(f"cannot read the {what} {p}: {err.strerror or err}", file=p) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{what} {p} is {_kind(st.st_mode)}: drivegen reads a regular file", file=p)
    if max_bytes is not None and st.st_size > max_bytes:
        raise InputError(f"{what} {p} is {st.st_size:,} bytes, larger than any {what} drivegen reads "
                         f"({max_bytes:,} bytes at most)", file=p)
    return st.st_size


def read_regular_file(path: str | os.PathLike, what: str, max_bytes: int) -> bytes:
    """The bytes of ``path`` once ``check_regular_file`` (with ``max_bytes``) accepts it; at most ``max_bytes`` are
    read even when the file grows meanwhile."""
    check_regular_file(path, what, max_bytes)
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        p = os.fspath(path)
        raise InputError(f"{what} {p} grew past {max_bytes:,} bytes while it was read", file=p)
    return data
