"""``sappkit report [--out DIR] [--notebooks PATH ...] [--no-input | --with-input] [--force]``: HTML reports."""

from __future__ import annotations

from pathlib import Path

from ._common import load_report, write_report


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "report",
        description="Run the notebooks top to bottom and write them as an HTML report with an index page, to open "
                    "in a browser or share; a line per cell shows progress.")
    parser.add_argument("--out", type=Path, default=Path("reports"), metavar="DIR",
                        help="the report folder (default: reports)")
    parser.add_argument("--notebooks", nargs="+", type=Path, default=(), metavar="PATH",
                        help="notebooks or folders of notebooks (default: every notebooks/*.ipynb of the repository "
                             "whose extras are installed; those left out are named)")
    code = parser.add_mutually_exclusive_group()
    code.add_argument("--no-input", dest="with_input", action="store_false", help="hide the code (default)")
    code.add_argument("--with-input", dest="with_input", action="store_true", help="show the code cells too")
    parser.add_argument("--force", action="store_true", help="replace a report already in DIR")
    parser.set_defaults(run=_run, with_input=False)


def _run(args) -> int:
    write_report(load_report(), args, with_input=args.with_input)
    return 0
