"""Even placement, per-cell costs and per-stage memory, against hand sums and the simulator."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sappkit import (
    InputError, LayerTable, cell_costs, even_assignment, in_flight, read_layers_json, simulate, stage_memory,
)
from sappkit.columns import STAGE_MEMORY
from sappkit.pipeline.schedules import model_order


def toy_table(dense=5, moe=7, const_mb=100.0):
    """Head, two body kinds with three options each (different backward minima), tail."""
    rows = [dict(kind="embed", role="head", count=1, param_mb=50, option="none", forward_time=1, backward_time=2,
                 activation_mb=3, memory_once_mb=4)]
    for kind, count, scale in (("dense", dense, 1.0), ("moe", moe, 2.0)):
        for option, backward, activation in (("none", 4, 30), ("selective", 5, 10), ("full", 7, 1)):
            rows.append(dict(kind=kind, role="body", count=count, param_mb=100 * scale, option=option,
                             forward_time=2 * scale, backward_time=backward * scale,
                             activation_mb=activation * scale, memory_once_mb=0.5 * scale))
    rows.append(dict(kind="head_out", role="tail", count=1, param_mb=60, option="none", forward_time=3,
                     backward_time=6, activation_mb=20, memory_once_mb=0))
    return LayerTable(pd.DataFrame(rows), const_mb=const_mb)


def random_assignment(rng, table, cells):
    """Every layer of every kind on a random cell under a random option."""
    rows = []
    for kind in table.body_kinds:
        for _ in range(table.count(kind)):
            chunk, stage = cells[rng.integers(len(cells))]
            rows.append((kind, chunk, stage, table.options(kind)[rng.integers(3)]))
    frame = pd.DataFrame(rows, columns=["kind", "chunk", "stage", "option"])
    return frame.groupby(["kind", "chunk", "stage", "option"]).size().rename("layers").reset_index()


# --- even_assignment ---------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(dense=st.integers(1, 30), moe=st.integers(1, 60), p=st.integers(2, 9),
       shape=st.sampled_from([("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("dualpipev", 2)]))
def test_even_assignment_places_every_layer_evenly_in_model_order(dense, moe, p, shape):
    schedule, v = shape
    table = toy_table(dense, moe)
    plan = even_assignment(table, stages=p, chunks=v, schedule=schedule)
    assert plan.groupby("kind")["layers"].sum().to_dict() == {"dense": dense, "moe": moe}
    assert (plan["layers"] > 0).all() and (plan["option"] == "none").all()
    cells = model_order(schedule, p, v)
    per_cell = plan.groupby(["chunk", "stage"])["layers"].sum().reindex(cells, fill_value=0).to_numpy()
    per_stage = plan.groupby("stage")["layers"].sum().reindex(range(p), fill_value=0).to_numpy()
    assert per_cell.max() - per_cell.min() <= 1 and per_stage.max() - per_stage.min() <= 1
    odd = (dense + moe) % len(cells) % p
    head_tail = [0] if schedule == "dualpipev" else [0, p - 1]
    if 0 < odd <= p - len(head_tail):
        assert (per_stage[head_tail] == per_stage.min()).all()
    walk = [(cells.index((row.chunk, row.stage)), row.kind) for row in plan.itertuples()]
    assert walk == sorted(walk)
    dense_last = max(i for i, kind in walk if kind == "dense")
    moe_first = min(i for i, kind in walk if kind == "moe")
    assert dense_last <= moe_first


def test_even_assignment_options():
    table = toy_table(2, 2)
    assert set(even_assignment(table, stages=2, option="full")["option"]) == {"full"}
    mixed = even_assignment(table, stages=2, option={"moe": "selective"})
    assert mixed.groupby("kind")["option"].first().to_dict() == {"dense": "none", "moe": "selective"}


def test_even_assignment_of_the_bundled_llama():
    plan = even_assignment(read_layers_json("data/llama2_70b.json"), stages=16, chunks=2, schedule="interleaved")
    assert len(plan) == 32 and plan["layers"].tolist() == [2] * 8 + [3] * 16 + [2] * 8


@pytest.mark.parametrize("kwargs, message", [
    (dict(option="recompute"), "option 'recompute' is not an option of kind 'dense'; its options are "
                               "'none', 'selective', 'full'"),
    (dict(option={"embed": "none"}), "option names kind 'embed', which is not a body kind; body kinds are "
                                     "'dense', 'moe'"),
    (dict(option=3), "option must be an option name or a mapping kind -> option; got 3"),
    (dict(stages=1), "stages must be an int >= 2; got 1 (a pipeline needs at least two stages)"),
    (dict(chunks=2), "chunks must be 1 for schedule '1f1b'; got 2 (use schedule='interleaved')"),
    (dict(schedule="dualpipev"), "chunks must be 2 for schedule 'dualpipev' (the V); got 1"),
])
def test_even_assignment_bad_input(kwargs, message):
    with pytest.raises(InputError) as caught:
        even_assignment(toy_table(), **(dict(stages=4) | kwargs))
    assert str(caught.value) == message


# --- cell_costs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule, p, v", [("1f1b", 3, 1), ("interleaved", 3, 2), ("interleaved", 2, 3),
                                            ("dualpipev", 3, 2), ("seqpipe", 2, 1)])
def test_cell_costs_equal_a_hand_sum(rng, schedule, p, v):
    table = toy_table()
    cells = model_order(schedule, p, v)
    for _ in range(3):
        plan = random_assignment(rng, table, cells)
        costs = cell_costs(table, plan, stages=p, chunks=v, schedule=schedule)
        assert costs[["chunk", "stage"]].values.tolist() == [[c, s] for c in range(v) for s in range(p)]
        head_cell, tail_cell = (0, 0), ((1, 0) if schedule == "dualpipev" else (v - 1, p - 1))
        rows = table.frame.set_index(["kind", "option"])
        for row in costs.itertuples():
            here = plan[(plan.chunk == row.chunk) & (plan.stage == row.stage)]
            expected = dict(forward_time=0.0, backward_time=0.0, recompute_time=0.0, activation_mb=0.0,
                            param_mb=0.0, memory_once_mb=0.0)
            for kind, option, n in zip(here.kind, here.option, here.layers):
                layer = rows.loc[(kind, option)]
                least = rows.loc[kind, "backward_time"].min()
                expected["forward_time"] += n * layer.forward_time
                expected["backward_time"] += n * layer.backward_time
                expected["recompute_time"] += n * (layer.backward_time - least)
                expected["activation_mb"] += n * layer.activation_mb
                expected["param_mb"] += n * layer.param_mb
                expected["memory_once_mb"] += n * layer.memory_once_mb
            for kind, cell in (("embed", head_cell), ("head_out", tail_cell)):
                if (row.chunk, row.stage) == cell:
                    layer = rows.loc[(kind, "none")]
                    for column in ("forward_time", "backward_time", "activation_mb", "param_mb", "memory_once_mb"):
                        expected[column] += layer[column]
            for column, value in expected.items():
                assert getattr(row, column) == pytest.approx(value), column
            assert row.layers == here.layers.sum()
            assert row.const_mb == (100.0 if row.chunk == 0 else 0.0)
            assert row.static_mb == pytest.approx(row.param_mb + row.memory_once_mb + row.const_mb)


def test_cell_costs_sum_the_split_backward_a_blank_taking_the_default():
    table = toy_table()
    frame = table.frame.assign(backward_weight_time=np.nan, weight_pass_mb=np.nan)
    frame.loc[(frame["option"] == "none") & (frame["role"] == "body"), ["backward_weight_time", "weight_pass_mb"]] = [
        1.0, 2.0]
    split = LayerTable(frame, const_mb=table.const_mb)
    plan = even_assignment(split, stages=2, chunks=2, schedule="zbv")
    costs = cell_costs(split, plan, stages=2, chunks=2, schedule="zbv")
    plain = cell_costs(table, plan, stages=2, chunks=2, schedule="zbv")
    assert list(costs.columns) == [*plain.columns, "backward_input_time", "backward_weight_time", "weight_pass_mb"]
    pd.testing.assert_frame_equal(costs[plain.columns], plain)
    least = split.frame.groupby("kind")["backward_time"].min()
    for row in costs.itertuples():
        here = plan[(plan.chunk == row.chunk) & (plan.stage == row.stage)]
        # Given: 1 on 'none' rows. Default: half the backward beyond its recompute, half the kind's least
        # backward; the head and tail recompute nothing.
        weight = sum(n * (1.0 if option == "none" else least[kind] / 2)
                     for kind, option, n in zip(here.kind, here.option, here.layers))
        weight += sum(least[kind] / 2 for kind, cell in (("embed", (0, 0)), ("head_out", (1, 0)))
                      if cell == (row.chunk, row.stage))
        # Given: 2 MB on 'none' rows; default: the whole activation (head and tail too).
        kept = sum(n * (2.0 if option == "none" else split.rows(kind).loc[option, "activation_mb"])
                   for kind, option, n in zip(here.kind, here.option, here.layers))
        kept += sum(split.rows(kind).loc["none", "activation_mb"] for kind, cell in (("embed", (0, 0)),
                                                                                     ("head_out", (1, 0)))
                    if cell == (row.chunk, row.stage))
        assert row.backward_weight_time == pytest.approx(weight)
        assert row.backward_input_time == pytest.approx(row.backward_time - weight)
        assert row.weight_pass_mb == pytest.approx(kept)


def test_cell_costs_const_mb_overrides_the_table():
    table = toy_table()
    plan = even_assignment(table, stages=2)
    assert cell_costs(table, plan, stages=2, const_mb=7)["const_mb"].tolist() == [7.0, 7.0]


def assignment_error(change):
    table = toy_table(2, 3)
    plan = even_assignment(table, stages=2)
    with pytest.raises(InputError) as caught:
        cell_costs(table, change(plan), stages=2)
    return str(caught.value)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.drop(columns="option"),
     "assignment is missing column(s) 'option'; an assignment needs kind, chunk, stage, option, layers"),
    (lambda a: a.assign(stage=[0, 2, 1]), "assignment row 1 column 'stage' is 2; expected a whole number in 0..1"),
    (lambda a: a.assign(chunk=[0, 1, 0]), "assignment row 1 column 'chunk' is 1; expected a whole number in 0..0"),
    (lambda a: a.assign(layers=[2, -1, 2]), "assignment row 1 column 'layers' is -1; expected a whole number >= 0"),
    (lambda a: a.assign(kind=["embed", "moe", "moe"]),
     "assignment row 0 kind 'embed' is not a body kind; body kinds are 'dense', 'moe' "
     "(head and tail are placed for you)"),
    (lambda a: a.assign(option=["none", "off", "none"]),
     "assignment row 1 option 'off' is not an option of kind 'moe'; its options are 'none', 'selective', 'full'"),
    (lambda a: pd.concat([a, a.iloc[[0]]], ignore_index=True),
     "assignment row 3 repeats (kind, chunk, stage, option) = ('dense', 0, 0, 'none'); give each once"),
    (lambda a: a.assign(layers=[2, 2, 2]), "assignment places 4 layers of kind 'moe'; the layer table has 3"),
])
def test_cell_costs_bad_assignment(change, message):
    assert assignment_error(change) == message


def test_assignment_must_be_a_frame():
    with pytest.raises(InputError) as caught:
        cell_costs(toy_table(), [("dense", 0, 0, "none", 5)], stages=2)
    assert str(caught.value) == ("assignment must be a DataFrame with columns kind, chunk, stage, option, layers; "
                                 "got list")


# --- stage_memory --------------------------------------------------------------------------------

@pytest.mark.parametrize("schedule, p, m, v, less_memory, k", [
    ("1f1b", 4, 8, 1, False, 1), ("1f1b", 4, 2, 1, False, 1), ("interleaved", 3, 6, 2, False, 1),
    ("interleaved", 3, 6, 3, True, 1), ("dualpipev", 3, 7, 2, False, 1), ("seqpipe", 3, 4, 1, False, 2),
])
def test_stage_memory_is_parameters_plus_activation_times_in_flight(rng, schedule, p, m, v, less_memory, k):
    table = toy_table()
    plan = random_assignment(rng, table, model_order(schedule, p, v))
    memory = stage_memory(table, plan, stages=p, micro_batches=m, chunks=v, schedule=schedule,
                          less_memory=less_memory, seq_split=k, limit_mb=5000)
    costs = cell_costs(table, plan, stages=p, chunks=v, schedule=schedule)
    counts = in_flight(schedule, p, m, chunks=v, less_memory=less_memory, seq_split=k)
    held = costs.merge(counts, on=["stage", "chunk"]).eval("activation_mb * in_flight").groupby(costs.stage).sum()
    assert list(memory.columns) == list(STAGE_MEMORY)
    np.testing.assert_allclose(memory["activation_mb"], held + costs.groupby("stage")["memory_once_mb"].sum())
    np.testing.assert_allclose(memory["param_mb"], costs.groupby("stage")["param_mb"].sum())
    assert (memory["const_mb"] == 100.0).all() and (memory["limit_mb"] == 5000).all()
    seed = stage_memory(table, plan, stages=p, micro_batches=m, chunks=v, schedule=schedule,
                        less_memory=less_memory, seq_split=k, working_set=False)
    np.testing.assert_allclose(seed["memory_mb"], costs.groupby("stage")["static_mb"].sum() + held)
    assert (seed["working_mb"] == 0).all() and (seed["overhead_mb"] == 0).all()
    if v == 1:  # the peak is the first backward: in-flight activations and the cell's working set
        working = costs.set_index("stage")["working_mb"]
        np.testing.assert_allclose(memory["working_mb"], working)
        np.testing.assert_allclose(memory["memory_mb"], seed["memory_mb"] + working)
        assert (memory["overhead_mb"] == 0).all() and (working > 0).all()


@pytest.mark.parametrize("schedule, v, m", [
    ("1f1b", 1, 16), ("1f1b", 1, 5), ("interleaved", 2, 16), ("interleaved", 2, 12), ("interleaved", 3, 20),
    ("zbv", 2, 16), ("dualpipev", 2, 16), ("dualpipev_split", 2, 18), ("zb_interleaved", 2, 16),
])
def test_simulator_measures_what_stage_memory_predicts(schedule, v, m):
    """Stage by stage, the simulated peak is the predicted memory, working set and all, on every schedule."""
    table = read_layers_json("data/deepseek_v3.json")
    plan = even_assignment(table, stages=8, chunks=v, schedule=schedule, option="selective")
    predicted = stage_memory(table, plan, stages=8, micro_batches=m, chunks=v, schedule=schedule)
    costs = cell_costs(table, plan, stages=8, chunks=v, schedule=schedule)
    simulated = simulate(costs, schedule=schedule, micro_batches=m).stages
    for column in ("memory_mb", "working_mb", "param_mb", "const_mb"):
        np.testing.assert_allclose(simulated[column], predicted[column], rtol=0, atol=1e-6, err_msg=column)
    if v == 1:
        pd.testing.assert_frame_equal(simulated[list(STAGE_MEMORY)], predicted)


def test_cell_costs_carry_the_tables_time_unit_to_the_simulator():
    table = toy_table()
    assert simulate(cell_costs(table, even_assignment(table, stages=2), stages=2), micro_batches=2).time_unit == \
        "time units"
    timed = LayerTable(toy_table().frame, time_unit="us")
    costs = cell_costs(timed, even_assignment(timed, stages=2), stages=2)
    assert costs.attrs["time_unit"] == "us"
    assert simulate(costs, micro_batches=2).describe().splitlines()[1].endswith(" us")
