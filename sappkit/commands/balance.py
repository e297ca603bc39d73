"""``sappkit balance LAYERS --stages P --micro-batches M --memory MB [...]``: balance layers and recompute."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .._files import output_path
from ..balancer.optimise import balance
from ..balancer.solver import SolverOptions
from ._common import add_pipeline_arguments, read_layers


def register(subparsers) -> None:
    parser = subparsers.add_parser("balance", help="place layers and recompute on the pipeline: fit memory, "
                                                   "minimise time (ILP balancer)")
    add_pipeline_arguments(parser)
    parser.add_argument("--objective", choices=("sapp", "step"), default="sapp",
                        help="sapp: seed 003's time model; step: the simulated step time")
    parser.add_argument("--level", type=int, default=1, help="seed 003's optimization_level")
    parser.add_argument("--const-mb", type=float, default=None, help="per-stage constant memory (default: the table's)")
    parser.add_argument("--solver", choices=("highs", "cbc"), default="highs")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds before the ILP stops")
    parser.add_argument("--yaml", type=Path, default=None, metavar="OUT.yaml",
                        help="write the plan as a MindFormers config fragment")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    if args.yaml is not None:
        output_path("--yaml", args.yaml)  # before the solve, so a typo does not cost it
    plan = balance(read_layers(args.layers), stages=args.stages, micro_batches=args.micro_batches,
                   memory_mb=args.memory, chunks=args.chunks, schedule=args.schedule, less_memory=args.less_memory,
                   objective=args.objective, optimization_level=args.level, const_mb=args.const_mb,
                   solver=SolverOptions(solver=args.solver, time_limit=args.time_limit))
    print(plan.describe().splitlines()[0])
    if plan.message:
        print(plan.message)
    if plan.counts is None:
        return 1
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_rows", None):
        print(plan.stages.round(1).to_string(index=False))
    if plan.status == "infeasible":
        return 1
    lists = plan.offsets(strict=False)
    for key, value in lists.items():
        print(f"{key}: {value}")
    if args.yaml is not None:
        plan.write_yaml(args.yaml, strict=False)
        print(f"MindFormers config written to {args.yaml}")
    return 0
