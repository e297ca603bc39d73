"""How the multi-chunk exact search prices a stage: memory inverted in one cell, staircases read by activation,
and the split pricing's first guess, which must be the answer (else the search only runs slower).

The inverse is checked against :func:`~sappkit.balancer.exact.stage_bounds.memory_bounds` itself, the staircase
read against a walk along its steps, and the guesses against the answers the probing search settles on.
"""

from __future__ import annotations

import numpy as np
import pytest

from sappkit.balancer.exact.boundary import cap_search
from sappkit.balancer.evaluate import ceiling
from sappkit.balancer.exact import search
from sappkit.balancer.setup import make_setup
from sappkit.balancer.exact.stage_bounds import activation_room, memory_bounds
from sappkit.balancer.exact.boundary.stage_cells import Staircases

from ..test_enumeration import with_working_sets
from ...test_optimise import loose_limit, table

SHAPES = [dict(schedule="interleaved", stages=3, chunks=2, micro_batches=3, working_set=True),
          dict(schedule="interleaved", stages=3, chunks=3, micro_batches=6, working_set=True),
          dict(schedule="interleaved", stages=4, chunks=2, micro_batches=8, working_set=False),
          dict(schedule="interleaved", stages=3, chunks=3, micro_batches=3, working_set=False)]


@pytest.mark.parametrize("pipeline", SHAPES, ids=["events v2", "events v3", "overhead v2", "overhead v3"])
def test_the_activation_room_is_the_most_a_cell_may_hold_under_the_limit(rng, pipeline):
    frame = with_working_sets(rng, table(rng, kinds=1, counts=(8,), options=("none", "selective", "full")))
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline), consistent_recompute=False, **pipeline)
    chunks, rows = setup.chunks, 200
    activation = rng.uniform(0, 3, (rows, chunks)) * setup.activation.max()
    working = rng.uniform(0, 1, (rows, chunks)) * max(setup.working.max(), 1.0)
    kept = rng.uniform(0, 0.5, rows) * setup.memory_mb
    checked = 0
    for s in range(setup.stages):
        for chunk in range(chunks):
            room = activation_room(setup, s, kept, activation, working, chunk)

            def memory(held):
                trial = activation.copy()
                trial[:, chunk] = held
                return kept + memory_bounds(setup, s, np.zeros((rows, 1)), trial, working)[0]

            inside, none = np.isfinite(room) & (room >= 0), room == -np.inf
            assert (memory(np.where(inside, room, 0.0))[inside] <= ceiling(setup.memory_mb) * (1 + 1e-9)).all()
            lifted = np.where(inside, room, 0.0)
            lifted += np.maximum(np.abs(lifted), 1.0) * 1e-6
            assert (memory(lifted)[inside] > setup.memory_mb).all()
            assert (memory(np.zeros(rows))[none] > setup.memory_mb).all()
            checked += inside.sum()
    assert checked > 100  # the limit binds somewhere: the check is not vacuous


def test_a_staircase_read_by_activation_gives_its_first_step_that_light(rng):
    segments, parts = 6, []
    for _ in range(segments):
        n = int(rng.integers(1, 6))
        backward = np.sort(rng.uniform(0, 10, n))
        activation = np.sort(rng.uniform(0, 50, n))[::-1]  # the least activation up to each step: falls
        parts.append((backward, activation, np.arange(n)))
    stairs = Staircases.empty(segments).extended(segments, [(k, {float(k % 2): part}) for k, part in
                                                            enumerate(parts)])
    compositions = np.repeat(np.arange(segments), 40)
    groups = np.searchsorted(stairs.groups, compositions % 2)
    room = rng.uniform(-5, 60, len(compositions))
    found = stairs.first_within(compositions, groups, room)
    for k, r, got in zip(compositions, room, found):
        backward, activation, _ = parts[k]
        light = np.flatnonzero(activation <= r)
        assert got == (backward[light[0]] if light.size else np.inf)
    other = stairs.first_within(compositions, 1 - groups, room)  # a group the composition has no staircase in
    assert np.isinf(other).all()


@pytest.mark.parametrize("chunks", [2, 3])
def test_the_split_pricing_guesses_every_least_cap_it_settles_on(rng, monkeypatch, chunks):
    guessed, settled = [], []
    search_caps, guess = cap_search.least_caps, cap_search._guess

    def recording_guess(*args):
        guessed.append(guess(*args))
        return guessed[-1]

    def recording_search(*args, **kwargs):
        found = search_caps(*args, **kwargs)
        if len(guessed) > len(settled):
            low, high, n = args[5], args[6], len(args[4])
            answer = found[0]
            # a guess past the bracket the search starts from is clipped into it; else it is the answer
            settled.append((np.clip(guessed[-1], low, np.maximum(low, np.minimum(high, n))), answer))
        return found

    monkeypatch.setattr(cap_search, "_guess", recording_guess)
    monkeypatch.setattr(cap_search, "least_caps", recording_search)
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(4, 11), options=("none", "selective", "full")))
    pipeline = dict(stages=3, chunks=chunks, micro_batches=3, working_set=True, consistent_recompute=False)
    limit = loose_limit(frame, **pipeline)
    for scale in (0.7, 0.85, 1.0):
        found = search(make_setup(frame, memory_mb=limit * scale, **pipeline))
        assert found is not None and found.proven
    assert len(settled) > 10
    for clipped, answer in settled:
        assert (clipped == answer).all()
