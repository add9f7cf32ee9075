"""The command line itself: what every command's help shows."""
from __future__ import annotations


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
