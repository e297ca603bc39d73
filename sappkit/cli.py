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
import difflib
import os
import sys
from importlib import import_module

from .errors import InputError

__all__ = ["main"]

#: Each sub-command with the line ``--help`` lists for it, in the order of the work. Its module,
#: ``sappkit.commands.<name with _ for ->``, has ``register(subparsers)`` adding its parser with
#: ``set_defaults(run=function)``; only the module of the command being run is imported, so that
#: ``sappkit --help`` and a light command do not pay for pandas and the models they do not use.
COMMANDS = {
    "fit": "fit what each layer costs in memory, per recompute option, from the peaks of a few dry runs",
    "plan-dryruns": "propose the fewest dry runs whose peaks pin down every memory cost, as a MindFormers YAML "
                    "to run",
    "balance": "place the layers and their recompute on the pipeline stages so that every stage fits the device "
               "and the step is fastest",
    "simulate": "simulate one training step of the layers spread evenly over the stages",
    "choose": "choose each layer's recompute so that every stage fits and the step is fastest, for layers already "
              "placed on the stages",
    "alternatives": "list the plans that fully recompute one more layer and still fit, and what each buys",
    "check-config": "price a trainer's config (Megatron-LM, torchtitan, MindFormers, HyperParallel) and name "
                    "every trap it falls into, with the fix",
    "layers": "per-layer forward and backward times from a profiler trace (PyTorch or MindSpore)",
    "validate": "price published training runs and print predicted against measured",
    "calibrate": "fit a cluster's physical parameters to your measured runs",
    "bench-device": "microbenchmark this machine's device and write a hardware file",
    "search": "search every parallel strategy a trainer accepts for the fastest step",
    "report": "run the notebooks and write them as an HTML report to share (code hidden)",
    "demo": "run the whole work on the bundled Llama-2-70B-class model, print the headline numbers and write the "
            "report",
    "bench": "measure how fast each model runs against its performance target (a report, never a failure)",
}

_EPILOG = ("Times print in the layer table's unit (ms for the bundled tables and estimates), memory in MB. "
           "Run 'sappkit COMMAND --help' for a command's options.")

#: Exit codes besides 0 and a command's own 1.
BAD_INPUT, INTERRUPTED, CLOSED_PIPE = 2, 130, 141


class _Parser(argparse.ArgumentParser):
    """An argument parser whose refusals are one line on stderr, like sappkit's own (exit 2)."""

    def error(self, message):
        self.exit(BAD_INPUT, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        # argparse names an unknown option only after every required one is there, so that a typo
        # (--memroy) reads as "--memory is required"; a command's parser names it first.
        if self._subparsers is None and args is not None:
            self._refuse_unknown_options(args)
        return super().parse_known_args(args, namespace)

    def _refuse_unknown_options(self, args) -> None:
        known = list(self._option_string_actions)
        previous = None
        for token in args:
            if token == "--":
                return
            name = token.split("=", 1)[0]
            takes_value = previous in self._option_string_actions and self._option_string_actions[previous].nargs != 0
            previous = token
            # As argparse reads them: a negative number or a word with a space in it is a value, and so is
            # whatever follows an option that takes one (--stages -inf: the value is refused by name).
            if (takes_value or not name.startswith("-") or self._negative_number_matcher.match(token)
                    or " " in token or any(option.startswith(name) for option in known)):
                continue
            close = difflib.get_close_matches(name, [option for option in known if option.startswith("--")], n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            self.error(f"unknown option {name!r}{hint}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser, with ``command``'s options registered (every command's, when None).

    The other commands are listed with their summary only, which keeps ``sappkit --help`` and one
    command's start from importing every command's models.
    """
    parser = _Parser(prog="sappkit", description=__doc__.splitlines()[0].removeprefix("sappkit: "), epilog=_EPILOG)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name, summary in COMMANDS.items():
        if command in (None, name):
            import_module(f".commands.{name.replace('-', '_')}", __package__).register(_Summarised(subparsers))
        else:
            subparsers.add_parser(name, help=summary, add_help=False)
    return parser


class _Summarised:
    """Sub-parsers whose ``add_parser`` gives each command its :data:`COMMANDS` summary as ``help``."""

    def __init__(self, subparsers):
        self._subparsers = subparsers

    def add_parser(self, name, **options):
        return self._subparsers.add_parser(name, help=COMMANDS[name], **options)


def _command_named(argv: list[str]) -> str | None:
    """The sub-command ``argv`` runs (its first word, after the top level's options), or None."""
    first = next((token for token in argv if not token.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    """Run the command line; bad input prints one line on stderr and exits 2 (see the module docstring)."""
    command = "sappkit"
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(_command_named(argv) or "").parse_args(argv)
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
