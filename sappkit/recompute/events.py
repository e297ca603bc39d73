"""The chooser's warm-up memory for more than one chunk: the peak over the stage's memory events.

With ``v > 1`` chunks a stage's memory peaks at one of its memory events
(:mod:`sappkit.pipeline.memory_events`): event ``e`` holds ``k_{e,c}``
micro-batches of each chunk ``c`` while the backward of one cell ``c_e``
runs, so the stage holds ``F_e + Σ_l [a(o_l) k_{e,c_l} + u(o_l)] + W_e``:
``F_e`` parameters, constant, head and tail (their activations at the event's
counts, the tail's working set when its cell's backward runs), ``a`` and
``u`` a body layer's activation and memory kept once under its option, and
``W_e`` the working set ``W(o)`` (:mod:`sappkit.recompute.pricing`) of the
last body layer of cell ``c_e`` (the layers flagged ``ends_warm_up``). The
balancer and the simulator charge the same (one memory truth); for one
chunk the only event is the end of warm-up and this is the pricing's
linear model.

The knapsack is one constraint per event (and the second peak's, with
``fsdp_holds_grads``): :class:`EventStageSolver` solves each alone (a lower
bound on the stage's least time), then a sound single constraint (every
event's weight at once, the tightest budget), the configured options and
weighted sums of the constraints (surrogates, the weights growing on the
constraints a choice breaks), and keeps the fastest choice that fits every
constraint: exact when an event's own optimum fits the others, else the
best found. Stages with few distinct choices (at most
:data:`_ENUMERATION_BUDGET`) are enumerated instead, exactly.
"""

from __future__ import annotations

import numpy as np

from ..columns import ACTIVATION_MB, CHUNK, MEMORY_ONCE_MB, STAGE, WORKING_MB
from ..pipeline.memory_events import StageEvents, memory_events
from .knapsack import Group, budget_buckets, build_front, canonical

__all__ = ["stage_events", "charged_chunks", "event_fixed", "event_peaks", "EventStageSolver"]

#: Weighted sums of the constraints tried after each constraint alone (each one knapsack).
_SURROGATE_ROUNDS = 12
#: Stages with at most this many distinct choices (products of the groups' option counts) are enumerated.
_ENUMERATION_BUDGET = 50_000


def stage_events(partition) -> tuple[StageEvents, ...]:
    """Every stage's undominated memory events under the partition's pipeline."""
    return memory_events(partition.schedule, partition.stages, partition.micro_batches, partition.chunks,
                         partition.less_memory)


def charged_chunks(partition, stage: int, *, ends_with_tail: bool) -> list[int]:
    """Chunks of ``stage`` whose last body layer's working set an event charges (not the tail's cell)."""
    tail = (partition.chunks - 1, partition.stages - 1) if ends_with_tail else None
    running = stage_events(partition)[stage].running
    return sorted({int(c) for c in running if c >= 0 and (int(c), stage) != tail})


def _fixed_cells(pricing) -> tuple[np.ndarray, np.ndarray, float]:
    """Head and tail: activation per micro-batch ``[chunk, stage]``, memory kept once per stage, and the
    tail's working set (kept at one micro-batch + ``working_mb``)."""
    p, v = pricing.partition.stages, pricing.partition.chunks
    activation, once, tail_working = np.zeros((v, p)), np.zeros(p), 0.0
    prices = pricing.prices
    for row, (chunk, stage) in ((prices.head, (0, 0)), (prices.tail, (v - 1, p - 1))):
        if row is not None:
            activation[chunk, stage] += row[ACTIVATION_MB]
            once[stage] += row[MEMORY_ONCE_MB]
    if prices.tail is not None:
        tail = prices.tail
        tail_working = tail[ACTIVATION_MB] + tail[MEMORY_ONCE_MB] + tail[WORKING_MB]
    return activation, once, tail_working


def _cell_working(pricing, stage: int, cells_working: np.ndarray) -> np.ndarray:
    """``[..., chunk]`` working sets of a stage's cells with the tail's on its cell."""
    partition = pricing.partition
    working = np.array(cells_working, dtype=float)
    if pricing.prices.tail is not None and stage == partition.stages - 1:
        working[..., partition.chunks - 1] = _fixed_cells(pricing)[2]
    return working


