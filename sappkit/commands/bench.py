"""``sappkit bench [--quick] [--only NAME ...]``: print the performance table (progress on stderr)."""

from __future__ import annotations

import os
import sys

from ..bench import MODULES, SLOW, run
from ._output import Output, add_output_arguments

#: The table's key columns (``--wide`` adds the details).
KEY_COLUMNS = ("benchmark", "case", "median_ms", "cpu_s", "target_ms", "passed")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        description="Measure how fast each model runs against the performance targets of the design and print one "
                    "table (median milliseconds, the CPU seconds every process spent, the target, whether the CPU one call costs met it, and the load average); a miss is reported, never an "
                    "error. Progress goes to stderr.")
    parser.add_argument("--quick", action="store_true",
                        help=f"fewer cases and repeats, 27 to 42 CPU s; leaves out {', '.join(SLOW)} unless named in "
                             "--only")
    parser.add_argument("--only", nargs="+", choices=MODULES, default=(), metavar="NAME",
                        help=f"measure only these ({', '.join(MODULES)})")
    add_output_arguments(parser, main="benchmark")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    table = run(quick=args.quick, only=tuple(args.only), progress=lambda line: print(line, file=sys.stderr,
                                                                                      flush=True))
    out = Output(args)
    out.line(f"load average {table['load'].min():.1f} to {table['load'].max():.1f} (1 min) while it ran, "
             f"{os.cpu_count()} cores; cpu_s: CPU seconds of every process on the row's work")
    out.table("bench", table, key=KEY_COLUMNS)
    out.finish()
    return 0
