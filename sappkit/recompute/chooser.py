"""The recompute chooser: the fastest recompute option of every body layer that fits every stage.

For a fixed :class:`~sappkit.Partition`, each stage's layers share what the
stage has left once its fixed memory is paid (:mod:`sappkit.recompute.pricing`). Three
ways to choose (SAPP's recompute chooser; docs/design.md "The recompute chooser"):

- **options** (``modes=None``): each layer any option of its kind's front;
- **one mode** (``modes``): every layer the same mode, the fastest that fits;
- **a mode per layer** (``modes`` and ``per_layer=True``).

Per stage, a multiple-choice knapsack over groups of interchangeable layers
(:mod:`sappkit.recompute.knapsack`) minimises the stage's forward + backward time
under its budget, exact at ``bucket_mb``; the layer that ends warm-up weighs
its working set with each option. With a second peak
(``fsdp_holds_grads``) the stage's first layer and the layer that ends
warm-up are enumerated, and each pair of their options leaves the other
layers one budget, the smaller of what both peaks allow; exact at one chunk
per stage, and at two or more it uses the largest share ``(n - 1)/n`` of the
other layers, which fits. With a host link (one chunk per stage), a stage's
first layers may offload (:mod:`sappkit.recompute.offload`). With more than
one chunk a stage fits at every memory event, one knapsack each
(:class:`~sappkit.recompute.events.EventStageSolver`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .._check import check_bool, check_numbers
from ..columns import GRAD_MB, LIMIT_MB, MEMORY_MB, TIME
from ..errors import InputError
from ..layers.units import with_time_unit
from ..limits import MAX_MEMORY_MB, MAX_SWEEP_POINTS
from .choice import RecomputeChoice, build_choice, refused_choice
from .submodules import submodule_note
from .events import EventStageSolver
from .knapsack import budget_buckets, build_front, canonical
from .offload import HostLink, offload_stage
from .pricing import FIXED_TIME, Pricing, price

__all__ = ["choose_recompute", "choose_priced", "sweep_recompute", "HostLink", "RecomputeChoice", "StageSolver",
           "SWEEP_COLUMNS"]

#: Columns of :func:`sweep_recompute`'s frame.
SWEEP_COLUMNS = ("memory_mb", "feasible", "mode", "time", "time_saved", "time_saved_vs_full", "baseline")


def _assign(groups, counts) -> dict[int, str]:
    """Each layer's option: a group's counts to its layers in model order, slower option first."""
    chosen = {}
    for group, count in zip(groups, counts):
        for layer, j in zip(group.layers, canonical(group, count)):
            chosen[layer] = group.options[j]
    return chosen


class StageSolver:
    """One stage's knapsack, built once, answering every device capacity up to ``cap_mb``.

    Parameters
    ----------
    pricing : Pricing
    stage : int
    cap_mb : float, optional
        The largest capacity asked about (default the pricing's).
    """

    def __init__(self, pricing: Pricing, stage: int, *, cap_mb: float | None = None):
        self.bucket = pricing.bucket_mb
        budget, backward_budget = pricing.budgets
        self.fixed = pricing.memory_mb - budget[stage]
        self.fixed_back = pricing.memory_mb - backward_budget[stage]
        cap = pricing.memory_mb if cap_mb is None else cap_mb
        groups = pricing.groups[stage]
        self.two_peaks = pricing.fsdp_holds_grads
        self.ends = [g for g in groups if self.two_peaks and (g.ends_warm_up or g.first)]
        self.middle = [g for g in groups if not (self.two_peaks and (g.ends_warm_up or g.first))]
        self.front = build_front(self.middle, bucket_mb=self.bucket,
                                 cap_mb=max(budget_buckets(cap - self.fixed, self.bucket), -1) * self.bucket)
        if self.two_peaks:
            combos = list(itertools.product(*(range(len(g.options)) for g in self.ends)))
            self.combos = combos
            self.end_weight = np.array([sum(g.weight[j] for g, j in zip(self.ends, c)) for c in combos], float)
            self.end_back = np.array([sum(g.backward_mb[j] for g, j in zip(self.ends, c)) for c in combos], float)
            self.end_time = np.array([sum(g.time[j] for g, j in zip(self.ends, c)) for c in combos], float)
            self.grads = sum(len(g.layers) * pricing.cost(g.kind, g.options[0])[GRAD_MB] for g in self.middle)
            self.n = max((g.in_flight for g in self.middle), default=1)

    def _budgets(self, limits: np.ndarray) -> np.ndarray:
        """Per end-option combination (rows) and limit (columns), the other layers' budget in buckets."""
        warm_up = np.floor((limits - self.fixed) / self.bucket)
        if not self.two_peaks:
            return warm_up[None, :]
        left = warm_up[None, :] - self.end_weight[:, None]
        room = limits[None, :] - self.fixed_back - self.end_back[:, None] - self.grads
        if self.n > 1:
            back = np.floor(room * self.n / ((self.n - 1) * self.bucket))
        else:
            back = np.where(room >= 0, np.inf, -1.0)
        return np.where(room < 0, -1.0, np.minimum(left, back))

    def _times(self, limits: np.ndarray) -> np.ndarray:
        budgets = self._budgets(limits)
        times = self.front.least_times(budgets.ravel()).reshape(budgets.shape)
        return times + (self.end_time[:, None] if self.two_peaks else 0.0)

    def least_times(self, limits_mb) -> np.ndarray:
        """The stage's least time at each capacity (``inf`` where nothing fits)."""
        return self._times(np.asarray(limits_mb, dtype=float)).min(axis=0)

    def choose(self, limit_mb: float) -> dict[int, str] | None:
        """Each layer's option at the least time within ``limit_mb``; None when nothing fits."""
        limits = np.array([float(limit_mb)])
        times = self._times(limits)[:, 0]
        best = int(np.argmin(times))
        if not np.isfinite(times[best]):
            return None
        budget = self._budgets(limits)[best, 0]
        chosen = _assign(self.middle, self.front.counts(budget))
        if self.two_peaks:
            chosen.update({g.layers[0]: g.options[j] for g, j in zip(self.ends, self.combos[best])})
        return chosen


def stage_solver(pricing: Pricing, stage: int) -> StageSolver | EventStageSolver:
    """The stage's solver: one knapsack for one chunk, one per memory event for more."""
    return StageSolver(pricing, stage) if pricing.partition.chunks == 1 else EventStageSolver(pricing, stage)


def _lightest(pricing: Pricing) -> list[str]:
    """Each layer's option keeping the least at the warm-up peak (the faster on a tie)."""
    options = [""] * len(pricing.body)
    for groups in pricing.groups:
        for g in groups:
            j = int(np.lexsort((g.time, g.memory_mb))[0])
            for layer in g.layers:
                options[layer] = g.options[j]
    return options


def _no_fit(pricing: Pricing, failed: Sequence[int], notes) -> RecomputeChoice:
    stages = pricing.evaluate(_lightest(pricing))
    parts = []
    for s in failed:
        need, limit = stages.at[s, MEMORY_MB], stages.at[s, LIMIT_MB]
        grain = "" if need > limit else f" in whole {pricing.bucket_mb:g} MB buckets"
        parts.append(f"stage {s} cannot fit{grain}: at its lightest options it needs {need:,.1f} MB "
                     f"against a limit of {limit:,.1f} MB")
    return refused_choice(pricing, "; ".join(parts), notes=notes, stages=stages)


def _mode_stages(pricing: Pricing) -> list[tuple[str, str, pd.DataFrame]]:
    """Every mode's stage frame with every layer running it (memory does not depend on the capacity)."""
    count = len(pricing.body)
    return [(mode, option, pricing.evaluate([option] * count)) for mode, option in pricing.modes.items()]


def _pick_mode(candidates, limit: float):
    """The fastest ``(mode, option, stages)`` whose every stage fits ``limit`` (the first listed on a tie)."""
    best = None
    for mode, option, stages in candidates:
        if (stages[MEMORY_MB] <= limit).all() and (best is None or stages[TIME].sum() < best[2][TIME].sum()):
            best = (mode, option, stages)
    return best


def _one_mode(pricing: Pricing, notes) -> RecomputeChoice:
    """Every layer one mode: the fastest that fits every stage."""
    candidates = _mode_stages(pricing)
    best = _pick_mode(candidates, pricing.memory_mb)
    if best is None:
        mode, _, stages = min(candidates, key=lambda item: item[2][MEMORY_MB].max())
        stage = int(stages[MEMORY_MB].idxmax())
        return refused_choice(pricing, f"no mode fits every stage: the lightest, {mode!r}, needs "
                                       f"{stages.at[stage, MEMORY_MB]:,.1f} MB on stage {stage} against a limit of "
                                       f"{pricing.memory_mb:,.1f} MB", notes=notes, stages=stages)
    if pricing.whole_only:
        notes = [*notes, submodule_note(pricing.layers, best[0])]
    return build_choice(pricing, [best[1]] * len(pricing.body), mode=best[0], notes=notes)


def _offload_notes(pricing: Pricing, per_layer: bool, link) -> tuple[bool, list[str]]:
    """Whether a host link can be used, and the notes saying why not."""
    if link is None:
        return False, []
    if not isinstance(link, HostLink):
        raise InputError(f"link must be a sappkit.HostLink or None; got {type(link).__name__}")
    if pricing.modes is not None and not per_layer:
        return False, ["a one-mode choice does not offload: the host link was left aside"]
    if pricing.partition.chunks > 1:
        return False, [f"offload is priced at one chunk per stage: the host link was left aside for "
                       f"{pricing.partition.chunks} chunks"]
    if pricing.modes is not None and "off" not in pricing.modes:
        return False, ["offloading layers run mode 'off', which is not among the modes: the host link was "
                       "left aside"]
    return True, []


def choose_priced(pricing: Pricing, *, per_layer: bool = False, link: HostLink | None = None) -> RecomputeChoice:
    """:func:`choose_recompute` on a pricing already made (see there)."""
    check_bool("per_layer", per_layer)
    if per_layer and pricing.modes is None:
        raise InputError("per_layer=True chooses a mode per layer, so it needs modes; pass e.g. "
                         "modes=('off', 'selective', 'full')")
    offload, notes = _offload_notes(pricing, per_layer, link)
    if pricing.modes is not None and not per_layer and (pricing.reason is None or pricing.whole_only):
        return _one_mode(pricing, notes)
    if pricing.reason is not None:
        return refused_choice(pricing, pricing.reason, notes=notes)
    count, p = len(pricing.body), pricing.partition.stages
    options, offloaded, copies, transit = [""] * count, np.zeros(count), np.zeros(count), np.zeros(p)
    failed = []
    for s in range(p):
        chosen = stage_solver(pricing, s).choose(pricing.memory_mb)
        if offload:
            plan = offload_stage(pricing, s, chosen, link)
            chosen = None if plan is None else plan.options
            if plan is not None:
                for layer, moved in plan.offloaded_mb.items():
                    offloaded[layer], copies[layer] = moved, plan.copy_time[layer]
                transit[s] = plan.transit_mb
        if chosen is None:
            failed.append(s)
            continue
        for layer, option in chosen.items():
            options[layer] = option
    if failed:
        return _no_fit(pricing, failed, notes)
    return build_choice(pricing, options, offloaded_mb=offloaded, copy_time=copies, transit_mb=transit, notes=notes)


def choose_recompute(layers, partition, *, memory_mb: float, modes=None, per_layer: bool = False,
                     link: HostLink | None = None, fsdp_holds_grads: bool | None = None,
                     bucket_mb: float = 1.0) -> RecomputeChoice:
    """The fastest recompute option of every body layer that fits every stage.

    Parameters
    ----------
    layers : LayerTable or DataFrame
    partition : Partition
    memory_mb : float
        Device capacity in MB.
    modes : tuple of str or mapping, optional
        Choose among runtime modes (default names ``off``, ``selective``,
        ``full`` or a mapping mode -> option) instead of each kind's front.
    per_layer : bool
        With ``modes``: a mode per layer rather than one for all, among
        exactly the modes given. SAPP's chooser always adds ``off`` and
        ``full``; sappkit does not, because ``modes`` states what the runtime
        runs (a mapping may name another runtime's modes, and a kind may have
        no ``none`` or ``full`` row): pass them to offer them.
    link : HostLink, optional
        Let each stage's first layers offload (one chunk per stage; with
        ``per_layer``, only when ``off`` is among the modes). Otherwise a
        note says why it was left aside.
    fsdp_holds_grads : bool, optional
        FSDP holds gradient outputs until the backward ends: stages fit at
        the second peak too. Default: where FSDP holds gradients (a body
        ``grad_mb`` above 0) over several micro-batches (``m > 1``), as
        SAPP charges it; True or False overrides.
    bucket_mb : float
        Knapsack granularity: memory rounded up, budgets down.

    Returns
    -------
    RecomputeChoice
        With ``reason`` set (and no ranges) when no choice is made: an
        unsupported schedule, a multimodal model, or a stage that cannot fit
        even at its lightest options.

    Examples
    --------
    >>> from sappkit.layers.table import LayerTable
    >>> from sappkit.recompute.partition import Partition
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=b,
    ...              activation_mb=a) for o, a, b in (("none", 40, 2), ("full", 5, 3))]
    >>> cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    >>> part = Partition(stages=2, micro_batches=4, cells=cells, configured="full")
    >>> choice = choose_recompute(LayerTable(pd.DataFrame(rows)), part, memory_mb=320)
    >>> choice.ranges[["first", "count", "option"]].values.tolist()
    [[0, 2, 'full'], [2, 2, 'none']]
    >>> choice.stages["memory_mb"].tolist(), choice.time_saved
    ([260.0, 320.0], 2.0)
    """
    pricing = price(layers, partition, memory_mb=memory_mb, modes=modes, fsdp_holds_grads=fsdp_holds_grads,
                    bucket_mb=bucket_mb)
    return choose_priced(pricing, per_layer=per_layer, link=link)


def _full_time(pricing: Pricing) -> float:
    """Every body layer fully recomputed (``full``, else its kind's lightest option): the stage times summed."""
    prices = pricing.prices
    total = float(pricing.stages[FIXED_TIME].sum())
    for kind, count in pricing.body["kind"].value_counts().items():
        options = prices.options[kind]
        option = "full" if "full" in options else min(options, key=lambda o: prices.costs[kind, o]["activation_mb"])
        total += count * pricing.cost(kind, option)[TIME]
    return total


def sweep_recompute(layers, partition, *, memory_mb: Sequence[float], modes=None, per_layer: bool = False,
                    link: HostLink | None = None, fsdp_holds_grads: bool | None = None,
                    bucket_mb: float = 1.0) -> pd.DataFrame:
    """Time saved against the device capacity: the time-saved curve.

    Prices once; without a host link every stage's knapsack is built once
    and answers every capacity (the same answers :func:`choose_recompute`
    gives one by one).

    Returns
    -------
    DataFrame
        One row per capacity, in the order given: ``memory_mb``,
        ``feasible``, ``mode`` (one-mode choices), ``time`` (the stage
        times, forward + backward per micro-batch, summed over the stages),
        ``time_saved`` (against the baseline :func:`choose_recompute` states
        at that capacity: the configured options where they fit, else the
        fastest single option that fits, else every layer at its most
        recomputed option), ``time_saved_vs_full`` (against every layer fully
        recomputed) and ``baseline`` (``"configured"``, ``"fastest single"``
        or ``"most recomputed"``); NaN times where nothing
        fits. Times are sums over the stages, not step times, in the layer
        table's unit (the frame's ``attrs["time_unit"]``).

    Examples
    --------
    The bundled Llama-2-70B-class model, five layers a stage, all fully
    recomputed as configured; one mode for all layers at each capacity:

    >>> import sappkit
    >>> from sappkit.demo import bundled
    >>> layers = sappkit.read_layers_json(bundled("llama2_70b.json"))
    >>> part = sappkit.Partition.from_offsets(layers, stages=16, micro_batches=32, recompute=True)
    >>> curve = sweep_recompute(layers, part, memory_mb=[15000, 30000, 80000], modes=("off", "selective", "full"))
    >>> curve[["memory_mb", "mode", "time_saved"]].round(1).values.tolist()
    [[15000.0, 'full', 0.0], [30000.0, 'selective', 584.1], [80000.0, 'off', 629.9]]
    """
    limits = np.array(check_numbers("memory_mb", memory_mb, maximum_count=MAX_SWEEP_POINTS, maximum=MAX_MEMORY_MB))
    pricing = price(layers, partition, memory_mb=float(limits.max()), modes=modes,
                    fsdp_holds_grads=fsdp_holds_grads, bucket_mb=bucket_mb)
    offload, _ = _offload_notes(pricing, per_layer, link)
    frame = pd.DataFrame({"memory_mb": limits, "feasible": False, "mode": None, "time": np.nan, "baseline": None})
    if pricing.reason is None or (pricing.whole_only and pricing.modes is not None and not per_layer):
        _sweep_times(pricing, frame, limits, per_layer, link if offload else None)
        at = [pricing.with_memory(limit) for limit in limits]
        frame["baseline"] = [priced.baseline.name for priced in at]
        frame["time_saved"] = [priced.baseline_time.sum() for priced in at] - frame["time"]
        frame["time_saved_vs_full"] = _full_time(pricing) - frame["time"]
    else:
        frame["time_saved"] = frame["time_saved_vs_full"] = np.nan
    return with_time_unit(frame[list(SWEEP_COLUMNS)], pricing.layers.time_unit)


def _sweep_times(pricing: Pricing, frame: pd.DataFrame, limits: np.ndarray, per_layer: bool, link) -> None:
    """Fill ``feasible``, ``mode`` and ``time`` of the sweep frame."""
    if per_layer and pricing.modes is None:
        raise InputError("per_layer=True chooses a mode per layer, so it needs modes; pass e.g. "
                         "modes=('off', 'selective', 'full')")
    if pricing.modes is not None and not per_layer:
        candidates = _mode_stages(pricing)
        for row, limit in enumerate(limits):
            best = _pick_mode(candidates, limit)
            if best is not None:
                frame.loc[row, ["feasible", "mode", "time"]] = [True, best[0], best[2][TIME].sum()]
        return
    if link is not None:
        for row, limit in enumerate(limits):
            choice = choose_priced(pricing.with_memory(limit), per_layer=per_layer, link=link)
            if choice.chosen:
                frame.loc[row, ["feasible", "time"]] = [True, choice.stages[TIME].sum()]
        return
    total = sum(stage_solver(pricing, s).least_times(limits) for s in range(pricing.partition.stages))
    total = total + pricing.stages[FIXED_TIME].sum()  # the head and tail, which no choice changes
    frame["feasible"] = np.isfinite(total)
    frame["time"] = np.where(np.isfinite(total), total, np.nan)
