"""Offloading activations to the host: a stage's first layers run plain and move what they keep.

The model (SAPP's recompute chooser's ``_offload_*``, ``_returns_fit``, ``_trim_offload``), at
one chunk per stage, every layer of a stage holding ``n`` micro-batches:

- **Copy window.** One stream copies each layer's activations to the host
  once its forward ends, in layer order, and must finish with the
  micro-batch's forward: layer ``i`` has ``overlap`` times the plain forward
  time of the layers after it, less what the earlier copies took. It moves
  all it keeps per micro-batch, or what the window leaves (``mb_per_time``
  MB per time unit); the layer that ends warm-up and those after it keep
  everything. The first ``c`` layers offload, ``c`` chosen below.
- **Copies back** run one layer ahead in the backward: layer ``i``'s bytes
  (with layer ``i + 1``'s when it offloads too) come back while this
  micro-batch's backward has released what layers ``i + 2, ...`` keep per
  micro-batch. Where that does not cover them at the chosen options, the
  stage holds the largest offloaded amount in transit (added to both peaks).
- **Cost.** Each MB moved costs ``time_per_mb`` out and again back. With a
  cost, the stage offloads no more than it needs: the memory left under the
  limit (whole buckets) goes back to the last offloaded layers.
- **Search.** For every count ``c`` the link reaches, with and without the
  transit hold, the other layers choose the fastest options in what the
  offloaded ones leave (a suffix knapsack; with a second peak, the budget
  keeps room for it as though the layer ending warm-up ran its lightest
  working set, which fits); the fastest valid plan wins if it beats keeping
  every layer's activations.
"""

from __future__ import annotations

import math
from dataclasses import KW_ONLY, dataclass

import numpy as np

from .._check import check_number
from ..columns import ACTIVATION_MB, FIRST_WORKING_MB, FORWARD_TIME, GRAD_MB, MEMORY_ONCE_MB, TIME, WORKING_MB
from ..errors import InputError
from .knapsack import Group, budget_buckets, build_front, canonical, suffix_fronts, to_buckets
from .pricing import Pricing

__all__ = ["HostLink", "StageOffload", "offload_stage"]

#: An offload plan must beat keeping every activation by more than this share of its time.
_BETTER = 1e-9


@dataclass(frozen=True)
class HostLink:
    """A device-to-host link activations can be offloaded over, in the layer table's own units.

    Parameters
    ----------
    mb_per_time : float
        MB the link moves per time unit of the layer table (> 0), one way.
    overlap : float
        Share of the forward's compute time the copies may take (0..1).
    time_per_mb : float
        Step time each MB moved costs, out and again back (>= 0).

    Examples
    --------
    >>> HostLink(50.0, overlap=0.8)
    HostLink(mb_per_time=50.0, overlap=0.8, time_per_mb=0.0)
    >>> round(HostLink.from_gbps(50, time_unit_ms=1.0).mb_per_time, 2)
    47.68
    """

    mb_per_time: float
    _: KW_ONLY
    overlap: float = 1.0
    time_per_mb: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "mb_per_time", check_number("mb_per_time", self.mb_per_time, minimum=0, strict=True))
        overlap = check_number("overlap", self.overlap, minimum=0)
        if overlap > 1:
            raise InputError(f"overlap must be a share between 0 and 1; got {self.overlap!r}")
        object.__setattr__(self, "overlap", overlap)
        object.__setattr__(self, "time_per_mb", check_number("time_per_mb", self.time_per_mb, minimum=0))

    @classmethod
    def from_gbps(cls, gbps: float, *, time_unit_ms: float = 1.0, overlap: float = 1.0,
                  time_per_mb: float = 0.0) -> HostLink:
        """A link of ``gbps`` GB/s (10^9 bytes) for a layer table whose time unit is ``time_unit_ms`` ms."""
        gbps = check_number("gbps", gbps, minimum=0, strict=True)
        unit = check_number("time_unit_ms", time_unit_ms, minimum=0, strict=True)
        return cls(gbps * 1e9 / 2**20 * unit / 1000, overlap=overlap, time_per_mb=time_per_mb)


@dataclass(frozen=True)
class StageOffload:
    """One stage's plan: each layer's option, MB per micro-batch offloaded, copy time; and the transit hold."""

    options: dict
    offloaded_mb: dict
    copy_time: dict
    transit_mb: float


