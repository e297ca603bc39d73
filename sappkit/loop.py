"""The engineer's loop on one model: dry runs, memory fit, balance, recompute per layer, one more layer.

:func:`run_loop` runs it on dry-run observations and a times table:
memory fit, layer table (fitted memory, given times), balanced plan against
the even partitions, recompute per layer on the balanced partition against
one mode for every layer, and the plans one more fully recomputed layer
reaches. :func:`simulate_choice` simulates a recompute choice as it would
run; :func:`compare_tables` checks a fitted table against a known one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from .balancer.optimise import balance
from .balancer.plan import Plan
from .balancer.views import compare_plans, even_plan
from .columns import MEMORY_MB, OPTION, STAGE
from .errors import InputError
from .layers.table import LayerTable, as_layer_table
from .layers.units import format_mb, format_time, text_table
from .memfit.fit import MemoryFit, fit_memory
from .one_more.analysis import alternatives
from .one_more.result import Alternatives
from .pipeline.costs import even_assignment, stage_memory
from .pipeline.simulator import Simulation
from .recompute.choice import RecomputeChoice
from .recompute.chooser import choose_recompute

__all__ = ["MODES", "Loop", "compare_tables", "run_loop", "simulate_choice"]

#: The trainer's recompute modes the loop chooses among.
MODES = ("off", "selective", "full")


def simulate_choice(choice: RecomputeChoice, **options) -> Simulation:
    """Simulate one step of a recompute choice on its partition: :meth:`RecomputeChoice.simulate`.

    Refuses a choice that was not made, and one that offloads to the host
    (the simulator runs no host copies).

    Examples
    --------
    >>> from sappkit import Partition, choose_recompute
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=b,
    ...              activation_mb=a) for o, a, b in (("none", 40, 2), ("full", 5, 3))]
    >>> cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    >>> part = Partition(stages=2, micro_batches=4, cells=cells, configured="full")
    >>> simulate_choice(choose_recompute(pd.DataFrame(rows), part, memory_mb=320)).step_time
    36.0
    """
    if not isinstance(choice, RecomputeChoice):
        raise InputError(f"choice must be a RecomputeChoice (sappkit.choose_recompute); got {type(choice).__name__}")
    return choice.simulate(**options)


def compare_tables(reference, fitted, *, stages: int, micro_batches: int) -> pd.DataFrame:
    """Per-stage memory two layer tables predict for the even partition, under every body option they share.

    Returns
    -------
    DataFrame
        ``option``, ``stage``, ``reference_mb``, ``fitted_mb`` and
        ``difference_mb`` (fitted − reference), 1F1B, in the memory fit's
        model: without the end-of-warm-up working set, which a fit of peak
        memory cannot tell from the activations.

    Examples
    --------
    >>> table = pd.DataFrame([dict(kind="block", role="body", count=8, param_mb=100, option=o,
    ...                            forward_time=1, backward_time=2, activation_mb=a) for o, a in (("none", 10),
    ...                                                                                        ("full", 1))])
    >>> heavier = table.assign(param_mb=101)
    >>> compare_tables(table, heavier, stages=2, micro_batches=4).groupby("option")["difference_mb"].max()
    option
    full    4.0
    none    4.0
    Name: difference_mb, dtype: float64
    """
    reference, fitted = as_layer_table(reference), as_layer_table(fitted)
    shape = {name: [(kind, table.count(kind)) for kind in table.body_kinds]
             for name, table in (("reference", reference), ("fitted", fitted))}
    if shape["reference"] != shape["fitted"]:
        raise InputError(f"fitted has body kinds and counts {shape['fitted']!r} but reference has "
                         f"{shape['reference']!r}; compare tables of one model")
    frames = []
    for option in _shared_options(reference, fitted):
        memory = [stage_memory(table, even_assignment(table, stages=stages, option=option), stages=stages,
                               micro_batches=micro_batches, working_set=False) for table in (reference, fitted)]
        frames.append(pd.DataFrame({OPTION: option, STAGE: memory[0][STAGE], "reference_mb": memory[0][MEMORY_MB],
                                    "fitted_mb": memory[1][MEMORY_MB]}))
    frame = pd.concat(frames, ignore_index=True)
    frame["difference_mb"] = frame["fitted_mb"] - frame["reference_mb"]
    return frame


def _shared_options(*tables: LayerTable) -> list[str]:
    """The options every body kind of every table offers, in the first kind's order."""
    first = tables[0]
    return [o for o in first.options(first.body_kinds[0])
            if all(o in table.options(kind) for table in tables for kind in table.body_kinds)]


