"""A stage's contents on one chunk against every mix of its layers, judged by the balancer's stage memory."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sappkit.balancer.evaluate import stage_memory
from sappkit.balancer.exact import Cache
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.contents import stage_contents, why_not_applicable
from sappkit.balancer.step.steptime import step_timer

from ..test_optimise import loose_limit, placements, table


def mixes_of(setup, composition):
    """Every split of a run's layers of each kind over that kind's options, as item counts."""
    per_kind = [[(setup.item_indices(kind), split) for split in placements(int(n), len(setup.item_indices(kind)))]
                for kind, n in zip(setup.kinds, composition)]
    for choice in itertools.product(*per_kind):
        mix = np.zeros(len(setup.items), dtype=int)
        for items, split in choice:
            mix[items] = split
        yield mix


@pytest.mark.parametrize("counts, working_set", [((6,), True), ((6,), False), ((3, 4), True)], ids=str)
def test_each_content_is_its_runs_fastest_mix_that_fits_and_none_is_missing(rng, counts, working_set):
    frame = table(rng, kinds=len(counts), counts=counts, modules=["m"] * len(counts))
    pipeline = dict(stages=3, micro_batches=4)
    setup = make_setup(frame, memory_mb=loose_limit(frame, **pipeline) * 0.8, objective="step",
                       working_set=working_set, consistent_recompute=False, **pipeline)
    timer = step_timer(setup)
    cap = 3.0 * float(setup.forward.max() + setup.backward.max())
    contents = stage_contents(setup, timer, Cache(), cap)
    bounds = np.r_[0, np.cumsum(setup.counts)]
    for s in range(setup.stages):
        listed = {}
        for start, length, c in zip(contents.starts[s], contents.lengths[s], contents.content[s]):
            composition = tuple(int(n) for n in np.maximum(0, np.minimum(start + length, bounds[1:])
                                                           - np.maximum(start, bounds[:-1])))
            mix = contents.mixes[s][c][:, 0]
            assert tuple(int(mix[setup.item_indices(kind)].sum()) for kind in setup.kinds) == composition
            listed[composition] = c
        for composition in {tuple(c) for c in itertools.product(*(range(n + 1) for n in counts))}:
            fitting = [mix for mix in mixes_of(setup, composition)
                       if stage_memory(setup, mix[None, :, None], np.array([s])).total[0]
                       <= setup.memory_mb * (1 + 1e-9) + 1e-6]
            phases = [timer.per_item @ mix + timer.fixed[:, 0, s] for mix in fitting]
            runnable = [ph for ph in phases if ph[0] + ph[1] <= cap * (1 + 1e-9)]
            if not runnable or (sum(composition) == 0 and s not in (0, setup.stages - 1)):
                assert composition not in listed
                continue
            c = listed[composition]
            assert contents.phases[s][c][:, 0] == pytest.approx(min(runnable, key=lambda ph: ph[1]))
            mix = contents.mixes[s][c][:, 0]
            assert stage_memory(setup, mix[None, :, None], np.array([s])).total[0] <= setup.memory_mb * (1 + 1e-9) + 1e-6


def test_contents_say_which_set_ups_they_cannot_describe(rng):
    frame = table(rng, kinds=2, counts=(3, 4), options=("none", "full"), modules=["m", "m"])
    base = dict(memory_mb=1e6, objective="step")
    assert why_not_applicable(make_setup(frame, stages=2, micro_batches=4, chunks=2, **base)) == \
        "2 chunks: the proof's bounds are too weak there (module docstring)"
    assert why_not_applicable(make_setup(frame, stages=2, micro_batches=4, **base)) == \
        "recompute consistency between body kinds ties the options of a stage's kinds"
    uneven = table(rng, counts=(4,), equal_forward=False)
    assert why_not_applicable(make_setup(uneven, stages=2, micro_batches=4, **base)) == \
        "options of 'k0' with different forward times or memory kept once"
    assert why_not_applicable(make_setup(frame, stages=2, micro_batches=4, consistent_recompute=False, **base)) == ""
