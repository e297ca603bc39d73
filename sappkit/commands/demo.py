"""``sappkit demo [--out DIR] [--force] [--no-report] [--notebooks PATH ...]``: the main job on bundled data.

Prints the headline numbers of the whole loop (fitted parameters, balanced
step time against the even partition, what recompute per layer saves, the
plans one more recomputed layer reaches), then executes the notebooks and
writes the rendered report (``sappkit report``).
"""

from __future__ import annotations

from pathlib import Path

from ..demo import run_demo
from ._common import load_report


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="run the whole loop on bundled data, print the headline numbers "
                                                "and write the rendered report")
    parser.add_argument("--out", type=Path, default=Path("reports"), metavar="DIR",
                        help="report folder (default: reports under the current directory)")
    parser.add_argument("--force", action="store_true", help="replace a previous report in DIR")
    parser.add_argument("--no-report", dest="report", action="store_false",
                        help="print the headline numbers only; execute no notebooks")
    parser.add_argument("--notebooks", nargs="+", type=Path, default=(), metavar="PATH",
                        help="notebooks or folders of notebooks to report (default: every notebooks/*.ipynb of the "
                             "repository)")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    report = load_report() if args.report else None  # before the demo: a missing extra is said at once
    print(run_demo().describe(), flush=True)
    if report is None:
        return 0
    notebooks = list(args.notebooks) or report.default_notebooks()
    print(f"\nwriting the report to {args.out}", flush=True)
    index = report.write_report(notebooks, args.out, force=args.force,
                                progress=lambda line: print(line, flush=True))
    print(f"report written to {index.parent} (open {index})")
    return 0
