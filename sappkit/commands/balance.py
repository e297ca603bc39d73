"""``sappkit balance LAYERS --stages P --micro-batches M --memory MB [...]``: balance layers and recompute.

Prints the status, what it is optimal for (SAPP's objective, the slowest stage's proxy, is not the step:
the first line says how far the simulated step is from what ``--objective step`` finds), the simulated
step time and its bubble, the peak stage
memory against the device, a table per stage and the MindFormers lists; the
solver's own objective only with ``--verbose``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .._files import output_path
from ..balancer.optimise import balance
from ..balancer.ilp.solver import SolverOptions
from ..columns import CHUNK, LAYERS, MEMORY_MB, OPTION, STAGE, TIME
from ..layers.units import format_mb, format_share, format_time
from ._common import (add_export_argument, add_pipeline_arguments, print_constraint_cost, print_export,
                      read_layers)
from ._output import STAGE_TIME_HEADER, Output, add_output_arguments

#: The stage table's key columns (``--wide`` shows all).
KEY_COLUMNS = (STAGE, LAYERS, "options", MEMORY_MB, TIME)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "balance",
        description="Place the body layers and their recompute on the pipeline stages so that every stage fits the "
                    "device memory and the step is as fast as possible; print the plan and, with --yaml, write it "
                    "as a MindFormers config.")
    add_pipeline_arguments(parser)
    parser.add_argument("--objective", choices=("sapp", "step"), default="sapp",
                        help="what the solver minimises: sapp, the original SAPP tool's stage-time model (default), "
                             "or step, the simulated step time itself")
    parser.add_argument("--level", type=int, default=1,
                        help="the SAPP tool's optimization_level for the sapp objective (0, 1 or 2; default 1)")
    parser.add_argument("--const-mb", type=float, default=None,
                        help="memory every stage holds besides its layers, in MB (default: the layer file's)")
    parser.add_argument("--solver", choices=("highs", "cbc"), default="highs",
                        help="the integer-program solver, when the exact search needs one (default highs)")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds the solver may take before it returns its best plan so far (default 60)")
    parser.add_argument("--trainer", choices=("megatron", "torchtitan", "mindformers"), default=None,
                        help="plan only what that trainer's config can state (its recompute policies), and print "
                             "what the restriction costs against the unconstrained plan")
    parser.add_argument("--yaml", type=Path, default=None, metavar="OUT.yaml",
                        help="also write the plan as a MindFormers config (offsets and recompute lists)")
    add_export_argument(parser)
    parser.add_argument("--verbose", action="store_true",
                        help="also print the solver's objective value, gap, method and time")
    add_output_arguments(parser, main="per-stage")
    parser.set_defaults(run=_run)


def _run(args) -> int:
    if args.yaml is not None:
        output_path("--yaml", args.yaml)  # before the solve, so a typo does not cost it
    plan = balance(read_layers(args), stages=args.stages, micro_batches=args.micro_batches,
                   memory_mb=args.memory, chunks=args.chunks, schedule=args.schedule, less_memory=args.less_memory,
                   objective=args.objective, optimization_level=args.level, const_mb=args.const_mb,
                   trainer=args.trainer, solver=SolverOptions(solver=args.solver, time_limit=args.time_limit))
    out = Output(args, plan.time_unit)
    setup = plan.setup
    out.line(f"{setup.schedule}: {setup.stages} stages, {setup.chunks} chunk(s), {setup.micro_batches} "
             f"micro-batches, {format_mb(setup.memory_mb)} devices: {_status(out, args, plan)}")
    for name in ("status", "objective_name", "objective", "gap", "method", "solve_seconds"):
        out.value(name, getattr(plan, name))
    if plan.message:
        out.line(plan.message)
        out.value("message", plan.message)
    if args.verbose:
        objective = "none" if plan.objective is None else format_time(plan.objective, plan.time_unit)
        gap = "unknown" if plan.gap is None else f"{plan.gap:.1%}"
        out.line(f"{plan.objective_name} objective {objective}, gap {gap}, found by {plan.method} in "
                 f"{plan.solve_seconds:.2f} s")
    print_constraint_cost(out, plan)
    for note in plan.notes:
        out.line(f"note: {note}")
    if plan.counts is None:
        out.finish()
        return 1
    stages = plan.stages.assign(options=_options(plan.assignment, setup.stages))
    peak = stages.loc[stages[MEMORY_MB].idxmax()]
    if plan.status != "infeasible":
        simulation = plan.simulate()
        bubbles = simulation.bubbles
        out.line(f"simulated step time {format_time(simulation.step_time, plan.time_unit)}, bubble "
                 f"{format_share(bubbles['real'], of='the compute')} (idle {bubbles['of_step']:.1%} of the step)")
        out.value("step_time", simulation.step_time)
        out.value("bubble", float(simulation.bubbles["real"]))
    out.line(f"peak stage memory {format_mb(peak[MEMORY_MB])} on stage {int(peak[STAGE])} of "
             f"{format_mb(setup.memory_mb)}" + ("" if plan.fits else ": over the limit"))
    out.value("peak_mb", float(peak[MEMORY_MB]))
    out.value("peak_stage", int(peak[STAGE]))
    out.value("limit_mb", setup.memory_mb)
    out.table("stages", stages, key=KEY_COLUMNS, headers={"options": "layers per option", TIME: STAGE_TIME_HEADER})
    out.keep("assignment", plan.assignment)
    if plan.status == "infeasible":
        out.finish()
        return 1
    lists = plan.offsets(strict=False)
    out.value("mindformers", lists)
    if args.trainer in (None, "mindformers"):  # a Megatron-LM or torchtitan user reads --export, not these
        out.line("MindFormers lists (offset per stage, then the cumulative recompute counts):")
        for key, value in lists.items():
            out.line(f"  {key}: {value}")
    if args.yaml is not None:
        plan.write_yaml(args.yaml, strict=False)
        out.line(f"MindFormers config written to {args.yaml}")
        out.value("yaml", str(args.yaml))
    print_export(out, plan, args.export)
    out.finish()
    return 0


def _status(out, args, plan) -> str:
    """The plan's status and what it holds for; a plan of SAPP's objective is set beside the step the step
    objective finds (same layers, shape and solver), since its optimum is the proxy's, not the step's."""
    if plan.objective_name != "sapp" or plan.counts is None or plan.status == "infeasible":
        return f"{plan.status} for the {plan.objective_name} objective"
    by_step = balance(read_layers(args), stages=args.stages, micro_batches=args.micro_batches,
                      memory_mb=args.memory, chunks=args.chunks, schedule=args.schedule,
                      less_memory=args.less_memory, objective="step", const_mb=args.const_mb, trainer=args.trainer,
                      solver=SolverOptions(solver=args.solver, time_limit=args.time_limit))
    step, best = plan.simulate().step_time, by_step.simulate().step_time
    out.value("step_objective_step_time", best)
    unit = plan.time_unit
    if step <= best:
        return (f"{plan.status} for SAPP's objective (a proxy); its simulated step {format_time(step, unit)} is "
                f"as fast as --objective step finds")
    return (f"{plan.status} for SAPP's objective (a proxy), not for the step: simulated {format_time(step, unit)}, "
            f"{step / best - 1:.1%} slower than the {format_time(best, unit)} --objective step finds")


def _options(assignment: pd.DataFrame, stages: int) -> list[str]:
    """Per stage, its layers per option over its chunks and kinds: ``none x3, selective x2``."""
    counts = assignment.groupby([STAGE, OPTION], sort=False)[LAYERS].sum()
    text = [[] for _ in range(stages)]
    for (stage, option), layers in counts.items():
        text[int(stage)].append(f"{option} x{int(layers)}")
    chunks = assignment.groupby(STAGE)[CHUNK].nunique().reindex(range(stages), fill_value=0).to_numpy()
    return [", ".join(parts) + (f" ({n} chunks)" if n > 1 else "") for parts, n in zip(text, np.asarray(chunks))]
