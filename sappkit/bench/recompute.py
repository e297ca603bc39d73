"""Recompute chooser timings: choose and sweep on the bundled DeepSeek-V3-class model and a 128-layer model,
16 stages, 80 GB devices, 1 MB buckets; and the knapsack against a plain 0/1 dynamic program over buckets."""

from __future__ import annotations

import numpy as np

from ..demo import bundled
from ..layers import read_layers_json
from ..pipeline.costs import even_assignment
from ..recompute.chooser import HostLink, choose_recompute, sweep_recompute
from ..recompute.knapsack import Group, budget_buckets, build_front, to_buckets
from ..recompute.partition import Partition
from ..recompute.pricing import BUDGET_MB, price
from . import median_seconds, row

__all__ = ["measure"]

_MEMORY_MB = 80_000.0
_MODES = ("off", "selective", "full")


def _models():
    """(name, layer table) for the bundled DeepSeek-V3-class model and the 70B-class model stretched to 128 layers."""
    deepseek = read_layers_json(bundled("deepseek_v3.json"))
    llama = read_layers_json(bundled("llama2_70b.json"))
    frame = llama.frame.copy()
    frame.loc[frame["role"] == "body", "count"] = 128
    return [("deepseek_v3 61 layers", deepseek), ("dense 128 layers", llama.with_frame(frame))]


def _partition(table, chunks: int = 1) -> Partition:
    """Body layers placed evenly on 16 stages, 64 micro-batches, configured with full recompute."""
    schedule = "1f1b" if chunks == 1 else "interleaved"
    assignment = even_assignment(table, stages=16, chunks=chunks, schedule=schedule, option="full")
    return Partition.from_assignment(assignment, stages=16, micro_batches=64, chunks=chunks, schedule=schedule,
                                     kind_order=table.body_kinds)


def _dense_least_time(groups, budget: int) -> float:
    """The plain 0/1 dynamic program: per layer, best time at every bucket budget up to ``budget``."""
    best = np.zeros(budget + 1)
    for group in groups:
        weights = to_buckets(group.memory_mb, 1.0)
        for _ in range(len(group.layers)):
            new = np.full(budget + 1, np.inf)
            for w, t in zip(weights, group.time):
                if w <= budget:
                    np.minimum(new[w:], best[:budget + 1 - w] + t, out=new[w:])
            best = new
    return float(best[budget])


def _knapsack_rows(name, table, repeats) -> list[dict]:
    """Every stage's knapsack of one pricing: the front against the plain dynamic program."""
    pricing = price(table, _partition(table), memory_mb=_MEMORY_MB, modes=_MODES)
    stages = [(pricing.groups[s], budget_buckets(pricing.stages[BUDGET_MB].iloc[s], 1.0))
              for s in range(len(pricing.groups))]

    def front():
        return [build_front([Group(len(g.layers), g.memory_mb, g.time) for g in groups], cap_mb=budget)
                .least_time(budget) for groups, budget in stages]

    def dense():
        return [_dense_least_time(groups, budget) for groups, budget in stages]

    equal = np.allclose(front(), dense(), rtol=1e-9)
    largest = max(budget for _, budget in stages)
    detail = f"16 stages, budgets up to {largest} buckets; same least times: {equal}"
    return [row("knapsack, Pareto front", name, median_seconds(front, repeats=repeats), None, detail),
            row("knapsack, plain 0/1 DP", name, median_seconds(dense, repeats=max(1, repeats // 2)), None,
                detail)]


def measure(quick: bool) -> list[dict]:
    repeats = 3 if quick else 7
    rows = []
    for name, table in _models():
        part = _partition(table)
        cases = [("front options", {}), ("mode per layer", dict(modes=_MODES, per_layer=True)),
                 ("fsdp second peak", dict(fsdp_holds_grads=True))]
        if not quick:
            cases += [("one mode", dict(modes=_MODES)), ("interleaved v=2", dict(partition=_partition(table, 2)))]
        for label, options in cases:
            partition = options.pop("partition", part)
            choice = choose_recompute(table, partition, memory_mb=_MEMORY_MB, **options)
            seconds = median_seconds(lambda: choose_recompute(table, partition, memory_mb=_MEMORY_MB, **options),
                                     repeats=repeats)
            detail = f"peak {choice.memory_mb:,.0f} MB" if choice.chosen else f"no choice: {choice.reason}"
            rows.append(row("recompute choose", f"{name}, {label}", seconds, 50.0, detail))
        link = HostLink.from_gbps(50.0)
        seconds = median_seconds(lambda: choose_recompute(table, part, memory_mb=_MEMORY_MB, link=link),
                                 repeats=repeats)
        rows.append(row("recompute choose", f"{name}, offload 50 GB/s", seconds, None, "host link, no target"))
        budgets = np.linspace(30_000, _MEMORY_MB, 41)
        seconds = median_seconds(lambda: sweep_recompute(table, part, memory_mb=budgets), repeats=repeats)
        rows.append(row("recompute sweep", f"{name}, 41 budgets", seconds, None, "every stage's knapsack built once"))
        rows.extend(_knapsack_rows(name, table, repeats))
    return rows
