"""The one error hierarchy. Every error drivegen raises on purpose is a ``DrivegenError``.

    DrivegenError                  carries scene / file / stage, so a run can record it and go on
    ├── InputError                 the user's input is unusable: a command exits 2 with the message
    │   ├── ConfigError            a config file or value (names the file and the field)
    │   ├── SourceError            a log: missing/truncated file, bad calibration, poses, table row
    │   │   └── UnlabelledFrameError   a frame outside its log's annotations met the 'labels' detector
    │   ├── TemplateError          a QA template file (names file, line and field)
    │   ├── RunFolderError         a run folder: not one, locked by another run, changed since, unreadable
    │   ├── AccessDeniedError      a disk or object store refused this user or these credentials
    │   └── ClusterError           a Ray cluster not joined: unreachable, authentication, version mismatch
    ├── StorageError               a disk or object store failed or could not be reached: a command exits 1
    ├── FamilyError                a paper family (built in or a plugin) broke its contract: its scenes fail
    └── (other subclasses)         a known failure that is not the input's fault: a command exits 1

An ``OSError`` that escapes a command is the storage's, never a bug: ``from_os_error`` says which of the two
above it is (``generator.cli``), and ``from_write_error`` does the same for a file drivegen could not write (a
refusal, a folder that cannot take it, or storage out of reach: three different things to do). Anything else
that escapes a command is a bug: the command prints the traceback and exits 1, never "unusable input".
"""
from __future__ import annotations

import errno
import re


class DrivegenError(Exception):
    """Base error. Carries the scene, the file and the stage so a run can record it and go on."""

    def __init__(self, message: str, *, scene: str | None = None, file: str | None = None, stage: str | None = None):
        self.message = message
        self.scene = scene
        self.file = file
        self.stage = stage
        where = ", ".join(f"{k}={_short(str(v), 300)}" for k, v in (("scene", scene), ("file", file), ("stage", stage))
                          if v)
        super().__init__(f"{message} [{where}]" if where else message)


class InputError(DrivegenError):
    """The user's input (config, logs, templates, run folder, command-line values) cannot be used."""


class ConfigError(InputError):
    """A config file or value is invalid; the message names the file and the field."""


class SourceError(InputError):
    """A log could not be read: missing/truncated file, bad calibration, missing poses, bad table row."""


class UnlabelledFrameError(SourceError):
    """A frame outside its log's annotations reached the 'labels' detection backend: its objects are unknown, not
    absent. Perception records the frame as an ``issues`` row (reason ``schemas.vocab.UNLABELLED_ISSUE``); it is
    no failure of the scene (the frame keeps its questions about the ego)."""


class RunFolderError(InputError):
    """A run folder cannot be used as asked: not a run folder, held by another run, changed since it was
    written, or a file in it unreadable; the message names the folder or file and what to do."""


class AccessDeniedError(InputError):
    """A file or object could not be used with this user's permissions or these credentials."""


class ClusterError(InputError):
    """A Ray cluster drivegen cannot join, raised before anything is written: its ``address`` and the ``reason``
    (one of ``CLUSTER_REASONS``), with what to do. A network or authentication failure of Ray, never a file's or a
    disk's."""

    def __init__(self, address: str, reason: str, message: str):
        if reason not in CLUSTER_REASONS:
            raise ValueError(f"reason must be one of {CLUSTER_REASONS}, got {reason!r}")
        self.address = address
        self.reason = reason
        super().__init__(f"cannot join the Ray cluster at {address} ({reason}): {message}")


CLUSTER_REASONS = ("unreachable", "authentication", "version mismatch")


class StorageError(DrivegenError):
    """A disk or an object store failed, or could not be reached (a network error: never a missing file)."""


class FamilyError(DrivegenError):
    """A paper family broke its contract (``schemas.families.PaperFamily``), e.g. its ``derive`` returned a table
    it does not declare: the family's code is at fault, not the input; the message names the family and the hook."""


