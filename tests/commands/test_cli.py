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
    exports = next(a for a in sub.choices["export"]._actions if a.dest == "export_name")
    assert len(exports.choices) >= 4
    for name, p in [*sub.choices.items(), *((f"export {n}", e) for n, e in exports.choices.items())]:
        with contextlib.redirect_stdout(io.StringIO()):
            text = p.format_help()
        assert "``" not in text, name


def test_building_the_command_line_loads_no_pipeline():
    """Every command's parser is built at each start (``drivegen COMMAND`` for any COMMAND): it must not import the
    pipeline and its stages' stack (scipy, pycocotools), which only the commands that run them need. A fresh
    interpreter, since this one may have imported them for other tests."""
    code = ("import sys; from generator.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith(('generator.pipeline', 'scipy.optimize'))))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout


def test_run_help_names_every_source_its_data_can_be():
    from generator.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    data = next(a for a in sub.choices["run"]._actions if a.dest == "data")
    assert all(k in data.help for k in ("nuScenes", "AV2", "JAAD")), data.help


@pytest.mark.parametrize("argv, module, options", [
    (["stride_qa", "R", "--split", "val", "--image-root", "I"], "stride_qa.export_bench",
     {"run": "R", "split": ["val"], "image_root": "I"}),
    (["intention_drive", "R", "--split", "test", "--config", "C"], "intention_drive.export_intention",
     {"run": "R", "split": ["test"], "config": "C"}),
    (["drama_x", "R", "--out", "D"], "drama_x.export_drama", {"run": "R", "out": "D"}),
    (["pie", "--data", "J", "--out", "D", "--video", "v1", "--require-clips"], "pie.export_pie",
     {"data": "J", "run": None, "video": ["v1"], "require_clips": True}),
])
def test_export_takes_each_familys_name_and_own_options(argv, module, options):
    """``drivegen export NAME`` with NAME the family's name reaches that family's own export command, with its own
    options; its '-' spelling and an export's earlier name are the same command."""
    import importlib

    from generator.cli import build_parser

    args = build_parser().parse_args(["export", *argv])
    assert args._main is importlib.import_module("generator.commands.export").main
    assert args.export_main is importlib.import_module(f"generator.families.{module}").main
    assert {k: getattr(args, k) for k in options} == options
    for alias in {"stride_qa": ["stride-qa", "bench"], "intention_drive": ["intention-drive", "intention"],
                  "drama_x": ["drama-x"], "pie": []}[argv[0]]:
        again = build_parser().parse_args(["export", alias, *argv[1:]])
        assert again.export_main is args.export_main and again.export_family == argv[0]


def test_an_unknown_export_lists_the_known_ones(capsys):
    from generator.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["export", "stride", "R"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "invalid choice: 'stride'" in err, err
    assert all(f"'{name}'" in err for name in ("stride_qa", "intention_drive", "drama_x", "pie")), err


@pytest.mark.parametrize("old, new", [("export_bench", "stride_qa"), ("export_intention", "intention_drive"),
                                      ("export_drama", "drama_x"), ("export_pie", "pie")])
def test_the_old_export_commands_are_deprecated_aliases(old, new):
    """``drivegen export_bench`` ... run the same code as ``drivegen export NAME`` for one release, and their help
    says they are deprecated and names the new form (the message itself: test_bench_export)."""
    import contextlib
    import io

    from generator.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    with contextlib.redirect_stdout(io.StringIO()):
        text = sub.choices[old].format_help()
    assert f"DEPRECATED: drivegen {old} is deprecated" in text and f"use drivegen export {new}" in text, text
    exports = next(a for a in sub.choices["export"]._actions if a.dest == "export_name")
    assert [a.dest for a in sub.choices[old]._actions] == [a.dest for a in exports.choices[new]._actions]
    assert sub.choices[old].get_default("_main").__name__ == "main"  # the alias' own wrapper, which prints the line


def test_score_takes_the_familys_name_too():
    """One name for export and score: ``drivegen score stride_qa`` (or stride-qa) is ``drivegen score stride``,
    and score.json keeps the scorer's name."""
    from generator.cli import build_parser

    parser = build_parser()
    for given, scorer in [("stride_qa", "stride"), ("stride-qa", "stride"), ("stride", "stride"),
                          ("intention_drive", "intention"), ("intention-drive", "intention"), ("drama_x", "drama-x"),
                          ("drama-x", "drama-x"), ("pie", "pie"), ("qa", "qa")]:
        assert parser.parse_args(["score", given, "T", "--pred", "P"]).family == scorer, given
    with pytest.raises(SystemExit):
        parser.parse_args(["score", "bench", "T", "--pred", "P"])


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
