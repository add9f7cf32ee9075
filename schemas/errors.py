"""The one error hierarchy. Every error drivegen raises on purpose is a ``DrivegenError``.

    DrivegenError                  carries scene / file / stage, so a run can record it and go on
    ├── InputError                 the user's input is unusable: a command exits 2 with the message
    │   ├── ConfigError            a config file or value (names the file and the field)
    │   ├── SourceError            a log: missing/truncated file, bad calibration, poses, table row
    │   ├── TemplateError          a QA template file (names file, line and field)
    │   └── RunFolderError         a run folder: not one, locked by another run, changed since, unreadable
    └── (other subclasses)         a known failure that is not the input's fault: a command exits 1

Anything else that escapes a command is a bug: the command prints the traceback and exits 1
(``generator.cli``), never "unusable input".
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


class RunFolderError(InputError):
    """A run folder cannot be used as asked: not a run folder, held by another run, changed since it was
    written, or a file in it unreadable; the message names the folder or file and what to do."""
