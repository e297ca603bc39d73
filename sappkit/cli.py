"""sappkit: plan pipeline-parallel training from the command line, one sub-command per step of the work.

Each sub-command is defined in ``sappkit/commands/``; they are listed in the
order of the work: fit memory from dry runs (or plan the dry runs), balance
the layers over the stages, simulate a step, choose each layer's recompute,
see what one more recomputed layer buys, check the performance model against
published runs, search for the parallel strategy to run, then the shared
report, the demo and the benchmarks. Default output fits 100 columns;
``--wide`` shows every column and ``--format csv|json`` prints for other
programs.

Whatever goes wrong with the input ends in one line on stderr, naming the fix
by the command's flags (an InputError's ``cli`` wording): bad input and
bad arguments exit 2, Ctrl-C exits 130, and a reader that stops early (``|
head``) ends the command quietly with 141 (128 + SIGPIPE, as a shell reports
a command the closed pipe stopped).
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from .errors import InputError

__all__ = ["main"]

#: Sub-command modules under ``sappkit.commands``, in the order of the work (the order ``--help`` lists them);
#: each has ``register(subparsers)`` adding its parser with ``set_defaults(run=function)``.
_COMMANDS = (
    "fit",
    "plan_dryruns",
    "balance",
    "simulate",
    "choose",
    "alternatives",
    "check_config",
    "layers",
    "validate",
    "calibrate",
    "bench_device",
    "search",
    "report",
    "demo",
    "bench",
)

_EPILOG = ("Times print in the layer table's unit (ms for the bundled tables and estimates), memory in MB. "
           "Run 'sappkit COMMAND --help' for a command's options.")

#: Exit codes besides 0 and a command's own 1.
BAD_INPUT, INTERRUPTED, CLOSED_PIPE = 2, 130, 141


class _Parser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line on stderr, like sappkit's own (exit 2)."""

    def error(self, message):
        self.exit(BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = _Parser(prog="sappkit", description=__doc__.splitlines()[0].removeprefix("sappkit: "), epilog=_EPILOG)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in _COMMANDS:
        import_module(f".commands.{name}", __package__).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; bad input prints one line on stderr and exits 2 (see the module docstring)."""
    command = "sappkit"
    try:
        args = build_parser().parse_args(argv)
        command = f"sappkit {args.command}"
        code = int(args.run(args) or 0)
        sys.stdout.flush()  # so that a closed pipe shows here rather than at the interpreter's exit
        return code
    except InputError as exc:
        # A path or a value may hold a line break; the message stays one line.
        line = (exc.cli or str(exc)).replace("\r", "\\r").replace("\n", "\\n")
        print(f"{command}: {line}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away: nothing more can be shown. Point stdout at /dev/null so that the
        # interpreter's own flush at exit does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE
