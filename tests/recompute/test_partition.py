"""Partition: explicit construction, from an assignment, from MindFormers offsets, and every refusal."""

import numpy as np
import pandas as pd
import pytest

from sappkit.errors import InputError
from sappkit.layers.table import LayerTable
from sappkit.recompute.partition import Partition

SAPP = (("none", 50, 2.0), ("selective", 20, 2.1), ("comm", 40, 2.2), ("both", 15, 2.3), ("full", 5, 3.0))


def table(counts=(("dense", 3), ("moe", 5)), options=SAPP):
    rows = [dict(kind="embed", role="head", count=1, param_mb=10, option="none", forward_time=1,
                 backward_time=1, activation_mb=1)]
    rows += [dict(kind=kind, role="body", count=count, param_mb=100, option=o, forward_time=1, backward_time=b,
                  activation_mb=a) for kind, count in counts for o, a, b in options]
    return LayerTable(pd.DataFrame(rows))


def cells(rows):
    return pd.DataFrame(rows, columns=["chunk", "stage", "kind", "layers"])


def test_explicit_cells_are_sorted_into_model_order_and_merged():
    frame = cells([(0, 1, "b", 2), (0, 0, "a", 1), (0, 0, "b", 0), (0, 0, "b", 1), (0, 0, "b", 2), (0, 1, "c", 1)])
    part = Partition(stages=2, micro_batches=4, cells=frame)
    assert part.cells.values.tolist() == [[0, 0, "a", 1], [0, 0, "b", 3], [0, 1, "b", 2], [0, 1, "c", 1]]
    assert part.layer_count == 7 and part.configured is None and part.schedule == "1f1b"
    assert part.body["stage"].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert part.body["in_flight"].tolist() == [2, 2, 2, 2, 1, 1, 1]
    assert part.in_flight["in_flight"].tolist() == [2, 1]


def test_interleaved_and_dualpipev_number_layers_in_model_order():
    frame = cells([(1, 0, "b", 1), (0, 1, "b", 2), (0, 0, "b", 1), (1, 1, "b", 3)])
    part = Partition(stages=2, micro_batches=4, chunks=2, cells=frame)
    assert part.schedule == "interleaved"
    assert list(zip(part.body["chunk"], part.body["stage"])) == [(0, 0), (0, 1), (0, 1), (1, 0), (1, 1), (1, 1),
                                                                 (1, 1)]
    assert part.body["in_flight"].tolist() == [3, 2, 2, 2, 1, 1, 1]
    v = Partition(stages=2, micro_batches=4, chunks=2, schedule="dualpipev", cells=frame)
    assert list(zip(v.body["chunk"], v.body["stage"])) == [(0, 0), (0, 1), (0, 1), (1, 1), (1, 1), (1, 1), (1, 0)]


def test_configured_and_assignment_round_trip():
    part = Partition(stages=2, micro_batches=4, cells=cells([(0, 0, "b", 3), (0, 1, "b", 2)]),
                     configured=["full", "full", "none", "none", "selective"])
    assignment = part.assignment
    assert assignment.values.tolist() == [["b", 0, 0, "full", 2], ["b", 0, 0, "none", 1], ["b", 0, 1, "none", 1],
                                          ["b", 0, 1, "selective", 1]]
    again = Partition.from_assignment(assignment, stages=2, micro_batches=4)
    assert again.configured == part.configured
    assert Partition(stages=2, micro_batches=4, cells=cells([(0, 0, "b", 2)]), configured="full").configured == (
        "full", "full")
    assert "stage 0: b x3" in part.describe()


def test_from_assignment_orders_kinds_by_kind_order():
    frame = pd.DataFrame({"kind": ["moe", "dense", "moe"], "chunk": [0, 0, 0], "stage": [0, 0, 1],
                          "option": ["none", "full", "none"], "layers": [1, 2, 3]})
    part = Partition.from_assignment(frame, stages=2, micro_batches=4, kind_order=("dense", "moe"))
    assert part.body["kind"].tolist() == ["dense", "dense", "moe", "moe", "moe", "moe"]
    assert part.configured == ("full", "full", "none", "none", "none", "none")
    unconfigured = Partition.from_assignment(frame.drop(columns="option"), stages=2, micro_batches=4)
    assert unconfigured.configured is None
    assert unconfigured.body["kind"].tolist()[:3] == ["moe", "dense", "dense"]


