"""Where a strategy's step goes, and what separates two strategies: the search's answer explained.

A :class:`PricedStrategy` is one strategy priced as the search prices it (the
same layer table, placement and simulation), with its step split into
:data:`TERMS`, ms, that add up to the step:

- ``compute_ms``: the layers' compute with recompute;
- ``tp_comm_ms``, ``cp_comm_ms``, ``ep_comm_ms``, ``zero_comm_ms``: each
  dimension's communication inside the layers that no compute hides;
- ``pp_comm_ms``: the pipeline transfers the stage waits for;
- ``dp_comm_ms``: the exposed gradient reduction and weight gather;
- ``optimizer_ms``: the optimizer step;
- ``bubble_ms``: the rest, pipeline bubbles and waiting.

The terms are those of the stage that finishes last (the one that sets the
step): its ``bubble_ms`` is the step less its other terms, so the terms add
up to the step exactly. A :class:`Comparison` sets two side by side, term by
term, and lists what differs between them (:meth:`Comparison.changes`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...balancer.evaluate import ceiling
from ...columns import MEMORY_MB, OPTION, SAPP_OPTIONS
from ...errors import InputError
from ...layers.timing import COMPUTE_MS, CP_COMM_MS, EP_COMM_MS, TP_COMM_MS, ZERO_COMM_MS
from ...layers.units import format_mb, text_table
from ..compiled import compile_shape
from ..config import Strategy
from ..evaluate import evaluate_strategy
from ..legality import check_strategy_fits
from ..step import DP_COMM_MS, IDLE_MS, OPTIMIZER_MS, PP_COMM_MS, price_plan, price_single_stage
from .tasks import Setting, p2p_ms, price_even, recompute_mix

__all__ = ["PricedStrategy", "Comparison", "TERMS", "BUBBLE_MS", "price_placed", "price_cheapest",
           "price_at", "price_config", "step_terms", "layers_for", "why_ranked", "ordinal"]

BUBBLE_MS = "bubble_ms"
#: A step's terms, ms, in the order they add up to it (module docstring).
TERMS = (COMPUTE_MS, TP_COMM_MS, CP_COMM_MS, EP_COMM_MS, ZERO_COMM_MS, PP_COMM_MS, DP_COMM_MS, OPTIMIZER_MS,
         BUBBLE_MS)
#: What :meth:`Comparison.changes` compares beyond the strategy's fields.
_PLACED = ("micro_batches", "placement", "recompute")


@dataclass(frozen=True, eq=False)
class PricedStrategy:
    """One strategy priced as the search prices it.

    Attributes
    ----------
    strategy : Strategy
    label : str
        Its name (the search's label where it is a row).
    step_ms : float
        The simulated step, ms.
    terms : Series
        The step's :data:`TERMS`, ms (module docstring); they add up to ``step_ms``.
    memory : DataFrame
        Each stage's memory, MB (``stage``, the parts, ``memory_mb``, ``limit_mb``).
    plan : Plan or None
        The placement's plan (None without a pipeline).
    placement, recompute : str
        ``even``, ``balanced`` or ``config`` (the trainer's own), and the recompute option(s).
    micro_batches : int
        Micro-batches per step.
    """

    strategy: Strategy
    label: str
    step_ms: float
    terms: pd.Series
    memory: pd.DataFrame
    plan: object
    placement: str
    recompute: str
    micro_batches: int

    @property
    def peak_memory_mb(self) -> float:
        """The fullest stage's memory, MB."""
        return float(self.memory[MEMORY_MB].max())

    @property
    def fits(self) -> bool:
        """Whether every stage fits its limit."""
        return bool((self.memory[MEMORY_MB] <= ceiling(self.memory["limit_mb"])).all())

    def __repr__(self) -> str:
        return f"PricedStrategy({self.label}: {self.step_ms:,.1f} ms, peak {format_mb(self.peak_memory_mb)})"


def step_terms(breakdown: pd.DataFrame, step_ms: float) -> pd.Series:
    """The :data:`TERMS` of a per-stage breakdown (:data:`sappkit.strategy.step.STEP_COLUMNS`): the last-finishing
    stage's (the least idle, the first of equals), its bubble the step less its other terms."""
    last = breakdown.iloc[int(np.argmin(breakdown[IDLE_MS].to_numpy()))]
    terms = pd.Series({term: float(last[term]) for term in TERMS[:-1]}, dtype=float)
    terms[BUBBLE_MS] = step_ms - float(terms.sum())
    terms.name = "ms"
    return terms


def _priced(strategy: Strategy, label: str, result, placement: str, recompute: str, m: int) -> PricedStrategy:
    return PricedStrategy(strategy=strategy, label=label, step_ms=float(result.step_time),
                          terms=step_terms(result.breakdown, float(result.step_time)),
                          memory=result.stages.reset_index(drop=True), plan=result.plan, placement=placement,
                          recompute=recompute, micro_batches=m)


def price_placed(setting: Setting, strategy: Strategy, layers, *, label: str, placement: str, recompute: str,
                 plan=None) -> PricedStrategy:
    """A search row priced again: ``even`` with every layer on ``recompute`` (an option), or ``balanced`` on
    ``plan`` (the balanced pass's)."""
    m = strategy.micro_batches(setting.global_batch)
    if placement == "balanced":
        result = price_plan(plan, layers, strategy, setting.cluster, p2p_ms=p2p_ms(setting, strategy))
    else:
        result = price_even(setting, strategy, layers, recompute)
        if result is None:
            raise InputError(f"strategy {label}: its even placement on recompute {recompute!r} does not fit "
                             f"{format_mb(setting.memory_mb)}")
    return _priced(strategy, label, result, placement, recompute, m)


def layers_for(setting: Setting, strategy: Strategy):
    """The layer table ``strategy`` is priced on in ``setting``, once it is held to the rules the search holds
    every strategy to (:func:`~sappkit.strategy.legality.check_strategy_fits`)."""
    check_strategy_fits(strategy, setting.models, global_batch=setting.global_batch, device=setting.cluster.device)
    compiled = compile_shape(setting.models, strategy.parallel, setting.cluster, kernels=setting.kernels,
                             options=SAPP_OPTIONS)
    return compiled.table(strategy.parallel, setting.cluster)


def price_cheapest(setting: Setting, strategy: Strategy, layers=None) -> PricedStrategy:
    """A strategy the search did not price, as its cheap pass would: the even placement under the fastest
    recompute option that fits (``layers`` default :func:`layers_for`)."""
    layers = layers_for(setting, strategy) if layers is None else layers
    found = [(result, option) for option in SAPP_OPTIONS
             if (result := price_even(setting, strategy, layers, option)) is not None]
    if not found:
        raise InputError(f"strategy {strategy.label}: no recompute option's even placement fits "
                         f"{format_mb(setting.memory_mb)}")
    result, option = min(found, key=lambda pair: pair[0].step_time)
    return _priced(strategy, strategy.label, result, "even", option, strategy.micro_batches(setting.global_batch))


def price_at(setting: Setting, strategy: Strategy, recompute: str) -> PricedStrategy:
    """``strategy`` on the even placement with every body layer on ``recompute`` (any option
    :func:`~sappkit.strategy.evaluate_strategy` takes, ``selective_op`` among them), priced as
    :func:`~sappkit.strategy.evaluate_strategy` prices it whether or not it fits (:attr:`PricedStrategy.fits`
    says): a published run at its own recompute, say."""
    result = evaluate_strategy(setting.models, strategy, cluster=setting.cluster, global_batch=setting.global_batch,
                               recompute=recompute, memory_mb=setting.memory_mb, kernels=setting.kernels)
    return _priced(strategy, strategy.label, result, "even", recompute, strategy.micro_batches(setting.global_batch))


def price_config(setting: Setting, config) -> PricedStrategy:
    """A trainer config (anything with ``.strategy`` and ``.plan_for(layers, memory_mb=)``, e.g.
    :class:`sappkit.trainers.TrainerConfig`) priced on its own placement and recompute."""
    strategy = config.strategy
    layers = layers_for(setting, strategy)
    plan = config.plan_for(layers, memory_mb=setting.memory_mb)
    mix = recompute_mix(plan)
    m = strategy.micro_batches(setting.global_batch)
    if strategy.pipeline_parallel == 1:
        options = plan.assignment[OPTION].unique()
        if len(options) != 1:
            raise InputError(f"the config runs no pipeline but several recompute options ({mix}); sappkit prices "
                             "one option on one stage")
        result = price_single_stage(layers, strategy, setting.cluster, micro_batches=m, option=options[0],
                                    memory_mb=setting.memory_mb)
    else:
        result = price_plan(plan, layers, strategy, setting.cluster, p2p_ms=p2p_ms(setting, strategy))
    return _priced(strategy, strategy.label, result, "config", mix, m)


@dataclass(frozen=True, eq=False)
class Comparison:
    """Two priced strategies side by side (``a`` then ``b``)."""

    a: PricedStrategy
    b: PricedStrategy

    @property
    def frame(self) -> pd.DataFrame:
        """One row per term (:data:`TERMS`), columns ``a``, ``b`` and ``b_minus_a``, ms; each column but the last
        adds up to its strategy's step."""
        frame = pd.DataFrame({"a": self.a.terms, "b": self.b.terms})
        frame["b_minus_a"] = frame["b"] - frame["a"]
        frame.index.name = "term"
        return frame

    @property
    def speedup(self) -> float:
        """``a``'s step over ``b``'s: above 1 when ``b`` is faster."""
        return self.a.step_ms / self.b.step_ms

    def changes(self) -> pd.DataFrame:
        """What differs, one row each (``what``, ``a``, ``b``): the strategy's fields (each degree, micro-batch
        size, schedule, ZeRO, the overlaps, dtype), then micro-batches, placement and recompute."""
        a, b = self.a.strategy.to_dict(), self.b.strategy.to_dict()
        rows = [(key, a[key], b[key]) for key in a if a[key] != b[key]]
        rows += [(key, getattr(self.a, key), getattr(self.b, key)) for key in _PLACED
                 if getattr(self.a, key) != getattr(self.b, key)]
        return pd.DataFrame(rows, columns=["what", "a", "b"])

    def describe(self) -> str:
        """The two steps, what changes and the terms side by side (each line under 100 columns)."""
        faster = "faster" if self.speedup >= 1 else "slower"
        changes = self.changes()
        said = ", ".join(f"{what} {a} -> {b}" for what, a, b in changes.itertuples(index=False)) or "nothing"
        lines = [f"{name}: {side.label}: {side.step_ms:,.1f} ms, peak {format_mb(side.peak_memory_mb)}"
                 + ("" if side.fits else f", over its limit of {format_mb(float(side.memory['limit_mb'].min()))}")
                 for name, side in (("a", self.a), ("b", self.b))]
        lines += [
f"b is {max(self.speedup, 1 / self.speedup):.3f}x {faster} than a"]
        lines += textwrap.wrap(f"changes: {said}", 100, subsequent_indent="  ")
        frame = self.frame.round(1)
        frame.loc["step_ms"] = [self.a.step_ms, self.b.step_ms, self.b.step_ms - self.a.step_ms]
        return "\n".join(lines + [text_table(frame.round(1).reset_index())])


def why_ranked(row: pd.Series, best: pd.Series, comparison: Comparison, priced: int, tied: int) -> str:
    """Why a priced row ranks where it does (``comparison``: the best against it; ``tied``: how many other rows
    share its rank), one paragraph."""
    ties = f", tied with {tied:,} other(s) to the microsecond" if tied else ""
    head = f"{row['label']}: rank {row['rank']} of {priced:,} priced, {row['step_ms']:,.1f} ms{ties}"
    if row.name == best.name:
        return f"{head}: the best"
    frame = comparison.frame
    moved = frame.loc[frame["b_minus_a"].abs().sort_values(ascending=False).index[:3], "b_minus_a"]
    terms = ", ".join(f"{term} {value:+,.1f} ms" for term, value in moved.items())
    changes = comparison.changes()
    said = ", ".join(f"{what} {a} -> {b}" for what, a, b in changes.itertuples(index=False)) or "nothing"
    band = ("within" if row["within_error"] else "outside") + f" the model's error of the best (its " \
           f"{row['model_error']:.1%}: {row['step_low_ms']:,.1f}-{row['step_high_ms']:,.1f} ms)"
    return (f"{head}, {comparison.speedup ** -1:.3f}x the best {best['label']} ({best['step_ms']:,.1f} ms); "
            f"from the best it changes {said}; the terms that move most: {terms}; {band}")


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
