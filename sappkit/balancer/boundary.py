"""Exact search for one or two body kinds over several chunks: a DP over stages that carries the kind boundary.

With ``v > 1`` chunks a stage holds ``v`` cells far apart in model order, so
the run DP of :mod:`.segments` does not apply. With two kinds in model order
the first kind's last layer sits on one cell, the *boundary cell* ``(c*,
s*)``: cells before it in model order hold the first kind only, cells after
it the second only, and it may hold the end of the first and the start of
the second (not on DualPipeV's chunk 1, where seed 003's frontier counts the
cell itself as earlier). So for a boundary chunk ``c*`` every stage's cells
follow one of three patterns: the one of the stages before ``s*`` in the
DP's stage order, the boundary stage's, the one after. One kind is the
case ``n1 = 0`` with one pattern; pricing a cell's layer count rather
than every product of its front points is what makes this search faster
than :mod:`.exact`'s enumeration there too.

Per stage and pattern the search lists every product of the cells'
compositions (layers of each kind) whose stage time can stay under a cap
``tau``. A cell's contents are points of its composition's front
(:func:`~sappkit.balancer.segments.run_front`), and for a backward cap
``beta`` the lightest point under it is all memory needs (memory grows with
every cell's activation and charged working set; a charged cell keeps one
such staircase per working set), so a product is priced at the least
``beta`` that fits, by a search over the cells' backward values
(:mod:`.stage_tables`), and contents are priced per layers of each kind
``(n0, n1)`` only while they could beat the best found. A DP over stages
with state (before or after the boundary, ``n0``, ``n1``) finds the least
largest stage time: the ``sapp`` objective at levels 0 and 1 where ``m !=
p``. ``tau`` grows until the optimum lies under it, which proves it: a
better placement would use only listed contents. It starts at the same
DP's optimum with every content at its least stage time (no pricing, only
listings), a lower bound. As in :mod:`.exact`, relaxed memory gives the
lower bound, exact memory the placement.

Where ``m = p`` the objective splits into ``S + max(L, S)`` (``S`` the
largest backward of a chunk but the last, ``L`` the last chunk's term):
for a bound ``sigma`` on ``S`` the same DP finds the least largest ``L``,
and a branch and bound over ``sigma`` (:func:`_split_round`) finds the
least objective under ``tau``, which starts a growth step above the
unpriced bound (:func:`_unpriced_bound`). Past :data:`_SPLIT_BUDGET`
bounds tried it hands its best placement, unproven, to the integer program
(with one kind, :mod:`.exact`'s enumeration may prove it first).
"""

from __future__ import annotations

import heapq

import numpy as np

from .cells import EPS, Cache
from ..columns import MEMORY_MB
from .evaluate import evaluate
from . import segments
from .segments import within
from .setup import V_SHAPED, BalanceSetup
from .stage_bounds import monotone_chunks
from .stage_cells import cells_of, counts_of, stage_key
from .stage_tables import StageTable, least_shared_cap, stage_table

__all__ = ["applicable", "search", "least_memory"]

#: How the cap on the stage time grows when no placement lies under it; the memory cap's growth.
_GROWTH, _MEMORY_GROWTH = 1.15, 1.3
#: Bounds on ``S`` the split objective's search may try (each a DP over every stage's priced contents) before it
#: hands its best placement, unproven, to the integer program.
_SPLIT_BUDGET = 60


def applicable(setup: BalanceSetup) -> str:
    """Why the search does not apply to ``setup`` ('' when it does)."""
    if len(setup.kinds) > 2:
        return "more than two body kinds with more than one chunk"
    shared = segments.applicable(setup)
    if shared:
        return shared
    if not all(monotone_chunks(setup, s).all() for s in range(setup.stages)):
        return "a chunk whose stage memory falls as it holds more (DualPipeV under seed 003's overhead)"
    return ""


# ------------------------------------------------------------------ the DP over stages


def _boundary_chunks(setup: BalanceSetup) -> range:
    """The chunks the first kind may end on (one stands for all with one kind, whose patterns coincide)."""
    return range(setup.chunks if len(setup.kinds) == 2 else 1)


def _work(setup: BalanceSetup, values: np.ndarray, pick) -> float:
    """Every layer's ``values`` on the option ``pick`` (min or max) takes for its kind, summed."""
    return float(setup.counts @ np.array([pick(values[setup.item_indices(kind)]) for kind in setup.kinds]))


