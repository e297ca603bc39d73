"""``sappkit validate [--runs FILE.csv] [--memory FILE.csv]``: the performance model against published runs, row by
row: step times, then per-device memory."""

from __future__ import annotations

from pathlib import Path

from ..strategy.validation import METRIC_NAMES, published_memory, published_runs, validate, validate_memory
from ._output import Output, add_output_arguments

#: The table's key columns (``--wide`` adds the step time, the source and what each row assumed).
KEY_COLUMNS = ("run", "metric", "measured", "predicted", "error")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="price published training runs and print predicted against measured",
        description="Price every published run of the table (default: the bundled data/published_runs.csv) with "
                    "sappkit's performance model and print what was measured, what sappkit predicts and the "
                    "error (predicted / measured - 1), then the mean and worst absolute errors. TFLOP/s/GPU "
                    "counts as the run's paper does; s/iteration is seconds per training step. Then the same "
                    "for per-device memory where a source gives it (data/published_memory.csv), in GiB. After each "
                    "table, the mean and worst absolute error per device, family (dense, fsdp, moe) and "
                    "precision.")
    parser.add_argument("--runs", type=Path, default=None, metavar="FILE.csv",
                        help="a table of runs with the bundled table's columns (default: the bundled one)")
    parser.add_argument("--memory", type=Path, default=None, metavar="FILE.csv",
                        help="a table of published per-device memory (default: the bundled one)")
    add_output_arguments(parser, main="per-run")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    out = Output(args)
    for name, result in (("runs", validate(published_runs(args.runs))),
                         ("memory", validate_memory(published_memory(args.memory)))):
        frame = result.frame
        shown = frame.assign(metric=frame["metric"].map(METRIC_NAMES), error=[f"{e:+.1%}" for e in frame["error"]],
                             measured=frame["measured"].round(2), predicted=frame["predicted"].round(2),
                             step_s=frame["step_s"].round(3))
        out.table(name, shown, key=KEY_COLUMNS, machine=frame)
        groups = result.by_group()
        out.table(f"{name}_by_group", groups.assign(**{column: [f"{e:.1%}" for e in groups[column]]
                                                        for column in ("mean_error", "worst_error")}),
                  machine=groups)
        what = "runs" if name == "runs" else "memory rows"
        out.line(f"mean |error| {result.mean_error:.2%}, worst {result.worst_error:.2%} over {len(frame)} {what} "
                 "(error = predicted / measured - 1)")
        out.value(f"{name}_mean_error", result.mean_error)
        out.value(f"{name}_worst_error", result.worst_error)
    out.finish()
    return 0
