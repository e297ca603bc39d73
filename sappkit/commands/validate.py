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
        "validate",
        description="Price every published run of the table (default: the bundled data/published_runs.csv) with "
                    "sappkit's performance model and print what was measured, what sappkit predicts and the "
                    "error (predicted / measured - 1), then the mean and worst absolute errors. TFLOP/s/GPU "
                    "counts as the run's paper does; s/iteration is seconds per training step. Then the same "
                    "for per-device memory where a source gives it (data/published_memory.csv), in MB. After each "
                    "table, the mean and worst absolute error per device, family (dense, fsdp, moe) and "
                    "precision.")
    parser.add_argument("--runs", type=Path, default=None, metavar="FILE.csv",
                        help="a table of runs with the bundled table's columns (default: the bundled one)")
    parser.add_argument("--memory", type=Path, default=None, metavar="FILE.csv",
                        help="a table of published per-device memory (default: the bundled one)")
    add_output_arguments(parser, main="per-run")
    parser.set_defaults(run=_run)


#: What each table's summary adds: the runs' error is in-sample, the memory rows' sources computed them.
_CAVEATS = {"runs": "in-sample: data/calibrate.py fits the A100's five and the H100's two efficiencies on these "
                    "rows; data/README.md gives the held-out errors",
            "memory": "the sources computed these from their formulas; none is a measurement"}
#: GiB to MB (MiB, as everywhere in sappkit).
_MB_PER_GIB = 1024.0


def _run(args) -> int:
    out = Output(args)
    for name, result in (("runs", validate(published_runs(args.runs))),
                         ("memory", validate_memory(published_memory(args.memory)))):
        frame = result.frame
        scale = _MB_PER_GIB if name == "memory" else 1.0
        metric = frame["metric"].map(METRIC_NAMES).str.replace(" GiB", " MB")
        shown = frame.assign(metric=metric, error=[f"{e:+.1%}" for e in frame["error"]],
                             measured=(scale * frame["measured"]).round(2 if scale == 1 else 0),
                             predicted=(scale * frame["predicted"]).round(2 if scale == 1 else 0),
                             step_s=frame["step_s"].round(3))
        out.table(name, shown, key=KEY_COLUMNS, machine=frame,
                  headers={"measured": "measured" if name == "runs" else "published"})
        groups = result.by_group()
        out.table(f"{name}_by_group", groups.assign(**{column: [f"{e:.1%}" for e in groups[column]]
                                                        for column in ("mean_error", "worst_error")}),
                  machine=groups)
        what = "runs" if name == "runs" else "memory rows"
        truth = "measured" if name == "runs" else "published"
        out.line(f"mean |error| {result.mean_error:.2%}, worst {result.worst_error:.2%} over {len(frame)} {what} "
                 f"(error = predicted / {truth} - 1; {_CAVEATS[name]})")
        out.value(f"{name}_mean_error", result.mean_error)
        out.value(f"{name}_worst_error", result.worst_error)
    out.finish()
    return 0