def test_from_offsets_pours_kinds_and_decodes_cumulative_recompute_lists():
    part = Partition.from_offsets(table(), stages=2, micro_batches=4, offset=[1, -1],
                                  recompute=[1, 0], select_recompute=[3, 2], select_comm_recompute=[2, 1])
    assert part.cells.values.tolist() == [[0, 0, "dense", 3], [0, 0, "moe", 2], [0, 1, "moe", 3]]
    # stage 0: full, both, selective, none, none; stage 1: both, selective, none.
    assert part.configured == ("full", "both", "selective", "none", "none", "both", "selective", "none")
    everything = Partition.from_offsets(table(), stages=2, micro_batches=4, recompute=True)
    assert set(everything.configured) == {"full"}
    comm_only = Partition.from_offsets(table(), stages=2, micro_batches=4, select_comm_recompute=[True, False])
    assert comm_only.configured == ("comm",) * 4 + ("none",) * 4


def test_from_offsets_with_chunks():
    part = Partition.from_offsets(table(counts=(("dense", 8),)), stages=2, micro_batches=4, chunks=2,
                                  offset=[[1, 0], [0, -1]], recompute=[[1, 0], [0, True]])
    assert part.cells["layers"].tolist() == [3, 2, 2, 1]
    assert part.configured == ("full", "none", "none", "none", "none", "none", "none", "full")


@pytest.mark.parametrize("kwargs, message", [
    (dict(offset=[1, 1]), "offset places 10 body layers; the layer table has 8 (so the offsets must sum to 0)"),
    (dict(offset=[-5, 5]), "offset gives cell (chunk 0, stage 0) -1 layers (4 + offset); a cell holds >= 0 layers"),
    (dict(offset=[0, 0, 0]), "offset must hold 1 list(s) of 2 values (chunk x stage); got [0, 0, 0]"),
    (dict(offset=[True, False]), "offset[0][0] is True; expected an int"),
    (dict(offset=[0, "1"]), "offset[0][1] is '1'; expected an int"),
    (dict(recompute=[5, 0]), "recompute[0][0] is 5; cell (chunk 0, stage 0) holds 4 layers (a count is between 0 "
                             "and the cell's layers)"),
    (dict(recompute=1.5), "recompute is 1.5; expected a bool or an int"),
    (dict(chunks=2, offset=[0, 0]), "offset must be a list of 2 lists (one per chunk) for 2 chunks; got [0, 0]"),
    (dict(recompute=[-1, 0]), "recompute[0][0] is -1; cell (chunk 0, stage 0) holds 4 layers (a count is between 0 "
                              "and the cell's layers)"),
    (dict(recompute=-1), "recompute[0][0] is -1; cell (chunk 0, stage 0) holds 4 layers (a count is between 0 and "
                         "the cell's layers)"),
    (dict(select_recompute=[0, np.int64(-1)]), "select_recompute[0][1] is -1; cell (chunk 0, stage 1) holds 4 layers "
                                               "(a count is between 0 and the cell's layers)"),
    (dict(recompute=[2.5, 0]), "recompute[0][0] is 2.5; expected a bool or an int"),
    (dict(recompute=[None, 0]), "recompute[0][0] is None; expected a bool or an int"),
    (dict(offset=[10**30, -10**30]), "offset[0][0] is 1000000000000000000000000000000; expected an int from -2048 to "
                                     "2048 (sappkit.limits.MAX_LAYERS)"),
    (dict(offset=[[0] * 2] * 10**6), "offset must hold 1 list(s) of 2 values (chunk x stage); got a list of 1000000 "
                                     "items"),
])
def test_from_offsets_refuses(kwargs, message):
    with pytest.raises(InputError) as error:
        Partition.from_offsets(table(), stages=2, micro_batches=4, **kwargs)
    assert str(error.value) == message


def test_minus_one_is_a_count_and_true_is_every_layer():
    """A -1 used to mean every layer of the cell (the sentinel ``True`` was stored as): it is refused; True is kept."""
    every = Partition.from_offsets(table(), stages=2, micro_batches=4, recompute=[True, 0])
    assert every.configured == ("full",) * 4 + ("none",) * 4


def test_from_offsets_refuses_an_option_the_kind_lacks():
    lean = table(options=SAPP[:1] + SAPP[-1:])
    with pytest.raises(InputError) as error:
        Partition.from_offsets(lean, stages=2, micro_batches=4, select_recompute=[1, 0])
    assert str(error.value) == ("the recompute lists (select_recompute) configure body layer 0 (kind 'dense') as "
                                "'selective', but kind 'dense' has no such option (its options: 'none', 'full')")


