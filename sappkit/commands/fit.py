"""``sappkit fit FILE.yaml|FILE.csv [--no-const]``: fit per-layer memory from dry-run peaks and print it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..memfit.dryruns import read_dryrun_csv, read_dryrun_yaml
from ..memfit.fit import fit_memory


def register(subparsers) -> None:
    parser = subparsers.add_parser("fit", help="fit per-layer memory from dry-run observations")
    parser.add_argument("observations", type=Path, metavar="FILE",
                        help="dry-run observations: a MindFormers pipeline_balance YAML or a CSV")
    parser.add_argument("--no-const", action="store_true", help="never fit the per-stage constant const_mb")
    parser.add_argument("--schedule", choices=("1f1b", "interleaved"), default="1f1b",
                        help="the schedule the dry runs ran (interleaved observations carry chunk rows)")
    parser.add_argument("--less-memory", action="store_true", help="the less-memory interleaved variant")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    readers = {".yaml": read_dryrun_yaml, ".yml": read_dryrun_yaml, ".csv": read_dryrun_csv}
    reader = readers.get(args.observations.suffix.lower())
    if reader is None:
        raise InputError(f"FILE must be a .yaml/.yml (MindFormers pipeline_balance) or .csv file of dry-run "
                         f"observations; got {str(args.observations)!r}")
    fit = fit_memory(reader(args.observations), const=False if args.no_const else "auto", schedule=args.schedule,
                     less_memory=args.less_memory)
    print(fit.describe())
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_rows", None):
        print(fit.params.drop(columns=[c for c in ("kind", "option") if fit.params[c].isna().all()])
              .round(2).to_string(index=False))
        print("\nhead and tail (the original tool reports them including const_mb):")
        print(fit.head_tail().round(2).to_string(index=False))
    return 0
