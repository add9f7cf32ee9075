"""``drivegen`` console command. Each subcommand lives in ``generator/commands/<name>.py`` and exposes
``add_parser(subparsers)`` (returning its parser) and ``main(args) -> int``.

Exit codes are decided here, once, from the error hierarchy (``schemas.errors``): an ``InputError``
(config, logs, templates, run folder, arguments, a Ray cluster that cannot be joined: ``ClusterError``) prints its
message and exits 2; another ``DrivegenError`` prints its message and exits 1; anything else is a bug: the
traceback is printed and the exit code is 1.
A reader that closes stdout before the output ends (``drivegen score ... | head``) is neither: the command stops
quietly with 141, the status of a process that SIGPIPE ends (Python's documented handling of BrokenPipeError).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys
import time
import traceback

from schemas.errors import DrivegenError, InputError, from_os_error
from schemas.families import broken_families, command_broken, families

# the process's command starts about here: the CLI is imported first, and its own imports (the error
# hierarchy and the family registry's module, about 0.1 s) are all that precede it
_STARTED_AT = time.perf_counter()

COMMANDS = ("synth", "run", "regenerate", "validate", "inspect", "export", "publish", "score", "report", "view",
            "clean", "families")


def command_modules() -> list[str]:
    """The core's subcommands (``generator.commands.<name>``), then every registered paper family's
    (``schemas.families``: ``PaperFamily.commands``)."""
    return [m for m, _ in _command_owners()]


def _command_owners() -> list[tuple[str, object]]:
    """(command module, its paper family or None for the core's), in order."""
    return [(f"generator.commands.{name}", None) for name in COMMANDS] + [
        (m, f) for f in families().values() for m in f.commands()]


class _Parser(argparse.ArgumentParser):
    """argparse's parser (every subcommand's too: argparse makes them of the root's class) whose usage errors
    name a paper family that could not be loaded when the user asked for one of its commands, scorers or
    exports, instead of "invalid choice" alone."""

    def error(self, message: str):
        broken = broken_families()
        if broken and "invalid choice" in message:
            asked = message.split("invalid choice: ", 1)[1].split("'")[1] if "invalid choice: '" in message else ""
            named = [b for b in broken if any(n in asked.replace("-", "_") for n in b.names())]
            for b in named or broken:
                message += (f"\n  (the paper family {b.line()} could not be loaded: its commands, scorers and exports "
                            "are unavailable; drivegen families lists the families)")
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="drivegen",
        description="Generate driving QA datasets and labels from LiDAR/camera logs on Ray.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, fam in _command_owners():
        try:
            mod = importlib.import_module(name)
            p = mod.add_parser(sub)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - a family's broken command breaks only itself
            if fam is None:
                raise
            command_broken(fam.name, f"its command module {name!r}", err)
            continue
        p.set_defaults(_main=mod.main)
    _plain_help(parser)
    parser.epilog = "Run 'drivegen COMMAND -h' for a command's options." + "".join(
        f"\nbroken paper family, left out: {b.line()}" for b in broken_families())
    return parser


def _plain_help(p: argparse.ArgumentParser) -> None:
    """The commands' help is written from their docstrings, which mark code with reST's double backticks; a
    terminal shows plain text. ``p`` and every parser under it (subcommands, and theirs: ``drivegen export NAME``)."""
    p.description = p.description and p.description.replace("``", "")
    p.epilog = p.epilog and p.epilog.replace("``", "")
    for action in p._actions:
        if isinstance(action.help, str):
            action.help = action.help.replace("``", "")
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):  # (an alias names the same parser again)
                _plain_help(sub)


STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a command stopped by its reader leaving


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code (module docstring)."""
    try:
        try:
            return _command(argv)
        finally:
            sys.stdout.flush()  # what is still buffered fails here, where it is handled, not at the interpreter's exit
    except BrokenPipeError:
        if not stdout_closed():
            raise
        # the rest of the output goes nowhere, so that Python's own flush at exit does not fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return STDOUT_CLOSED


def stdout_closed() -> bool:
    """Whether stdout's reader has gone (a pipe whose read end is closed polls POLLERR): a BrokenPipeError is then
    that, and not a socket's or a storage's."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # stdout is no file (an in-process caller replaced it)
        return False


def _command(argv: list[str] | None) -> int:
    called_at = time.perf_counter()  # a command called in-process starts here (its parser's imports included)
    for stream in (sys.stdout, sys.stderr):  # a value from the user's files that cannot be encoded (a lone
        if hasattr(stream, "reconfigure"):  # surrogate in an id) is printed escaped, never a crash
            stream.reconfigure(errors="backslashreplace")
    args = build_parser().parse_args(argv)
    args.started_at = _STARTED_AT if argv is None else called_at  # a command's wall time starts here
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    name = f"drivegen {args.command}"
    try:
        return int(args._main(args) or 0)
    except InputError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 2
    except DrivegenError as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # the storage's (a disk, an object store), never a bug: schemas.errors.from_os_error
        if isinstance(err, BrokenPipeError) and stdout_closed():
            raise  # the output's reader left, the storage did not: main stops quietly
        mapped = from_os_error(err)
        print(f"{name}: error: {mapped}", file=sys.stderr)
        return 2 if isinstance(mapped, InputError) else 1
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - a bug: say so, with the traceback, never "unusable input"
        traceback.print_exc()
        print(f"{name}: internal error (a bug in drivegen, not in your input): please report the traceback above",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