@pytest.mark.parametrize("kwargs, message", [
    (dict(cells=[1, 2]), "cells must be a DataFrame with columns chunk, stage, kind, layers; got list"),
    (dict(cells=pd.DataFrame({"chunk": [0], "stage": [0], "kind": ["b"]})),
     "cells is missing column(s) 'layers'; a cells frame needs chunk, stage, kind, layers"),
    (dict(cells=cells([(0, 2, "b", 1)])),
     "cells row 0 places layers on (chunk 0, stage 2); the pipeline has chunks 0..0 and stages 0..1"),
    (dict(cells=cells([(0, 0, "b", -1)])), "cells row 0 column 'layers' is -1; expected a whole number >= 0"),
    (dict(cells=cells([(0, 0, "b", 1.5)])), "cells row 0 column 'layers' is 1.5; expected a whole number >= 0"),
    (dict(cells=cells([(0, 0, "b", 2)]), configured=["full"]),
     "configured has 1 options; the partition places 2 body layers (give one option per body layer in model order, "
     "or one option for all)"),
    (dict(cells=cells([(0, 0, "b", 2)]), configured=["full", 3]), "configured[1] is 3; expected an option name (str)"),
    (dict(cells=cells([(0, 0, "b", 2)]), configured=["full", ""]),
     "configured[1] is ''; expected an option name (str)"),
    (dict(cells=cells([(0, 0, None, 2)])), "cells row 0 column 'kind' is None; expected a non-empty name"),
    (dict(cells=cells([(0, 2**70, "b", 2)])), "cells row 0 column 'stage' is 1180591620717411303424; expected at most "
                                              "256 (sappkit.limits.MAX_STAGES)"),
    (dict(cells=cells([(0, 0, "b", 2)]), configured=7),
     "configured must be an option name or a sequence of 2 option names; got int"),
    (dict(cells=cells([(0, 0, "b", 2)]), stages=1),
     "stages must be an int >= 2; got 1 (a pipeline needs at least two stages)"),
    (dict(cells=cells([(0, 0, "b", 2)]), schedule="pipedream"),
     "schedule must be one of '1f1b', 'interleaved', 'dualpipev', 'seqpipe', 'gpipe', "
     "'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev_split', 'dualpipe'; got 'pipedream'"),
    (dict(cells=cells([(0, 0, "b", 2)]), stages=2, micro_batches=4, chunks=2, schedule="dualpipe"),
     "schedule 'dualpipe' is not modelled by the recompute partition: it runs two copies of the model in "
     "opposite directions; give another schedule, or simulate it with sappkit.simulate on per-cell costs"),
])
def test_partition_refuses(kwargs, message):
    kwargs = dict(stages=2, micro_batches=4) | kwargs
    with pytest.raises(InputError) as error:
        Partition(**kwargs)
    assert str(error.value) == message


@pytest.mark.parametrize("frame, kwargs, message", [
    ("not a frame", {}, "assignment must be a DataFrame with columns kind, chunk, stage, layers; got str"),
    (pd.DataFrame({"kind": ["b"], "chunk": [0], "stage": [0]}), {},
     "assignment is missing column(s) 'layers'; an assignment needs kind, chunk, stage, layers"),
    (pd.DataFrame({"kind": ["b"], "chunk": [0], "stage": [0], "layers": [2]}), dict(kind_order=["a"]),
     "assignment kind 'b' is not in kind_order ['a']; list every kind of the assignment in model order"),
    (pd.DataFrame({"kind": ["b"], "chunk": [0], "stage": [-1], "layers": [2]}), {},
     "assignment row 0 column 'stage' is -1; expected a whole number >= 0"),
    (pd.DataFrame({"kind": ["b", "b"], "chunk": [0, 0], "stage": [0, 1], "layers": [2, 2],
                  "option": pd.Series(["full", None], dtype=object)}),
     {}, "assignment row 1 column 'option' is None; expected a non-empty name"),
    (pd.DataFrame({"kind": ["b"], "chunk": [0], "stage": [0], "layers": [2], "option": ["full"]}).pipe(
        lambda f: pd.concat([f, f[["layers"]]], axis=1)), {}, "assignment has column 'layers' 2 times; expected each "
                                                              "column once"),
])
def test_from_assignment_refuses(frame, kwargs, message):
    with pytest.raises(InputError) as error:
        Partition.from_assignment(frame, stages=2, micro_batches=4, **kwargs)
    assert str(error.value) == message
