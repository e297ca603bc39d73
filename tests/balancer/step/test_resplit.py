"""Stage re-splits keep every stage's layers and options and move them between the stage's chunks."""

from __future__ import annotations

import numpy as np

from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.resplit import MOST_SPLITS, stage_resplits

from ..test_optimise import table


def test_every_re_split_keeps_the_stage_s_layers_and_changes_only_that_stage(rng):
    frame = table(rng, counts=(24,))
    for chunks in (2, 3):
        setup = make_setup(frame, stages=3, micro_batches=6, chunks=chunks, memory_mb=1e6)
        counts = np.zeros((len(setup.items), chunks, 3), dtype=int)
        counts[rng.integers(len(setup.items), size=24), rng.integers(chunks, size=24), rng.integers(3, size=24)] += 1
        splits = stage_resplits(setup, counts)
        changed = (splits != counts[None]).any(axis=(1, 2))  # [split, stage]
        assert (changed.sum(axis=1) == 1).all()
        assert (splits.sum(axis=2) == counts.sum(axis=1)[None]).all()
        per_stage = changed.sum(axis=0)
        assert (per_stage <= MOST_SPLITS).all() and (per_stage > 0).all()
        assert len({split.tobytes() for split in splits}) == len(splits)
