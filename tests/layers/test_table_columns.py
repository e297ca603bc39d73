"""The layer table's replaced columns: checked in numpy, the same table as the full check, bad values still refused."""

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, LayerTable
from sappkit.hardware import Cluster
from sappkit.layers import ParallelConfig
from sappkit.models.presets import get
from sappkit.strategy.compiled import compile_shape


@pytest.fixture(scope="module")
def estimate() -> LayerTable:
    """DeepSeek-V3's estimate at one shape of the search (dense and MoE kinds, MTP in the tail)."""
    parallel = ParallelConfig(tensor_parallel=2, data_parallel=8, expert_parallel=8)
    return compile_shape((get("deepseek-v3"),), parallel, Cluster.preset("dgx-h100"),
                         options=("none", "selective", "full")).layers


def _fully_checked(table: LayerTable, **columns) -> LayerTable:
    return LayerTable(table.frame.assign(**columns), time_unit=table.time_unit, custom_options=table.custom_options)


def test_replaced_columns_give_the_fully_checked_table(estimate):
    rows = len(estimate.frame)
    columns = dict(param_mb=estimate.frame["param_mb"].to_numpy() * 0.5,
                   forward_time=list(estimate.frame["forward_time"] + 1.0),
                   working_mb=np.arange(rows),  # whole numbers become floats, as the full check makes them
                   grad_mb=np.zeros(rows, dtype=np.float32))
    replaced = estimate.with_columns(**columns)
    pd.testing.assert_frame_equal(replaced.frame, _fully_checked(estimate, **columns).frame, check_exact=True)
    assert replaced.frame.attrs == estimate.frame.attrs
    assert replaced.param_mb("moe_decoder") == estimate.param_mb("moe_decoder") * 0.5


def test_compiled_tables_are_the_fully_checked_tables(estimate):
    shape = compile_shape((get("deepseek-v3"),), ParallelConfig(tensor_parallel=2, data_parallel=8,
                                                                expert_parallel=8), Cluster.preset("dgx-h100"),
                          options=("none", "selective", "full"))
    for zero in (1, 3):
        table = shape.table(ParallelConfig(tensor_parallel=2, data_parallel=8, expert_parallel=8, zero=zero),
                            Cluster.preset("dgx-h100"))
        pd.testing.assert_frame_equal(table.frame, _fully_checked(table).frame, check_exact=True)


@pytest.mark.parametrize("values, message", [
    (np.nan, "layers row 0 column 'forward_time' is nan; expected a finite number >= 0"),
    (-1.0, "layers row 0 column 'forward_time' is -1.0; expected a finite number >= 0"),
    (np.inf, "layers row 0 column 'forward_time' is inf; expected a finite number >= 0"),
    (True, "layers row 0 column 'forward_time' is True; expected a finite number >= 0"),
    ("fast", "layers row 0 column 'forward_time' is 'fast'; expected a finite number >= 0"),
    (1e30, "layers row 0 column 'forward_time' is 1e+30; expected at most"),
])
def test_a_bad_replaced_value_is_refused_naming_its_row(estimate, values, message):
    column = list(estimate.frame["forward_time"])
    column[0] = values
    # A list takes the full check; an array of numbers numpy's, which must refuse the same values the same way.
    for given in [column] + ([np.array(column)] if isinstance(values, float) else []):
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace("+", r"\+")):
            estimate.with_columns(forward_time=given)


def test_a_kinds_parameters_differing_across_its_options_are_refused(estimate):
    param_mb = estimate.frame["param_mb"].to_numpy().copy()
    row = int(np.flatnonzero(estimate.frame["kind"] == "moe_decoder")[0])
    param_mb[row] += 1.0
    with pytest.raises(InputError, match="layers kind 'moe_decoder' has different 'param_mb' on its rows"):
        estimate.with_columns(param_mb=param_mb)


def test_a_user_frame_with_a_bad_row_is_still_refused(estimate):
    frame = estimate.frame.copy()
    frame.loc[2, "activation_mb"] = -5.0
    with pytest.raises(InputError, match="layers row 2 .* column 'activation_mb' is -5.0; expected a finite"):
        LayerTable(frame)
