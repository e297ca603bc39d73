"""The step bench's reference plans: a long randomised search per case, run once and stored.

:func:`reference_search` is a simulator-driven local search written apart from the balancer's own: from
several starts (:func:`reference_starts`: the ``sapp`` optimum, every even plan that fits, the least-memory
placement), random single and double changes, sideways moves accepted, a seeded generator. Each case of
:func:`sappkit.bench.step_cases.step_cases` runs it for the case's CPU seconds (30, 60 or 120) from the generator
``np.random.default_rng((SEARCH_SEED, index))``. That takes about 70 minutes of CPU for all 87 cases, so
``python data/make_step_references.py`` runs it once and writes :data:`REFERENCE_FILE` (bundled data): per
case the best placement, its step time and how many rounds the search ran. Given the rounds, the search is
deterministic: :func:`search_case` with ``rounds=`` re-runs it exactly, whatever the machine's speed, and
each case also stores the best placement after :data:`CHECKPOINT_ROUNDS` rounds, which a slow test
regenerates on a few cases. ``sappkit bench --only step`` then compares against the stored plans in seconds.
"""

from __future__ import annotations

import json
import time

import numpy as np

from .._files import bundled
from ..errors import InputError
from ..balancer.exact import least_memory
from ..balancer.ilp.solver import SolverOptions
from ..balancer.optimise import optimise
from ..balancer.setup import BalanceSetup, make_setup
from ..balancer.step.moves import valid
from ..balancer.step.steptime import step_timer
from ..balancer.views import even_plan
from .step_cases import Case

__all__ = ["reference_search", "reference_starts", "search_case", "search_seconds", "stored_references",
           "REFERENCE_FILE", "SEARCH_SEED", "CHECKPOINT_ROUNDS"]

#: The bundled file of stored reference plans (:func:`stored_references`).
REFERENCE_FILE = "step_references.json"
#: Case ``k``'s search draws from ``np.random.default_rng((SEARCH_SEED, k))``.
SEARCH_SEED = 7
#: Every stored case also keeps the search's best after this many rounds (cheap to regenerate).
CHECKPOINT_ROUNDS = 30


def reference_search(setup: BalanceSetup, starts: list[np.ndarray], rng: np.random.Generator, *,
                     seconds: float | None = None, rounds: int | None = None,
                     batch: int = 32) -> tuple[np.ndarray, float, int]:
    """Randomised local search round-robin over ``starts`` until ``rounds`` rounds or ``seconds`` of CPU time
    (whichever comes first; one of them is needed): ``(best placement, its step time in ms, rounds run)``.

    Each round draws ``batch`` placements from one start's current one, each
    one or two random changes (a layer to any cell and any option of its kind,
    or an option swap between two cells), and moves to the fastest valid
    one unless it is slower. With ``rounds`` alone the result depends only
    on ``rng``.
    """
    if seconds is None and rounds is None:
        raise ValueError("reference_search needs seconds or rounds")
    timer = step_timer(setup)
    items, cells = len(setup.items), setup.chunks * setup.stages
    kinds = [np.array(setup.item_indices(kind)) for kind in setup.kinds]
    states = [[np.asarray(c, dtype=int), timer.time(c)] for c in starts]
    best = min(states, key=lambda state: state[1])
    best = [best[0].copy(), best[1]]
    end, turn = time.process_time() + (np.inf if seconds is None else seconds), 0
    while (rounds is None or turn < rounds) and time.process_time() < end:
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
    return best[0], best[1], turn


def reference_starts(case: Case) -> tuple[BalanceSetup, np.ndarray, list]:
    """``(setup, the sapp optimum's counts, the even plans that fit)`` of ``case``: with the least-memory
    placement when it is valid, the starts of its reference search."""
    setup = make_setup(case.table, **case.pipeline)
    sapp = optimise(setup, SolverOptions()).counts
    even = [p for p in (even_plan(case.table, option=o, **case.pipeline) for _, o in setup.items) if p.fits]
    return setup, sapp, even


def _search_starts(setup: BalanceSetup, sapp: np.ndarray, even: list) -> list[np.ndarray]:
    fewest = least_memory(setup)
    return [sapp, *(p.counts for p in even)] + ([fewest] if fewest is not None and valid(setup, fewest[None])[0]
                                                else [])


def search_case(case: Case, *, rounds: int | None = None) -> dict:
    """The reference search of ``case`` as :data:`REFERENCE_FILE` stores it: its :data:`CHECKPOINT_ROUNDS`
    checkpoint, then the search for ``case.seconds`` of CPU time (stored as ``seconds``), or for exactly
    ``rounds`` rounds (to regenerate a stored case; ``rounds=CHECKPOINT_ROUNDS`` gives the checkpoint
    alone)."""
    setup, sapp, even = reference_starts(case)
    starts = _search_starts(setup, sapp, even)
    found = {}
    for name, limit in (("checkpoint", CHECKPOINT_ROUNDS), ("reference", rounds)):
        if name == "reference" and rounds == CHECKPOINT_ROUNDS:
            break
        counts, step_ms, run = reference_search(setup, starts, np.random.default_rng((SEARCH_SEED, case.index)),
                                                seconds=case.seconds if limit is None else None, rounds=limit)
        found[name] = dict(rounds=run, step_time_ms=step_ms, counts=counts.ravel().tolist())
    return dict(index=case.index, benchmark=case.benchmark, pipeline=case.pipeline,
                shape=list(np.shape(sapp)), seconds=case.seconds, **found.pop("reference", {}), **found)


def search_seconds(case: Case, stored: dict | None) -> float:
    """The CPU seconds the reference search of ``case`` ran: the stored ``seconds`` (a stored search may have
    run longer than the case asks, never shorter), else the case's own."""
    return float(stored.get("seconds", case.seconds)) if stored is not None else case.seconds


def stored_references() -> dict[int, dict]:
    """The stored reference of every case in :data:`REFERENCE_FILE`, by case index (empty when none is
    stored)."""
    try:
        path = bundled(REFERENCE_FILE)
    except InputError:  # not stored yet: the bench searches live
        return {}
    return {case["index"]: case for case in json.loads(path.read_text())["cases"]}