# What S3 (and pyarrow's AWS SDK messages) say when the credentials or the permissions are at fault.
_DENIED = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "INVALID_ACCESS_KEY_ID", "SignatureDoesNotMatch",
           "SIGNATURE_DOES_NOT_MATCH", "InvalidToken", "ExpiredToken", "HTTP response code: 403")


# What S3 (and pyarrow, creating a folder) says of a bucket that does not exist: the user's destination, not an
# outage.
_NO_BUCKET = re.compile(r"NoSuchBucket|NO_SUCH_BUCKET|[Bb]ucket '[^']*' not found")

# Errors of a local path that are the path's, not the disk's: a name the user gave (or a log holds) that cannot be
# used as it is. errno -> what happened, as a message says it.
_PATH_ERRNOS = {
    errno.ELOOP: "a symlink loop (its links never reach a file)",
    errno.ENAMETOOLONG: "a name too long for the filesystem",
    errno.ENOTDIR: "a path through something that is not a folder",
    errno.EISDIR: "a folder, not a file",
}
# A local folder that cannot take a file: the user picks another one.
_UNWRITABLE_ERRNOS = {
    errno.EROFS: "a read-only filesystem",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
}


def _denied(err: OSError) -> bool:
    return isinstance(err, PermissionError) or any(k in str(err) for k in _DENIED)


def _short(text: str, limit: int = 400) -> str:
    """A message quotes at most ``limit`` characters of an error's text (a path may be 100,000 characters)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def from_os_error(err: OSError) -> DrivegenError:
    """An ``OSError`` (a local file, or pyarrow's object-store errors) as the error a user can act on: access
    refused (an ``InputError``: exit 2, check the credentials or permissions), a named file that is missing, a
    folder, a symlink loop, a name too long or a bucket that does not exist (exit 2), else the storage failing or out of reach (exit 1, try
    again)."""
    text = _short(str(err))
    file = getattr(err, "filename", None)
    file = _short(file) if isinstance(file, str) else file
    if _denied(err):
        return AccessDeniedError(f"access refused: {text}; check the credentials (AWS_ACCESS_KEY_ID / "
                                 "AWS_SECRET_ACCESS_KEY / AWS_PROFILE for s3://) and the permissions on it",
                                 file=file)
    if isinstance(err, FileNotFoundError):
        return InputError(f"{text}", file=file)
    if _NO_BUCKET.search(text):
        return InputError(f"no such bucket: {text}", file=file)
    if err.errno in _PATH_ERRNOS:
        return InputError(f"{file or 'a path'} is {_PATH_ERRNOS[err.errno]}: {err.strerror or text}", file=file)
    return StorageError(f"storage error: {text}; a network error or a failing disk, not your input: try again "
                        "(drivegen run --resume finishes an interrupted run)", file=file)


def from_write_error(target: str, err: OSError) -> DrivegenError:
    """What to tell a user whose file ``target`` (a path or URI) could not be written: credentials or permissions
    refused, or a folder that cannot take it (read-only, full, a path that is no folder): a ``RunFolderError``
    saying which (other credentials, or another ``--out``); else the disk or object store failed or could not be
    reached (``StorageError``: try again, ``--resume`` finishes the run), never "give a folder you can write to"
    for an outage."""
    why = _short(getattr(err, "strerror", None) or str(err))
    if _denied(err):
        return RunFolderError(f"cannot write {target}: access refused ({why}); check the credentials "
                              "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_PROFILE for s3://) and the "
                              "permissions, or give an --out folder you can write to", file=target)
    no_bucket = _NO_BUCKET.search(str(err)) is not None
    errno = err.errno or 0  # (an OSError raised without one: 0 is no errno)
    if no_bucket or errno in _UNWRITABLE_ERRNOS or errno in _PATH_ERRNOS:
        what = "a bucket that does not exist" if no_bucket else (_UNWRITABLE_ERRNOS.get(errno)
                                                                  or _PATH_ERRNOS[errno])
        return RunFolderError(f"cannot write {target}: {what} ({why}); give an --out folder you can write to",
                              file=target)
    return StorageError(f"cannot write {target}: {why}; the disk or object store failed or could not be reached, "
                        "not your input: try again (drivegen run --resume finishes an interrupted run)", file=target)
