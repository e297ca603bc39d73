"""Stage re-splits keep every stage's layers and options and move them between the stage's chunks."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

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


def all_resplits_nearest_first(counts: np.ndarray, stage: int) -> list[np.ndarray]:
    """Brute force: every split of the stage's layers over its chunks (each item's counts keep their sum),
    listed in lexicographic order, nearest first (a stable sort on the layers moved), itself left out."""
    here = counts[:, :, stage]
    ways = [[way for way in itertools.product(range(int(n) + 1), repeat=here.shape[1]) if sum(way) == n]
            for n in here.sum(axis=1)]
    splits = [np.array(choice) for choice in itertools.product(*ways)]
    splits = [split for split in splits if (split != here).any()]
    return sorted(splits, key=lambda split: int(np.abs(split - here).sum()))


def test_the_re_splits_are_the_nearest_of_every_split_in_order(rng):
    frame = table(rng, counts=(24,))
    for chunks, layers in ((2, 30), (3, 14), (4, 9)):
        setup = make_setup(frame, stages=2, micro_batches=6, chunks=chunks, memory_mb=1e6)
        counts = np.zeros((len(setup.items), chunks, 2), dtype=int)
        np.add.at(counts, (rng.integers(len(setup.items), size=layers), rng.integers(chunks, size=layers),
                           rng.integers(2, size=layers)), 1)
        splits = stage_resplits(setup, counts)
        for stage in range(2):
            expected = all_resplits_nearest_first(counts, stage)[:MOST_SPLITS]
            got = [split[:, :, stage] for split in splits if (split[:, :, stage] != counts[:, :, stage]).any()]
            assert [split.tolist() for split in got] == [split.tolist() for split in expected]


def test_a_stage_of_many_layers_over_many_chunks_re_splits_without_listing_every_split():
    # 40 layers of three options on each of 2 stages of 4 chunks: about 10^11 splits a stage; over 20 chunks,
    # about 10^25. Listing them hung (4 chunks) or ran out of memory (more) inside sappkit search.
    rows = [dict(kind="b", role="body", count=80, param_mb=1, option=option, forward_time=1, backward_time=2,
                 activation_mb=1) for option in ("none", "selective", "full")]
    for chunks, per_cell in ((4, (5, 2, 3)), (20, (1, 1, 0))):
        setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=8, chunks=chunks, memory_mb=1e6)
        counts = np.zeros((3, chunks, 2), dtype=int)
        half = chunks // 2
        counts[0], counts[1, :half], counts[2, half:] = per_cell
        counts[2, 0] += 40 - counts.sum(axis=(0, 1))[0]  # 40 layers a stage
        splits = stage_resplits(setup, counts)
        assert splits.shape == (2 * MOST_SPLITS, 3, chunks, 2)
        assert (splits.sum(axis=2) == counts.sum(axis=1)[None]).all()
        moved = np.abs(splits - counts[None]).sum(axis=(1, 2, 3)) // 2
        assert moved.min() == 1 and moved.max() <= 2
