"""Shared fixtures of the one-more-recomputed-layer tests."""

import pandas as pd
import pytest

from sappkit import LayerTable, Partition


@pytest.fixture(scope="module")
def small():
    """Four body layers of one kind ``b``, two per stage on two stages: ``(LayerTable, Partition)``."""
    rows = [dict(kind="b", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=t,
                 activation_mb=a) for o, a, t in (("none", 40, 2), ("selective", 15, 2.2), ("full", 5, 3))]
    cells = pd.DataFrame({"chunk": 0, "stage": [0, 1], "kind": "b", "layers": 2})
    return LayerTable(pd.DataFrame(rows)), Partition(stages=2, micro_batches=4, cells=cells)
