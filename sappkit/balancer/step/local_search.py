"""Local search on the simulated step time: the ``step`` objective's improvement phase.

From each start placement the search makes one change at a time while the
simulated step (:mod:`sappkit.balancer.step.steptime`) gets shorter and the
placement stays valid (:func:`~sappkit.balancer.step.moves.valid`: every stage fits, by the balancer's
memory model):

- **move**: one layer leaves a cell and joins another, keeping its option or
  changing it (within its kind); on one cell that is a recompute change;
- **swap**: two cells exchange the options of one layer each (recompute moves
  from one cell to another).

Every path through the schedule bounds the step from below, and a change
alters a path's length by the layers' times on it. So a change can only
help if it shortens the current longest path, and its new step time is at
least the longest of the *known* paths after it: the stage paths of
:func:`sappkit.pipeline.critical.stage_paths` and the longest paths of the
placements the search accepted. Each round keeps the changes whose bound
does not exceed the current step, simulates them in growing batches (the
changes that helped last round first, then by that bound), and takes the
best of the first batch that holds a better placement: faster, or as fast
with its ops ending earlier elsewhere (another longest path got shorter,
which lets the next change shorten the step). When no change helps, the
round tries every **stage exchange** (:mod:`sappkit.balancer.step.exchange`: two
stages trade their layers, recompute repaired to fit), which moves a busy
stage to where its fill and drain cost least; a round without a better
placement either way is a local optimum.

Some better placements lie several changes away, each one alone slower
(e.g. with 1F1B and few micro-batches the first stage should hold more
layers than the others). So the search then *kicks* the best placement
found (two random changes, or the exchange of two random stages, that keep
it valid) and descends again, keeping the result when it is better: an
iterated local search, until a budget of simulated placements is spent or
eight kicks in a row found nothing better (the search has converged: on
short steps the budget would buy thousands more placements that rarely
help). Most kicks are undone by their
descent, which then ends at a local optimum met before; the changes a round
tries depend on the placement alone (its longest path, exact bounds), so
the search keeps the optima it met and a descent stops on reaching one
rather than simulate its neighbourhood again. A round's longest path is
walked on the op end times of the batch that found the placement, not
timed again. Everything is deterministic: candidates in a fixed order,
kicks from a seeded generator, a budget of placements rather than of
seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..setup import BalanceSetup
from .exchange import exchanged, stage_exchanges
from .known_memory import KnownMemory
from .moves import among, applied, candidate_changes, change_bounds, valid, valid_changes, valid_placements
from .resplit import stage_resplits
from .steptime import StepTimer

__all__ = ["Changes", "Improved", "improve", "WORK_BUDGET", "MOST_PLACEMENTS"]

#: Op times computed over all starts (placements simulated x ops in the step) before the search stops: a
#: deterministic budget that buys as many placements as the schedule's size allows (about 1,900 for p = 16,
#: v = 3, m = 64; 2,900 for p = 16, v = 2, m = 64), but never more than :data:`MOST_PLACEMENTS`, for the
#: search's own work per placement (validity, candidate changes, paths) outweighs short steps' op times
#: (p = 4 with 180 layers: 16,000 placements take ~1-2 CPU s and reach what 35,000 did on the step bench's
#: stress families but one case, 0.3 % slower and still under its reference).
WORK_BUDGET = 12_000_000
MOST_PLACEMENTS = 16_000
#: The first batch of candidates simulated together in a round; each later one is twice as large.
_FIRST_BATCH = 24
_LARGEST_BATCH = 384
#: Candidates checked for validity at a time: twice those a batch still lacks, within these (a round that
#: finds a better placement in its first batch screens a few dozen, not hundreds; the order is the same).
_LEAST_SCREEN, _SCREEN = 64, 512
#: Longest paths of accepted placements kept as bounds.
_KEPT_PATHS = 24
#: A change must shorten the step by more than this fraction (ties are no improvement).
_TOLERANCE = 1e-9
#: Random changes per kick, attempts at a valid kick, placements simulated per descent after a kick.
_KICK, _KICK_TRIES, _KICK_BUDGET = 2, 50, 500
#: Kicks in a row that find nothing better before the search stops: the search has converged. On the step
#: bench's 30 stress cases 8 (with the local optima kept) gives the plans 20 did but three, case 74 0.11 %
#: slower, cases 60 and 67 0.2 and 0.3 % faster (all within 0.5 % of their references), in about half the CPU
#: time on the p = 4 families, where the placement budget is largest and kicks seldom help.
_PATIENCE = 8
#: The kicks' random generator's seed: the search is deterministic.
_SEED = 0


@dataclass(frozen=True)
class Changes:
    """How many changes of each kind a search made."""

    moves: int = 0
    swaps: int = 0
    exchanges: int = 0
    resplits: int = 0

    def __add__(self, other: Changes) -> Changes:
        return Changes(self.moves + other.moves, self.swaps + other.swaps, self.exchanges + other.exchanges,
                       self.resplits + other.resplits)

    @property
    def total(self) -> int:
        return self.moves + self.swaps + self.exchanges + self.resplits

    def describe(self) -> str:
        """E.g. ``"12 moves, 3 swaps and 1 stage exchange"``."""
        parts = [f"{n} {word}{'s' * (n != 1)}" for n, word in ((self.moves, "move"), (self.swaps, "swap"),
                                                              (self.exchanges, "stage exchange"),
                                                              (self.resplits, "stage re-split")) if n]
        return " and ".join(parts) if len(parts) < 3 else f"{', '.join(parts[:-1])} and {parts[-1]}"


@dataclass(frozen=True)
class Improved:
    """The best placement found, its simulated step time, and how it was reached."""

    counts: np.ndarray
    step_time: float
    start: str
    """The label of the start it came from."""
    changes: Changes
    """The changes the descents made on the way from the start (the kicks' own random changes aside)."""
    kicks: int
    """Kicks after which the search found a better placement."""
    evaluated: int
    """Placements simulated over all starts."""

    def describe(self) -> str:
        """Which start and which changes reached the placement, in words (a plan's ``method``)."""
        kicks = f"; {self.kicks} random kick{'s' * (self.kicks != 1)} helped" if self.kicks else ""
        return (f"{self.start}, then {self.changes.describe()} by local search{kicks}" if self.changes.total
                else f"{self.start}; no change shortens its step")


@dataclass(frozen=True)
class _Reached:
    counts: np.ndarray
    time: float
    ends: float
    """Sum of the ops' end times: the tie-break between placements of one step time."""
    changes: Changes
    evaluated: int

    def beats(self, other: _Reached) -> bool:
        """Faster, or as fast with ops ending earlier elsewhere."""
        if self.time < other.time * (1 - _TOLERANCE):
            return True
        return self.time <= other.time * (1 + _TOLERANCE) and self.ends < other.ends * (1 - _TOLERANCE)


class _Better(NamedTuple):
    """The best candidate of a batch that beats the current placement."""

    counts: np.ndarray
    time: float
    ends: float
    index: int
    """Its row in the batch."""
    op_ends: np.ndarray
    """Every op's end time (:meth:`StepTimer.runs`): its longest path without timing it again."""


def _best_better(timer: StepTimer, candidates: np.ndarray, time: float,
                 ends: float) -> tuple[_Better | None, np.ndarray]:
    """The best of ``candidates`` that beats a placement of step ``time`` and end sum ``ends`` (faster, or as
    fast with ops ending earlier elsewhere: another longest path got shorter), or None; and which of them
    beat it."""
    if not len(candidates):
        return None, np.zeros(0, dtype=bool)
    times, sums, op_ends = timer.runs(candidates)
    same = np.abs(times - time) <= time * _TOLERANCE
    better = (times < time * (1 - _TOLERANCE)) | (same & (sums < ends * (1 - _TOLERANCE)))
    if not better.any():
        return None, better
    best = int(np.lexsort((sums, np.where(same, time, times)))[0])
    return _Better(candidates[best], float(times[best]), float(sums[best]), best, op_ends[:, best]), better


def _descend(memory: KnownMemory, timer: StepTimer, counts: np.ndarray, budget: int,
             optima: set[bytes]) -> _Reached:
    """Changes from ``counts`` while they help, until none does or ``budget`` placements were simulated
    (stages priced by the search's ``memory``).

    ``optima`` holds the local optima the search has met (``counts.tobytes()``), and gains this descent's
    if it reaches one: which changes a round tries depends on the placement alone (its longest path, the
    bounds exact), so a descent that reaches a known optimum stops there without trying them all again,
    as kicks that their descent undoes do.
    """
    setup = memory.setup
    times, sums, op_ends = timer.runs(counts[None])
    time, ends, op_ends = float(times[0]), float(sums[0]), op_ends[:, 0]
    made, evaluated = Changes(), 0
    accepted = []
    helped = np.zeros((0, 8), dtype=int)
    while evaluated < budget and counts.tobytes() not in optima:
        longest = timer.critical(counts, op_ends)
        accepted = [longest, *accepted][:_KEPT_PATHS]
        paths = np.vstack([*accepted, timer.graph.paths])
        weights = timer.cell_weights(paths)
        changes = candidate_changes(setup, counts, weights[0])
        bounds = change_bounds(changes, weights, paths @ timer.durations(counts))
        keep = bounds <= time * (1 + _TOLERANCE)
        changes, bounds = changes[keep], bounds[keep]
        changes = changes[np.lexsort((bounds, ~among(changes, helped)))]
        found, size, screened = None, _FIRST_BATCH, 0
        waiting = changes[:0]  # screened valid, not simulated yet
        while found is None and evaluated < budget:
            wanted = min(size, budget - evaluated)
            while len(waiting) < wanted and screened < len(changes):
                block = changes[screened:screened + min(_SCREEN, max(2 * (wanted - len(waiting)), _LEAST_SCREEN))]
                screened += len(block)
                waiting = np.concatenate([waiting, block[valid_changes(memory, counts, block)]])
            if not len(waiting):
                break
            tried, waiting = waiting[:wanted], waiting[wanted:]
            evaluated += len(tried)
            found, better = _best_better(timer, applied(counts, tried), time, ends)
            helped = tried[better]
            size = min(2 * size, _LARGEST_BATCH)
            if found is not None:
                row = tried[found.index]
                made += Changes(moves=1) if (row[4:] == row[[0, 1, 0, 1]]).all() else Changes(swaps=1)
        if found is None and evaluated < budget:
            traded, resplit = stage_exchanges(setup, counts, memory), stage_resplits(setup, counts)
            traded, resplit = traded[valid_placements(memory, traded)], resplit[valid_placements(memory, resplit)]
            whole = np.concatenate([traded, resplit])[:budget - evaluated]
            evaluated += len(whole)
            found, _ = _best_better(timer, whole, time, ends)
            if found is not None:
                made += Changes(exchanges=1) if found.index < len(traded) else Changes(resplits=1)
        if found is None:
            if evaluated < budget:  # every change was tried
                optima.add(counts.tobytes())
            break
        counts, time, ends, _, op_ends = found
    return _Reached(counts, time, ends, made, evaluated)


def _kick(memory: KnownMemory, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
    """``counts`` after :data:`_KICK` random changes (moves or swaps), or half the time after the exchange of
    two random stages (:func:`~sappkit.balancer.step.exchange.exchanged`), that leave it valid; None if none found
    (stages priced by the search's ``memory``)."""
    setup = memory.setup
    if setup.stages > 1 and rng.random() < 0.5:
        pair = rng.choice(setup.stages, size=2, replace=False)
        kicked = exchanged(setup, counts[None], pair[:1], pair[1:], memory)[0]
        if valid_placements(memory, kicked[None])[0] and not np.array_equal(kicked, counts):
            return kicked
    items, cells = len(setup.items), setup.chunks * setup.stages
    kinds = [np.array(setup.item_indices(kind)) for kind in setup.kinds]
    for _ in range(_KICK_TRIES):
        kicked = counts.reshape(items, cells).copy()
        for _ in range(_KICK):
            kind = kinds[rng.integers(len(kinds))]
            held = np.argwhere(kicked[kind] > 0)
            i, a = held[rng.integers(len(held))]
            i, j, b = kind[i], kind[rng.integers(len(kind))], int(rng.integers(cells))
            if rng.random() < 0.5:
                kicked[i, a] -= 1
                kicked[j, b] += 1
            elif kicked[j, b] > 0:  # np.add.at: i == j or a == b repeat an index, which += would add once
                np.add.at(kicked, ([i, j, j, i], [a, a, b, b]), (-1, 1, -1, 1))
        kicked = kicked.reshape(counts.shape)
        if valid_placements(memory, kicked[None])[0]:
            return kicked
    return None


def _search(memory: KnownMemory, timer: StepTimer, states: list[_Reached], budget: int,
            optima: set[bytes]) -> tuple[list[_Reached], list[int]]:
    """Kick each placement of ``states`` in turn and descend again, keeping what beats it (iterated local
    search from several places at once), until the budget is spent or every one has had :data:`_PATIENCE`
    kicks in a row find nothing (``optima``: the local optima met, :func:`_descend`). Returns the placements
    reached and the kicks that improved each."""
    evaluated, kicks, failed = 0, [0] * len(states), [0] * len(states)
    rng = np.random.default_rng(_SEED)
    while evaluated < budget and min(failed) < _PATIENCE:
        for i, best in enumerate(states):
            if failed[i] >= _PATIENCE or evaluated >= budget:
                continue
            kicked = _kick(memory, best.counts, rng)
            evaluated += 1  # the kicked placement is simulated too
            if kicked is None:
                failed[i] = _PATIENCE
                continue
            reached = _descend(memory, timer, kicked, min(_KICK_BUDGET, budget - evaluated), optima)
            evaluated += reached.evaluated
            failed[i] += 1
            if reached.beats(best):
                states[i] = _Reached(reached.counts, reached.time, reached.ends, best.changes + reached.changes, 0)
                kicks[i], failed[i] = kicks[i] + 1, 0
    return states, kicks


def improve(setup: BalanceSetup, timer: StepTimer, starts: dict[str, np.ndarray], *,
            budget: int | None = None) -> Improved:
    """The fastest placement the search reaches from any of ``starts`` (labelled valid placements).

    Each start descends (a start equal to one before is skipped) with at most an equal share of the
    ``budget`` of simulated placements (default :data:`WORK_BUDGET` op times); then the kicks take turns over
    the placements reached with what is left. Ties go to the earlier start.
    """
    budget = min(WORK_BUDGET // timer.graph.ops, MOST_PLACEMENTS) if budget is None else budget
    memory = KnownMemory(setup)  # every stage contents priced once over the whole search
    seen, labels, states, evaluated, optima = [], [], [], 0, set()
    for label, counts in starts.items():
        counts = np.asarray(counts, dtype=int)
        if any(np.array_equal(counts, other) for other in seen):
            continue
        seen.append(counts)
        labels.append(label)
        states.append(_descend(memory, timer, counts, max(budget // (len(starts) + 1), 1), optima))
        evaluated += states[-1].evaluated
    states, kicks = _search(memory, timer, states, budget - evaluated, optima)
    i = min(range(len(states)), key=lambda k: (states[k].time, k))
    return Improved(counts=states[i].counts, step_time=states[i].time, start=labels[i], changes=states[i].changes,
                    kicks=kicks[i], evaluated=evaluated + sum(state.evaluated for state in states))
