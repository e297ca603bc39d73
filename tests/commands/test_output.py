"""How sub-commands print: wrapped sentences, narrow tables without empty columns, CSV and JSON for programs."""

import argparse
import json

import numpy as np
import pandas as pd

from sappkit.commands._output import WIDTH, Output, add_output_arguments

FRAME = pd.DataFrame({"stage": [0, 1], "memory_mb": [56017.07, 9.5], "time": [118.1, 125.4], "limit_mb": np.nan,
                      "note": ["a", "b"]})


def output(*arguments, unit="ms"):
    parser = argparse.ArgumentParser()
    add_output_arguments(parser, main="stage")
    return Output(parser.parse_args(list(arguments)), unit)


def test_text_wraps_sentences_and_shows_the_key_columns_without_empty_ones(capsys):
    out = output()
    out.line("word " * 40 + "\n  indented " + "word " * 30)
    out.table("stages", FRAME, key=("stage", "memory_mb", "time", "limit_mb"))
    out.finish()
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= WIDTH
    indented = lines.index(next(line for line in lines if line.startswith("  indented")))
    assert lines[1].startswith("  word") and lines[indented + 1].startswith("    word")  # continuations indented
    assert lines[-3:] == ["stage  memory_mb  time (ms)", "    0     56,017        118",
                          "    1         10        125"]  # one number of decimals a column


def test_wide_shows_every_column_that_holds_something(capsys):
    out = output("--wide")
    out.table("stages", FRAME, key=("stage",))
    assert capsys.readouterr().out.splitlines()[0].split() == ["stage", "memory_mb", "time", "(ms)", "note"]


def test_csv_prints_the_main_table_and_json_everything(capsys):
    out = output("--format", "csv")
    out.line("not for programs")
    out.table("stages", FRAME, key=("stage",))
    out.keep("other", FRAME.head(1))
    out.finish()
    assert capsys.readouterr().out.splitlines()[0] == "stage,memory_mb,time,limit_mb,note"
    out = output("--format", "json")
    out.value("step_time", float("nan"))
    out.value("layers", (1, 2))
    out.table("stages", FRAME)
    out.finish()
    document = json.loads(capsys.readouterr().out)
    assert document["time_unit"] == "ms" and document["step_time"] is None and document["layers"] == [1, 2]
    assert document["stages"][0] == {"stage": 0, "memory_mb": 56017.07, "time": 118.1, "limit_mb": None, "note": "a"}


def test_csv_without_a_table_is_the_headline_values(capsys):
    out = output("--format", "csv")
    out.value("status", "failed")
    out.finish()
    assert capsys.readouterr().out == "time_unit,status\nms,failed\n"


def test_a_table_too_wide_cuts_its_widest_text_column_to_fit_and_wide_shows_it_whole(capsys):
    """A long case text (the bench's) once pushed tables to 156 columns; it is cut to 100, ending in '…'."""
    frame = pd.DataFrame({"case": ["x" * 120, "short"], "median_ms": [1234.5, 2.0], "detail": ["d" * 30, "e"]})
    out = output()
    out.table("bench", frame, key=("case", "median_ms", "detail"))
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) == 100
    assert lines[1] == "x" * 56 + "…" + "  " + "    1,234" + "  " + "d" * 30
    assert lines[2].startswith("short ")
    out = output("--wide")
    out.table("bench", frame, key=("case", "median_ms", "detail"))
    assert capsys.readouterr().out.splitlines()[1].startswith("x" * 120 + "  ")