def _plain_costs(pricing: Pricing, kinds) -> list[dict]:
    off = pricing.modes["off"] if pricing.modes is not None else None
    rows = []
    for kind in kinds:
        option = off if off is not None else pricing.plain[kind]
        rows.append(dict(pricing.cost(kind, option), option=option))
    return rows


def _shares(plain: list[dict], ending: int, link: HostLink) -> np.ndarray:
    """MB per micro-batch each of the first layers can move within the forward's copy window."""
    forward = np.array([cost[FORWARD_TIME] for cost in plain])
    after = np.concatenate((np.cumsum(forward[::-1])[::-1][1:], [0.0]))
    shares, room = [], math.inf
    for i in range(ending):
        room = min(room, link.overlap * after[i])
        share = min(plain[i][ACTIVATION_MB], room * link.mb_per_time)
        room = max(0.0, room - share / link.mb_per_time)
        if share <= 0:
            break
        shares.append(share)
    return np.array(shares)


def offload_stage(pricing: Pricing, stage: int, stay: dict | None, link: HostLink) -> StageOffload | None:
    """The fastest plan of one stage when its first layers may offload; None when nothing fits.

    ``stay`` is the stage's plan keeping every activation (None when none
    fits), which an offload plan must beat.
    """
    groups = pricing.groups[stage]
    group_of = {layer: g for g in groups for layer in g.layers}
    layers = np.array(sorted(group_of), dtype=int)
    stay_time = math.inf if stay is None else sum(
        float(group_of[layer].time[group_of[layer].options.index(stay[layer])]) for layer in layers)
    kept = StageOffload(stay, {}, {}, 0.0) if stay is not None else None
    if not len(layers):
        return kept
    n = groups[0].in_flight
    plain = _plain_costs(pricing, [group_of[layer].kind for layer in layers])
    flags = [group_of[layer].ends_warm_up for layer in layers]
    ending = flags.index(True) if any(flags) else len(layers)
    shares = _shares(plain, ending, link)
    if not shares.size:
        return kept
    search = _Search(pricing, stage, groups, layers, plain, n, link)
    best = None
    for total, count, transit in sorted(search.candidates(shares)):
        if total >= stay_time * (1 - _BETTER):
            break
        plan = search.plan(shares, count, transit)
        if plan is not None:
            best = plan
            break
    if best is None:
        return kept
    return search.trimmed(best) if link.time_per_mb > 0 else best


