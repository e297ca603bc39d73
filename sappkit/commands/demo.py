"""``sappkit demo [--out DIR] [--force] [--no-report] [--notebooks PATH ...]``: the main job on bundled data.

Prints the headline numbers of the whole loop (fitted parameters, balanced
step time against the even partition, what recompute per layer saves, the
plans one more recomputed layer reaches), then executes the notebooks and
writes the rendered report (``sappkit report``).
"""

from __future__ import annotations

from pathlib import Path

from ..demo import run_demo
from ._common import load_report, write_report
from ._output import Output


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo",
        description="Run the whole work on the bundled Llama-2-70B-class model (dry runs, memory fit, balance, "
                    "simulate, recompute per layer, one more recomputed layer), print the headline numbers, then "
                    "execute the notebooks and write the HTML report.")
    parser.add_argument("--out", type=Path, default=Path("reports"), metavar="DIR",
                        help="the report folder (default: reports under the current directory)")
    parser.add_argument("--force", action="store_true", help="replace a report already in DIR")
    parser.add_argument("--no-report", dest="report", action="store_false",
                        help="print the headline numbers only; execute no notebooks")
    parser.add_argument("--notebooks", nargs="+", type=Path, default=(), metavar="PATH",
                        help="notebooks or folders of notebooks to report (default: every notebooks/*.ipynb of the "
                             "repository)")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    # Before the demo: a missing extra, or a report folder in the way, is said at once.
    report = load_report() if args.report else None
    if report is not None:
        report.check_out(args.out, force=args.force)
    Output(args).line(run_demo().describe())
    if report is None:
        return 0
    print(f"\nwriting the report to {args.out}", flush=True)
    write_report(report, args)
    return 0
