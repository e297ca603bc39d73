"""Fuzzing the file readers: malformed layer JSON and CSV, dry-run YAML, CSV and logs."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from sappkit import (
    LayerTable, read_dryrun_csv, read_dryrun_logs, read_dryrun_yaml, read_layers_csv, read_layers_json,
    write_layers_csv,
)
from sappkit.limits import MAX_LAYERS, MAX_MEMORY_MB

from .support import BAD, bad_or, fresh, fuzz, refused_or_valid, some_text

#: JSON memory key of each SAPP option (read_layers_json's module docstring).
MEMORY_KEYS = ("memory_activation", "memory_select_rec", "memory_select_comm", "memory_both_comm_select",
               "memory_recompute")
#: Layer keys whose value a case may corrupt, and the layer-table columns a refusal may name instead.
COLUMNS_OF = {"nb_layer": ("count",), "time": ("forward_time", "backward_time"), "forward_time": ("forward_time",),
              "memory_parameter": ("param_mb",), "recompute_coef": ("backward_time",),
              "select_rec_coef": ("backward_time",), "recompute_time": ("backward_time",),
              "working_mb": ("working_mb",), **{key: ("activation_mb",) for key in MEMORY_KEYS}}
#: What a refusal of a file that does not read as text names.
UNREADABLE = ("not UTF-8", "binary", "not valid", "not a readable CSV", "nested too deeply", "more than")


@st.composite
def layer_documents(draw) -> dict:
    """A valid MindFormers layer description: optional head and tail, one or two body kinds."""
    layers = []
    if draw(st.booleans()):
        layers.append({"name": "embed", "type": "HEAD", "nb_layer": 1, "time": 1, "memory_parameter": 50,
                       "memory_activation": 3})
    for index in range(draw(st.integers(1, 2))):
        layer = {"name": f"block{index}", "type": "BODY", "nb_layer": draw(st.integers(1, 12)),
                 "time": draw(st.floats(0.1, 10)), "memory_parameter": draw(st.floats(0, 900))}
        for key in draw(st.lists(st.sampled_from(MEMORY_KEYS), min_size=1, max_size=5, unique=True)):
            layer[key] = draw(st.floats(0, 800))
        layers.append(layer)
    if draw(st.booleans()):
        layers.append({"name": "head", "type": "TAIL", "nb_layer": 1, "time": 2, "memory_parameter": 60,
                       "memory_activation": 9})
    return {"stage_const_mem": draw(st.floats(0, 3000)), "layers_description": layers}


def _table_is_bounded(table: LayerTable) -> None:
    frame = table.frame
    assert 1 <= frame["count"].min() and table.body_layers <= MAX_LAYERS
    numbers = frame[["param_mb", "forward_time", "backward_time", "activation_mb"]].to_numpy(float)
    assert np.isfinite(numbers).all() and (numbers >= 0).all()


@fuzz(60)
@given(document=layer_documents(), data=st.data())
def test_layer_json(tmp_path, document, data):
    path = tmp_path / "layers.json"
    how = data.draw(st.sampled_from(["value", "drop", "unknown", "top", "text"]))
    layer = data.draw(st.sampled_from(document["layers_description"]))
    culprits = [layer["name"]]
    if how == "value":
        key = data.draw(st.sampled_from([*COLUMNS_OF, "name", "type", "model_name"]))
        layer[key] = data.draw(st.sampled_from(BAD))
        culprits += [key, *COLUMNS_OF.get(key, ()), *MEMORY_KEYS]
    elif how == "drop":
        key = data.draw(st.sampled_from(sorted(layer)))
        del layer[key]
        culprits += [key, *MEMORY_KEYS]
    elif how == "unknown":
        key = data.draw(some_text())
        layer[key] = 1
        culprits += [repr(key)[1:-1][:20], "a str of", "unknown key"]
    elif how == "top":
        key = data.draw(st.sampled_from(["layers_description", "stage_const_mem"]))
        document[key] = data.draw(st.sampled_from(BAD))
        culprits = [key]
    text = json.dumps(document, default=repr)
    if how == "text":
        cut = data.draw(st.integers(0, len(text)))
        text = text[:cut] + data.draw(some_text())
        culprits = [*UNREADABLE, "layers_description", "top level", "nb_layer"]
    path.write_text(text, encoding="utf-8")
    refused_or_valid(lambda: read_layers_json(path), [str(path)] if how == "text" else culprits, _table_is_bounded)


@fuzz(40)
@given(document=layer_documents(), data=st.data())
def test_layer_csv(tmp_path, document, data):
    source, path = tmp_path / "source.json", tmp_path / "layers.csv"
    source.write_text(json.dumps(document))
    write_layers_csv(read_layers_json(source), path)
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    row = data.draw(st.integers(1, len(lines) - 1))
    cells = lines[row].split(",")
    column = data.draw(st.integers(0, len(header) - 1))
    how = data.draw(st.sampled_from(["cell", "header", "garbage"]))
    if how == "cell":
        cells[column] = data.draw(st.sampled_from(["", "x", "True", "-1", "1e400", "nan", "inf", "1e300", "2.5",
                                                   '"a,b"', "10" * 20]))
        lines[row] = ",".join(cells)
    elif how == "header":
        header[column] = data.draw(st.sampled_from(["", "kind", "zzz", header[-1], "count "]))
        lines[0] = ",".join(header)
    else:
        lines.insert(row, data.draw(some_text()))
    path.write_text("\n".join(lines) + "\n")
    culprits = [f"column {header[column]!r}", f"columns {header[column]!r}", "column(s)", "row", "CSV", "not UTF-8",
                "binary", "const_mb"]
    refused_or_valid(lambda: read_layers_csv(path), culprits, _table_is_bounded)


def _dryrun_yaml(p: int, total: int, offsets, fulls, head, tail, ids, memories) -> str:
    return (f"pipeline_config: {{pipeline_num: {p}, num_layer: {total}, offset: {offsets}}}\n"
            f"recompute_config: {{recompute: {fulls}}}\n"
            f"memory_usage: {{head_memory: {head}, tail_memory: {tail}, "
            f"body_memories: {{stage_id: {ids}, memories: {memories}}}}}\n")


#: YAML keys a dry-run case may corrupt, as the reader names them.
YAML_KEYS = ("pipeline_num", "num_layer", "offset", "recompute", "head_memory", "tail_memory", "stage_id",
             "memories")


@fuzz(60)
@given(p=st.integers(2, 6), per_stage=st.integers(1, 4), data=st.data())
def test_dryrun_yaml(tmp_path, p, per_stage, data):
    values = {"pipeline_num": p, "num_layer": p * per_stage, "offset": [0] * p,
              "recompute": [data.draw(st.integers(0, per_stage)) for _ in range(p)],
              "head_memory": 9000.0, "tail_memory": 7000.0, "stage_id": list(range(1, p - 1)),
              "memories": [8000.0 + s for s in range(1, p - 1)]}
    key = data.draw(st.sampled_from(YAML_KEYS))
    how = data.draw(st.sampled_from(["value", "item", "alias", "text"]))
    if how == "value":
        values[key] = data.draw(st.sampled_from(BAD))
    elif how == "item" and isinstance(values[key], list) and values[key]:
        values[key][data.draw(st.integers(0, len(values[key]) - 1))] = data.draw(bad_or(st.integers(-3, 8)))
    text = _dryrun_yaml(*(json.dumps(values[k], default=repr) for k in YAML_KEYS))
    if how == "alias":
        text = "time_config: {a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], " + ", ".join(
            f"b{i}: &b{i} [{', '.join([f'*b{i - 1}' if i else '*a'] * 10)}]" for i in range(6)) + "}\n" + \
            text.replace(json.dumps(values[key]), "*b5", 1)
    elif how == "text":
        cut = data.draw(st.integers(0, len(text)))
        text = text[:cut] + data.draw(some_text()) + text[cut:]
    path = tmp_path / "dryruns.yaml"
    path.write_text(text, encoding="utf-8")

    def check(frame):
        assert ((frame["memory_mb"] > 0) & (frame["memory_mb"] <= MAX_MEMORY_MB)).all()
        assert (frame[[c for c in frame.columns if c.startswith("n_")]].sum(axis=1) == frame["layers"]).all()

    culprits = [key, *YAML_KEYS, "rounds", "top level", "pipeline_config", "memory_usage", *UNREADABLE]
    refused_or_valid(lambda: read_dryrun_yaml(path), culprits, check)


@fuzz(30)
@given(data=st.data())
def test_dryrun_csv(tmp_path, data):
    rows = ["run,stage,stages,layers,n_none,n_full,memory_mb", "a,0,3,2,2,0,9000", "a,1,3,3,1,2,8000",
            "a,2,3,2,2,0,5000"]
    row, column = data.draw(st.integers(0, 3)), data.draw(st.integers(0, 6))
    cells = rows[row].split(",")
    cells[column] = data.draw(st.sampled_from(["", "x", "True", "-1", "0", "1e27", "nan", "2.5", "a", "n_", "n_none",
                                               "1" * 30, "9" * 400]))
    rows[row] = ",".join(cells)
    path = tmp_path / "observations.csv"
    path.write_text("\n".join(rows) + "\n")
    header = rows[0].split(",")
    culprits = [f"column {header[column]!r}", "column(s)", "missing", "counts", "row", "stages", "CSV"]
    refused_or_valid(lambda: read_dryrun_csv(path), culprits)


@fuzz(30)
@given(peaks=st.lists(st.one_of(st.integers(0, 10**6), st.sampled_from(["0", "1e27", "9" * 400, "1" * 28, "x", ""])),
                      min_size=1, max_size=3), garbage=st.binary(max_size=16))
def test_dryrun_logs(tmp_path, peaks, garbage):
    root = fresh(tmp_path)
    for stage, peak in enumerate(peaks):
        folder = root / f"stage{stage}_rank{stage}"
        folder.mkdir()
        (folder / "worker.log").write_bytes(garbage + f"\nUsed peak memory usage (without fragments): {peak}M\n"
                                            .encode())

    def check(frame):
        assert frame["memory_mb"].tolist() == [float(p) for p in peaks]
        assert all(0 < p <= MAX_MEMORY_MB and math.isfinite(p) for p in frame["memory_mb"])

    refused_or_valid(lambda: read_dryrun_logs(root, stages=4, layers=8),
                     ["peak memory", "no *.log file below it has a line"], check)