def _patterns(setup: BalanceSetup, boundary_chunk: int) -> tuple[tuple, tuple, tuple]:
    """What each chunk holds on stages before the boundary stage (in stage order), on it, and after it (with one
    kind the three coincide, so any stage may play the boundary stage's part)."""
    if len(setup.kinds) == 1:
        return ((0,) * setup.chunks,) * 3
    c = boundary_chunk
    reversed_chunk = setup.schedule in V_SHAPED and c == 1  # runs back up the V: later stages come first
    first, then = (1, 0) if reversed_chunk else (0, 1)
    earlier = tuple(0 if d < c else 1 for d in range(setup.chunks))

    def with_chunk(holds):
        return earlier[:c] + (holds,) + earlier[c + 1:]

    return with_chunk(first), with_chunk("both"), with_chunk(then)


def _advance(state: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One stage of the min-max DP: per ``(n0, n1)`` after it, the best over the table's entries ``(a, b)`` of
    ``max(state[n0 - a, n1 - b], table[a, b])``, and the entry taken (its a, b); computed only within the box
    the entries the state holds (below inf) reach."""
    shape = state.shape
    best, best_a, best_b = np.full(shape, np.inf), np.zeros(shape, int), np.zeros(shape, int)
    a, b = np.nonzero(np.isfinite(table))
    held0, held1 = np.nonzero(state < np.inf)
    if not a.size or not held0.size:
        return best, best_a, best_b
    box = tuple(slice(held.min() + step.min(), min(size, held.max() + step.max() + 1))
                for held, step, size in ((held0, a, shape[0]), (held1, b, shape[1])))
    if any(side.start >= side.stop for side in box):
        return best, best_a, best_b
    n0, n1 = np.meshgrid(np.arange(box[0].start, box[0].stop), np.arange(box[1].start, box[1].stop), indexing="ij")
    src0, src1 = n0[None] - a[:, None, None], n1[None] - b[:, None, None]
    valid = (src0 >= 0) & (src1 >= 0)
    offered = np.where(valid, np.maximum(state[np.maximum(src0, 0), np.maximum(src1, 0)],
                                         table[a, b][:, None, None]), np.inf)
    entry = offered.argmin(axis=0)
    best[box] = np.take_along_axis(offered, entry[None], axis=0)[0]
    best_a[box], best_b[box] = a[entry], b[entry]
    return best, best_a, best_b


def _solve(setup: BalanceSetup, tables: list[tuple[StageTable, StageTable, StageTable]],
           exact: bool) -> tuple[float, list[tuple[int, int]]]:
    """Least largest stage value for one boundary chunk, and per stage (which pattern, content index)."""
    n0, n1 = counts_of(setup)
    before = np.full((n0 + 1, n1 + 1), np.inf)
    before[0, 0] = -np.inf
    after = np.full_like(before, np.inf)
    steps = []
    for stage_tables in tables:
        values = [t.exact if exact else t.relaxed for t in stage_tables]
        stay, stay_a, stay_b = _advance(before, values[0])
        cross, cross_a, cross_b = _advance(before, values[1])
        keep, keep_a, keep_b = _advance(after, values[2])
        crossed = cross < keep
        steps.append((stay_a, stay_b, np.where(crossed, cross_a, keep_a), np.where(crossed, cross_b, keep_b),
                      crossed))
        before, after = stay, np.minimum(cross, keep)
    value = float(after[n0, n1])
    if not np.isfinite(value):
        return np.inf, []
    picks, phase, left = [], 1, (n0, n1)
    for s in range(setup.stages - 1, -1, -1):
        stay_a, stay_b, take_a, take_b, crossed = steps[s]
        if phase == 0:
            pattern, a, b = 0, stay_a[left], stay_b[left]
        else:
            pattern, a, b = (1 if crossed[left] else 2), take_a[left], take_b[left]
            phase = 0 if crossed[left] else 1
        table = tables[s][pattern]
        pick = (table.exact_pick if exact else table.relaxed_pick)[a, b]
        picks.append((pattern, int(pick)))
        left = (left[0] - int(a), left[1] - int(b))
    return value, picks[::-1]


def _placement(setup: BalanceSetup, tables, picks) -> np.ndarray:
    """The counts of the picked contents: every cell on its lightest point under the content's backward cap,
    within the working-set group of the content's exact pricing."""
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for s, (pattern, content) in enumerate(picks):
        table = tables[s][pattern]
        counts[:, :, s], _ = _stage_counts(setup, table, content, table.beta[content], int(table.group[content]))
    return counts


def _stage_counts(setup: BalanceSetup, table: StageTable, content: int, beta: np.ndarray,
                  group: int) -> tuple[np.ndarray, float]:
    """``[item, chunk]``: the table's ``content`` with every cell on its lightest point under its cap in
    ``beta``, within the working-set groups ``group`` (an index into their product); and the largest backward
    of its cells but the last."""
    counts, backward = np.zeros((len(setup.items), setup.chunks), dtype=int), 0.0
    groups = np.unravel_index(group, [len(cell.working) for cell in table.cells])
    for c, cell in enumerate(table.cells):
        composition = table.contents[content, c:c + 1]
        _, step = cell.least_activation(composition, beta[c:c + 1])
        point = int(step[0, groups[c]])
        counts[:, c] = cell.mix(int(composition[0]), point)
        if c < len(table.cells) - 1:
            backward = max(backward, float(cell.stairs.backward[point]))
    return counts, backward


def _settled(setup: BalanceSetup, found, sigmas: np.ndarray, i: int) -> tuple[int, np.ndarray]:
    """The least candidate ``d <= i`` at which the contents of the exact placement found at ``sigmas[i]`` fit
    with ``L`` no larger (each stage's last cell capped at what keeps its ``L`` within the optimum), and that
    placement: ``lambda`` is then the same on candidates ``d .. i``, where the objective is least at ``d``.

    A stage fits at its own ``S`` (its points stay the lightest under it), so stages are settled from the
    largest ``S`` down, until the rest are within the least cap found."""
    _, value, counts, tables, picks = found
    placed, own = counts.copy(), {}
    for s, (pattern, content) in enumerate(picks):
        table = tables[s][pattern]
        own[s] = _stage_counts(setup, table, content, table.beta[content], int(table.group[content]))[1]
    settled = 0.0
    for s in sorted(own, key=own.get, reverse=True):
        if within(own[s], settled):
            break
        pattern, content = picks[s]
        table = tables[s][pattern]
        offset = max(float(cell.forward[table.contents[content, c]]) for c, cell in enumerate(table.cells))
        cap, beta, group = least_shared_cap(setup, table, s, content, value - offset, own[s])
        settled = max(settled, cap)
        placed[:, :, s], _ = _stage_counts(setup, table, content, beta, group)
    return int(np.searchsorted(sigmas, settled - EPS * max(1.0, settled))), placed


def _optimum(setup: BalanceSetup, cache: Cache, cap: float, measure: str, sigma: float | None = None,
             priced: bool = True):
    """(relaxed optimum, exact optimum, its placement or None) of the min-max over stages of their values (the
    stage time, ``L`` under ``sigma``, or memory) over every boundary chunk under ``cap``; None past the
    enumeration budget. Unpriced (:func:`~sappkit.balancer.stage_tables.stage_table`), the relaxed optimum
    alone (:func:`_unpriced_bound`). A boundary chunk whose listed contents make up no placement (its
    unpriced optimum passes ``cap``: every listed content is under it) is not priced."""
    relaxed_best, exact_best, counts = np.inf, np.inf, None
    for boundary_chunk in _boundary_chunks(setup):
        if priced and measure != "memory":
            unpriced = _chunk_optimum(setup, cache, boundary_chunk, cap, measure, None, False)
            if unpriced is None:
                return None
            if not within(unpriced[0], cap):
                relaxed_best = min(relaxed_best, unpriced[0])
                continue
        found = _chunk_optimum(setup, cache, boundary_chunk, cap, measure, sigma, priced)
        if found is None:
            return None
        relaxed, value, placed, _, _ = found
        relaxed_best = min(relaxed_best, relaxed)
        if placed is not None and value < exact_best:
            exact_best, counts = value, placed
    return relaxed_best, exact_best, counts


def _chunk_optimum(setup: BalanceSetup, cache: Cache, boundary_chunk: int, cap: float, measure: str,
                   sigma: float | None, priced: bool):
    """:func:`_optimum` for one boundary chunk; unpriced optima cached, the search asks for them every round."""
    key = stage_key(setup, "optimum", boundary_chunk, measure, round(cap, 9), sigma) if not priced else None
    if key in cache.stages:
        return cache.stages[key]
    patterns = _patterns(setup, boundary_chunk)
    tables = []
    for s in range(setup.stages):
        stage = tuple(stage_table(setup, cache, s, pattern, cap, measure, sigma, priced) for pattern in patterns)
        if any(table is None for table in stage):
            return None
        tables.append(stage)
    relaxed, _ = _solve(setup, tables, exact=False)
    found = (relaxed, np.inf, None, tables, [])
    if priced:
        value, picks = _solve(setup, tables, exact=True)
        found = (relaxed, value, _placement(setup, tables, picks) if picks else None, tables, picks)
    if key is not None:
        cache.stages[key] = found
    return found


def search(setup: BalanceSetup, cache: Cache) -> tuple[bool, np.ndarray | None, float, float] | None:
    """(proven, placement, its value, lower bound) for ``setup``'s ``sapp`` objective; placement None
    (proven) when nothing fits; None past the enumeration budget."""
    if not evaluate(setup, _even_lightest(setup)).fits and _fits(setup, cache) is False:
        return True, None, np.inf, np.inf
    if setup.bottleneck_split:
        return _search_split(setup, cache)
    fixed = setup.fixed_forward.sum() + setup.fixed_backward.sum()
    least_work = _work(setup, setup.forward + setup.backward, np.min) + fixed
    most_work = _work(setup, setup.forward + setup.backward, np.max) + fixed
    tau = lower = _unpriced_bound(setup, cache, least_work / (setup.stages * setup.chunks), most_work, "time")
    if tau is None or not np.isfinite(tau):
        return None if tau is None else (False, None, np.inf, most_work)
    while True:
        found = _optimum(setup, cache, tau, "time")
        if found is None:
            return None
        relaxed, value, counts = found
        if within(relaxed, tau):
            lower = relaxed
            if counts is not None and within(value, tau):
                return bool(within(value, lower)), counts, value, lower
        else:
            lower = max(lower, tau)
        if tau >= most_work:  # every content was listed: no placement fits with exact memory
            return False, None, np.inf, lower
        # a placement found above the cap bounds the optimum: listing up to it proves it
        tau = min(tau * _GROWTH, most_work, value if counts is not None else np.inf)


def _search_split(setup: BalanceSetup, cache: Cache) -> tuple[bool, np.ndarray | None, float, float] | None:
    """:func:`search` for the split objective ``S + max(L, S)``: the cap ``tau`` on it grows as for the stage
    time, and each round bounds ``S`` by ``sigma`` (:func:`_split_round`)."""
    least_backward = _work(setup, setup.backward, np.min) + setup.fixed_backward.sum()
    most_work = _work(setup, setup.forward + setup.backward, np.max) + setup.fixed_backward.sum() \
        + setup.fixed_forward.sum()
    lower = _unpriced_bound(setup, cache, 2 * least_backward / (setup.stages * setup.chunks), 3 * most_work, "split")
    if lower is None or not np.isfinite(lower):
        return None if lower is None else (False, None, np.inf, 3 * most_work)
    tau = lower * _GROWTH  # S and L peak on different stages: the bound is seldom within reach
    budget, kept = [_SPLIT_BUDGET], (np.inf, None)
    while True:
        value, counts, round_lower = _split_round(setup, cache, tau, budget, kept)
        kept = (value, counts)
        if round_lower is None:  # past the budget: the best placement found, unproven
            return None if kept[1] is None else (False, kept[1], kept[0], lower)
        lower = max(lower, round_lower)
        if counts is not None and within(value, tau):
            return bool(within(value, lower)), counts, value, lower
        if tau >= 3 * most_work:  # every content was listed: no placement fits with exact memory
            return False, None, np.inf, lower
        tau = min(tau * _GROWTH, 3 * most_work, value if counts is not None else np.inf)


def _unpriced_bound(setup: BalanceSetup, cache: Cache, tau: float, ceiling: float, measure: str) -> float | None:
    """The min-max DP's optimum with every content at its least value (memory past its lightest point aside),
    from the cap ``tau`` grown until the optimum lies under it: every content of a better placement is then
    listed, so it bounds the objective from below, found with listings and DPs alone (the split objective's
    stage value ``S_s + max(L_s, S_s)`` is at most its ``S + max(L, S)``). None past the enumeration budget,
    inf where nothing is listed up to ``ceiling``."""
    while True:
        found = _optimum(setup, cache, tau, measure, priced=False)
        if found is None:
            return None
        if within(found[0], tau):
            return found[0]
        if tau >= ceiling:
            return np.inf
        tau = min(tau * _GROWTH, ceiling)


def _split_round(setup: BalanceSetup, cache: Cache, tau: float, budget: list[int], kept: tuple):
    """(least objective found, its placement or None, lower bound) of the split objective with the contents
    listed under ``tau``, from the best placement ``kept`` (objective, counts) of earlier rounds; exact where it
    is at most ``tau``. The lower bound (on the objective or ``tau``, whichever is less) is None where the round
    stopped short, past ``budget`` (the evaluations left, counted down) or the enumeration budget.

    For a boundary chunk and a bound ``sigma`` on ``S`` the min-max DP over ``L`` gives ``lambda(sigma)``
    (exact while ``sigma + lambda <= tau``: every content that could do better is listed), and the objective
    is the least over chunks and ``sigma`` of ``sigma + max(lambda(sigma), sigma)``, ``sigma`` running over
    the backward caps of the chunk's cells but the last (:func:`_sigmas`). ``lambda`` never grows with
    ``sigma``, so on the candidates ``sigma_i < ... < sigma_j`` no objective is below ``sigma_i +
    max(lambda(sigma_j), sigma_i)``: a branch and bound, best first over every chunk's intervals, evaluates the
    candidates whose interval could still beat the best found. The listed ``lambda`` never grows with
    ``sigma`` either, and a placement under ``tau`` holds only listed contents, so that bound computed with it
    bounds every objective in the interval, or ``tau``. An interval's candidates that could not beat the best
    found even at the listed ``lambda`` of its right end are cut off, and the rest evaluated from its new right
    end: where ``lambda`` is flat there, one evaluation settles them. An evaluation also settles the
    candidates down to where its placement's contents still fit (:func:`_settled`), and the search steps left
    of that candidate while such steps keep ``lambda``: that finds where ``lambda`` drops. A chunk whose listed
    contents make up no placement is not searched."""
    best = list(kept)
    lower = tau
    # per chunk: its candidates; candidate -> (listed relaxed lambda, its objective); settled candidates to step
    # left of
    sigmas, known, sweeps = {}, {}, {}
    heap = []  # best first: (bound, chunk, lo, hi, anchor)

    def evaluate_at(chunk, i, swept=None):
        """Evaluate candidate ``i``: the least candidate settled with it (:func:`_settled`, where the relaxed and
        exact ``lambda`` agree), None past the budgets. ``swept``: the ``lambda`` of the settled candidate just
        right of ``i``, when the search steps left from it."""
        budget[0] -= 1
        found = _chunk_optimum(setup, cache, chunk, tau, "split", float(sigmas[chunk][i]), True) \
            if budget[0] >= 0 else None
        if found is None:
            return None
        relaxed, value, placed, _, _ = found
        settled = i
        if placed is not None and within(value, relaxed):
            settled, placed = _settled(setup, found, sigmas[chunk], i)
        if settled < i and (swept is None or within(relaxed, swept)):
            sweeps[chunk].add(settled)
        for j in {i, settled}:
            sigma = float(sigmas[chunk][j])
            known[chunk][j] = (relaxed, sigma + max(relaxed, sigma))
        sigma = float(sigmas[chunk][settled])
        if placed is not None and sigma + max(value, sigma) < best[0]:
            best[:] = sigma + max(value, sigma), placed
        return settled

    def push(chunk, lo, hi, anchor):
        """Queue candidates ``lo .. hi - 1`` (``anchor >= hi`` evaluated) at the least objective they could reach,
        unless none can beat ``tau`` or a smaller evaluated candidate: ``lower`` takes what proves it."""
        nonlocal lower
        values, listed = sigmas[chunk], known[chunk][anchor][0]
        if lo >= hi:
            return
        least = values[lo] + max(listed, values[lo])
        if not within(least, tau):
            lower = min(lower, tau)
            return
        left = known[chunk].get(lo - 1)
        if within(listed, tau - values[anchor]) and left is not None and within(left[0], listed):
            lower = min(lower, left[1])  # lambda flat (and true) up to the anchor: sigma only adds
            return
        heapq.heappush(heap, (least, chunk, lo, hi, anchor))

    for boundary_chunk in _boundary_chunks(setup):
        unpriced = _chunk_optimum(setup, cache, boundary_chunk, tau, "split", None, False)
        if unpriced is None:
            return best[0], best[1], None
        if not within(unpriced[0], tau):
            continue
        sigmas[boundary_chunk], known[boundary_chunk] = _sigmas(setup, cache, boundary_chunk, tau), {}
        sweeps[boundary_chunk] = set()
        settled = evaluate_at(boundary_chunk, len(sigmas[boundary_chunk]) - 1)
        if settled is None:
            return best[0], best[1], None
        push(boundary_chunk, 0, settled, settled)
    while heap:
        least, chunk, lo, hi, anchor = heapq.heappop(heap)
        if not (least < best[0] and not within(best[0], least)):
            lower = min(lower, least)  # and every interval left, bounded no lower
            break
        listed = known[chunk][anchor][0]
        reach = int(np.searchsorted(sigmas[chunk], min(best[0] - listed, best[0] / 2)))  # past it none beats best
        if reach <= lo:
            continue
        sweep = anchor == hi and anchor in sweeps[chunk]
        mid = min(reach, hi) - 1 if reach < hi or sweep else (lo + hi - 1) // 2
        settled = evaluate_at(chunk, mid, listed if sweep else None)
        if settled is None:
            return best[0], best[1], None
        push(chunk, lo, settled, settled)
        push(chunk, mid + 1, min(hi, reach), anchor)
    evaluated = [value if within(value, tau) else tau for chunk in known for _, value in known[chunk].values()]
    return best[0], best[1], min([lower, best[0], *evaluated])


def _sigmas(setup: BalanceSetup, cache: Cache, boundary_chunk: int, tau: float) -> np.ndarray:
    """Every bound on ``S`` worth trying under ``tau`` for one boundary chunk: 0 and the backward caps of the
    cells but the last chunk's within ``tau / 2``, ascending."""
    values = [np.zeros(1)]
    for pattern in _patterns(setup, boundary_chunk):
        for s in range(setup.stages):
            for cell in cells_of(setup, cache, s, pattern, tau, "split")[:-1]:
                values.append(cell.values[within(cell.values, tau / 2)])
    values = np.unique(np.concatenate(values))
    return values[np.r_[True, np.diff(values) > EPS * np.maximum(1.0, values[1:])]]  # sums in another order: one


def _even_lightest(setup: BalanceSetup) -> np.ndarray:
    """The model's layers spread evenly over the cells in model order, each on its kind's lightest option: a
    placement whose fit proves, cheaply, that one exists."""
    cells = setup.cells
    shares = np.diff(np.linspace(0, int(setup.counts.sum()), len(cells) + 1).round().astype(int))
    kind_of = np.repeat(np.arange(len(setup.kinds)), setup.counts)
    lightest = [min(setup.item_indices(kind), key=lambda i: setup.activation[i]) for kind in setup.kinds]
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for (c, s), start, n in zip(cells, np.r_[0, np.cumsum(shares)[:-1]], shares):
        for k in kind_of[start:start + n]:
            counts[lightest[k], c, s] += 1
    return counts


def _fits(setup: BalanceSetup, cache: Cache) -> bool | None:
    """Whether some placement's relaxed memory fits the limit (False proves none fits); None past the budget."""
    found = _optimum(setup, cache, setup.memory_mb, "memory")
    return None if found is None else bool(within(found[0], setup.memory_mb))


def least_memory(setup: BalanceSetup, cache: Cache) -> np.ndarray | None:
    """The placement whose largest stage memory is least (time ignored); None past the enumeration budget.

    The cap starts at what the even, lightest placement needs: the optimum lies under it, so one listing
    usually proves it."""
    cap = float(evaluate(setup, _even_lightest(setup)).stages[MEMORY_MB].max())
    while True:
        found = _optimum(setup, cache, cap, "memory")
        if found is None:
            return None
        _, value, counts = found
        if counts is not None and within(value, cap):
            return counts
        cap *= _MEMORY_GROWTH
