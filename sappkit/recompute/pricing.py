"""Pricing a partition for the recompute chooser: what each body layer's options cost, stage by stage.

:func:`price` does it once for a layer table, a :class:`~sappkit.Partition`
and the options on offer; :func:`~sappkit.choose_recompute`,
:func:`~sappkit.sweep_recompute` and the one-more-recomputed-layer analysis
all work from the :class:`Pricing` it returns.

The memory model (docs/design.md "One memory model"; SAPP's recompute chooser and
memory estimator). A body
layer ``l`` with ``n_l`` micro-batches in flight running option ``o`` keeps
``kept(o, n) = activation_mb(o) n + memory_once_mb(o)``. Per stage ``s``:

- **warm-up peak** ``M1 = F1 + sum_l kept(o_l, n_l) + W(o_e)``, where ``e``
  is the layer that ends the stage's warm-up (the last body layer of the
  stage's last chunk; none when that cell ends with the tail or is empty)
  and ``W(o) = kept(run(o), 1) + working_mb(o)``: what it keeps at one
  micro-batch, ``run(o)`` being the kind's plain option (``none``) when
  ``o`` is ``full``, plus what its backward holds beyond.
- **second peak** (``fsdp_holds_grads``, as a later micro-batch's backward
  ends) ``M2 = F2 + sum_l [kept(o_l, n_l) (n_l - 1) / n_l + grad_mb(o_l)] +
  W1(o_f)``, ``f`` the stage's first body layer (of the main module, the
  tail's or the last, where a vision tower shares the stage) and ``W1`` as
  ``W`` with ``first_working_mb``. By default charged where FSDP holds
  gradients (a body ``grad_mb`` above 0) and they accumulate over several
  micro-batches (``m > 1``), as SAPP's chooser charges it
  (:func:`~sappkit.recompute.layer_prices.holds_grads`); ``fsdp_holds_grads=True`` / ``False`` overrides.
- fixed parts ``F1`` = body and head/tail parameters + head/tail
  activations at their cells' in-flight counts + the tail's working set
  (kept at one micro-batch + ``working_mb``) on the stage it ends +
  ``const_mb``; ``F2`` = parameters + head/tail activations times their
  share ``(n - 1)/n`` + head/tail ``grad_mb`` + overhead + ``const_mb``.
- **more than one chunk**: the warm-up peak ``M1`` is the peak over the
  stage's memory events (:mod:`sappkit.recompute.events`), as the balancer
  and the simulator charge it: each event holds each cell's activation at
  its own count and the working set of the last layer of the cell whose
  backward runs (the layers flagged ``ends_warm_up``, one per such cell);
  reported as activation × in-flight, ``overhead_mb`` (the rest of the
  peak) and the working set held then.
- **interleaved overhead** in ``F2`` (v > 1, SAPP's memory estimator's
  ``vpp_1f1b_steady_overhead``): with ``d_c`` the per-micro-batch
  activation of cell ``(c, s)`` under the *configured* options (head and
  tail included where they sit) and ``r = m - p``: the largest of ``(r -
  s) |d_a - d_b|`` over the pairs ``(v-1-i, i+1)`` and ``(v-1-i, i)`` and of
  ``s |d_a - d_b|`` over ``(v-2-i, i)`` (less-memory: ``(r - s)`` over
  ``(v-1-i, i)``, ``s`` over ``(v-2-i, i)``), and 0; held fixed whatever
  the choice.

The stage's memory is the higher of the two peaks.

**Time** per stage is sappkit's one stage time (docs/design.md "Time and the
objectives"): the forward + backward (recompute included) of one
micro-batch through every layer the stage holds, head and tail included, over
its chunks, as a balancer plan's and the simulator's ``time``. **Time saved**
is measured against a stated baseline that fits (:attr:`Pricing.baseline`,
:mod:`sappkit.recompute.baseline`): per stage the baseline's time less the
choice's (the head and tail cancel), a sum over the stages and not a step
time. Beside it, each stage's memory under the baseline
(``baseline_memory_mb``), so a choice that moves layers says what that does.

A stage's layers form groups of interchangeable layers
(:mod:`sappkit.recompute.groups`) with per-option memory at both peaks and
time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from .._check import check_number
from ..columns import (
    ACTIVATION_MB, CONST_MB, FIRST_WORKING_MB, GRAD_MB, IN_FLIGHT, KIND, LIMIT_MB, MEMORY_MB, MEMORY_ONCE_MB,
    OVERHEAD_MB, PARAM_MB, STAGE, TIME, WORKING_MB,
)
from ..errors import InputError
from ..limits import MAX_BUCKETS, MAX_MEMORY_MB
from ..layers.table import LayerTable, as_layer_table
from .events import event_peaks
from .baseline import Baseline, baseline_of
from .groups import ENDS_WARM_UP, FIRST, GROUP, LayerGroup, ends_warm_up, first_layers, layer_groups
from .layer_prices import LayerPrices, holds_grads, layer_prices, resolve_modes
from .partition import CONFIGURED, Partition
from .pricing_fixed import BACKWARD_BUDGET_MB, BACKWARD_FIXED_MB, BUDGET_MB, FIXED_MB, FIXED_TIME, fixed_memory

__all__ = ["Baseline", "Pricing", "price", "SUPPORTED_SCHEDULES",
           "BACKWARD_MB", "TRANSIT_MB", "TIME_SAVED", "BASELINE_MEMORY_MB", "FIXED_MB", "FIXED_TIME", "BUDGET_MB",
           "BACKWARD_BUDGET_MB"]

#: Schedules whose in-flight counts and working set the chooser prices (as SAPP's recompute chooser does).
SUPPORTED_SCHEDULES = ("1f1b", "interleaved")
BACKWARD_MB = "backward_mb"
TRANSIT_MB = "transit_mb"
TIME_SAVED = "time_saved"
BASELINE_MEMORY_MB = "baseline_memory_mb"


@dataclass(frozen=True, eq=False)
class Pricing:
    """A partition priced for the chooser (build it with :func:`price`).

    Attributes
    ----------
    layers : LayerTable
    partition : Partition
    memory_mb, bucket_mb : float
        Device capacity and knapsack granularity, in MB.
    fsdp_holds_grads : bool
        Stages have the second peak (resolved: :func:`holds_grads`).
    modes : dict or None
        Mode -> option, when the choice is among modes.
    offered : dict
        Kind -> the options its layers may run (its front, fastest first, or
        the modes' options in mode order).
    plain : dict
        Kind -> its plain option (``none``, else the one keeping the most).
    body : DataFrame
        One row per body layer: ``layer``, ``chunk``, ``stage``, ``kind``,
        ``in_flight``, ``configured`` (resolved), ``ends_warm_up``, ``first``
        and ``group`` (index into the stage's :attr:`groups`).
    stages : DataFrame
        Per stage the fixed parts: ``stage``, ``param_mb``, ``activation_mb``,
        ``overhead_mb``, ``working_mb``, ``const_mb``, ``fixed_mb`` (``F1``),
        ``backward_fixed_mb`` (``F2``, NaN without a second peak),
        ``limit_mb``, ``budget_mb`` (``limit - F1``), ``backward_budget_mb``,
        ``fixed_time`` (the head's and tail's forward + backward there).
    groups : tuple of tuple of LayerGroup
        Per stage, its groups in order of their first layer.
    reason : str or None
        Why no choice of each layer's option can be made: an unsupported
        schedule (then ``body``, ``stages`` and ``groups`` are empty) or a
        multimodal model, which is priced whole for a one-mode choice
        (:attr:`whole_only`).
    """

    layers: LayerTable
    partition: Partition
    memory_mb: float
    bucket_mb: float
    fsdp_holds_grads: bool
    modes: dict[str, str] | None
    offered: dict[str, tuple[str, ...]]
    plain: dict[str, str]
    body: pd.DataFrame
    stages: pd.DataFrame
    groups: tuple[tuple[LayerGroup, ...], ...]
    reason: str | None = None
    prices: LayerPrices | None = field(default=None, repr=False)

    @property
    def whole_only(self) -> bool:
        """A multimodal model priced whole: a one-mode choice only, since per-layer budgets would be built from
        one submodule's layers."""
        return self.reason is not None and not self.body.empty

    @cached_property
    def baseline(self) -> Baseline:
        """What time saved is measured against at this capacity (module docstring; :func:`baseline_of`)."""
        return baseline_of(self)

    @cached_property
    def baseline_time(self) -> np.ndarray:
        """Per stage, the stage time (forward + backward per micro-batch, head and tail included) under
        :attr:`baseline`."""
        return self._baseline_values[TIME].to_numpy()

    @cached_property
    def baseline_memory(self) -> np.ndarray:
        """Per stage, the memory (the higher peak) under :attr:`baseline`."""
        return self._baseline_values[MEMORY_MB].to_numpy()

    @cached_property
    def _baseline_values(self) -> pd.DataFrame:
        return self._stage_values(self.baseline.options)

    @property
    def most_recomputed(self) -> dict[str, str]:
        """Kind -> its most recomputed option on offer: the least activation memory (the slower on a tie)."""
        return {kind: min(options, key=lambda o: (self.cost(kind, o)[ACTIVATION_MB], -self.cost(kind, o)[TIME]))
                for kind, options in self.offered.items()}

    @cached_property
    def budgets(self) -> tuple[np.ndarray, np.ndarray]:
        """Per stage ``limit - F1`` and ``limit - F2`` as arrays (NaN without a second peak)."""
        return self.stages[BUDGET_MB].to_numpy(float), self.stages[BACKWARD_BUDGET_MB].to_numpy(float)

    def with_memory(self, memory_mb: float) -> Pricing:
        """The same pricing at another device capacity (cheap: only the budgets change)."""
        memory_mb = _check_memory(memory_mb, self.bucket_mb)
        stages = self.stages.assign(**{LIMIT_MB: memory_mb, BUDGET_MB: memory_mb - self.stages[FIXED_MB],
                                       BACKWARD_BUDGET_MB: memory_mb - self.stages[BACKWARD_FIXED_MB]})
        return replace(self, memory_mb=memory_mb, stages=stages)

    def option_modes(self) -> dict[str, str]:
        """Option -> the mode that runs it (empty without modes)."""
        return {} if self.modes is None else {option: mode for mode, option in self.modes.items()}

    def cost(self, kind: str, option: str) -> dict[str, float]:
        """One layer's costs under ``option``: ``activation_mb``, ``memory_once_mb``, ``time``,
        ``working_mb`` (``W``), ``first_working_mb`` (``W1``) and ``grad_mb``."""
        if (kind, option) not in self.prices.costs:
            raise InputError(f"kind {kind!r} has no option {option!r}; its options are "
                             f"{', '.join(map(repr, self.prices.options[kind]))}")
        return self.prices.costs[kind, option]

    def evaluate(self, options: Sequence[str], *, offloaded_mb=None, copy_time=None, transit_mb=None) -> pd.DataFrame:
        """Per-stage memory and time of a per-layer assignment (the shared stage schema and more).

        Parameters
        ----------
        options : sequence of str
            Each body layer's option, model order (any option of its kind).
        offloaded_mb : array-like, optional
            MB per micro-batch each layer moves to the host (default 0).
        copy_time : array-like, optional
            Time each layer's copies add to the step (default 0).
        transit_mb : array-like, optional
            Per stage, memory held in transit (default 0); added to both peaks.

        Returns
        -------
        DataFrame
            ``stage``, ``param_mb``, ``activation_mb`` (transit included),
            ``overhead_mb``, ``working_mb``, ``const_mb``, ``memory_mb`` (the
            higher peak), ``limit_mb``, ``backward_mb`` (second peak, NaN
            without), ``transit_mb``, ``time`` (the stage time: forward +
            backward of every layer the stage holds, head and tail included,
            + copies), ``time_saved`` and ``baseline_memory_mb`` (against
            and under :attr:`baseline`).
        """
        frame = self._stage_values(options, offloaded_mb=offloaded_mb, copy_time=copy_time, transit_mb=transit_mb)
        # Rounded to 1e-9 time units: a stage that keeps the baseline saves 0, not the float noise of two sums.
        frame[TIME_SAVED] = np.round(self.baseline_time - frame[TIME].to_numpy(), 9) + 0.0
        frame[BASELINE_MEMORY_MB] = self.baseline_memory
        return frame

    def _stage_values(self, options: Sequence[str], *, offloaded_mb=None, copy_time=None,
                      transit_mb=None) -> pd.DataFrame:
        """:meth:`evaluate` without ``time_saved``."""
        body, p = self.body, self.partition.stages
        if len(options) != len(body):
            raise InputError(f"options has {len(options)} entries; the partition has {len(body)} body layers")
        zeros = np.zeros(len(body))
        offloaded = zeros if offloaded_mb is None else np.asarray(offloaded_mb, dtype=float)
        copies = zeros if copy_time is None else np.asarray(copy_time, dtype=float)
        transit = np.zeros(p) if transit_mb is None else np.asarray(transit_mb, dtype=float)
        cost = self._layer_costs(options)
        n = body[IN_FLIGHT].to_numpy(float)
        stage = body[STAGE].to_numpy()
        kept = (cost[ACTIVATION_MB] - offloaded) * n + cost[MEMORY_ONCE_MB]
        working = np.where(body[ENDS_WARM_UP], cost[WORKING_MB], 0.0)
        back = kept * (n - 1) / n + cost[GRAD_MB] + np.where(body[FIRST], cost[FIRST_WORKING_MB], 0.0)
        frame = self.stages
        activation = frame[ACTIVATION_MB].to_numpy() + np.bincount(stage, kept, p) + transit
        working = frame[WORKING_MB].to_numpy() + np.bincount(stage, working, p)
        overhead = frame[OVERHEAD_MB].to_numpy()
        if self.partition.chunks > 1:  # the peak over memory events: the part above activation in overhead
            peaks, working = event_peaks(self, cost)
            once = np.bincount(stage, cost[MEMORY_ONCE_MB], p) + self._fixed_once()
            overhead = once + peaks + transit - activation - working
        warm_up = frame[PARAM_MB].to_numpy() + activation + overhead + working + frame[CONST_MB].to_numpy()
        backward = frame[BACKWARD_FIXED_MB].to_numpy() + np.bincount(stage, back, p) + transit
        time = frame[FIXED_TIME].to_numpy() + np.bincount(stage, cost[TIME] + copies, p)
        return pd.DataFrame({
            STAGE: np.arange(p), PARAM_MB: frame[PARAM_MB], ACTIVATION_MB: activation,
            OVERHEAD_MB: overhead, WORKING_MB: working, CONST_MB: frame[CONST_MB],
            MEMORY_MB: np.fmax(warm_up, backward), LIMIT_MB: frame[LIMIT_MB], BACKWARD_MB: backward,
            TRANSIT_MB: transit, TIME: time,
        })

    def _fixed_once(self) -> np.ndarray:
        """Head's and tail's memory kept once, per stage."""
        once = np.zeros(self.partition.stages)
        for row, stage in ((self.prices.head, 0), (self.prices.tail, self.partition.stages - 1)):
            if row is not None:
                once[stage] += row[MEMORY_ONCE_MB]
        return once

    def _layer_costs(self, options: Sequence[str]) -> dict[str, np.ndarray]:
        table = {kind: {} for kind in self.offered}
        columns = (ACTIVATION_MB, MEMORY_ONCE_MB, TIME, WORKING_MB, FIRST_WORKING_MB, GRAD_MB)
        values = np.empty((len(options), len(columns)))
        for row, (kind, option) in enumerate(zip(self.body[KIND], options)):
            if option not in table[kind]:
                table[kind][option] = [self.cost(kind, option)[c] for c in columns]
            values[row] = table[kind][option]
        return {column: values[:, i] for i, column in enumerate(columns)}


def _multimodal(prices: LayerPrices) -> str | None:
    if len(prices.modules) > 1:
        return (f"the model is multimodal (modules {', '.join(map(repr, prices.modules))}): per-layer budgets "
                "would be built from one module's layers, so no choice per layer is made (a one-mode choice "
                "is: pass modes)")
    return None


def _check_partition(prices: LayerPrices, partition: Partition) -> None:
    placed = partition.cells.groupby(KIND, sort=False)["layers"].sum()
    kinds, options = prices.kinds, prices.options
    for kind in placed.index:
        if kind not in kinds:
            raise InputError(f"partition places kind {kind!r}, which is not a body kind of the layer table "
                             f"(body kinds: {', '.join(map(repr, kinds))})")
    for kind in kinds:
        if int(placed.get(kind, 0)) != prices.counts[kind]:
            raise InputError(f"partition places {int(placed.get(kind, 0))} layers of kind {kind!r}; the layer "
                             f"table has count {prices.counts[kind]} (a partition places every body layer)")
    if partition.configured is not None:
        for index, (kind, option) in enumerate(zip(partition.body[KIND], partition.configured)):
            if option not in options[kind]:
                raise InputError(f"partition configures body layer {index} (kind {kind!r}) as {option!r}, "
                                 f"which is not an option of {kind!r} ({', '.join(map(repr, options[kind]))})")


def price(layers, partition: Partition, *, memory_mb: float, modes=None, fsdp_holds_grads: bool | None = None,
          bucket_mb: float = 1.0) -> Pricing:
    """Price every body layer's options and every stage's fixed memory once.

    Parameters
    ----------
    layers : LayerTable or DataFrame
    partition : Partition
    memory_mb : float
        Device capacity (MB).
    modes : tuple of str or mapping, optional
        Offer the modes' options (a tuple of default mode names or a mapping
        mode -> option) instead of each kind's front.
    fsdp_holds_grads : bool, optional
        Price the second peak as a later micro-batch's backward ends;
        default where FSDP holds gradients over several micro-batches
        (:func:`~sappkit.recompute.layer_prices.holds_grads`).
    bucket_mb : float
        Knapsack granularity (MB).

    Examples
    --------
    >>> from sappkit.layers.table import LayerTable
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=b,
    ...              activation_mb=a) for o, a, b in (("none", 40, 2), ("full", 5, 3))]
    >>> cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    >>> pricing = price(LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=4, cells=cells),
    ...                 memory_mb=500)
    >>> pricing.evaluate(["full"] * 4)["memory_mb"].tolist()
    [260.0, 250.0]
    """
    table = as_layer_table(layers)
    if not isinstance(partition, Partition):
        raise InputError(f"partition must be a sappkit.Partition; got {type(partition).__name__}")
    bucket_mb = check_number("bucket_mb", bucket_mb, minimum=0, strict=True)
    memory_mb = _check_memory(memory_mb, bucket_mb)
    prices = layer_prices(table)
    _check_partition(prices, partition)
    fsdp_holds_grads = holds_grads(prices, partition.micro_batches, fsdp_holds_grads)
    mapping = resolve_modes(modes, prices)
    offered = {kind: (prices.front[kind] if mapping is None else tuple(mapping.values())) for kind in prices.kinds}
    empty = Pricing(table, partition, memory_mb, bucket_mb, bool(fsdp_holds_grads), mapping, offered, prices.plain,
                    pd.DataFrame(), pd.DataFrame(), (), prices=prices)
    if partition.schedule not in SUPPORTED_SCHEDULES:
        return replace(empty, reason=f"schedule {partition.schedule!r} is not supported by the recompute chooser: "
                                     f"it prices the in-flight counts and end-of-warm-up working set of "
                                     f"{' and '.join(SUPPORTED_SCHEDULES)} only")
    if fsdp_holds_grads:
        for kind in prices.kinds:
            grads = list(dict.fromkeys(prices.costs[kind, option][GRAD_MB] for option in offered[kind]))
            if len(grads) > 1:
                raise InputError(f"layers kind {kind!r} has different grad_mb on its options ({grads}); "
                                 "the second peak needs one gradient size per kind")
    body = partition.body.copy()
    body[CONFIGURED] = [prices.plain[kind] if option is None else option
                        for kind, option in zip(body[KIND], body[CONFIGURED])]
    body[ENDS_WARM_UP] = ends_warm_up(partition, ends_with_tail=prices.tail is not None)
    body[FIRST] = first_layers(body, table) if fsdp_holds_grads else False
    pricing = replace(empty, body=body)
    configured = pricing._layer_costs(body[CONFIGURED].tolist())[ACTIVATION_MB]
    stages = fixed_memory(prices, partition, body, configured, memory_mb=memory_mb,
                          fsdp_holds_grads=bool(fsdp_holds_grads))
    group_of, groups = layer_groups(body, offered, pricing.cost, stages=partition.stages,
                                    fsdp_holds_grads=bool(fsdp_holds_grads), bucket_mb=bucket_mb)
    return replace(pricing, body=body.assign(**{GROUP: group_of}), stages=stages, groups=groups,
                   reason=_multimodal(prices))


def _check_memory(memory_mb, bucket_mb: float) -> float:
    """The device capacity, checked, and not cut into more knapsack buckets than the limit."""
    memory_mb = check_number("memory_mb", memory_mb, minimum=0, strict=True, maximum=MAX_MEMORY_MB)
    if memory_mb / bucket_mb > MAX_BUCKETS:
        raise InputError(f"bucket_mb {bucket_mb:g} cuts memory_mb {memory_mb:g} into {memory_mb / bucket_mb:.3g} "
                         f"buckets; expected at most {MAX_BUCKETS.cited} (use bucket_mb >= "
                         f"{memory_mb / MAX_BUCKETS:.3g})")
    return memory_mb
