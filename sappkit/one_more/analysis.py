"""One more fully recomputed layer: the distinct plans a per-layer choice reaches, and what each buys.

Start from ``current``, a choice of a runtime mode per body layer (SAPP's recompute
chooser's ``RecomputeAnalysis``; docs/design.md "The recompute chooser"). The layers of
a stage that are interchangeable form the chooser's groups (same kind and
in-flight count; the layer that ends warm-up, and with a second FSDP peak
the stage's first layer, each stand apart: :mod:`sappkit.recompute.pricing`). For each
group and each mode its layers start in (``full`` aside), one layer of that
mode is turned up to ``full`` and the group's new mode counts go back to its
layers in the chooser's canonical order (slower mode first, model order:
:func:`sappkit.recompute.knapsack.canonical`), so turning up any layer of the group
gives one plan. A plan is kept when every stage still fits the device, at
the exact memory (no buckets), and it frees memory on its stage: the layer
that ends warm-up, turned up to ``full``, rebuilds the plain layer's
activations for its backward, which can outweigh what it keeps less with
few micro-batches in flight; such a plan holds more and costs time, so it
is left out and counted. Two plans are one when their stages hold the
same (kind, mode) counts and their per-stage peaks and time saved agree
within rounding: the first is kept, in order of stage, group and mode.

Everything is priced once (:func:`sappkit.recompute.pricing.price`, as
:func:`sappkit.choose_recompute` prices); each plan is then a matter of
sums over the stored prices, all plans evaluated at once (with more than one
chunk, plan by plan at the peak over the stage's memory events, as the
chooser prices it). ``current`` is read
and checked by :func:`sappkit.one_more.current.layer_modes`.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ..columns import (
    ACTIVATION_MB, CHUNK, CONST_MB, KIND, LIMIT_MB, MEMORY_MB, MEMORY_ONCE_MB, OVERHEAD_MB, PARAM_MB, STAGE, TIME,
    WORKING_MB,
)
from ..errors import InputError
from ..layers.units import with_time_unit
from ..recompute.choice import RecomputeChoice
from ..recompute.knapsack import Group, canonical
from ..recompute.pricing import BACKWARD_MB, BASELINE_MEMORY_MB, FIXED_TIME, TIME_SAVED, Pricing, price
from .current import check_dimensions, dimension_pairs, layer_modes
from .result import (
    ALTERNATIVE, ALTERNATIVE_COLUMNS, LAYER, AlternativePlan, Alternatives, PlanList, build_plan, layer_ranges,
    no_alternatives, stage_columns,
)

__all__ = ["RecomputeAnalysis", "alternatives"]

FULL = "full"
# Peaks and time saved within this share (or this many MB / time units) of each other are equal: the same
# prices summed in another order differ in their last bits.
_ROUNDING = 1e-9
_CHOOSE_OPTIONS = ("fsdp_holds_grads", "bucket_mb", "per_layer", "link")
_BACKWARD_FIXED_MB = "backward_fixed_mb"
#: Memory within this of the limit fits: sums of one plan's terms in another order differ in their last bits.
_ROUNDING_MB = 1e-9


class RecomputeAnalysis:
    """The plans one more fully recomputed layer reaches at one fixed strategy, priced once.

    Parameters
    ----------
    layers : LayerTable or DataFrame
    partition : Partition
    memory_mb : float
        Device capacity (MB): every plan must fit every stage within it.
    modes : tuple of str or mapping
        The runtime's modes (default names ``off``, ``selective``, ``full``,
        or a mapping mode -> option); ``full`` is the mode layers turn up to.
    dimensions : tuple of (str, int) or mapping, optional
        The strategy's parallel degrees (e.g. ``{"dp": 8, "tp": 4}``); every
        plan reports them, and a ``current`` priced at others is refused.
    **choose_options
        What :func:`sappkit.choose_recompute` takes besides: ``fsdp_holds_grads``
        and ``bucket_mb`` price as there; ``per_layer`` may only be True and
        ``link`` only None (the analysis neither makes one-mode plans nor
        offloads).

    Attributes
    ----------
    pricing : Pricing
        The prices every plan is evaluated with.
    dimensions : tuple of (str, int)
    modes : tuple of str
    reason : str or None
        Why there never are alternatives here (a multimodal model, an
        unsupported schedule, no ``full`` among the modes), else None.

    Examples
    --------
    >>> from sappkit.layers.table import LayerTable
    >>> from sappkit.recompute.partition import Partition
    >>> from sappkit.recompute.chooser import choose_recompute
    >>> rows = [dict(kind="b", role="body", count=6, param_mb=100, option=o, forward_time=1, backward_time=t,
    ...              activation_mb=a) for o, a, t in (("none", 40, 2), ("selective", 15, 2.2), ("full", 5, 3))]
    >>> cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 3})
    >>> part = Partition(stages=2, micro_batches=4, cells=cells)
    >>> modes = ("off", "selective", "full")
    >>> analysis = RecomputeAnalysis(LayerTable(pd.DataFrame(rows)), part, memory_mb=520, modes=modes)
    >>> current = choose_recompute(analysis.pricing.layers, part, memory_mb=520, modes=modes, per_layer=True)
    >>> current.layer_options["mode"].tolist()
    ['off', 'off', 'selective', 'off', 'off', 'off']
    >>> for plan in analysis.alternatives(current):
    ...     print(plan.layer_options["mode"].tolist())
    ['full', 'off', 'selective', 'off', 'off', 'off']
    ['off', 'off', 'selective', 'full', 'off', 'off']

    Layer 2 ends stage 0's warm-up: at ``full`` it would rebuild the plain
    layer (40 MB) for its backward, more than the 2 x 10 MB it keeps less, so
    that plan is left out:

    >>> alternatives(current, analysis=analysis).left_out
    1
    """

    def __init__(self, layers, partition, *, memory_mb: float, modes, dimensions=(), **choose_options):
        pricing_options = _pricing_options(choose_options)
        if modes is None:
            raise InputError("modes is None; the analysis turns layers up to the mode 'full' of a runtime's modes: "
                             "pass modes=('off', 'selective', 'full') or a mapping mode -> option")
        self._setup(price(layers, partition, memory_mb=memory_mb, modes=modes, **pricing_options), dimensions)

    @classmethod
    def from_pricing(cls, pricing: Pricing, *, dimensions=()) -> RecomputeAnalysis:
        """An analysis on prices already made (``RecomputeChoice.pricing``): nothing is priced again."""
        if not isinstance(pricing, Pricing):
            raise InputError(f"pricing must be a sappkit.recompute.pricing.Pricing; got {type(pricing).__name__}")
        if pricing.modes is None:
            raise InputError("the pricing has no modes (it offers each kind's front); the analysis turns layers "
                             "up to the mode 'full': price with modes=('off', 'selective', 'full')")
        analysis = cls.__new__(cls)
        analysis._setup(pricing, dimensions)
        return analysis

    def _setup(self, pricing: Pricing, dimensions) -> None:
        self.pricing = pricing
        self.dimensions = dimension_pairs(dimensions)
        self.modes = tuple(pricing.modes)
        self.reason = pricing.reason
        if self.reason is None and FULL not in self.modes:
            self.reason = (f"'full' is not among the modes ({', '.join(map(repr, self.modes))}), so no layer "
                           "can be turned up to it")
        if self.reason is not None:
            return
        self._full = self.modes.index(FULL)
        self._groups = [g for groups in pricing.groups for g in groups]
        self._knapsack_groups = [Group(len(g.layers), g.memory_mb, g.time) for g in self._groups]
        self._prices = _layer_prices(pricing)

    def alternatives(self, current) -> list[AlternativePlan]:
        """The distinct plans that fully recompute one more layer of ``current`` and still fit.

        Parameters
        ----------
        current : RecomputeChoice or DataFrame
            A choice of a mode per layer (``choose_recompute(..., per_layer=True)``
            or a plan this method returned), or its ranges: ``first``,
            ``count``, ``kind``, ``mode`` (optional ``option``,
            ``offloaded_mb``).

        Returns
        -------
        list of AlternativePlan
            Empty for a multimodal model, an unsupported schedule, modes
            without ``full``, a one-mode ``current`` (the runtime runs every
            layer one way), or when no group can be turned up and fit.

        Raises
        ------
        InputError
            ``current`` priced at other dimensions; a range with count <= 0
            or first < 0; overlapping ranges; a body layer missing or beyond
            the partition; a kind that is not the partition's; a mode not
            priced; a plan that offloads.
        """
        return list(self._explore(current).plans)

    def _explore(self, current) -> Alternatives:
        """The alternatives from ``current`` as frames and plans (:func:`alternatives`), times in the table's unit."""
        found = self._search(current)
        for frame in (found.frame, found.stages):
            with_time_unit(frame, self.pricing.layers.time_unit)
        return found

    def _search(self, current) -> Alternatives:
        check_dimensions(current, self.dimensions)
        if self.reason is not None:
            return no_alternatives(current, self.reason)
        if isinstance(current, RecomputeChoice) and current.mode is not None:
            return no_alternatives(current, f"current runs mode {current.mode!r} for every layer (a one-mode "
                                            "choice): its runtime cannot turn up one layer")
        rows, starts = self._candidates(layer_modes(current, pricing=self.pricing))
        values = self._evaluate(rows)
        if not isinstance(current, RecomputeChoice):
            current = self._plan(rows, values, 0)
        limit, memory = self.pricing.memory_mb, values[MEMORY_MB]
        over = np.flatnonzero(memory[0] > limit + _ROUNDING_MB)
        if over.size:
            return no_alternatives(current, f"current does not fit: stage {over[0]} needs "
                                            f"{memory[0, over[0]]:,.1f} MB against a limit of {limit:,.1f} MB")
        kept, left_out = self._distinct(rows, values, starts)
        if not kept:
            reason = ("every layer already runs 'full'" if not starts else "no plan with one more layer at 'full' "
                      "fits" if not left_out else f"no plan with one more layer at 'full' frees memory and fits "
                      f"({left_out} fit but hold as much or more on their stage)")
            return no_alternatives(current, reason)
        return self._found(current, rows, values, [(row, *starts[row - 1]) for row in kept], left_out)

    def _found(self, current, rows: np.ndarray, values: dict, kept: list[tuple[int, int, int]],
               left_out: int) -> Alternatives:
        """The frames of the ``kept`` plans, each ``(row, group, starting mode)``, and their plans."""
        memory, saved = values[MEMORY_MB], values[TIME_SAVED]
        records = []
        for number, (row, index, start) in enumerate(kept):
            group = self._groups[index]
            s = group.stage
            records.append((number, s, group.kind, self.modes[start],
                            layer_ranges(np.flatnonzero(rows[row] != rows[0])), memory[row].max(),
                            memory[0, s] - memory[row, s], saved[0, s] - saved[row, s], memory[row, s],
                            group.in_flight, group.ends_warm_up, group.first))
        numbers = [row for row, _, _ in kept]
        long = {ALTERNATIVE: np.repeat(np.arange(len(kept)), self.pricing.partition.stages)}
        long.update((column, array.ravel())
                    for column, array in stage_columns(self._prices["fixed"], values, numbers).items())
        return Alternatives(pd.DataFrame(records, columns=list(ALTERNATIVE_COLUMNS)), pd.DataFrame(long),
                            PlanList(lambda number: self._plan(rows, values, numbers[number]), len(kept)), current,
                            left_out=left_out)

    def _candidates(self, modes: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """``current`` (row 0), then per group and starting mode the modes after one layer of the group is
        turned up and the group's counts reassigned; and each of those rows' (group, starting mode)."""
        rows, starts = [modes], []
        for index, (group, items) in enumerate(zip(self._groups, self._knapsack_groups)):
            layers = np.asarray(group.layers)
            now = modes[layers]
            for start in dict.fromkeys(now.tolist()):
                if start == self._full:
                    continue
                counts = np.bincount(now, minlength=len(self.modes))
                counts[start] -= 1
                counts[self._full] += 1
                row = modes.copy()
                row[layers] = canonical(items, counts)
                rows.append(row)
                starts.append((index, start))
        return np.array(rows), starts

    def _evaluate(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Every plan's (row's) stage columns at once: each ``[plan, stage]``; with more than one chunk plan by
        plan, the warm-up peak being the memory events' (:mod:`sappkit.recompute.events`)."""
        if self.pricing.partition.chunks > 1:
            frames = [self.pricing.evaluate(list(self._prices["options"][row])) for row in rows]
            values = {column: np.array([frame[column].to_numpy() for frame in frames])
                      for column in (ACTIVATION_MB, OVERHEAD_MB, WORKING_MB, MEMORY_MB, BACKWARD_MB, TIME)}
            return {**values, TIME_SAVED: self._prices["baseline"] - values[TIME]}
        prices = self._prices
        fixed, onehot = prices["fixed"], prices["onehot"]
        layers = np.arange(rows.shape[1])
        activation = fixed[ACTIVATION_MB] + prices[ACTIVATION_MB][layers, rows] @ onehot
        working = fixed[WORKING_MB] + prices[WORKING_MB][layers, rows] @ onehot
        warm_up = fixed[PARAM_MB] + activation + fixed[OVERHEAD_MB] + working + fixed[CONST_MB]
        backward = fixed[_BACKWARD_FIXED_MB] + prices[BACKWARD_MB][layers, rows] @ onehot
        time = fixed[FIXED_TIME] + prices[TIME][layers, rows] @ onehot
        return {ACTIVATION_MB: activation, WORKING_MB: working, MEMORY_MB: np.fmax(warm_up, backward),
                BACKWARD_MB: backward, TIME: time, TIME_SAVED: prices["baseline"] - time}

    def _distinct(self, rows: np.ndarray, values: dict, starts: list[tuple[int, int]]) -> tuple[list[int], int]:
        """The rows (1-based: row 0 is current) that fit and free memory on their stage, each the first of its kind
        of plan; and how many distinct plans fit but free none."""
        memory = values[MEMORY_MB]
        fits = (memory <= self.pricing.memory_mb + _ROUNDING_MB).all(axis=1)
        kinds = self.pricing.body[KIND].to_numpy()
        seen: dict[tuple, list[int]] = {}
        kept, left_out = [], 0
        for row, (index, _) in enumerate(starts, start=1):
            if not fits[row]:
                continue
            stage = self._groups[index].stage
            on_stage = self._prices[STAGE] == stage
            key = (stage, frozenset(Counter(zip(kinds[on_stage], rows[row, on_stage].tolist())).items()))
            if any(_same(values, row, other) for other in seen.get(key, ())):
                continue
            seen.setdefault(key, []).append(row)
            if memory[0, stage] - memory[row, stage] > _ROUNDING_MB:
                kept.append(row)
            else:
                left_out += 1
        return kept, left_out

    def _plan(self, rows: np.ndarray, values: dict, row: int) -> AlternativePlan:
        """The plan of row ``row``."""
        stages = {column: array[0] for column, array in stage_columns(self._prices["fixed"], values, [row]).items()}
        return build_plan(self.pricing, self._prices, rows[row], stages, self.dimensions)


def alternatives(choice, *, analysis: RecomputeAnalysis | None = None, dimensions=()) -> Alternatives:
    """What one more fully recomputed layer buys from ``choice``: the frames, and a plan per row.

    Parameters
    ----------
    choice : RecomputeChoice or DataFrame
        A choice of a mode per layer (``choose_recompute(..., modes=...,
        per_layer=True)`` or a plan from an earlier step), or its ranges
        frame (then ``analysis`` is needed).
    analysis : RecomputeAnalysis, optional
        The analysis to reuse (walking a path of plans prices once). Default:
        one on ``choice.pricing``, the prices the chooser made (nothing is
        priced again).
    dimensions : tuple of (str, int) or mapping, optional
        The strategy's parallel degrees, without ``analysis``.

    Returns
    -------
    Alternatives
        ``frame`` (one row per plan), ``stages`` (per-stage memory per plan,
        long), ``plans``, ``current`` and ``reason`` (why none, when none);
        the frames carry the layer table's time unit in ``attrs["time_unit"]``.

    Examples
    --------
    >>> from sappkit import Partition, choose_recompute, even_assignment, read_layers_json
    >>> llama = read_layers_json("data/llama2_70b.json")
    >>> partition = Partition.from_assignment(even_assignment(llama, stages=8), stages=8, micro_batches=16)
    >>> choice = choose_recompute(llama, partition, memory_mb=60_000, modes=("off", "selective", "full"),
    ...                           per_layer=True)
    >>> found = alternatives(choice)
    >>> len(found.frame), found.binding_stage
    (12, 2)
    >>> found.frame.query("stage == 2")[["from_mode", "memory_mb", "memory_freed_mb", "time_cost"]].round(1)
      from_mode  memory_mb  memory_freed_mb  time_cost
    6       off    58258.5           4644.0        7.9
    """
    if analysis is None:
        if not isinstance(choice, RecomputeChoice):
            raise InputError(f"choice is a {type(choice).__name__}, which carries no prices; pass "
                             "analysis=RecomputeAnalysis(...) to price its layers")
        analysis = RecomputeAnalysis.from_pricing(choice.pricing, dimensions=dimensions)
    elif not isinstance(analysis, RecomputeAnalysis):
        raise InputError(f"analysis must be a sappkit.RecomputeAnalysis; got {type(analysis).__name__}")
    return analysis._explore(choice)


def _pricing_options(options: dict) -> dict:
    """``choose_recompute``'s options as the analysis prices them (``fsdp_holds_grads``, ``bucket_mb``)."""
    unknown = sorted(set(options) - set(_CHOOSE_OPTIONS))
    if unknown:
        raise InputError(f"RecomputeAnalysis got unknown option(s) {', '.join(map(repr, unknown))}; it takes "
                         f"choose_recompute's {', '.join(_CHOOSE_OPTIONS)}")
    if options.get("per_layer", True) is not True:
        raise InputError(f"per_layer must be True for the analysis; got {options['per_layer']!r} (it extends a "
                         "choice of a mode per layer)")
    if options.get("link") is not None:
        raise InputError(f"link must be None for the analysis; got {options['link']!r} (it prices plans without "
                         "offload, and refuses a plan that offloads)")
    return {key: value for key, value in options.items() if key in ("fsdp_holds_grads", "bucket_mb")}


def _layer_prices(pricing: Pricing) -> dict[str, np.ndarray]:
    """Per body layer and mode what it adds to each stage column, and the arrays plans are built from."""
    body, modes = pricing.body, pricing.modes
    count = len(body)
    shape = (count, len(modes))
    prices = {column: np.zeros(shape) for column in (ACTIVATION_MB, WORKING_MB, BACKWARD_MB, TIME)}
    for groups in pricing.groups:
        for g in groups:
            layers = list(g.layers)
            kept = np.array([pricing.cost(g.kind, option)[ACTIVATION_MB] * g.in_flight
                             + pricing.cost(g.kind, option)[MEMORY_ONCE_MB] for option in g.options])
            prices[ACTIVATION_MB][layers] = kept
            prices[WORKING_MB][layers] = g.memory_mb - kept
            prices[BACKWARD_MB][layers] = g.backward_mb
            prices[TIME][layers] = g.time
    stage = body[STAGE].to_numpy()
    kinds = body[KIND].to_numpy()
    baseline = pricing.baseline_time
    fixed = {column: pricing.stages[column].to_numpy(float) for column in (
        PARAM_MB, ACTIVATION_MB, OVERHEAD_MB, WORKING_MB, CONST_MB, LIMIT_MB, _BACKWARD_FIXED_MB, FIXED_TIME)}
    fixed[BASELINE_MEMORY_MB] = pricing.baseline_memory
    return {**prices, "onehot": np.eye(pricing.partition.stages)[stage], STAGE: stage, KIND: kinds,
            "kind_code": np.unique(kinds, return_inverse=True)[1], LAYER: body[LAYER].to_numpy(),
            CHUNK: body[CHUNK].to_numpy(), "baseline": baseline, "fixed": fixed,
            "modes": np.asarray(list(modes), dtype=object), "options": np.asarray(list(modes.values()), dtype=object)}


def _same(values: dict, row: int, other: int) -> bool:
    """Whether two plans have equal per-stage peaks and time saved, within rounding."""
    return all(np.allclose(values[column][row], values[column][other], rtol=_ROUNDING, atol=_ROUNDING)
               for column in (MEMORY_MB, TIME_SAVED))
