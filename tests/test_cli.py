"""The command line itself: what every command's help shows, and how a command ends when its reader leaves."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DRIVEGEN = Path(sys.executable).with_name("drivegen")


def test_every_commands_help_is_plain_text():
    """``drivegen COMMAND -h`` is read in a terminal: no reST double backticks from the docstrings it is built
    from, for every command the registry lists (the families' too)."""
    import contextlib
    import io

    from generator.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert len(sub.choices) >= 10
    for name, p in sub.choices.items():
        with contextlib.redirect_stdout(io.StringIO()):
            text = p.format_help()
        assert "``" not in text, name


def test_run_help_names_every_source_its_data_can_be():
    from generator.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    data = next(a for a in sub.choices["run"]._actions if a.dest == "data")
    assert all(k in data.help for k in ("nuScenes", "AV2", "JAAD")), data.help


def test_a_closed_stdout_is_not_a_storage_error(labelled_run):
    """``drivegen score ... | head``: the reader leaves before the output ends. The command stops quietly with 141
    (128 + SIGPIPE, as the shell reports a command SIGPIPE ends), never "storage error: [Errno 32] Broken pipe ...
    a failing disk" with exit 1, nor Python's "Exception ignored ... BrokenPipeError" at exit. The pipe's reader
    is closed before the command starts, so every write fails, whatever the machine's load."""
    r, w = os.pipe()
    os.close(r)
    try:
        res = subprocess.run([str(DRIVEGEN), "score", "intention", "--pred", "baseline:ground_truth",
                              str(labelled_run / "intention")], stdout=w, stderr=subprocess.PIPE, text=True,
                             timeout=300)
    finally:
        os.close(w)
    assert res.returncode == 141, res.stderr[-2000:]
    for said in ("storage error", "Broken pipe", "BrokenPipeError", "Traceback"):
        assert said not in res.stderr, res.stderr[-2000:]
