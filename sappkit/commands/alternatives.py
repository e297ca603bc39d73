"""``sappkit alternatives LAYERS --stages P --micro-batches M --memory MB [--offsets FILE.yaml] [--sort KEY]``:
what one more fully recomputed layer buys from the chooser's per-layer plan.

Rows that lower the plan's peak (they relieve the stage that binds) are
marked ``*``; ``--sort`` orders the rows by what the user asks, e.g. the
memory freed per unit of time it costs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .._check import short
from ..columns import KIND, MEMORY_MB, STAGE
from ..errors import InputError
from ..one_more.analysis import alternatives
from ..one_more.result import ALTERNATIVE, FROM_MODE, LAYERS_CHANGED, MEMORY_FREED_MB, STAGE_MEMORY_MB, TIME_COST
from ..recompute.changes import change_lines
from ..recompute.chooser import choose_recompute
from ..recompute.trainer_plan import trainer_plan_line
from . import _common
from ._output import Output, add_output_arguments

LOWERS_PEAK = "lowers_peak"
FREED_PER_COST = "freed_per_cost"
#: ``--sort`` keys: the columns each sorts by, and whether each ascends.
SORTS = {
    "peak": ([MEMORY_MB, TIME_COST], [True, True]),
    "freed-per-cost": ([FREED_PER_COST, MEMORY_MB], [False, True]),
    "freed": ([MEMORY_FREED_MB, TIME_COST], [False, True]),
    "cost": ([TIME_COST, MEMORY_FREED_MB], [True, False]),
    "stage": ([STAGE, ALTERNATIVE], [True, True]),
}
#: The table's key columns (``--wide`` shows all).
KEY_COLUMNS = ("mark", ALTERNATIVE, STAGE, KIND, FROM_MODE, "layers", MEMORY_MB, MEMORY_FREED_MB, TIME_COST,
               FREED_PER_COST, STAGE_MEMORY_MB)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "alternatives",
        description="Start from the per-layer recompute choice (as 'sappkit choose --per-layer' makes it) and list "
                    "every distinct plan that fully recomputes one more layer and still fits: the memory each frees "
                    "on its stage, the time it costs, and whether it lowers the plan's peak (marked *).")
    _common.add_pipeline_arguments(parser)
    _common.add_chooser_arguments(parser, modes_help="the runtime modes each layer may run (default: those of "
                                                     "off,selective,full whose option, none, selective or full, "
                                                     "every layer kind has; full must be among them)")
    parser.add_argument("--dimensions", default="", metavar="NAME=DEGREE,...",
                        help="other parallel degrees to record with every plan, e.g. dp=8,tp=4")
    parser.add_argument("--sort", choices=SORTS, default="peak",
                        help="order of the rows: peak (the new peak, lowest first; default), freed-per-cost (memory "
                             "freed per unit of time it costs, most first), freed (most memory freed first), cost "
                             "(cheapest first) or stage")
    add_output_arguments(parser, main="alternatives")
    parser.set_defaults(run=_run)


def _dimensions(text: str) -> tuple[tuple[str, int], ...]:
    pairs = []
    for item in filter(None, text.split(",")):
        name, _, degree = item.partition("=")
        try:
            value = int(degree) if name.strip() and degree.isdigit() else None
        except ValueError:  # a digit int() cannot read ('²'), or more digits than Python reads
            value = None
        if value is None:
            raise InputError(f"--dimensions entry {short(item)} is not NAME=DEGREE (e.g. tp=4)")
        pairs.append((name.strip(), value))
    return tuple(pairs)


def _run(args) -> int:
    layers = _common.read_layers(args)
    choice = choose_recompute(layers, _common.partition(layers, args), memory_mb=args.memory,
                              modes=_common.modes(args, layers, per_layer=True), per_layer=True,
                              fsdp_holds_grads=args.fsdp_holds_grads, bucket_mb=args.bucket_mb)
    out = Output(args, choice.time_unit)
    _common.say_unused_shape(args, out)
    if not choice.chosen:
        out.line(f"no per-layer choice to start from: {choice.reason}")
        out.value("reason", choice.reason)
        out.finish()
        return 1
    found = alternatives(choice, dimensions=_dimensions(args.dimensions))
    mode, overrides = choice.trainer_plan()
    out.line(f"the plan to start from (sappkit choose --per-layer): {choice.short_headline()}")
    out.line(f"baseline: {choice.baseline}")
    if choice.fastest_single_text():
        out.line(choice.fastest_single_text())
    out.line(f"{choice.peak_text()}; stage {found.binding_stage} binds")
    for line in change_lines(choice.layout_changes()):
        out.line(line)
    out.keep("changes", choice.layout_changes())
    out.line(trainer_plan_line(mode, overrides))
    for name in ("baseline", "step_time", "baseline_step_time", "step_time_saved", "time_saved", "memory_mb"):
        out.value(name, getattr(choice, name))
    out.value("binding_stage", found.binding_stage)
    out.value("trainer_plan", {"mode": mode, "layers": overrides})
    if found.reason:
        out.line(f"no alternative: {found.reason}")
        out.value("reason", found.reason)
        out.finish()
        return 0
    frame = _sorted(found.frame, args.sort, choice.memory_mb)
    lowering = int(frame[LOWERS_PEAK].sum())
    out.line(f"{len(frame)} plan(s) with one more layer at 'full', sorted by {args.sort}; * marks the "
             f"{lowering} that lower the peak; memory freed and time cost (per micro-batch) on the layer's stage")
    if found.left_out:
        out.line(f"left out: {found.left_out} plan(s) that fit but free no memory on their stage (the layer that "
                 "ends warm-up, at 'full', rebuilds the plain layer for its backward)")
    out.value("left_out", found.left_out)
    shown = frame.assign(mark=np.where(frame[LOWERS_PEAK], "*", ""), layers=frame[LAYERS_CHANGED])
    one_each = shown["layers"].astype(str).str.fullmatch(r"\d+").all()  # one layer per plan: say "layer"
    out.table("alternatives", shown, key=KEY_COLUMNS, machine=frame,
              headers={"mark": "", ALTERNATIVE: "#", FROM_MODE: "from", "layers": "layer" if one_each else "layers",
                       MEMORY_MB: "peak_mb",
                       MEMORY_FREED_MB: "freed_mb", TIME_COST: "cost", STAGE_MEMORY_MB: "stage_mb",
                       FREED_PER_COST: f"MB per {choice.time_unit}"})
    out.finish()
    return 0


def _sorted(frame: pd.DataFrame, key: str, peak_mb: float) -> pd.DataFrame:
    """The alternatives with ``lowers_peak`` and ``freed_per_cost`` (inf for no cost), sorted by ``key``."""
    cost = frame[TIME_COST].to_numpy(float)
    freed = frame[MEMORY_FREED_MB].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(cost > 0, freed / cost, np.where(freed > 0, np.inf, np.nan))
    frame = frame.assign(**{LOWERS_PEAK: frame[MEMORY_MB] < peak_mb, FREED_PER_COST: rate})
    columns, ascending = SORTS[key]
    return frame.sort_values(columns, ascending=ascending, kind="stable").reset_index(drop=True)