def _faster(new: float, old: float) -> str:
    gain = 1 - new / old
    return f"{gain:.1%} faster" if gain >= 0 else f"{-gain:.1%} slower"


@dataclass(frozen=True, eq=False)
class Loop:
    """The engineer's loop on one model, one field per step (:func:`run_loop`).

    Attributes
    ----------
    setting : str
        The pipeline and the inputs, in words.
    fit : MemoryFit
        From the dry-run observations.
    layers : LayerTable
        The fitted memory with the given times (:meth:`MemoryFit.to_layers`).
    agreement : DataFrame
        :func:`compare_tables` of the times table against ``layers``.
    plan : Plan
        :func:`sappkit.balance` on ``layers``.
    plans : DataFrame
        :func:`~sappkit.balancer.views.compare_plans` of ``balanced`` and the
        even partitions ``even, <option>`` (simulated step times).
    choices : DataFrame
        Recompute on the balanced partition: ``choice`` (``one mode``, ``a
        mode per layer``), ``mode``, ``time_saved`` (summed over the stages,
        against the chooser's stated baseline: the plan's options, which
        fit), ``step_time`` (simulated), ``peak_mb``, ``reason`` (why no
        choice, else None). Empty when the plan has no placement.
    choice, one_mode : RecomputeChoice or None
        A mode per layer, and one mode for every layer.
    alternatives : Alternatives or None
        The plans one more fully recomputed layer reaches from ``choice``.
    """

    setting: str
    fit: MemoryFit
    layers: LayerTable
    agreement: pd.DataFrame
    plan: Plan
    plans: pd.DataFrame
    choices: pd.DataFrame = field(default_factory=pd.DataFrame)
    choice: RecomputeChoice | None = None
    one_mode: RecomputeChoice | None = None
    alternatives: Alternatives | None = None

    def even_baseline(self) -> pd.Series | None:
        """The even partition that fits and simulates fastest (None when no even partition fits)."""
        even = self.plans[self.plans["plan"].str.startswith("even") & self.plans["fits"]]
        return None if even.empty else even.loc[even["step_time"].idxmin()]

    def describe(self) -> str:
        """The headline of each step: fit, balance, recompute per layer, one more recomputed layer.

        Times in the layer table's unit, memory in MB; the tables fit 100 columns.
        """
        unit = self.layers.time_unit
        params = text_table(self.fit.params[["name", "value_mb", "stderr_mb"]].round(1))
        difference = self.agreement["difference_mb"].abs().max()
        agreement = (f"   layer table: the fitted memory predicts the even partitions' stage memory within "
                     f"{format_mb(difference)} of the times table's own (leave-one-out error "
                     f"{format_mb(self.fit.loo_error_mb)})")
        lines = [self.setting, f"1. memory fit: {self.fit.describe(width=None)}", params, agreement]
        plan = self.plan
        if not plan.has_plan:
            return "\n".join(lines + [f"2. balance: {plan.status}: {plan.message}"])
        step = float(self.plans["step_time"].iloc[0])
        even = self.even_baseline()
        against = ("; no even partition with one option fits" if even is None else
                   f" against {format_time(even['step_time'], unit)} for the "
                   f"{even['plan'].replace(', ', ' partition with ')} recompute, the fastest even partition that "
                   f"fits: {_faster(step, even['step_time'])}")
        lines += [f"2. balance: {plan.status}; simulated step time {format_time(step, unit)}{against}",
                  text_table(self.plans[["plan", "status", "step_time", "peak_mb", "fits"]], unit)]
        lines.append("3. recompute, " + self._recompute_line())
        found = self.alternatives
        if found is not None:
            peak = self.choice.stages[MEMORY_MB].max()
            tail = (f"{len(found.frame)} distinct plans still fit (stage {found.binding_stage} binds at "
                    f"{format_mb(peak)})" if found.reason is None else f"none: {found.reason}")
            lines.append(f"4. one more fully recomputed layer: {tail}")
        return "\n".join(lines)

    def _recompute_line(self) -> str:
        per_layer, one = (self.choices.set_index("choice").loc[label] for label in ("a mode per layer", "one mode"))
        unit = self.layers.time_unit
        if per_layer["reason"] is not None:
            if pd.isna(one["reason"]):  # a multimodal model: one mode for the whole model only
                return (f"no choice per layer: {per_layer['reason']}; one mode for every layer: {one['mode']}, "
                        f"simulated step time {format_time(one['step_time'], unit)}")
            return f"no choice: {per_layer['reason']}"
        modes = ", ".join(self.choice.pricing.modes or ())
        text = f"a mode per layer ({modes}): simulated step time {format_time(per_layer['step_time'], unit)}"
        if one["reason"] is not None:
            return text + f"; one mode for every layer does not fit ({one['reason']})"
        saved = per_layer["time_saved"] - one["time_saved"]
        return (text + f" against {format_time(one['step_time'], unit)} with one mode ({one['mode']}) on every "
                f"layer: {_faster(per_layer['step_time'], one['step_time'])}; {format_time(saved, unit)} less "
                f"forward + backward per micro-batch, summed over the stages")


