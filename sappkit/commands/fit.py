"""``sappkit fit FILE.yaml|FILE.csv [--no-const]``: fit per-layer memory from dry-run peaks and print it."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..memfit.dryruns import read_dryrun_csv, read_dryrun_yaml
from ..memfit.fit import fit_memory
from ._output import Output, add_output_arguments

#: The parameter table's key columns (``--wide`` shows all).
KEY_COLUMNS = ("name", "value_mb", "stderr_mb")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "fit",
        description="Fit what each layer costs in memory under each recompute option (and the head, tail and a "
                    "per-stage constant) from the peak memory of a few dry runs, by least squares.")
    parser.add_argument("observations", type=Path, metavar="FILE",
                        help="the dry runs: a MindFormers pipeline_balance YAML or a CSV of observed stages")
    parser.add_argument("--no-const", action="store_true",
                        help="do not fit the memory every stage holds besides its layers (const_mb)")
    parser.add_argument("--schedule", choices=("1f1b", "interleaved"), default="1f1b",
                        help="the schedule the dry runs ran (interleaved observations have a row per chunk; "
                             "default 1f1b)")
    parser.add_argument("--less-memory", action="store_true",
                        help="the dry runs ran the interleaved order that keeps fewer micro-batches in flight")
    add_output_arguments(parser, main="fitted parameters")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    readers = {".yaml": read_dryrun_yaml, ".yml": read_dryrun_yaml, ".csv": read_dryrun_csv}
    reader = readers.get(args.observations.suffix.lower())
    if reader is None:
        raise InputError(f"FILE must be a .yaml/.yml (MindFormers pipeline_balance) or .csv file of dry-run "
                         f"observations; got {str(args.observations)!r}")
    fit = fit_memory(reader(args.observations), const=False if args.no_const else "auto", schedule=args.schedule,
                     less_memory=args.less_memory)
    out = Output(args)  # memory only
    out.line(fit.describe())
    for name in ("rank", "condition_number", "loo_error_mb", "const_fitted"):
        out.value(name, getattr(fit, name))
    out.table("params", fit.params, key=KEY_COLUMNS)
    out.line("\nhead and tail (the original tool reports them including const_mb):")
    out.table("head_tail", fit.head_tail())
    out.finish()
    return 0
