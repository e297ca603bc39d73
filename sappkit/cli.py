"""The ``sappkit`` command: one sub-command per model, each defined in ``sappkit/commands/``."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from .errors import InputError

__all__ = ["main"]

#: Sub-command modules under ``sappkit.commands``; each has ``register(subparsers)``
#: adding its parser with ``set_defaults(run=function)``.
_COMMANDS = (
    "bench",
    "demo",
    "simulate",
    "report",
    "alternatives",
    "choose",
    "fit",
    "plan_dryruns",
    "balance",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(prog="sappkit", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        import_module(f".commands.{name}", __package__).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; bad input prints one line on stderr and exits 2."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except InputError as exc:
        print(f"sappkit {args.command}: {exc}", file=sys.stderr)
        return 2
