"""The step search's memo of stage memory: the totals stage_memory gives, each (stage, contents) priced once."""

from __future__ import annotations

import numpy as np
import pytest

from sappkit.balancer.evaluate import placement_memory, stage_memory
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.known_memory import KnownMemory

from ..test_optimise import table


@pytest.mark.parametrize("pipeline", [dict(stages=4, micro_batches=8, chunks=2), dict(stages=3, micro_batches=6),
                                      dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev")], ids=str)
def test_known_memory_gives_stage_memory_and_prices_each_stage_contents_once(rng, pipeline):
    frame = table(rng, kinds=2, counts=(8, 9), options=("none", "full"), modules=["vision", "language"])
    setup = make_setup(frame, memory_mb=1e6, **pipeline)
    items, v, p = len(setup.items), setup.chunks, setup.stages
    few = rng.integers(0, 3, size=(5, items, v, p))  # few placements, drawn again and again: many repeats
    counts = few[rng.integers(0, len(few), size=12)]
    memory = KnownMemory(setup)
    assert memory.placement(counts).tolist() == placement_memory(setup, counts).tolist()
    distinct = {(s, placement[:, :, s].tobytes()) for placement in few[np.unique(
        [np.flatnonzero((few == c).all(axis=(1, 2, 3)))[0] for c in counts])] for s in range(p)}
    assert memory.priced == len(distinct)
    contents = np.moveaxis(counts, -1, 1)[:, :2]  # [n, 2, item, chunk]: stages 0 and 1, broadcast
    stages = np.array([1, 0])
    assert memory.total(contents, stages).tolist() == stage_memory(setup, contents, stages).total.tolist()
    assert memory.total(contents[:0], stages).shape == (0, 2)
