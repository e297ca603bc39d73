"""The layer table's replaced columns: checked in numpy, the same table as the full check, bad values still refused."""

import re

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, LayerTable
from sappkit.hardware import Cluster
from sappkit.layers import ParallelConfig, estimate_layers
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


@pytest.fixture(scope="module")
def built() -> pd.DataFrame:
    """The frame :func:`sappkit.estimate_layers` builds for DeepSeek-V3 (MoE, MTP), before its rows are checked."""
    frames = []
    original = LayerTable.__dict__["_built"]

    def kept(cls, frame, **fields):
        frames.append(frame.copy())
        return original.__func__(cls, frame, **fields)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LayerTable, "_built", classmethod(kept))
        estimate_layers(get("deepseek-v3"), parallel=ParallelConfig(tensor_parallel=4, data_parallel=2, expert_parallel=8),
                        cluster=Cluster.preset("dgx-h100"), options=("none", "selective", "full"))
    return frames[0]


@pytest.mark.parametrize("change", [
    {},
    {"count": float, "working_mb": int},  # numbers of another type: the checked table's types all the same
])
def test_a_built_frame_gives_the_fully_checked_table(built, change):
    frame = built.astype(change)
    fast, full = (make(frame, time_unit="ms", const_mb=5.0) for make in (LayerTable._built, LayerTable))
    pd.testing.assert_frame_equal(fast.frame, full.frame, check_exact=True)
    assert fast.frame.attrs == full.frame.attrs and fast.const_mb == full.const_mb


@pytest.mark.parametrize("column, value, message", [
    ("forward_time", np.nan, "layers row 1 (kind 'dense_decoder') column 'forward_time' is nan"),
    ("activation_mb", -1.0, "layers row 1 (kind 'dense_decoder') column 'activation_mb' is -1.0"),
    ("count", 0, "layers row 1 (kind 'dense_decoder') column 'count' is 0; expected a whole number >= 1"),
    ("role", "middle", "layers row 1 (kind 'dense_decoder') column 'role' is 'middle'"),
    ("option", "fulll", "layers row 1 (kind 'dense_decoder') column 'option' is 'fulll'"),
])
def test_a_bad_built_frame_is_refused_as_the_full_check_refuses_it(built, column, value, message):
    frame = built.copy()
    frame.loc[1, column] = value  # numbers stay a numeric column: numpy's checks must refuse them
    with pytest.raises(InputError, match=re.escape(message)):
        LayerTable._built(frame)


def test_the_per_kind_lookups_are_pandas_own(estimate):
    """The plain-dict index (LayerTable._index) holds what pandas' records and first rows per kind hold, with the
    same Python types, so that every lookup through it answers as the frame does."""
    frame = estimate.frame
    records = frame.to_dict("records")
    held = [record for options in estimate._records.values() for record in options.values()]
    assert sorted(held, key=repr) == sorted(records, key=repr)
    assert [[type(v) for v in r.values()] for r in held] == [[type(r[k]) for k in r] for r in held]
    assert all(type(a) is type(b) for r in records for a, b in
               zip(r.values(), estimate._records[r["kind"]][r["option"]].values()))
    firsts = frame.drop_duplicates("kind").set_index("kind")
    assert list(estimate._kinds) == list(firsts.index)
    for kind, row in firsts.iterrows():
        assert estimate.count(kind) == int(row["count"]) and estimate.module(kind) == str(row["module"])
        assert estimate.param_mb(kind) == float(row["param_mb"])
    assert estimate.body_layers == int(firsts.loc[list(estimate.body_kinds), "count"].sum())
    assert estimate.body_kinds == tuple(firsts.index[firsts["role"] == "body"])
