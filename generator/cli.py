"""``drivegen`` console command. Each subcommand lives in ``generator/commands/<name>.py`` and exposes
``add_parser(subparsers)`` (returning its parser) and ``main(args) -> int``."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS = ("synth", "run", "regenerate", "validate", "export_bench", "inspect")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drivegen",
        description="Generate STRIDE-QA-style driving QA datasets from LiDAR/camera logs on Ray.",
        epilog="Run 'drivegen COMMAND -h' for a command's options.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        mod = importlib.import_module(f"generator.commands.{name}")
        p = mod.add_parser(sub)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    return int(args._main(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