def _choices(choices: Mapping[str, RecomputeChoice]) -> pd.DataFrame:
    rows = []
    for label, choice in choices.items():
        made = choice.chosen
        rows.append(dict(choice=label, mode=(choice.mode or "(per layer)") if made else None,
                         time_saved=choice.time_saved, step_time=simulate_choice(choice).step_time if made else np.nan,
                         peak_mb=choice.memory_mb, reason=choice.reason))
    return pd.DataFrame(rows)


def run_loop(observations, times, *, micro_batches: int, memory_mb: float, modes=MODES,
             setting: str | None = None) -> Loop:
    """The loop on one model, from its dry runs to the plans one more recomputed layer reaches.

    The pipeline is the one the dry runs ran (their ``stages``, 1F1B): the
    fitted head and tail hold their activations at that shape.

    Parameters
    ----------
    observations : DataFrame
        Dry-run observations (:func:`sappkit.read_dryrun_csv`), one stage count.
    times : LayerTable or DataFrame
        Forward and backward times per kind and option (e.g. the model's layer
        JSON); its own memory is what ``agreement`` compares the fit with.
    micro_batches : int
    memory_mb : float
        Device memory for the balancer and the chooser.
    modes : tuple of str or mapping
        The trainer's recompute modes (:func:`sappkit.choose_recompute`).
    setting : str, optional
        The first line of :meth:`Loop.describe` (default: the pipeline in words).

    Examples
    --------
    >>> from sappkit import read_dryrun_csv, read_layers_json
    >>> loop = run_loop(read_dryrun_csv("data/llama2_70b_dryruns.csv"), read_layers_json("data/llama2_70b.json"),
    ...                 micro_batches=32, memory_mb=58000)
    >>> loop.plan.status, loop.even_baseline()["plan"], len(loop.alternatives.frame)
    ('optimal', 'even, selective', 21)
    """
    if not isinstance(observations, pd.DataFrame) or "stages" not in observations.columns:
        raise InputError("observations must be a DataFrame of dry-run observations with a 'stages' column "
                         "(sappkit.read_dryrun_csv)")
    shapes = sorted(observations["stages"].unique().tolist())
    if len(shapes) != 1:
        raise InputError(f"observations hold dry runs of {shapes!r} stages; the loop balances the pipeline the dry "
                         "runs ran (the fitted head and tail hold activations at that shape), so give runs of one "
                         "stage count")
    stages = int(shapes[0])
    fit = fit_memory(observations)
    table = fit.to_layers(times)
    pipeline = dict(stages=stages, micro_batches=micro_batches, memory_mb=memory_mb)
    plan = balance(table, **pipeline)
    plans = compare_plans({"balanced": plan, **{f"even, {o}": even_plan(table, option=o, **pipeline)
                                                for o in _shared_options(table)}})
    loop = Loop(setting=setting or f"1f1b, {stages} stages, {micro_batches} micro-batches, {format_mb(memory_mb)} "
                                   "devices",
                fit=fit, layers=table, agreement=compare_tables(times, table, stages=stages,
                                                                micro_batches=micro_batches),
                plan=plan, plans=plans)
    if not plan.has_plan:
        return loop
    partition = plan.partition()
    per_layer = choose_recompute(table, partition, memory_mb=memory_mb, modes=modes, per_layer=True)
    one_mode = choose_recompute(table, partition, memory_mb=memory_mb, modes=modes)
    return replace(loop, choices=_choices({"a mode per layer": per_layer, "one mode": one_mode}), choice=per_layer,
                   one_mode=one_mode, alternatives=alternatives(per_layer) if per_layer.chosen else None)
