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
    └── (other subclasses)         a known failure that is not the input's fault: a command exits 1

An ``OSError`` that escapes a command is the storage's, never a bug: ``from_os_error`` says which of the two
above it is (``generator.cli``). Anything else that escapes a command is a bug: the command prints the
traceback and exits 1, never "unusable input".
"""
from __future__ import annotations


class DrivegenError(Exception):
    """Base error. Carries the scene, the file and the stage so a run can record it and go on."""

    def __init__(self, message: str, *, scene: str | None = None, file: str | None = None, stage: str | None = None):
        self.message = message
        self.scene = scene
        self.file = file
        self.stage = stage
        where = ", ".join(f"{k}={v}" for k, v in (("scene", scene), ("file", file), ("stage", stage)) if v)
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


# What S3 (and pyarrow's AWS SDK messages) say when the credentials or the permissions are at fault.
_DENIED = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
           "ExpiredToken", "HTTP response code: 403")


def from_os_error(err: OSError) -> DrivegenError:
    """An ``OSError`` (a local file, or pyarrow's object-store errors) as the error a user can act on: access
    refused (an ``InputError``: exit 2, check the credentials or permissions), a named file that is missing or is
    a folder (exit 2), else the storage failing or out of reach (exit 1, try again)."""
    text = str(err)
    file = getattr(err, "filename", None)
    if isinstance(err, PermissionError) or any(k in text for k in _DENIED):
        return AccessDeniedError(f"access refused: {text}; check the credentials (AWS_ACCESS_KEY_ID / "
                                 "AWS_SECRET_ACCESS_KEY / AWS_PROFILE for s3://) and the permissions on it",
                                 file=file)
    if isinstance(err, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return InputError(f"{text}", file=file)
    return StorageError(f"storage error: {text}; a network error or a failing disk, not your input: try again "
                        "(drivegen run --resume finishes an interrupted run)", file=file)
