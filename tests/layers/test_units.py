"""The time unit a layer table knows: where it comes from, where it is refused, how times and memory read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from sappkit import (
    InputError, LayerTable, TransformerConfig, estimate_layers, fit_memory, read_dryrun_csv, read_layers_csv,
    read_layers_json, write_layers_csv, write_layers_json,
)
from sappkit.layers.units import (
    check_time_unit, format_mb, format_number, format_time, labelled, ms_per_unit, text_table, time_unit_of,
)

DATA = Path(__file__).resolve().parents[2] / "data"
ROWS = [dict(kind="block", role="body", count=4, param_mb=900, option=o, forward_time=10, backward_time=b,
             activation_mb=a) for o, b, a in (("none", 20, 300), ("full", 30, 20))]
LAYER = {"name": "block", "type": "BODY", "nb_layer": 4, "time": 10, "memory_parameter": 900,
         "memory_activation": 300}
BAD_UNIT = ("a short name such as 'ms' or 'us' (a non-empty string of at most 24 characters on one line, without "
            "leading or trailing spaces)")


def raises_exactly(message: str):
    return pytest.raises(InputError, match=f"^{re.escape(message)}$")


def json_file(tmp_path, **top) -> Path:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"layers_description": [LAYER], **top}))
    return path


@pytest.mark.parametrize("value", ["ms", "us", "s", "MindFormers units", "x" * 24])
def test_short_units_pass(value):
    assert check_time_unit(value) == value


@pytest.mark.parametrize("value, shown", [("", "''"), (" ms", "' ms'"), ("ms\n", "'ms\\n'"), ("x" * 25, repr("x" * 25)),
                                          (3, "3"), (None, "None")])
def test_other_units_are_refused(value, shown):
    with raises_exactly(f"time_unit must be {BAD_UNIT}; got {shown}"):
        check_time_unit(value)


def test_numbers_read_with_separators_and_few_decimals():
    assert [format_number(v) for v in (123456.7, 999.5, 99.94, 9.994, 0.004, float("nan"))] == [
        "123,457", "1,000", "99.9", "9.99", "0", "n/a"]
    assert (format_time(5765.99, "MindFormers units"), format_mb(70465.4), format_mb(8.05)) == (
        "5,766 MindFormers units", "70,465 MB", "8.05 MB")


def test_a_table_takes_its_unit_from_the_argument_the_frame_or_nobody():
    frame = pd.DataFrame(ROWS)
    assert LayerTable(frame).time_unit == "time units"
    frame.attrs["time_unit"] = "us"
    assert LayerTable(frame).time_unit == "us"
    table = LayerTable(frame, time_unit="ms")
    assert (table.time_unit, table.frame.attrs["time_unit"], frame.attrs["time_unit"]) == ("ms", "ms", "us")
    assert table.with_frame(table.frame.head(1)).time_unit == "ms"
    assert time_unit_of(table.frame[["kind", "forward_time"]]) == "ms"
    with raises_exactly(f"time_unit must be {BAD_UNIT}; got ''"):
        LayerTable(frame, time_unit="")
    frame.attrs["time_unit"] = 7
    with raises_exactly(f"frame.attrs['time_unit'] must be {BAD_UNIT}; got 7"):
        LayerTable(frame)


def test_estimates_and_the_bundled_tables_are_in_ms():
    model = TransformerConfig(layers=2, hidden_size=64, num_heads=4, ffn_size=128, seq_length=32, vocab_size=100)
    assert estimate_layers(model).time_unit == "ms"
    for name in ("llama2_70b.json", "deepseek_v3.json", "vlm.json"):
        assert read_layers_json(DATA / name).time_unit == "ms"
    fitted = fit_memory(read_dryrun_csv(DATA / "llama2_70b_dryruns.csv"))
    assert fitted.to_layers(read_layers_json(DATA / "llama2_70b.json")).time_unit == "ms"


def test_a_mindformers_file_without_a_unit_is_in_its_relative_unit_unless_told(tmp_path):
    path = json_file(tmp_path)
    assert read_layers_json(path).time_unit == "MindFormers units"
    assert read_layers_json(path, time_unit="ms").time_unit == "ms"
    stated = json_file(tmp_path, time_unit="us")
    assert read_layers_json(stated).time_unit == read_layers_json(stated, time_unit="us").time_unit == "us"
    with raises_exactly(f"{stated}: the file states time_unit 'us' but time_unit='ms' was given; drop the argument "
                        "or correct the file"):
        read_layers_json(stated, time_unit="ms")
    bad = json_file(tmp_path, time_unit="")
    with raises_exactly(f"{bad}: key 'time_unit' is ''; expected a short unit name (a non-empty string of at most 24 "
                        "characters)"):
        read_layers_json(bad)
    with raises_exactly(f"time_unit must be {BAD_UNIT}; got ''"):
        read_layers_json(path, time_unit="")


def test_a_csv_states_its_unit_in_a_column(tmp_path):
    table = LayerTable(pd.DataFrame(ROWS), time_unit="us")
    write_layers_csv(table, tmp_path / "t.csv")
    assert read_layers_csv(tmp_path / "t.csv").time_unit == "us"
    with raises_exactly(f"{tmp_path / 't.csv'}: the file states time_unit 'us' but time_unit='ms' was given; drop "
                        "the argument or correct the file"):
        read_layers_csv(tmp_path / "t.csv", time_unit="ms")
    plain = tmp_path / "plain.csv"
    plain.write_text(pd.DataFrame(ROWS).to_csv(index=False))
    assert (read_layers_csv(plain).time_unit, read_layers_csv(plain, time_unit="ms").time_unit) == ("time units", "ms")
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(pd.DataFrame(ROWS).assign(time_unit=["ms", "us"]).to_csv(index=False))
    with raises_exactly(f"{mixed}: column 'time_unit' holds ['ms', 'us']; expected one unit on every row"):
        read_layers_csv(mixed)


def test_the_json_writer_states_the_unit(tmp_path):
    write_layers_json(LayerTable(pd.DataFrame(ROWS), time_unit="us"), tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["time_unit"] == "us"


def test_a_terminal_table_heads_times_with_their_unit_and_separates_thousands():
    frame = LayerTable(pd.DataFrame(ROWS), time_unit="us").frame[["kind", "option", "forward_time", "activation_mb"]]
    assert text_table(frame).splitlines() == ["kind   option  forward_time (us)  activation_mb",
                                              "block  none                   10            300",
                                              "block  full                   10             20"]
    assert list(labelled(frame, headers={"forward_time": "forward"}).columns) == [
        "kind", "option", "forward (us)", "activation_mb"]
    assert text_table(pd.DataFrame({"objective": [1234.5], "ok": [True], "none": [None]}), "ms").splitlines() == [
        "objective (ms)  ok    none", "         1,234  True  -"]


def test_a_terminal_table_gives_each_column_one_number_of_decimals():
    """Issue 39: a column read 7.87 beside 12.9 and 56,017 beside 9.50 (each number as format_number alone)."""
    frame = pd.DataFrame({"cost": [7.874, 12.94, 0.001, 150.2], "small": [7.874, 0.5, 2.0, 0.0],
                          "whole": [3.0, 12.0, 1500.0, 7.0], "memory_mb": [56017.07, 9.5, float("nan"), -0.2]})
    rows = [line.split() for line in text_table(frame).splitlines()[1:]]
    assert rows == [["8", "7.87", "3", "56,017"], ["13", "0.50", "12", "10"], ["0", "2.00", "1,500", "-"],
                    ["150", "0.00", "7", "0"]]
    for column in zip(*rows):
        assert len({len(cell.partition(".")[2]) for cell in column if cell != "-"}) == 1, column


def test_the_length_of_a_unit_in_ms_is_known_or_must_be_stated():
    assert (ms_per_unit("ms", None), ms_per_unit("s", None), ms_per_unit("MindFormers units", 2.5)) == (1.0, 1000.0,
                                                                                                        2.5)
    with raises_exactly("time_unit_ms is needed: the layer table's times are in 'MindFormers units', whose length in "
                        "ms sappkit cannot know (it knows 's', 'ms', 'us'); state how many ms one time unit is"):
        ms_per_unit("MindFormers units", None)
