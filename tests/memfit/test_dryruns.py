"""Dry-run readers and MindFormers stage configurations: conventions on hand-made files, every refusal."""

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sappkit import DryRunWarning, InputError, dryrun_config, read_dryrun_csv, read_dryrun_logs, read_dryrun_yaml
from sappkit.memfit.stage_config import per_option_counts

DATA = Path(__file__).parent / "data"
OPTIONS = ["n_none", "n_selective", "n_comm", "n_both", "n_full"]


def counts(frame):
    return frame[["stage", "layers", *OPTIONS]].to_numpy().tolist()


def write(tmp_path, text, name="dryrun.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the cumulative-count convention ------------------------------------------------------------

def _positional(layers, full, select, comm):
    """Brute force: walk the layers of a stage; layer j runs full if j < full, and so on."""
    out = dict.fromkeys(["none", "selective", "comm", "both", "full"], 0)
    for j in range(layers):
        if j < full:
            out["full"] += 1
        elif j < select and j < comm:
            out["both"] += 1
        elif j < select:
            out["selective"] += 1
        elif j < comm:
            out["comm"] += 1
        else:
            out["none"] += 1
    return out


def test_cumulative_counts_equal_walking_the_layers(rng):
    for _ in range(300):
        layers = int(rng.integers(0, 9))
        full, select, comm = (int(rng.integers(0, layers + 1)) for _ in range(3))
        got = per_option_counts(layers, full, select, comm)
        assert {o: int(v) for o, v in got.items()} == _positional(layers, full, select, comm)


def test_kinds_follow_the_positional_rule(rng):
    # With one kind, the positional split must give the cumulative formula's counts.
    for _ in range(30):
        held = rng.integers(1, 6, 4)
        total = int(held.sum())
        offset = (held - total // 4).tolist()  # sums to the remainder, as MindFormers wants
        rec = [int(rng.integers(0, n + 1)) for n in held]
        sel = [int(rng.integers(0, n + 1)) for n in held]
        plain = dryrun_config(stages=4, layers=total, offset=offset, recompute=rec, select_recompute=sel)
        split = dryrun_config(stages=4, layers=total, offset=offset, recompute=rec, select_recompute=sel,
                              kinds={"block": total})
        assert counts(split) == counts(plain)


def test_kinds_split_a_stage_in_model_order():
    config = dryrun_config(stages=4, layers=10, offset=[-1, 1, 1, 1], recompute=[1, 2, 0, 1],
                           select_recompute=[1, 3, 1, 0], kinds={"dense": 3, "moe": 7})
    got = config[["stage", "kind", "layers", *OPTIONS]].to_numpy().tolist()
    assert got == [[0, "dense", 1, 0, 0, 0, 0, 1],
                   [1, "dense", 2, 0, 0, 0, 0, 2],  # the stage's first two layers run full
                   [1, "moe", 1, 0, 1, 0, 0, 0],
                   [2, "moe", 3, 2, 1, 0, 0, 0],
                   [3, "moe", 3, 2, 0, 0, 0, 1]]


def test_an_empty_stage_keeps_a_row():
    config = dryrun_config(stages=4, layers=6, offset=[-1, 0, 0, 3], kinds={"a": 1, "b": 5})
    assert config[["stage", "kind", "layers"]].to_numpy().tolist() == [[0, "a", 0], [1, "a", 1], [2, "b", 1],
                                                                      [3, "b", 4]]


def test_chunks_are_lists_per_chunk_in_model_order():
    config = dryrun_config(stages=2, layers=10, chunks=2, offset=[[1, 0], [1, 0]], recompute=[[1, 0], [True, 0]])
    assert config[["chunk", "stage", "layers", "n_none", "n_full"]].to_numpy().tolist() == [
        [0, 0, 3, 2, 1], [0, 1, 2, 2, 0], [1, 0, 3, 0, 3], [1, 1, 2, 2, 0]]


@pytest.mark.parametrize("kwargs, message", [
    (dict(offset=[1, 0, 0, 0]), "offset sums to 1; with 8 layers on 4 stages, 2 each, the offsets must sum to 0"),
    (dict(offset=[-3, 3, 0, 0]), "offset stage 0 gives -1 layers (2 + offset); a stage cannot hold fewer than 0 "
                                 "layers"),
    (dict(offset=[1, 0, 0]), "offset is [1, 0, 0]; expected 0, a bool or a list of 4 values (4 stages)"),
    (dict(offset=True), "offset is True; expected 0 or a list of ints per stage"),
    (dict(offset=[0, 0.5, 0, 0]), "offset stage 1 is 0.5; expected an int"),
    (dict(recompute=[0, 3, 0, 0]), "recompute stage 1 is 3; expected an int from 0 to 2 (the layers there) or a "
                                   "bool"),
    (dict(select_recompute=2), "select_recompute is 2; expected 0, a bool or a list of 4 values (4 stages)"),
    (dict(kinds={"a": 3, "b": 4}), "kinds add up to 7 layers ({'a': 3, 'b': 4}); expected layers = 8"),
    (dict(kinds={"a": 0, "b": 8}), "kinds['a'] must be an int >= 1; got 0"),
    (dict(kinds=["a"]), "kinds must be a mapping of body kind to its layer count in model order; got ['a']"),
    (dict(stages=1), "stages must be an int >= 2; got 1 (a pipeline needs at least two stages)"),
    (dict(offset=[10**30, -10**30, 0, 0]), "offset stage 0 is 1000000000000000000000000000000; expected an int from "
                                           "-2048 to 2048 (sappkit.limits.MAX_LAYERS)"),
    (dict(recompute=[-1, 0, 0, 0]), "recompute stage 0 is -1; expected an int from 0 to 2 (the layers there) or a "
                                    "bool"),
    (dict(recompute=[2.0, 0, 0, 0]), "recompute stage 0 is 2.0; expected an int from 0 to 2 (the layers there) or a "
                                     "bool"),
    (dict(kinds={None: 8}), "kinds key must be a non-empty name; got None"),
    (dict(kinds={"": 8}), "kinds key must be a non-empty name; got ''"),
    (dict(kinds={"a": True, "b": 7}), "kinds['a'] must be an int >= 1; got True"),
    (dict(run=None), "run must be a non-empty name; got None"),
    (dict(chunks=2**70), "chunks must be an int <= 32 (sappkit.limits.MAX_CHUNKS); got 1180591620717411303424"),
])
def test_dryrun_config_refusals(kwargs, message):
    args = dict(stages=4, layers=8) | kwargs
    with pytest.raises(InputError) as error:
        dryrun_config(**args)
    assert str(error.value) == message


def test_dryrun_config_refuses_chunk_lists_of_the_wrong_shape():
    with pytest.raises(InputError) as error:
        dryrun_config(stages=2, layers=8, chunks=2, offset=[0, 0])
    assert str(error.value) == ("offset is [0, 0]; expected 0, a bool or a list of 2 lists of 2 values (one per "
                                "chunk) (2 stages, 2 chunks)")


# --- the MindFormers YAML -------------------------------------------------------------------------

def test_two_rounds_read_as_two_runs_with_head_and_tail_from_round_one():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rounds agree at stages 0 and 3: no warning
        frame = read_dryrun_yaml(DATA / "two_rounds.yaml")
    assert frame["run"].tolist() == ["round1"] * 4 + ["round2"] * 2
    assert counts(frame) == [[0, 20, 19, 0, 0, 0, 1], [1, 21, 19, 0, 0, 0, 2], [2, 19, 18, 0, 0, 0, 1],
                             [3, 20, 19, 0, 0, 0, 1], [1, 19, 16, 0, 0, 0, 3], [2, 21, 17, 0, 0, 0, 4]]
    assert frame["memory_mb"].tolist() == [66502, 52536, 35595, 25599, 45439, 35700]


def test_rounds_that_differ_at_the_ends_warn_and_keep_round_one():
    with pytest.warns(DryRunWarning) as record:
        frame = read_dryrun_yaml(DATA / "rounds_differ.yaml")
    assert [str(w.message) for w in record] == [
        f"{DATA / 'rounds_differ.yaml'}: round(s) 2 differ from round 1 at stage 0 or 3; head_memory and "
        "tail_memory are read as round 1's stages, as the format's documentation says (the original tool pairs "
        "them with the last round's configuration)"]
    head = frame[frame["stage"] == 0]
    assert head[["run", "layers", "n_full", "memory_mb"]].to_numpy().tolist() == [["round1", 5, 1, 30000.0]]


def test_bools_and_zero():
    frame = read_dryrun_yaml(DATA / "bools_and_zero.yaml")
    # recompute [true, 0, 1, false]; select_recompute true (every layer); select_comm_recompute 0.
    assert counts(frame) == [[0, 3, 0, 0, 0, 0, 3], [1, 3, 0, 3, 0, 0, 0], [2, 3, 0, 2, 0, 0, 1],
                             [3, 3, 0, 3, 0, 0, 0]]


def test_a_list_of_one_list_is_one_round_with_all_cumulative_counts():
    frame = read_dryrun_yaml(DATA / "cumulative.yaml")
    assert counts(frame) == [[0, 6, 3, 1, 0, 1, 1], [1, 5, 1, 0, 2, 2, 0], [2, 5, 0, 0, 3, 0, 2],
                             [3, 4, 3, 1, 0, 0, 0]]
    assert frame["memory_mb"].tolist() == [41000.5, 30000, 20000, 12000]


def test_kinds_apply_to_every_round():
    frame = read_dryrun_yaml(DATA / "two_rounds.yaml", kinds={"dense": 3, "moe": 77})
    assert frame.loc[frame["kind"] == "dense", ["run", "stage", "layers", "n_full"]].to_numpy().tolist() == [
        ["round1", 0, 3, 1]]


GOOD = """pipeline_config: {pipeline_num: 4, num_layer: 8, offset: 0}
recompute_config: {recompute: [1, 0, 0, 1]}
memory_usage: {head_memory: 9000, tail_memory: 5000, body_memories: {stage_id: [1, 2], memories: [7000, 6000]}}
"""


@pytest.mark.parametrize("old, new, message", [
    ("offset: 0", "offset: 0, layers: 3", "pipeline_config has unknown key 'layers'; expected keys pipeline_num, "
                                          "num_layer, offset"),
    ("recompute_config:", "recompute_cfg:", "the top level has unknown key 'recompute_cfg'; expected keys "
                                            "pipeline_config, time_config, recompute_config, memory_usage"),
    ("pipeline_num: 4", "pipeline_num: one", "pipeline_config.pipeline_num is 'one'; expected an int >= 2"),
    ("num_layer: 8", "num_layer: 8.5", "pipeline_config.num_layer is 8.5; expected an int >= 1"),
    ("head_memory: 9000", "head_memory: null", "memory_usage.head_memory is None; expected the stage's peak "
                                               "memory, a number > 0 (MB)"),
    ("tail_memory: 5000", "tail_memory: -5", "memory_usage.tail_memory is -5; expected the stage's peak memory, "
                                             "a number > 0 (MB)"),
    ("stage_id: [1, 2]", "stage_id: [0, 2]", "memory_usage.body_memories.stage_id lists stage 0, but "
                                             "head_memory already observes it; observe a stage once per round"),
    ("stage_id: [1, 2]", "stage_id: [1, 1]", "memory_usage.body_memories.stage_id lists stage 1, but it is "
                                             "listed twice; observe a stage once per round"),
    ("stage_id: [1, 2]", "stage_id: [1, 4]", "memory_usage.body_memories.stage_id has 4; expected a stage from "
                                             "0 to 3"),
    ("memories: [7000, 6000]", "memories: [7000]", "memory_usage.body_memories.stage_id and memories must be "
                                                   "lists of one length; got [1, 2] and [7000]"),
    ("memories: [7000, 6000]", "memories: [7000, zero]", "memory_usage.body_memories.memories (stage 2) is "
                                                         "'zero'; expected the stage's peak memory, a number > 0 "
                                                         "(MB)"),
    ("recompute: [1, 0, 0, 1]", "recompute: [1, 0, 0, 9]", "(round 1): recompute stage 3 is 9; expected an int "
                                                           "from 0 to 2 (the layers there) or a bool"),
    ("stage_id: [1, 2], memories: [7000, 6000]", "stage_id: [[1], [2], [1]], memories: [[70], [60], [71]]",
     "the keys give different numbers of rounds (pipeline_config.offset has 2, "
     "memory_usage.body_memories.stage_id has 3, memory_usage.body_memories.memories has 3); every list of lists "
     "must have one list per round"),
    ("body_memories: {stage_id: [1, 2], memories: [7000, 6000]}", "body_memories: {stage_id: [1, 2]}",
     "memory_usage.body_memories has no key 'memories'; expected keys stage_id, memories"),
])
def test_yaml_refusals_name_file_key_and_value(tmp_path, old, new, message):
    assert old in GOOD
    text = GOOD.replace(old, new)
    if "has 3" in message:
        text = text.replace("offset: 0", "offset: [[0, 0, 0, 0], [0, 0, 0, 0]]")
    path = write(tmp_path, text)
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(path)
    separator = " " if message.startswith("(") else ": "
    assert str(error.value) == f"{path}{separator}{message}"


def test_yaml_with_rounds_needs_a_value_per_round(tmp_path):
    text = GOOD.replace("offset: 0", "offset: [[0, 0, 0, 0], [1, -1, 0, 0]]").replace(
        "stage_id: [1, 2], memories: [7000, 6000]", "stage_id: [[1, 2], [1]], memories: [[7000, 6000], [7100]]")
    path = write(tmp_path, text)
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(path)
    assert str(error.value) == (f"{path}: recompute_config.recompute is [1, 0, 0, 1]; with 2 rounds expected a "
                                "list of 2 items, one per round")
    flat = write(tmp_path, text.replace("[[1, 2], [1]]", "[1, 2]").replace("[1, 0, 0, 1]", "[[1, 0, 0, 1], 0]"),
                 "flat.yaml")
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(flat)
    assert str(error.value) == (f"{flat}: memory_usage.body_memories.stage_id is [1, 2]; with 2 rounds expected "
                                "a list of 2 lists, one per round")


def test_yaml_file_problems(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(missing)
    assert str(error.value) == f"{missing}: no such file; expected a MindFormers pipeline_balance YAML"
    broken = write(tmp_path, "pipeline_config: [1, 2\n", "broken.yaml")
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(broken)
    assert str(error.value) == (f"{broken}: not valid YAML (expected ',' or ']', but got '<stream end>' at line 2 "
                                "column 1); expected a MindFormers pipeline_balance YAML")
    scalar = write(tmp_path, "3\n", "scalar.yaml")
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(scalar)
    assert str(error.value) == (f"{scalar}: the top level is 3; expected a mapping with keys pipeline_config, "
                                "time_config, recompute_config, memory_usage")
    nothing = write(tmp_path, "pipeline_config: {pipeline_num: 4, num_layer: 8}\n", "nothing.yaml")
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(nothing)
    assert str(error.value) == (f"{nothing}: the top level has no key 'memory_usage'; expected keys "
                                "pipeline_config, time_config, recompute_config, memory_usage")


# --- MindSpore logs -------------------------------------------------------------------------------

def test_logs_take_each_stage_folder_peak_and_the_stated_configuration():
    used = read_dryrun_logs(DATA / "logs_4stages", stages=4, layers=8, offset=[1, 0, 0, -1], recompute=[0, 1, 2, 0])
    assert counts(used) == [[0, 3, 3, 0, 0, 0, 0], [1, 2, 1, 0, 0, 0, 1], [3, 1, 1, 0, 0, 0, 0]]
    assert used["memory_mb"].tolist() == [30500, 20100, 12000]  # stage 1: the larger of its two ranks
    actual = read_dryrun_logs(DATA / "logs_4stages", stages=4, layers=8, peak="actual", run="A")
    assert actual["memory_mb"].tolist() == [31200, 20800, 12500.5]
    assert set(actual["run"]) == {"A"}


def test_log_refusals(tmp_path):
    def refused(folder, **kwargs):
        with pytest.raises(InputError) as error:
            read_dryrun_logs(folder, **({"stages": 4, "layers": 8} | kwargs))
        return str(error.value)

    assert refused(tmp_path / "none") == (f"{tmp_path / 'none'}: no such folder; expected a folder with one "
                                          "stage<s>_* folder per stage")
    assert refused(tmp_path) == (f"{tmp_path}: no stage<s>_* folders; expected one folder per observed stage "
                                 "(stage0_..., stage3_...)")
    assert refused(DATA / "logs_4stages", peak="max") == "peak must be one of 'used', 'actual'; got 'max'"
    (tmp_path / "stage7_rank56").mkdir()
    assert refused(tmp_path) == (f"{tmp_path / 'stage7_rank56'}: stage 7 is not a stage of a 4-stage pipeline "
                                 "(0 to 3)")
    (tmp_path / "stage7_rank56").rmdir()
    (tmp_path / "stage1_a").mkdir()
    (tmp_path / "stage1_a" / "x.log").write_text("nothing here\n")
    assert refused(tmp_path) == (f"{tmp_path / 'stage1_a'}: no *.log file below it has a line 'Used peak memory "
                                 "usage (without fragments): <n>M'; expected the dry run's log for this stage")
    (tmp_path / "stage1_b").mkdir()
    assert refused(tmp_path) == (f"{tmp_path}: stage 1 has two folders, 'stage1_a' and 'stage1_b'; keep one "
                                 "folder per stage")


@pytest.mark.parametrize("line, message", [
    ("Used peak memory usage (without fragments): 0M", "the peak memory is 0.0; expected the stage's peak memory, a "
                                                       "number > 0 (MB)"),
    ("Used peak memory usage (without fragments): 1000000000000000000000000000M",
     "the peak memory is 1e+27; expected a peak memory <= 1073741824 (sappkit.limits.MAX_MEMORY_MB) MB"),
    ("Used peak memory usage (without fragments): " + "9" * 400 + "M", "the peak memory is inf; expected the stage's "
                                                                      "peak memory, a number > 0 (MB)"),
])
def test_implausible_peaks_in_a_log_name_the_file_and_line(tmp_path, line, message):
    (tmp_path / "stage0_rank0").mkdir()
    log = tmp_path / "stage0_rank0" / "worker.log"
    log.write_text(f"starting\n{line}\n")
    with pytest.raises(InputError) as error:
        read_dryrun_logs(tmp_path, stages=4, layers=8)
    assert str(error.value) == f"{log} line 2: {message}"


@pytest.mark.parametrize("peaks, message", [
    ("head_memory: 0, tail_memory: 1, body_memories: {stage_id: [1], memories: [1]}",
     "memory_usage.head_memory is 0; expected the stage's peak memory, a number > 0 (MB)"),
    ("head_memory: 1.0e+27, tail_memory: 1, body_memories: {stage_id: [1], memories: [1]}",
     "memory_usage.head_memory is 1e+27; expected a peak memory <= 1073741824 (sappkit.limits.MAX_MEMORY_MB) MB"),
    ("head_memory: 1, tail_memory: 1, body_memories: {stage_id: [1], memories: [true]}",
     "memory_usage.body_memories.memories (stage 1) is True; expected the stage's peak memory, a number > 0 (MB)"),
    ("head_memory: 1, tail_memory: 1, body_memories: {stage_id: [1], memories: [1.0e+27]}",
     "memory_usage.body_memories.memories (stage 1) is 1e+27; expected a peak memory <= 1073741824 "
     "(sappkit.limits.MAX_MEMORY_MB) MB"),
])
def test_implausible_peaks_in_a_yaml_name_the_key(tmp_path, peaks, message):
    path = write(tmp_path, f"pipeline_config: {{pipeline_num: 4, num_layer: 8}}\nmemory_usage: {{{peaks}}}\n",
                 "peaks.yaml")
    with pytest.raises(InputError) as error:
        read_dryrun_yaml(path)
    assert str(error.value) == f"{path}: {message}"


# --- CSV and the observations frame ---------------------------------------------------------------

def test_bundled_csvs_read():
    for name, runs in (("llama2_70b", 2), ("deepseek_v3", 3), ("vlm", 3)):
        frame = read_dryrun_csv(Path("data") / f"{name}_dryruns.csv")
        assert frame["run"].nunique() == runs
        assert (frame[OPTIONS].sum(axis=1) == frame["layers"]).all()


GOOD_CSV = pd.DataFrame({"run": ["a", "a", "a"], "stage": [0, 1, 2], "stages": 3, "layers": [2, 3, 2],
                         "n_none": [2, 1, 2], "n_full": [0, 2, 0], "memory_mb": [9000.0, 8000.0, 5000.0]})


@pytest.mark.parametrize("change, message", [
    (lambda f: f.drop(columns="memory_mb"), "is missing 'memory_mb'; dry-run observations need columns run, "
                                            "stage, stages, layers, memory_mb and one count column per option "
                                            "(n_none, n_full, ...)"),
    (lambda f: f.drop(columns=["n_none", "n_full"]), "is missing n_<option> count columns; dry-run observations "
                                                     "need columns run, stage, stages, layers, memory_mb and one "
                                                     "count column per option (n_none, n_full, ...)"),
    (lambda f: f.assign(n_full=[0, 1, 0]), "row 1 (run 'a', stage 1): its counts n_none + n_full add up to 2 but "
                                           "layers is 3; they must add up to the layers"),
    (lambda f: f.assign(memory_mb=[9000, 0, 5000]), "row 1 (run 'a', stage 1) column 'memory_mb' is 0; expected "
                                                    "the stage's peak memory, a number > 0 (MB)"),
    (lambda f: f.assign(layers=[2, 3.5, 2]), "row 1 (run 'a', stage 1) column 'layers' is 3.5; expected a whole "
                                             "number >= 0"),
    (lambda f: f.assign(stage=[0, 1, 3]), "row 2 (run 'a', stage 3) has stages = 3; expected stages >= 2 and "
                                          "stage < stages"),
    (lambda f: f.assign(stage=[0, 1, 1]), "row 2 (run 'a', stage 1) repeats (run, stage) of an earlier row; "
                                          "observe each once"),
    (lambda f: f.assign(stages=[3, 3, 4]), "row 0 (run 'a', stage 0) column 'stages' differs between the rows of "
                                           "its run; a run has one stages value"),
])
def test_csv_refusals(tmp_path, change, message):
    path = tmp_path / "obs.csv"
    change(GOOD_CSV.copy()).to_csv(path, index=False)
    with pytest.raises(InputError) as error:
        read_dryrun_csv(path)
    assert str(error.value) == f"{path} {message}"


def test_rows_of_one_stage_share_its_peak(tmp_path):
    frame = pd.DataFrame({"run": "a", "stage": [0, 0], "chunk": [0, 1], "stages": 2, "layers": [1, 1],
                          "n_none": [1, 1], "memory_mb": [100.0, 101.0]})
    path = tmp_path / "obs.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InputError) as error:
        read_dryrun_csv(path)
    assert str(error.value) == (f"{path} row 0 (run 'a', stage 0) column 'memory_mb' differs between the rows of "
                                "its stage; a stage has one memory_mb value")
    missing = tmp_path / "nope.csv"
    with pytest.raises(InputError) as error:
        read_dryrun_csv(missing)
    assert str(error.value) == f"{missing}: no such file; expected a CSV of dry-run observations"


def test_csv_round_trip_keeps_the_frame(tmp_path):
    frame = read_dryrun_yaml(DATA / "cumulative.yaml")
    frame.to_csv(tmp_path / "obs.csv", index=False)
    again = read_dryrun_csv(tmp_path / "obs.csv")
    pd.testing.assert_frame_equal(again, frame, check_dtype=False)
    assert np.issubdtype(again["n_full"].dtype, np.integer)
