"""Layer tables on disk as CSV, and what both file formats share: round trips, missing and unwritable paths."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sappkit import (
    InputError, LayerTable, ParallelConfig, TransformerConfig, estimate_layers, read_layers_csv, read_layers_json,
    write_layers_csv, write_layers_json,
)
from sappkit.columns import SAPP_OPTIONS


def write(tmp_path, text: str, name: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def raises_exactly(message: str):
    """Expect an InputError with exactly ``message``."""
    return pytest.raises(InputError, match=f"^{re.escape(message)}$")


def assert_same_table(got: LayerTable, expected: LayerTable):
    pd.testing.assert_frame_equal(got.frame, expected.frame, check_like=True)  # column order is not content
    assert got.const_mb == expected.const_mb
    assert got.time_unit == expected.time_unit


@pytest.fixture
def estimated_table() -> LayerTable:
    model = TransformerConfig(layers=4, hidden_size=64, num_heads=8, num_kv_heads=2, ffn_size=200, seq_length=128,
                              vocab_size=1000, gated_mlp=True, experts=4, top_k=2, dense_layers=1)
    return estimate_layers(model, parallel=ParallelConfig(tensor_parallel=2, zero=3, data_parallel=4),
                           const_mb=777.7)


# --- round trips, both formats -----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", ["extended_table", "estimated_table"])
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_write_then_read_gives_the_same_table(tmp_path, request, make, fmt):
    table = request.getfixturevalue(make)
    path = tmp_path / f"model.{fmt}"
    (write_layers_json if fmt == "json" else write_layers_csv)(table, path)
    assert_same_table((read_layers_json if fmt == "json" else read_layers_csv)(path), table)


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=5, max_size=5),
       options=st.sets(st.sampled_from(SAPP_OPTIONS), min_size=1), const=st.floats(min_value=0, max_value=1e5))
def test_round_trip_keeps_every_float(tmp_path_factory, values, options, const):
    forward, param, *rest = values
    rows = [dict(kind="k", role="body", count=3, param_mb=param, option=option, forward_time=forward,
                 backward_time=rest[0] + i, activation_mb=rest[1] / (i + 1), working_mb=rest[2])
            for i, option in enumerate(o for o in SAPP_OPTIONS if o in options)]
    table = LayerTable(pd.DataFrame(rows), const_mb=const)
    folder = tmp_path_factory.mktemp("round")
    write_layers_json(table, folder / "t.json")
    write_layers_csv(table, folder / "t.csv")
    assert_same_table(read_layers_json(folder / "t.json"), table)
    assert_same_table(read_layers_csv(folder / "t.csv"), table)


# --- paths and the CSV -------------------------------------------------------------------------------------------


def test_missing_and_odd_paths(tmp_path):
    with raises_exactly(f"{tmp_path}/none.json: no such file; expected a MindFormers layer description object"):
        read_layers_json(tmp_path / "none.json")
    with raises_exactly(f"{tmp_path}: not a file; expected a layer table file"):
        read_layers_csv(tmp_path)


HEADER = "kind,role,count,param_mb,option,forward_time,backward_time,activation_mb"
ROW = "b,body,4,900,none,10,20,300"
BAD_CSV = [
    ("", "not a readable CSV (No columns to parse from file); expected a header row and one row per (kind, option)"),
    (f"{HEADER},colour\n{ROW},red\n", "unknown column(s) 'colour'; expected columns among kind, role, count, "
                                      "param_mb, option, forward_time, backward_time, activation_mb, module, "
                                      "memory_once_mb, working_mb, first_working_mb, grad_mb, const_mb, time_unit"),
    (f"{HEADER}\nb,body,4,900,none,10,20,lots\n", "row 0 column 'activation_mb' is 'lots'; expected a number"),
    (f"{HEADER}\nb,body,4,900,none,10,20,\n", "row 0 column 'activation_mb' is ''; expected a number"),
    (f"{HEADER}\nb,body,4,900,none,10,20,-3\n", "layers row 0 (kind 'b') column 'activation_mb' is -3.0; expected "
                                                 "a finite number >= 0"),
    (f"{HEADER},const_mb\n{ROW},1\nb,body,4,900,full,10,30,1,2\n", "column 'const_mb' holds [1.0, 2.0]; expected "
                                                                   "one number on every row"),
    (f"{HEADER},const_mb\n{ROW},\n", "column 'const_mb' holds [nan]; expected one number on every row"),
    ("kind,role\nb,body\n", "layers is missing column(s) 'count', 'param_mb', 'option', 'forward_time', "
                            "'backward_time', 'activation_mb'; a layer table needs kind, role, count, param_mb, "
                            "option, forward_time, backward_time, activation_mb"),
]


@pytest.mark.parametrize("text, message", BAD_CSV)
def test_bad_csv_names_the_path_and_the_column(tmp_path, text, message):
    path = write(tmp_path, text, "model.csv")
    with raises_exactly(f"{path}: {message}"):
        read_layers_csv(path)


def test_csv_blank_optional_cells_take_defaults_and_text_stays_text(tmp_path):
    path = write(tmp_path, f"{HEADER},module,working_mb,first_working_mb\nNA,body,4,900,None,10,20,3,,7,\n",
                 "model.csv")
    row = read_layers_csv(path, custom_options=("None",)).frame.iloc[0]
    assert (row.kind, row.option, row.module, row.working_mb, row.first_working_mb) == ("NA", "None", "model", 7, 7)


def test_an_unwritable_path_is_named(tmp_path):
    rows = [dict(kind="b", role="body", count=2, param_mb=1, option=option, forward_time=1, backward_time=2,
                 activation_mb=1) for option in ("none", "full")]
    target = tmp_path / "missing" / "m.json"
    with raises_exactly(f"{target}: cannot write (No such file or directory); expected a writable file path"):
        write_layers_csv(pd.DataFrame(rows), target)
