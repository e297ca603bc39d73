"""``sappkit plan-dryruns --stages P --layers L --options none,selective,full``: propose dry runs as YAML."""

from __future__ import annotations

from pathlib import Path

from .._files import output_path, write_text
from ..memfit.planner import plan_dryruns
from ._output import Output


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan-dryruns",
        description="Propose the fewest dry runs (compile-only runs that log each stage's peak memory) whose peaks "
                    "pin down every per-layer memory cost, and print them as the MindFormers pipeline_balance YAML "
                    "to run; fill in the peaks and give the file to 'sappkit fit'.")
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages the dry runs use")
    parser.add_argument("--layers", type=int, required=True, help="body layers of the model (num_layer)")
    parser.add_argument("--options", required=True, metavar="LIST",
                        help="the recompute options to fit, comma-separated, among none, selective, comm, both and "
                             "full")
    parser.add_argument("--no-const", action="store_true",
                        help="do not plan for the memory every stage holds besides its layers (const_mb)")
    parser.add_argument("--max-runs", type=int, default=8,
                        help="give up rather than propose more dry runs than this (default 8)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE.yaml", help="also write the YAML here")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    if args.out is not None:
        output_path("--out", args.out)
    options = [o.strip() for o in args.options.split(",") if o.strip()]
    plan = plan_dryruns(args.stages, args.layers, options, const=not args.no_const, max_runs=args.max_runs)
    text = plan.to_yaml()
    Output(args).line(plan.describe())
    print(text, end="")
    if args.out is not None:
        write_text(args.out, text, name="--out")
        print(f"written to {args.out}")
    return 0