class _Search:
    """The offload search of one stage: budgets per count, the rest's choice, the checks."""

    def __init__(self, pricing, stage, groups, layers, plain, n, link):
        self.pricing, self.groups, self.layers, self.plain, self.n, self.link = pricing, groups, layers, plain, n, link
        self.budget_mb, self.back_budget = (float(column[stage]) for column in pricing.budgets)
        self.bucket = pricing.bucket_mb
        self.budget = budget_buckets(self.budget_mb, self.bucket)
        self.limit = pricing.memory_mb
        self.position = {int(layer): i for i, layer in enumerate(layers)}
        self.group_of = {layer: g for g in groups for layer in g.layers}
        items = [Group(1, self.group_of[layer].memory_mb, self.group_of[layer].time) for layer in layers]
        self.suffix = suffix_fronts(items, bucket_mb=self.bucket, cap_mb=max(self.budget, 0) * self.bucket)
        self.grads = np.array([cost[GRAD_MB] for cost in plain])
        ending = [g for g in groups if g.ends_warm_up]
        self.lightest_working = 0.0 if not ending else min(
            pricing.cost(ending[0].kind, option)[WORKING_MB] for option in ending[0].options)

    def _offloaded(self, shares):
        """Per offloaded layer: kept MB, time, second-peak MB."""
        act = np.array([cost[ACTIVATION_MB] for cost in self.plain[:shares.size]])
        once = np.array([cost[MEMORY_ONCE_MB] for cost in self.plain[:shares.size]])
        kept = (act - shares) * self.n + once
        time = np.array([cost[TIME] for cost in self.plain[:shares.size]]) + 2 * shares * self.link.time_per_mb
        back = kept * (self.n - 1) / self.n + self.grads[:shares.size]
        if self.pricing.fsdp_holds_grads and shares.size:
            back[0] += self.plain[0][FIRST_WORKING_MB]
        return kept, time, back

    def _rest_budget(self, shares, count: int, transit: bool) -> float:
        kept, _, back = self._offloaded(shares[:count])
        held = max(shares[:count]) if transit else 0.0
        budget = self.budget - int(to_buckets(kept, self.bucket).sum()) - int(to_buckets(held, self.bucket))
        if not self.pricing.fsdp_holds_grads:
            return budget
        left = self.back_budget - back.sum() - held - self.grads[count:].sum()
        if self.n == 1:
            return budget if left >= 0 else -1
        return min(budget, math.floor((left * self.n / (self.n - 1) + self.lightest_working) / self.bucket))

    def candidates(self, shares):
        """(total time, count, transit) for every count and transit hold, fastest first when sorted."""
        times = np.concatenate(([0.0], np.cumsum(self._offloaded(shares)[1])))
        found = []
        for count in range(1, shares.size + 1):
            for transit in (False, True):
                rest = self.suffix[count].least_time(self._rest_budget(shares, count, transit))
                if math.isfinite(rest):
                    found.append((times[count] + rest, count, transit))
        return found

    def plan(self, shares, count: int, transit: bool) -> StageOffload | None:
        """The plan offloading the first ``count`` layers; None when its copies back do not fit."""
        budget = self._rest_budget(shares, count, transit)
        rest = [(g, [layer for layer in g.layers if self.position[layer] >= count]) for g in self.groups]
        rest = [(g, members) for g, members in rest if members]
        knapsack = [Group(len(members), g.memory_mb, g.time) for g, members in rest]
        counts = build_front(knapsack, bucket_mb=self.bucket, cap_mb=budget * self.bucket).counts(budget)
        options = {int(layer): self.plain[i]["option"] for i, layer in enumerate(self.layers[:count])}
        for (g, members), item, chosen in zip(rest, knapsack, counts):
            options.update({layer: g.options[j] for layer, j in zip(members, canonical(item, chosen))})
        part = shares[:count]
        if not transit and not self._returns_fit(options, part):
            return None
        return self._stage_plan(options, part, max(part) if transit else 0.0)

    def _stage_plan(self, options, part, transit_mb) -> StageOffload:
        copy = {int(layer): 2 * share * self.link.time_per_mb for layer, share in zip(self.layers, part)}
        moved = {int(layer): float(share) for layer, share in zip(self.layers, part) if share > 0}
        return StageOffload(options, moved, copy, float(transit_mb))

    def _kept(self, options, part) -> np.ndarray:
        """What each layer keeps at ``n`` micro-batches under ``options`` with the first layers offloading."""
        kept = []
        for i, layer in enumerate(self.layers):
            cost = self.pricing.cost(self.group_of[layer].kind, options[int(layer)])
            moved = part[i] if i < part.size else 0.0
            kept.append((cost[ACTIVATION_MB] - moved) * self.n + cost[MEMORY_ONCE_MB])
        return np.array(kept)

    def _returns_fit(self, options, part) -> bool:
        released = np.concatenate((np.cumsum((self._kept(options, part) / self.n)[::-1])[::-1], [0.0]))
        for i in range(part.size):
            back = part[i] + (part[i + 1] if i + 1 < part.size else 0.0)
            if back > released[min(i + 2, len(self.layers))]:
                return False
        return True

    def _memory(self, options, part, transit_mb) -> float:
        """The stage's peak under the plan, both peaks."""
        kept = self._kept(options, part)
        costs = [self.pricing.cost(self.group_of[layer].kind, options[int(layer)]) for layer in self.layers]
        working = sum(cost[WORKING_MB] for layer, cost in zip(self.layers, costs) if self.group_of[layer].ends_warm_up)
        warm_up = self.limit - self.budget_mb + kept.sum() + working + transit_mb
        if not self.pricing.fsdp_holds_grads:
            return warm_up
        back = self.limit - self.back_budget + (kept * (self.n - 1) / self.n).sum() + transit_mb
        back += sum(cost[GRAD_MB] for cost in costs) + costs[0][FIRST_WORKING_MB]
        return max(warm_up, back)

    def trimmed(self, plan: StageOffload) -> StageOffload:
        """The plan with no more offloaded than the stage needs, the copies costing time."""
        part = np.array([plan.offloaded_mb.get(int(layer), 0.0) for layer in self.layers[:len(plan.copy_time)]])
        slack = math.floor(self.limit / self.bucket) * self.bucket - self._memory(plan.options, part, plan.transit_mb)
        for i in range(part.size - 1, -1, -1):
            if slack <= 0:
                break
            give = min(part[i], slack / self.n)
            part[i] -= give
            slack -= give * self.n
        transit = max(part) if plan.transit_mb > 0 else 0.0
        return self._stage_plan(plan.options, part, transit)
