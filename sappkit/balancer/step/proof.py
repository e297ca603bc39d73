"""The proven-fastest placement over the stages' contents: lazy paths, pruning and branch and bound.

The step time of a placement is its longest path through the schedule's graph, so it is the largest of
finitely many linear functions of the cells' phase times, one per path. With a placement one content per
stage (:mod:`.contents`), this search proves the optimum over them:

1. **Paths.** Start from the schedule's stage paths and, for the best placement known and each placement
   one layer away from it, the longest path through every stage
   (:func:`~sappkit.pipeline.paths.stage_critical_paths`). Each is a valid cut: no placement's step time
   is shorter than any of its paths.
2. **Pruning.** Per path, a DP over stages on the model position gives, for every stage and run, the
   shortest that path can be with that run in place; a run whose best is no shorter than the best step
   known cannot be in a faster placement and goes. Repeat until nothing goes.
3. **Branch and bound.** A depth-first search over stages, one run after another, for a placement whose
   every known path is shorter than the best step known; a partial placement goes as soon as one path,
   completed at its shortest (the DP of step 2), reaches the best. None found proves the best optimal;
   otherwise the placement's exact step time either beats the best or shows paths the set lacked (its own
   and those of the placements one layer away), which join it, and the search repeats.

Every cut is a path of the graph, so every answer is exact. Budgets (rounds, and nodes per search) keep it
finite; past them the result says so, with the least bound of the partial placements left open as a proven
lower bound. A placement one layer away from another moves a run boundary: between those two stages every
run shifts by one (with several body kinds the frontier moves with it and stays valid), and a stage whose
run changes takes the content nearest its old one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...pipeline.critical import step_ends
from ...pipeline.paths import stage_critical_paths
from ..exact.cells import Cache
from ..setup import BalanceSetup
from .contents import StageContents, stage_contents
from .steptime import StepTimer

__all__ = ["Proof", "prove", "search", "ROUNDS", "NODES", "CUTOFF"]

#: Searches for a faster placement before the proof stops unproven, and nodes each may visit.
ROUNDS, NODES = 40, 20_000
#: A placement must be this much faster than the best known to count (ties are no improvement).
CUTOFF = 1e-9


@dataclass(frozen=True)
class Proof:
    """The fastest placement found, its step time, a proven lower bound, and how it was found."""

    counts: np.ndarray
    step_time: float
    lower: float
    proven: bool
    start: str
    """The label of the start whose placement (or a content-wise as fast one) began the search."""
    moves: int
    """Layers the descent from that start moved."""
    improved: int
    """Placements the branch and bound found that beat the best known."""
    rounds: int
    """Branch-and-bound searches run."""
    paths: int
    """Paths of the graph the proof used."""

    def describe(self) -> str:
        """How the search found the placement, in words (a plan's ``method``)."""
        plural = lambda n, word: f"{n} {word}{'s' * (n != 1)}"  # noqa: E731
        outcome = "proven optimal" if self.proven else "not proven within the search's budgets"
        return (f"{plural(self.moves, 'layer move')} by descent from the {self.start}, "
                f"{plural(self.improved, 'faster placement')} by branch and bound; {outcome} "
                f"({plural(self.rounds, 'round')}, {plural(self.paths, 'path')} of the schedule)")


class _Runs:
    """Which contents each stage may take at each model position, and the nearest to another."""

    def __init__(self, contents: StageContents):
        self.contents = contents
        self.at = []
        for s in range(len(contents.starts)):
            table: dict[tuple[int, int], list[int]] = {}
            for key, c in zip(zip(contents.starts[s].tolist(), contents.lengths[s].tolist()),
                              contents.content[s].tolist()):
                table.setdefault(key, []).append(c)
            self.at.append(table)

    def bounds(self, chosen: list[int]) -> np.ndarray:
        """Where each stage's run starts, and the total at the end."""
        return np.r_[0, np.cumsum([self.contents.mixes[s][c].sum() for s, c in enumerate(chosen)])]

    def nearest(self, s: int, start: int, length: int, mix: np.ndarray) -> int | None:
        """The content of stage ``s``'s run ``(start, length)`` nearest ``mix``, then of least time."""
        options = self.at[s].get((start, length))
        if not options:
            return None
        mixes, phases = self.contents.mixes[s][options], self.contents.phases[s][options]
        distance = np.abs(mixes - mix).sum(axis=(1, 2))
        return options[int(np.lexsort((phases.sum(axis=(1, 2)), distance))[0])]

    def choice_of(self, timer: StepTimer, counts: np.ndarray) -> list[int] | None:
        """A content per stage with the placement's layers per cell and no longer phase times, or None."""
        counts = np.asarray(counts)
        bounds = np.r_[0, np.cumsum(counts.sum(axis=(0, 1)))]
        chosen = []
        for s in range(counts.shape[-1]):
            options = self.at[s].get((int(bounds[s]), int(bounds[s + 1] - bounds[s])), [])
            mine = np.einsum("fi,ic->fc", timer.per_item, counts[:, :, s]) + timer.fixed[:, :, s]
            fit = [c for c in options if (self.contents.mixes[s][c].sum(axis=0) == counts[:, :, s].sum(axis=0)).all()
                   and (self.contents.phases[s][c] <= mine * (1 + 1e-9) + 1e-9).all()]
            if not fit:
                return None
            chosen.append(min(fit, key=lambda c: self.contents.phases[s][c].sum()))
        return chosen

    def neighbours(self, chosen: list[int]) -> list[list[int]]:
        """Every placement one layer away (module docstring)."""
        bounds, p, found = self.bounds(chosen), len(chosen), []
        for source in range(p):
            for target in range(p):
                if source == target:
                    continue
                shifted = bounds.copy()
                if source < target:
                    shifted[source + 1: target + 1] -= 1
                else:
                    shifted[target + 1: source + 1] += 1
                moved = [c if (shifted[s], shifted[s + 1]) == (bounds[s], bounds[s + 1]) else
                         self.nearest(s, int(shifted[s]), int(shifted[s + 1] - shifted[s]),
                                      self.contents.mixes[s][c]) for s, c in enumerate(chosen)]
                if all(c is not None for c in moved):
                    found.append(moved)
        return found


def _descend(timer: StepTimer, runs: _Runs, chosen: list[int]) -> tuple[list[int], int]:
    """Steepest descent over placements one layer away: the fastest while it is faster, or as fast with its ops
    ending earlier (another longest path got shorter); and the moves it made."""
    time, ends = (float(x[0]) for x in step_ends(timer.graph, runs.contents.durations(timer, chosen)[None]))
    moves = 0
    while True:
        around = runs.neighbours(chosen)
        if not around:
            return chosen, moves
        times, sums = step_ends(timer.graph, np.stack([runs.contents.durations(timer, c) for c in around]))
        pick = np.lexsort((sums, times))[0]
        if not (times[pick] < time * (1 - CUTOFF)
                or (times[pick] <= time * (1 + CUTOFF) and sums[pick] < ends * (1 - CUTOFF))):
            return chosen, moves
        chosen, time, ends, moves = around[pick], float(times[pick]), float(sums[pick]), moves + 1


def _cuts(timer: StepTimer, contents: StageContents, choices: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The step times of placements and the longest path through every stage of each (rows of counts)."""
    durations = np.stack([contents.durations(timer, chosen) for chosen in choices])
    times, paths = stage_critical_paths(timer.graph, durations)
    return times, paths.reshape(-1, timer.graph.durations)


def _weights(contents: StageContents, timer: StepTimer, paths: np.ndarray) -> list[np.ndarray]:
    """Per stage ``[content, path]``: the length each content adds to each path (rows of duration counts)."""
    cells = len(timer.order)
    position = np.argsort(timer.order).reshape(timer.fixed.shape[1], timer.fixed.shape[2])  # [chunk, stage]
    phases = np.arange(timer.fixed.shape[0])[:, None] * cells
    return [np.einsum("nfc,pfc->np", contents.phases[s], paths[:, phases + position[None, :, s]])
            for s in range(len(contents.phases))]


def _sweep(contents: StageContents, weights: list[np.ndarray], alive: list[np.ndarray],
           forward: bool) -> list[np.ndarray]:
    """Per stage boundary and model position ``[position, path]``: the shortest each path can be over the
    stages before (``forward``) or after that boundary, with the position where they meet."""
    p, total, paths = len(alive), contents.total, weights[0].shape[1]
    table = [np.full((total + 1, paths), np.inf) for _ in range(p + 1)]
    table[0 if forward else p][0 if forward else total] = 0.0
    for s in (range(p) if forward else range(p - 1, -1, -1)):
        live = np.flatnonzero(alive[s])
        start, end = contents.starts[s][live], contents.starts[s][live] + contents.lengths[s][live]
        source, target = (start, end) if forward else (end, start)
        reached = table[s if forward else s + 1][source] + weights[s][contents.content[s][live]]
        order = np.argsort(target, kind="stable")
        groups = np.flatnonzero(np.r_[True, np.diff(target[order]) > 0])
        if len(order):
            table[s + 1 if forward else s][target[order][groups]] = np.minimum.reduceat(reached[order], groups, axis=0)
    return table


def _prune(contents: StageContents, weights: list[np.ndarray], upper: float) -> list[np.ndarray]:
    """Per stage, which listed runs some placement faster than ``upper`` may use, by every path."""
    limit = upper * (1 - CUTOFF)
    alive = [np.ones(len(starts), dtype=bool) for starts in contents.starts]
    while True:
        before, after = _sweep(contents, weights, alive, forward=True), _sweep(contents, weights, alive, False)
        dropped = False
        for s, runs in enumerate(alive):
            live = np.flatnonzero(runs)
            start, end = contents.starts[s][live], contents.starts[s][live] + contents.lengths[s][live]
            best = before[s][start] + weights[s][contents.content[s][live]] + after[s + 1][end]
            beyond = live[(best >= limit).any(axis=1)]
            if len(beyond):
                runs[beyond], dropped = False, True
        if not dropped or not all(runs.any() for runs in alive):
            return alive


def _branch(contents: StageContents, weights: list[np.ndarray], alive: list[np.ndarray],
            upper: float) -> tuple[list[int] | None, float]:
    """A placement over the ``alive`` runs whose every path is shorter than ``upper`` (module docstring, step 3),
    or None; with the least bound left open when the node budget stopped the search (``upper`` when it ran
    out of nodes to visit)."""
    limit, p = upper * (1 - CUTOFF), len(alive)
    after = _sweep(contents, weights, alive, forward=False)
    from_position = []
    for s in range(p):
        live = np.flatnonzero(alive[s])
        start = contents.starts[s][live]
        order = np.argsort(start, kind="stable")
        groups = np.split(live[order], np.flatnonzero(np.diff(start[order])) + 1)
        from_position.append({int(contents.starts[s][g[0]]): (contents.starts[s][g] + contents.lengths[s][g],
                                                               contents.content[s][g]) for g in groups if len(g)})
    stack = [(0.0, 0, 0, np.zeros(weights[0].shape[1]), [])]
    for _ in range(NODES):
        if not stack:
            return None, upper
        _, s, position, lengths, chosen = stack.pop()
        if s == p:
            return chosen, upper
        ends, kept = from_position[s].get(position, (np.zeros(0, int), np.zeros(0, int)))
        grown = lengths[None, :] + weights[s][kept]
        bounds = (grown + after[s + 1][ends]).max(axis=1)
        below = np.flatnonzero(bounds < limit)
        for k in below[np.argsort(-bounds[below], kind="stable")]:
            stack.append((float(bounds[k]), s + 1, int(ends[k]), grown[k], chosen + [int(kept[k])]))
    return None, min([upper, *(node[0] for node in stack)])


def prove(timer: StepTimer, contents: StageContents, starts: dict[str, np.ndarray]) -> Proof | None:
    """The fastest placement over ``contents``, proven where the budgets allow (module docstring), from the
    labelled placements ``starts`` (the fastest, after a descent); None when no start maps onto the
    contents."""
    runs = _Runs(contents)
    mapped = {label: runs.choice_of(timer, counts) for label, counts in starts.items()}
    mapped = {label: chosen for label, chosen in mapped.items() if chosen is not None}
    if not mapped:
        return None
    labels = list(mapped)
    times, _ = _cuts(timer, contents, list(mapped.values()))
    first = int(np.argmin(times))
    best, moves = _descend(timer, runs, mapped[labels[first]])
    found_times, paths = _cuts(timer, contents, [best] + runs.neighbours(best))
    best_time, improved, rounds, lower = float(found_times[0]), 0, 0, -np.inf
    cuts = np.unique(np.vstack([timer.graph.paths, paths]), axis=0)
    while rounds < ROUNDS:
        weights = _weights(contents, timer, cuts)
        alive = _prune(contents, weights, best_time)
        if not all(runs_of_stage.any() for runs_of_stage in alive):
            lower = best_time
            break
        found, lower = _branch(contents, weights, alive, best_time)
        rounds += 1
        if found is None:
            break
        found_times, paths = _cuts(timer, contents, [found] + runs.neighbours(found))
        cuts = np.unique(np.vstack([cuts, paths]), axis=0)
        if found_times[0] < best_time * (1 - CUTOFF):
            best, best_time, improved = found, float(found_times[0]), improved + 1
    else:  # out of rounds: every path's shortest over the runs left bounds the optimum
        weights = _weights(contents, timer, cuts)
        alive = _prune(contents, weights, best_time)
        lower = float(_sweep(contents, weights, alive, forward=True)[-1][contents.total].max())
    return Proof(counts=contents.placement(best), step_time=best_time, lower=min(lower, best_time),
                 proven=lower >= best_time, start=labels[first], moves=moves, improved=improved, rounds=rounds,
                 paths=len(cuts))


def search(setup: BalanceSetup, timer: StepTimer, cache: Cache, starts: dict[str, np.ndarray]) -> Proof | None:
    """:func:`prove` over the stage contents of ``setup`` (:mod:`.contents`, which must apply) that the fastest
    start leaves possible: a stage runs every unit's forward and backward one after another, so its time is
    at most the step time over the units."""
    upper = min(timer.time(counts) for counts in starts.values())
    return prove(timer, stage_contents(setup, timer, cache, upper / setup.slices), starts)
