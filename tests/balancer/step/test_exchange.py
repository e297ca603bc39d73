"""Stage exchanges: whole stages trade places, recompute is repaired to fit, and the step search uses them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import sappkit
from sappkit.balancer.step import local_search, moves
from sappkit.balancer.evaluate import stage_memory
from sappkit.balancer.step.known_memory import KnownMemory
from sappkit.balancer.step.exchange import fitted, stage_exchanges
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.steptime import step_timer

from ..test_optimise import OPTIONS, loose_limit, placements, table


def stage_totals(setup, counts) -> np.ndarray:
    """Every stage's memory of one placement, by the balancer's model."""
    return stage_memory(setup, np.moveaxis(counts, -1, 0), np.arange(setup.stages)).total


def layers_per_cell(setup, counts) -> np.ndarray:
    """``[kind, chunk, stage]``: layers whatever their option."""
    return np.stack([counts[setup.item_indices(kind)].sum(axis=0) for kind in setup.kinds])


def least_stage_memory(setup, counts, stage) -> float:
    """The least memory of ``stage`` holding the layers of ``counts`` there, options chosen anew (one kind)."""
    items = setup.item_indices(setup.kinds[0])
    per_chunk = [placements(int(counts[items, c, stage].sum()), len(items)) for c in range(setup.chunks)]
    contents = np.array([np.stack(choice, axis=1) for choice in itertools.product(*per_chunk)])  # [n, item, chunk]
    return float(stage_memory(setup, contents, np.full(len(contents), stage)).total.min())


@pytest.mark.parametrize("pipeline", [dict(stages=3, micro_batches=6), dict(stages=3, micro_batches=6, chunks=2)],
                         ids=str)
def test_fitted_keeps_the_layers_and_fits_whenever_their_options_can(rng, pipeline):
    frame = table(rng, counts=(9,), options=OPTIONS)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline) * 0.9, **pipeline)
    cells = setup.chunks * setup.stages
    fitted_some = 0
    for _ in range(40):
        flat = rng.multinomial(9, np.ones(cells) / cells)
        counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
        counts[0] = flat.reshape(setup.chunks, setup.stages)  # every layer at the option keeping most
        result = fitted(setup, counts[None])[0]
        assert np.array_equal(layers_per_cell(setup, result), layers_per_cell(setup, counts))
        before, after = stage_totals(setup, counts), stage_totals(setup, result)
        limit = setup.memory_mb * (1 + 1e-9) + 1e-6
        for s in range(setup.stages):
            if before[s] <= limit:
                assert np.array_equal(result[..., s], counts[..., s])
        can_fit = all(least_stage_memory(setup, counts, s) <= limit for s in range(setup.stages))
        assert (after <= limit).all() == can_fit
        fitted_some += can_fit and (before > limit).any()
    assert fitted_some >= 5


def test_stage_exchanges_trade_every_pair_of_stages(rng):
    frame = table(rng, counts=(20,))
    pipeline = dict(stages=4, micro_batches=8, chunks=2)
    plan = sappkit.balance(frame, memory_mb=loose_limit(frame, **pipeline), **pipeline)
    setup = plan.setup
    exchanged = stage_exchanges(setup, plan.counts)
    pairs = list(itertools.combinations(range(setup.stages), 2))
    assert len(exchanged) == len(pairs)
    layers = layers_per_cell(setup, plan.counts)
    for result, (a, b) in zip(exchanged, pairs):
        order = np.arange(setup.stages)
        order[[a, b]] = b, a
        assert np.array_equal(layers_per_cell(setup, result), layers[..., order])
        for s in set(range(setup.stages)) - {a, b}:
            assert np.array_equal(result[..., s], plan.counts[..., s])


def test_the_step_search_ends_where_no_stage_exchange_helps(rng, monkeypatch):
    """Interleaved 8-stage instances: the descent's end beats every stage exchange; without exchanges (and
    re-splits) it stops short on some, so the check has teeth."""
    pipeline = dict(stages=8, micro_batches=16, chunks=2)
    short = 0
    for _ in range(3):
        frame = table(rng, counts=(int(rng.integers(34, 50)),))
        limit = loose_limit(frame, **pipeline) * float(rng.choice([0.8, 0.9, 1.0]))
        sapp = sappkit.balance(frame, memory_mb=limit, **pipeline)
        setup = make_setup(frame, memory_mb=limit, objective="step", **pipeline)
        timer = step_timer(setup)
        reached = local_search._descend(KnownMemory(setup), timer, sapp.counts, 10**6, set())
        exchanged = stage_exchanges(setup, reached.counts)
        assert local_search._best_better(timer, exchanged[moves.valid(setup, exchanged)], reached.time,
                                          reached.ends)[0] is None
        with monkeypatch.context() as patch:
            patch.setattr(local_search, "stage_exchanges", lambda setup, counts, memory: counts[None][:0])
            patch.setattr(local_search, "stage_resplits", lambda setup, counts: counts[None][:0])
            plain = local_search._descend(KnownMemory(setup), timer, sapp.counts, 10**6, set())
        exchanged = stage_exchanges(setup, plain.counts)
        short += local_search._best_better(timer, exchanged[moves.valid(setup, exchanged)], plain.time,
                                            plain.ends)[0] is not None
    assert short >= 1
