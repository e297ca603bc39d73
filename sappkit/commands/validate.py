"""``sappkit validate [--runs FILE.csv]``: the performance model against published runs, row by row."""

from __future__ import annotations

from pathlib import Path

from ..strategy.validation import published_runs, validate
from ._output import Output, add_output_arguments

#: The table's key columns (``--wide`` adds the step time, the source and what each row assumed).
KEY_COLUMNS = ("run", "metric", "measured", "predicted", "error")
_METRIC_NAMES = {"tflops_sc21": "TFLOP/s/GPU", "iteration_s": "s/iteration"}


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="price published training runs and print predicted against measured",
        description="Price every published run of the table (default: the bundled data/published_runs.csv) with "
                    "sappkit's performance model and print what was measured, what sappkit predicts and the "
                    "error (predicted / measured - 1), then the mean and worst absolute errors. TFLOP/s/GPU "
                    "counts as the run's paper does; s/iteration is seconds per training step.")
    parser.add_argument("--runs", type=Path, default=None, metavar="FILE.csv",
                        help="a table of runs with the bundled table's columns (default: the bundled one)")
    add_output_arguments(parser, main="per-run")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    result = validate(published_runs(args.runs))
    out = Output(args)
    frame = result.frame.copy()
    shown = frame.assign(metric=frame["metric"].map(_METRIC_NAMES), error=[f"{e:+.1%}" for e in frame["error"]],
                         measured=frame["measured"].round(2), predicted=frame["predicted"].round(2),
                         step_s=frame["step_s"].round(3))
    out.table("runs", shown, key=KEY_COLUMNS, machine=frame)
    out.line(f"mean |error| {result.mean_error:.2%}, worst {result.worst_error:.2%} over {len(frame)} runs "
             "(error = predicted / measured - 1)")
    out.value("mean_error", result.mean_error)
    out.value("worst_error", result.worst_error)
    out.finish()
    return 0
