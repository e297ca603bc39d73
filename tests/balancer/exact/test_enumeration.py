"""The exact search with the end-of-warm-up working set: the same optimum as the ILP and as brute force.

The working set of a stage's last-chunk cell depends on which option its
last layer runs, so the search keeps per-option fronts there
(``cells.working_fronts``); these tests check that nothing is lost: the
search's optimum equals the integer program's and an enumeration of every
placement judged by :func:`~sappkit.balancer.evaluate.evaluate` itself (the
peak over the stage's memory events), on 1F1B, interleaved (``m`` a multiple
of ``p`` and not, three chunks, less-memory) and DualPipeV.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from sappkit.balancer.exact.cells import Cache, working_fronts
from sappkit.balancer.evaluate import evaluate
from sappkit.balancer.exact import search
from sappkit.balancer.setup import make_setup

from ..test_optimise import loose_limit, placements, solve_both_ways, table


def with_working_sets(rng, frame):
    """``frame`` with a random ``working_mb`` on every body and tail row (the head's stays 0)."""
    frame = frame.copy()
    frame["working_mb"] = np.where(frame["role"] == "head", 0.0, rng.integers(0, 40, len(frame)).astype(float))
    return frame


def every_placement(setup):
    """(largest stage memory, ``sapp`` objective) of every placement of the one body kind, as two arrays."""
    shape = (len(setup.items), setup.chunks, setup.stages)
    return judged(setup, (flat.reshape(shape) for flat in placements(int(setup.counts[0]), int(np.prod(shape)))))


def fills_every_cell(setup, counts) -> bool:
    """``counts`` leaves no cell empty that must hold a layer."""
    occupied = counts.sum(axis=0)
    return all(occupied[c, s] > 0 for c, s in setup.cells if (c, s) not in setup.reserved)


def judged(setup, placed):
    """(largest stage memory, ``sapp`` objective) of the ``placed`` counts that leave no cell empty
    that must hold a layer, as :func:`~sappkit.balancer.evaluate.evaluate` judges them; two arrays."""
    peaks, values = [], []
    for counts in placed:
        if not fills_every_cell(setup, counts):
            continue
        result = evaluate(setup, counts)
        peaks.append(result.stages["memory_mb"].max())
        values.append(result.sapp)
    return np.array(peaks), np.array(values)


def brute_force(placed, limit):
    """Least objective among the placements whose every stage fits ``limit`` (as evaluate judges), or inf."""
    peaks, values = placed
    fits = peaks <= limit * (1 + 1e-9) + 1e-6
    return float(values[fits].min()) if fits.any() else math.inf


def assert_search_proves_brute_force(frame, scales, *, listed=None, **pipeline):
    """At ``scales`` times a loose limit, the exact search proves the least objective of the placements that fit
    (inf where none does); ``listed(setup)`` judges every placement (default: :func:`every_placement`)."""
    limit = loose_limit(frame, **pipeline)
    placed = (listed or every_placement)(make_setup(frame, memory_mb=limit, **pipeline))
    for scale in scales:
        setup = make_setup(frame, memory_mb=limit * scale, **pipeline)
        found = search(setup)
        assert found is not None and found.proven
        value = math.inf if found.counts is None else found.upper
        assert value == pytest.approx(brute_force(placed, setup.memory_mb), rel=1e-9)


@pytest.mark.parametrize("options", [("none", "full"), ("none", "selective", "full"),
                                     ("none", "comm", "both", "full")])
def test_working_fronts_hold_every_mix_a_stage_could_want(rng, options):
    # Against every mix of n layers: each is matched or beaten on backward, activation and working set.
    for _ in range(10):
        setup = make_setup(with_working_sets(rng, table(rng, counts=(5,), options=options)), stages=2,
                           micro_batches=2, memory_mb=1e9, working_set=True)
        _check_fronts(setup, working_fronts(setup, 5, Cache()))


def _check_fronts(setup, fronts):
    order = setup.cell_order
    for n in range(1, 6):
        front = fronts[n]
        for mix in itertools.product(range(n + 1), repeat=len(setup.items)):
            if sum(mix) != n:
                continue
            mix = np.array(mix)
            last = [i for i in order if mix[i]][-1]
            b, a, w = mix @ setup.backward, mix @ setup.activation, setup.working[last]
            beaten = ((front.backward <= b + 1e-9) & (front.activation <= a + 1e-9) & (front.working <= w + 1e-9))
            assert beaten.any(), (n, mix.tolist())
        for point, mix in enumerate(front.mix):
            last = [i for i in order if mix[i]][-1]
            assert front.working[point] == setup.working[last]
            assert front.backward[point] == pytest.approx(mix @ setup.backward)


@pytest.mark.parametrize("pipeline", [
    dict(stages=2, micro_batches=4),
    dict(stages=3, micro_batches=3),
    dict(stages=2, micro_batches=4, chunks=2),
    dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev"),
    dict(stages=2, micro_batches=3, chunks=2), dict(stages=2, micro_batches=2, chunks=3),
    dict(stages=2, micro_batches=5, chunks=2, less_memory=True),
    dict(stages=2, micro_batches=5, chunks=2, schedule="dualpipev"),
], ids=["1f1b", "1f1b-m=p", "interleaved", "dualpipev", "m-not-a-multiple", "three-chunks", "less-memory",
        "dualpipev-m-odd"])
def test_exact_search_with_the_working_set_equals_brute_force(pipeline):
    # Every placement judged by evaluate (the peak over memory events): the search's optimum is the least that fits.
    rng = np.random.default_rng(11)
    for trial in range(2):
        frame = with_working_sets(rng, table(rng, counts=(4,), options=("none", "selective", "full"),
                                             tail=bool(trial % 2)))
        assert_search_proves_brute_force(frame, (0.8, 1.0, 1.3), working_set=True, **pipeline)


@pytest.mark.parametrize("pipeline", [
    dict(stages=4, micro_batches=8),
    dict(stages=3, micro_batches=6, chunks=2),
    dict(stages=3, micro_batches=6, chunks=2, schedule="dualpipev"),
    dict(stages=3, micro_batches=7, chunks=2), dict(stages=3, micro_batches=4, chunks=3),
    dict(stages=3, micro_batches=7, chunks=2, schedule="dualpipev"),
], ids=["1f1b", "interleaved", "dualpipev", "m-not-a-multiple", "three-chunks", "dualpipev-m-odd"])
def test_exact_search_with_the_working_set_agrees_with_the_ilp(rng, pipeline):
    frame = with_working_sets(rng, table(rng, counts=(14,)))
    limit = loose_limit(frame, **pipeline)
    for scale in (0.6, 0.9):
        fast, ilp, _ = solve_both_ways(frame, memory_mb=limit * scale, working_set=True, **pipeline)
        assert fast is not None and fast == pytest.approx(ilp, rel=1e-6)