def event_fixed(pricing, stage: int) -> np.ndarray:
    """``F_e`` of every event of ``stage``: what it holds whatever the body layers' options."""
    activation, once, _ = _fixed_cells(pricing)
    frame = pricing.stages
    events = stage_events(pricing.partition)[stage]
    base = float(frame.at[stage, "param_mb"] + frame.at[stage, "const_mb"] + once[stage])
    return base + events.peak(activation[:, stage], _cell_working(pricing, stage, np.zeros(activation.shape[0])))


def event_peaks(pricing, cost: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per stage the events' peak above parameters, constant and memory kept once, and the working set held
    then, for body layers' per-layer ``cost`` (activation per micro-batch, working set)."""
    partition, body = pricing.partition, pricing.body
    p, v = partition.stages, partition.chunks
    fixed, _, _ = _fixed_cells(pricing)
    cell = body[CHUNK].to_numpy() * p + body[STAGE].to_numpy()
    activation = np.bincount(cell, cost[ACTIVATION_MB], p * v).reshape(v, p) + fixed
    working = np.bincount(cell, np.where(body["ends_warm_up"], cost[WORKING_MB], 0.0), p * v).reshape(v, p)
    peaks, held_working = np.zeros(p), np.zeros(p)
    for s, events in enumerate(stage_events(partition)):
        cells_working = _cell_working(pricing, s, working[:, s])
        values = events.peak(activation[:, s], cells_working)
        top = int(values.argmax())
        peaks[s] = values[top]
        held_working[s] = cells_working[events.running[top]] if events.running[top] >= 0 else 0.0
    return peaks, held_working


class EventStageSolver:
    """One stage's choice under every memory event's constraint (module docstring).

    Parameters
    ----------
    pricing : Pricing
    stage : int
    """

    def __init__(self, pricing, stage: int):
        self.pricing, self.stage = pricing, stage
        self.groups = pricing.groups[stage]
        events = stage_events(pricing.partition)[stage]
        weights, fixed = [], list(event_fixed(pricing, stage))
        for held, running in zip(events.held, events.running):
            weights.append([self._kept(g, held[g.chunk]) + (self._working(g) if g.ends_warm_up and g.chunk == running
                                                             else 0.0) for g in self.groups])
        if pricing.fsdp_holds_grads:
            weights.append([g.backward_mb for g in self.groups])
            fixed.append(float(pricing.stages.at[stage, "backward_fixed_mb"]))
        self.weights, self.fixed = weights, np.array(fixed)

    def _kept(self, group, n: float) -> np.ndarray:
        costs = [self.pricing.cost(group.kind, option) for option in group.options]
        return np.array([c[ACTIVATION_MB] * n + c[MEMORY_ONCE_MB] for c in costs])

    def _working(self, group) -> np.ndarray:
        return np.array([self.pricing.cost(group.kind, option)[WORKING_MB] for option in group.options])

    def _fits(self, counts, limit: float) -> bool:
        return all(sum(float(w @ c) for w, c in zip(weights, counts)) <= limit - fixed + 1e-9
                   for weights, fixed in zip(self.weights, self.fixed))

    def _time(self, counts) -> float:
        return float(sum(g.time @ c for g, c in zip(self.groups, counts)))

    def _solve(self, weights, budget_mb: float):
        """The least-time counts under one linear constraint (None when none fits)."""
        bucket = self.pricing.bucket_mb
        budget = budget_buckets(budget_mb, bucket)
        if budget < 0:
            return None
        groups = [Group(count=g.count, memory_mb=w, time=g.time) for g, w in zip(self.groups, weights)]
        return build_front(groups, bucket_mb=bucket, cap_mb=budget * bucket).counts(budget)

    def _candidates(self, limit: float):
        budgets = limit - self.fixed
        if (budgets < 0).any():
            return
        for weights, budget in zip(self.weights, budgets):
            yield self._solve(weights, budget)
        # Sound for every constraint at once: each option's heaviest weight against the tightest budget.
        yield self._solve([np.max([w[g] for w in self.weights], axis=0) for g in range(len(self.groups))],
                          float(budgets.min()))
        yield self._configured()
        yield from self._surrogates(budgets)

    def _surrogates(self, budgets: np.ndarray):
        """Choices under weighted sums of the constraints, the weights growing on those a choice breaks."""
        share = np.full(len(budgets), 1.0 / len(budgets))
        for _ in range(_SURROGATE_ROUNDS):
            weights = [sum(q * w[g] for q, w in zip(share, self.weights)) for g in range(len(self.groups))]
            counts = self._solve(weights, float(share @ budgets))
            if counts is None:
                return
            yield counts
            held = np.array([sum(float(w[g] @ c) for g, c in enumerate(counts)) for w in self.weights])
            over = np.maximum(held - budgets, 0.0) / np.maximum(budgets, self.pricing.bucket_mb)
            if not over.any():
                return
            share = share * (1.0 + over)
            share /= share.sum()

    def _configured(self):
        """The configured options' counts, when every layer's is on offer."""
        options = self.pricing.body["configured"].to_numpy()
        counts = []
        for g in self.groups:
            picked = np.zeros(len(g.options), dtype=int)
            for layer in g.layers:
                if options[layer] not in g.options:
                    return None
                picked[g.options.index(options[layer])] += 1
            counts.append(picked)
        return tuple(counts)

    def _enumerated(self, limit_mb: float):
        """Every distinct choice's fit and time, the fastest that fits (None, inf: none does); or None when the
        stage has more than :data:`_ENUMERATION_BUDGET` choices."""
        mixes = [_mixes(g.count, len(g.options)) for g in self.groups]
        sizes = [len(m) for m in mixes]
        if int(np.prod(sizes, dtype=float)) > _ENUMERATION_BUDGET:
            return None
        picks = np.indices(sizes).reshape(len(sizes), -1).T
        fits = np.ones(len(picks), dtype=bool)
        for weights, fixed in zip(self.weights, self.fixed):
            held = sum(mixes[g][picks[:, g]] @ w for g, w in enumerate(weights))
            fits &= np.asarray(held) <= limit_mb - fixed + 1e-9
        time = np.asarray(sum(mixes[g][picks[:, g]] @ group.time for g, group in enumerate(self.groups)), float)
        time = np.broadcast_to(time, fits.shape)
        if not fits.any():
            return None, np.inf
        best = int(np.flatnonzero(fits)[np.argmin(time[fits])])
        return tuple(mixes[g][picks[best, g]] for g in range(len(self.groups))), float(time[best])

    def _best(self, limit_mb: float):
        """The fastest candidate's counts that fits every constraint, and its time (None, inf: none does)."""
        enumerated = self._enumerated(limit_mb)
        if enumerated is not None:
            return enumerated
        best, best_time = None, np.inf
        for counts in self._candidates(limit_mb):
            if counts is not None and self._fits(counts, limit_mb) and self._time(counts) < best_time:
                best, best_time = counts, self._time(counts)
        return best, best_time

    def choose(self, limit_mb: float) -> dict[int, str] | None:
        """Each layer's option at the least time found within ``limit_mb``; None when nothing found fits."""
        best, _ = self._best(float(limit_mb))
        if best is None:
            return None
        return {layer: g.options[j] for g, c in zip(self.groups, best) for layer, j in zip(g.layers, canonical(g, c))}

    def least_times(self, limits_mb) -> np.ndarray:
        """The stage's time at each capacity (``inf`` where nothing fits)."""
        limits = np.asarray(limits_mb, dtype=float)
        return np.array([self._best(float(limit))[1] for limit in limits.ravel()]).reshape(limits.shape)


def _mixes(count: int, options: int) -> np.ndarray:
    """Every way ``count`` layers spread over ``options`` options: ``[mix, option]``."""
    if options == 1:
        return np.array([[count]])
    return np.array([[first, *rest] for first in range(count, -1, -1) for rest in _mixes(count - first, options - 1)])
