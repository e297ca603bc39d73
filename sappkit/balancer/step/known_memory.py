"""Stage memory priced once per stage and contents, for one search.

The step search (:mod:`sappkit.balancer.step.local_search`) prices the same stage contents over and over: a
move or a swap touches one or two stages, and a stage exchange, a re-split or a kick leaves every other stage
as it was. :class:`KnownMemory` keeps the memory of each (stage, contents) it has priced
(:func:`~sappkit.balancer.evaluate.stage_memory`'s total), so each is priced once. A search makes its own, and
it goes with the search: nothing outlives it.
"""

from __future__ import annotations

import numpy as np

from ..evaluate import stage_memory
from ..setup import BalanceSetup

__all__ = ["KnownMemory"]


class KnownMemory:
    """:func:`~sappkit.balancer.evaluate.stage_memory` totals of one setup's stages, each (stage, contents) priced
    once.

    Examples
    --------
    >>> import pandas as pd
    >>> from sappkit.balancer.setup import make_setup
    >>> rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=bt,
    ...              activation_mb=a) for o, bt, a in (("none", 2, 50), ("full", 3, 5))]
    >>> memory = KnownMemory(make_setup(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000))
    >>> counts = np.array([[[0, 2]], [[2, 0]]])  # [item, chunk, stage]
    >>> memory.placement(np.stack([counts, counts])).tolist(), memory.priced
    ([[270.0, 350.0], [270.0, 350.0]], 2)
    """

    def __init__(self, setup: BalanceSetup):
        self.setup = setup
        self._known: dict[bytes, float] = {}

    @property
    def priced(self) -> int:
        """How many (stage, contents) have been priced."""
        return len(self._known)

    def total(self, contents: np.ndarray, stages: np.ndarray) -> np.ndarray:
        """``stage_memory(setup, contents, stages).total`` (integer layer counts ``contents``, shaped as there),
        pricing only the (stage, contents) not priced before."""
        contents, stages = np.asarray(contents), np.asarray(stages)
        shape = np.broadcast_shapes(stages.shape, contents.shape[:-2])
        contents = np.broadcast_to(contents, shape + contents.shape[-2:]).reshape(-1, *contents.shape[-2:])
        stages = np.broadcast_to(stages, shape).reshape(-1)
        width = contents.shape[-2] * contents.shape[-1]
        rows = np.ascontiguousarray(np.column_stack([stages, contents.reshape(len(stages), width)]), dtype=np.int64)
        keys = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist()
        known = self._known
        found = np.array(list(map(known.get, keys)), dtype=float)  # None, not priced yet: nan
        missing = np.flatnonzero(np.isnan(found))
        if len(missing):
            first = {}  # each new (stage, contents) once, where first met
            for k in missing.tolist():
                first.setdefault(keys[k], k)
            priced = stage_memory(self.setup, contents[list(first.values())], stages[list(first.values())]).total
            known.update(zip(first, priced.tolist()))
            found[missing] = [known[keys[k]] for k in missing]
        return found.reshape(shape)

    def placement(self, counts: np.ndarray) -> np.ndarray:
        """``[n, stage]``: every stage's memory of placements ``[n, item, chunk, stage]``
        (:func:`~sappkit.balancer.evaluate.placement_memory`)."""
        return self.total(np.moveaxis(counts, -1, 1), np.arange(self.setup.stages)[None, :])
