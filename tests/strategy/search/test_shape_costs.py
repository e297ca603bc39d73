"""A shape's summary for the search's bounds (ShapeCosts.of, read from arrays) holds what its frames say."""

import numpy as np
import pytest

from sappkit.hardware import Cluster
from sappkit.layers import ParallelConfig
from sappkit.models.presets import get
from sappkit.strategy.compiled import compile_shape
from sappkit.strategy.search.shapes import ShapeCosts
from sappkit.columns import SAPP_OPTIONS


@pytest.fixture(scope="module")
def compiled():
    """DeepSeek-V3 at one shape of its search: dense and MoE body kinds, a head and a tail."""
    parallel = ParallelConfig(tensor_parallel=2, data_parallel=8, expert_parallel=8)
    return compile_shape((get("deepseek-v3"),), parallel, Cluster.preset("dgx-h100"),
                         options=("none", "selective", "full"))


def test_the_summary_is_the_frames_own(compiled):
    costs, table, params = ShapeCosts.of(compiled), compiled.layers, compiled.params
    kinds = list(table.body_kinds)
    assert list(costs.dense_params) == list(params.loc[kinds, "params"])
    assert list(costs.expert_params) == list(params.loc[kinds, "expert_params"])
    assert list(costs.counts) == [table.count(k) for k in kinds]
    columns = ("forward_time", "backward_time", "activation_mb", "memory_once_mb")
    for k, kind in enumerate(kinds):
        for o, option in enumerate(SAPP_OPTIONS):
            rows = table.frame[(table.frame["kind"] == kind) & (table.frame["option"] == option)]
            expected = [np.inf] * 4 if rows.empty else [float(np.nan_to_num(rows.iloc[0][c], nan=np.inf))
                                                         for c in columns]
            got = [costs.forward[k, o], costs.backward[k, o], costs.activation[k, o], costs.once[k, o]]
            assert got == expected, (kind, option)
    for end, row, name in ((costs.head, table.head, "head"), (costs.tail, table.tail, "tail")):
        assert end == (*(float(row[c]) for c in columns), float(params.at[row["kind"], "params"])), name
