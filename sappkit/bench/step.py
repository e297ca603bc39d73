"""``objective="step"`` against a long randomised search on random instances (the README's 0.5 % target).

Each case is a random one-kind decoder (96-192 layers, 2-5 recompute
options with MindFormers-like time and memory ratios) on a random pipeline
(1F1B or interleaved, ``p`` in {4, 8, 16}, ``v`` in {1, 2, 3}, ``m`` in
{p, 2p, 4p}) under a tight or a loose memory limit. For each case the row
gives the ``step`` plan's simulated step time against

- the ``sapp`` optimum, simulated, and
- :func:`reference_search`: 30 seconds of randomised local search from
  two starts (the ``sapp`` optimum and the least-memory placement), written
  apart from the balancer's own search:
  random single and double changes, sideways moves accepted, a seeded
  generator. ``--quick`` runs the first two cases with 3 seconds each.

``passed`` is the target: the ``step`` plan at most 0.5 % slower than the
better of the two. The reference times placements with the balancer's
longest-path evaluation (equal to :func:`sappkit.simulate`, checked in the
tests) for throughput, and its result is checked with the simulator.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from ..balancer.exact import least_memory
from ..balancer.step.local_search import valid
from ..balancer.optimise import balance, optimise
from ..balancer.plan import make_plan
from ..balancer.setup import BalanceSetup, make_setup
from ..balancer.ilp.solver import SolverOptions
from ..balancer.step.steptime import step_timer
from ..pipeline.costs import even_assignment, stage_memory
from . import row

__all__ = ["measure", "random_instance", "reference_search", "TOLERANCE"]

#: The step plan may be this much slower than the best reference (the README's "Performance").
TOLERANCE = 0.005
#: (backward factor, activation factor) of each SAPP option against ``none`` (MindFormers' defaults, jittered).
_OPTIONS = {"none": (1.0, 1.0), "selective": (1.04, 0.18), "comm": (1.125, 0.98), "both": (1.165, 0.16),
            "full": (1.5, 0.01)}


def random_instance(rng: np.random.Generator) -> tuple[pd.DataFrame, dict]:
    """A random layer table and pipeline (module docstring): ``(table, balance keyword arguments)``."""
    layers = int(rng.integers(96, 193))
    middle = [o for o in ("selective", "comm", "both") if rng.random() < 0.5]
    options = ["none", *middle, "full"]
    forward, activation = float(rng.uniform(5, 10)), float(rng.uniform(500, 1000))
    rows = [dict(kind="embedding", role="head", count=1, param_mb=float(rng.uniform(200, 400)), option="none",
                 forward_time=0.1, backward_time=0.2, activation_mb=5.0)]
    for option in options:
        slower, keeps = _OPTIONS[option]
        rows.append(dict(kind="decoder", role="body", count=layers, param_mb=600.0, option=option,
                         forward_time=forward, backward_time=2 * forward * slower * float(rng.uniform(0.97, 1.03)),
                         activation_mb=activation * keeps * float(rng.uniform(0.9, 1.1))))
    rows.append(dict(kind="lm_head", role="tail", count=1, param_mb=float(rng.uniform(200, 400)), option="none",
                     forward_time=forward * float(rng.uniform(0.2, 0.6)),
                     backward_time=2 * forward * float(rng.uniform(0.2, 0.6)), activation_mb=80.0))
    table = pd.DataFrame(rows)
    p = int(rng.choice([4, 8, 16]))
    v = int(rng.choice([1, 2, 3]))
    while layers < 2 * p * v:
        v -= 1
    m = int(rng.choice([1, 2, 4])) * p
    even = {option: stage_memory(table, even_assignment(table, stages=p, chunks=v,
                                                        schedule="1f1b" if v == 1 else "interleaved",
                                                        option=option),
                                 stages=p, micro_batches=m, chunks=v, schedule="1f1b" if v == 1 else "interleaved",
                                 const_mb=3000.0)["memory_mb"].max() for option in ("none", "full")}
    share = float(rng.choice([0.25, 0.6]))
    memory = even["full"] + share * (even["none"] - even["full"])
    return table, dict(stages=p, chunks=v, micro_batches=m, memory_mb=round(float(memory)), const_mb=3000.0)


def reference_search(setup: BalanceSetup, starts: list[np.ndarray], seconds: float, rng: np.random.Generator,
                     batch: int = 32) -> tuple[np.ndarray, float]:
    """Randomised local search for ``seconds``: round-robin over ``starts``, random changes, sideways accepted.

    Each round draws ``batch`` placements from one start's current one, each
    one or two random changes (a layer to any cell and any option of its
    kind, or an option swap between two cells), and moves to the fastest valid
    one unless it is slower.
    """
    timer = step_timer(setup)
    items, cells = len(setup.items), setup.chunks * setup.stages
    kinds = [np.array(setup.item_indices(kind)) for kind in setup.kinds]
    states = [[np.asarray(c, dtype=int), timer.time(c)] for c in starts]
    best = min(states, key=lambda state: state[1])
    best = [best[0].copy(), best[1]]
    end, turn = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        state = states[turn % len(states)]
        turn += 1
        drawn = np.repeat(state[0].reshape(1, items, cells), batch, axis=0)
        for b in range(batch):
            for _ in range(1 if rng.random() < 0.7 else 2):
                kind = kinds[rng.integers(len(kinds))]
                held = np.argwhere(drawn[b, kind] > 0)
                i, a = held[rng.integers(len(held))]
                i, j, b_cell = kind[i], kind[rng.integers(len(kind))], int(rng.integers(cells))
                if rng.random() < 0.5:
                    drawn[b, i, a] -= 1
                    drawn[b, j, b_cell] += 1
                elif drawn[b, j, b_cell] > 0:
                    drawn[b, i, a] -= 1
                    drawn[b, j, a] += 1
                    drawn[b, j, b_cell] -= 1
                    drawn[b, i, b_cell] += 1
        drawn = drawn.reshape(batch, items, setup.chunks, setup.stages)
        drawn = drawn[valid(setup, drawn)]
        if not len(drawn):
            continue
        times = timer.times(drawn)
        k = int(np.argmin(times))
        if times[k] <= state[1]:
            state[0], state[1] = drawn[k], float(times[k])
            if state[1] < best[1]:
                best = [state[0].copy(), state[1]]
    return best[0], best[1]


def _cases(quick: bool):
    rng = np.random.default_rng(2024)
    for _ in range(2 if quick else 17):
        yield random_instance(rng)


def measure(quick: bool) -> list[dict]:
    """One row per random case: the step plan against the sapp optimum and the reference search."""
    seconds = 3.0 if quick else 30.0
    rng = np.random.default_rng(7)
    rows = []
    for table, pipeline in _cases(quick):
        start = time.perf_counter()
        plan = balance(table, objective="step", **pipeline)
        solve = time.perf_counter() - start
        setup = make_setup(table, **pipeline)
        case = (f"p={setup.stages} v={setup.chunks} m={setup.micro_batches} L={setup.layers.body_layers} "
                f"{len(setup.items)} options {pipeline['memory_mb']} MB")
        if not plan.has_plan:
            rows.append(row("balance step vs search", case, solve, None, f"{plan.status}: {plan.message}"))
            continue
        sapp = optimise(setup, SolverOptions()).counts
        fewest = least_memory(setup)
        starts = [sapp] + ([fewest] if fewest is not None and valid(setup, fewest[None])[0] else [])
        found, _ = reference_search(setup, starts, seconds, rng)
        simulated = make_plan(setup, found, status="evaluated", gap=None, solve_seconds=0.0,
                              method="reference").simulate().step_time
        sapp_time = make_plan(setup, sapp, status="evaluated", gap=None, solve_seconds=0.0,
                              method="sapp").simulate().step_time
        best = min(sapp_time, simulated)
        result = row("balance step vs search", case, solve, None,
                     f"step {plan.step_time:.1f} ({plan.method}); sapp {sapp_time:.1f} "
                     f"({plan.step_time / sapp_time - 1:+.2%}); {seconds:g} s search {simulated:.1f} "
                     f"({plan.step_time / simulated - 1:+.2%}); bound gap {plan.gap:.1%}")
        result["passed"] = bool(plan.step_time <= best * (1 + TOLERANCE))
        rows.append(result)
    return rows
