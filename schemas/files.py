"""Checks on a local file drivegen is asked to read (a config, a prediction file), before it is opened: a FIFO
or a device would block the command forever or never end, a symlink loop is not "a missing file"."""
from __future__ import annotations

import errno
import os
import stat

from schemas.errors import InputError


def check_regular_file(path: str | os.PathLike, what: str) -> None:
    """InputError naming ``what`` and the path unless ``path`` is a regular file (after its symlinks): missing,
    a symlink loop, a folder, a FIFO, a socket or a device each get their own message."""
    p = os.fspath(path)
    try:
        mode = os.stat(p).st_mode
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist", file=p) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{what} {p} is a symlink loop (its links never reach a file)", file=p) from None
        raise InputError(f"cannot read the {what} {p}: {err.strerror or err}", file=p) from None
    if stat.S_ISREG(mode):
        return
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "not a regular file")
    raise InputError(f"{what} {p} is {kind}: drivegen reads a regular file", file=p)
