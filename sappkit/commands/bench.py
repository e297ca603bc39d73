"""``sappkit bench [--quick] [--only NAME ...]``: print the performance table."""

from __future__ import annotations

import pandas as pd

from ..bench import MODULES, run


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="measure every performance target (never fails on speed)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and cases, for CI")
    parser.add_argument("--only", nargs="+", choices=MODULES, default=(), metavar="NAME",
                        help=f"bench modules to run ({', '.join(MODULES)})")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    table = run(quick=args.quick, only=tuple(args.only))
    with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 80):
        print(table.to_string(index=False))
    return 0
