"""``sappkit plan-dryruns --stages P --layers L --options none,selective,full``: propose dry runs as YAML."""

from __future__ import annotations

from pathlib import Path

from .._files import output_path, write_text
from ..memfit.planner import plan_dryruns


def register(subparsers) -> None:
    parser = subparsers.add_parser("plan-dryruns", help="propose the fewest dry runs that identify every memory "
                                                        "parameter, as a MindFormers YAML")
    parser.add_argument("--stages", type=int, required=True, help="pipeline stages of the dry runs")
    parser.add_argument("--layers", type=int, required=True, help="body layers of the model (num_layer)")
    parser.add_argument("--options", required=True, metavar="LIST",
                        help="comma-separated SAPP options to fit: none, selective, comm, both, full")
    parser.add_argument("--no-const", action="store_true", help="do not plan for the per-stage constant")
    parser.add_argument("--max-runs", type=int, default=8, help="give up beyond this many runs (default 8)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE.yaml", help="also write the YAML here")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    if args.out is not None:
        output_path("--out", args.out)
    options = [o.strip() for o in args.options.split(",") if o.strip()]
    plan = plan_dryruns(args.stages, args.layers, options, const=not args.no_const, max_runs=args.max_runs)
    text = plan.to_yaml()
    print(plan.describe())
    print(text, end="")
    if args.out is not None:
        write_text(args.out, text, name="--out")
        print(f"written to {args.out}")
    return 0
