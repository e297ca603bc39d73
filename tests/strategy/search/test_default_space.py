"""The default space holds what trainers run: every published strategy of ``data/published_runs.csv`` in the
default space of its own setup with no rule against it; the new searched settings laid out once where they change
nothing; the new dimensions read from ``dims=`` and from labels, and refused by name when wrong; and the time bound
prunes no strategy faster than the answer on published-like setups."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

from sappkit import Cluster, InputError, Strategy, TransformerConfig
from sappkit.strategy.search import engine, search_strategies
from sappkit.strategy.search.explain import price_cheapest
from sappkit.strategy.search.labels import parse_strategy
from sappkit.strategy.search.space import (DIMENSIONS, FREE_CHUNKS, canonical_settings, default_dims,
                                           enumerate_strategies)
from sappkit.strategy.validation import published_runs, run_inputs

GPT = TransformerConfig(layers=24, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=32000)
MOE = TransformerConfig(layers=8, dense_layers=2, hidden_size=1024, num_heads=8, ffn_size=4096, experts=8, top_k=2,
                        expert_ffn_size=1024, seq_length=2048, vocab_size=32000, gated_mlp=True, dropout=False)
#: The degrees that fix a layout: the test asks the space for the published one alone (each a default value), so
#: that the layout's other dimensions keep their default values and filters.
LAYOUT = ("tensor_parallel", "context_parallel", "pipeline_parallel", "data_parallel")


def _row_of(strategy: Strategy) -> pd.DataFrame:
    """A strategy as a one-row frame of the searched fields, its settings without effect as the space writes them."""
    return canonical_settings(pd.DataFrame([{key: getattr(strategy, key) for key in (*DIMENSIONS, "schedule")}]))


def _published():
    runs = published_runs()
    return [pytest.param(run, id=run["run"]) for _, run in runs.iterrows()]


@pytest.mark.parametrize("run", _published())
def test_every_published_strategy_is_in_its_default_space(run):
    model, strategy, batch = run_inputs(run)
    per_node = Cluster.preset(run["cluster"]).devices_per_node
    defaults = default_dims([model], strategy.devices, per_node, global_batch=batch)
    for key in DIMENSIONS:
        assert getattr(strategy, key) in defaults[key], (key, getattr(strategy, key), defaults[key])
    space = enumerate_strategies([model], devices=strategy.devices, devices_per_node=per_node, global_batch=batch,
                                 dims={key: [getattr(strategy, key)] for key in LAYOUT})
    wanted = _row_of(strategy).iloc[0]
    match = space[np.logical_and.reduce([space[key] == wanted[key] for key in (*DIMENSIONS, "schedule")])]
    assert len(match) == 1, strategy.label
    assert match["rule"].isna().all(), match["reason"].iloc[0]


def test_settings_without_effect_are_laid_out_once():
    space = enumerate_strategies([GPT], devices=16, devices_per_node=8, global_batch=64)
    assert not space.duplicated([*DIMENSIONS, "schedule"]).any()
    assert (space.loc[space["tensor_parallel"] == 1, "sequence_parallel"]).all()
    assert not space.loc[space["tensor_parallel"] == 1, "tp_comm_overlap"].any()
    assert set(space.loc[space["context_parallel"] == 1, "cp_kind"]) == {"ring"}
    assert space.loc[space["zero"] < 3, "reshard_after_forward"].all()
    accepted = space[space["rule"].isna()]
    # every new setting is laid out where it changes something
    assert set(accepted["cp_kind"]) == {"ring", "allgather", "a2a"}
    assert set(accepted.loc[accepted["zero"] == 3, "reshard_after_forward"]) == {True, False}
    sharded = accepted[(accepted["tensor_parallel"] > 1)]
    assert set(zip(sharded["sequence_parallel"], sharded["tp_comm_overlap"])) == {(True, False), (True, True),
                                                                                   (False, False)}


def test_high_chunk_counts_are_laid_out_where_the_cells_hold_equal_layers():
    space = enumerate_strategies([GPT], devices=16, devices_per_node=8, global_batch=64,
                                 dims=dict(tensor_parallel=[1], context_parallel=[1], zero=[1]))
    interleaved = space[(space["schedule"] == "interleaved") & space["rule"].isna()]
    chunks = interleaved.groupby("pipeline_parallel")["virtual_stages"].agg(lambda v: sorted(set(v))).to_dict()
    # 24 layers (and 26 with the embedding and the loss): any v up to 4, above it p v divides 24 or 26 (and stays
    # within 24)
    assert chunks == {2: [2, 3, 4, 6, 12], 4: [2, 3, 4, 6], 8: [2, 3]}
    assert max(v for vs in chunks.values() for v in vs) > FREE_CHUNKS


def test_expert_tensor_parallelism_and_micro_batches_take_the_values_trainers_run():
    space = enumerate_strategies([MOE], devices=16, devices_per_node=8, global_batch=96)
    accepted = space[space["rule"].isna()]
    etp = accepted["expert_tensor_parallel"]
    assert ((etp == 1) | (etp == accepted["tensor_parallel"])).all() and (etp > 1).any()
    b = accepted["micro_batch_size"]
    whole = b * accepted["data_parallel"] == 96
    assert (((b & (b - 1)) == 0) | whole).all() and (whole & (b == 6)).any()
    assert default_dims([MOE], 16, 8, global_batch=96)["micro_batch_size"] == (1, 2, 3, 4, 6, 8, 12, 16)


def test_the_new_dimensions_round_trip_through_dims_and_labels():
    dims = dict(tensor_parallel=[2], context_parallel=[2], pipeline_parallel=[1], zero=[3], micro_batch_size=[1],
                reshard_after_forward=[False], tp_comm_overlap=[True], cp_kind=["allgather"], sequence_parallel=[True])
    space = enumerate_strategies([GPT], devices=16, devices_per_node=8, global_batch=64, dims=dims)
    assert len(space) == 1 and space["rule"].isna().all()
    row = space.iloc[0]
    assert (row["reshard_after_forward"], row["tp_comm_overlap"], row["cp_kind"]) == (False, True, "allgather")
    strategy = Strategy(tensor_parallel=2, context_parallel=2, data_parallel=4, zero=3, reshard_after_forward=False,
                        tp_comm_overlap=True, cp_kind="allgather")
    assert strategy.label == "t2 p1 v1 dp4 cp2 ep1 b1 1f1b zero3 no-reshard tp-overlap cp-allgather"
    assert parse_strategy(strategy.label) == strategy
    etp = Strategy(tensor_parallel=4, data_parallel=4, expert_parallel=4, expert_tensor_parallel=4)
    assert parse_strategy(etp.label) == etp


@pytest.mark.parametrize("dims, message", [
    ({"cp_kind": ["ring", "ulysses"]}, "dims['cp_kind'] must be one of 'ring', 'allgather', 'a2a'; got 'ulysses'"),
    ({"tp_comm_overlap": [1]}, "dims['tp_comm_overlap'] must be a bool; got 1"),
    ({"reshard_after_forward": ["no"]}, "dims['reshard_after_forward'] must be a bool; got 'no'"),
    ({"expert_tensor_parallel": [0]}, "dims['expert_tensor_parallel'] must be an int >= 1; got 0"),
    ({"virtual_stages": [1.5]}, "dims['virtual_stages'] must be an int >= 1; got 1.5"),
])
def test_bad_values_of_the_new_dimensions_are_refused_by_name(dims, message):
    with pytest.raises(InputError) as error:
        enumerate_strategies([GPT], devices=16, devices_per_node=8, global_batch=64, dims=dims)
    assert str(error.value) == message


def test_a_bad_label_switch_is_refused_by_name():
    with pytest.raises(InputError, match="unknown token 'cp-ulysses'"):
        parse_strategy("t2 cp2 cp-ulysses", devices=16)


LLAMA_LIKE = TransformerConfig(layers=16, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_size=3584,
                               seq_length=4096, vocab_size=32000, gated_mlp=True, dropout=False)


@pytest.mark.parametrize("setup", [
    dict(devices=16, global_batch=32, memory_mb=6000.0, dims=dict(tensor_parallel=[1, 2, 4], context_parallel=[1, 2],
                                                                  zero=[1, 3], micro_batch_size=[1, 2])),
    dict(devices=8, global_batch=16, memory_mb=4000.0, dims=dict(tensor_parallel=[2, 4], context_parallel=[1, 2, 4],
                                                                 zero=[0, 3], micro_batch_size=[1])),
], ids=["llama-like-16", "llama-like-8"])
def test_the_time_bound_never_prunes_a_strategy_faster_than_the_answer(setup):
    """A published-like setup (a Llama-shaped model on H100 nodes) searched with rounds of 4, so that most
    strategies meet a threshold before they are priced; the strategies it pruned on time, priced as the cheap pass
    would (every option's even placement), are none faster than the threshold, nor their bounds above their steps.
    Sampled across the settings the search gained (resharding, the CP kinds, TP overlap, chunks above 4)."""
    with ThreadPoolExecutor(1) as pool, pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "ROUND", 4)
        found = search_strategies(LLAMA_LIKE, cluster="dgx-h100", balance_top=2, progress=False, executor=pool,
                                  **setup)
    frame = found.frame
    pruned = frame[frame["status"] == "pruned_time"]
    assert len(pruned) >= 100
    picked = pd.concat([group.head(3) for _, group in pruned.groupby(
        ["reshard_after_forward", "tp_comm_overlap", "cp_kind", pruned["virtual_stages"] > FREE_CHUNKS])])
    checked = 0
    for index, row in picked.iterrows():
        try:
            priced = price_cheapest(found.setting, found.strategy(index))
        except InputError:  # no option's even placement fits: never faster
            continue
        assert priced.step_ms >= found.threshold_ms * (1 - 1e-9) >= found.best["step_ms"] * (1 - 1e-9), row["label"]
        assert row["even_bound_ms"] <= priced.step_ms * (1 + 1e-9) and row["time_bound_ms"] <= priced.step_ms * (
            1 + 1e-9), row["label"]
        checked += 1
    assert checked >= 10
    # a comparison names the searched settings that differ (a: a pruned strategy, b: the best)
    strategy, best = found.strategy(picked.index[-1]), found.strategy()
    differ = {key for key in ("reshard_after_forward", "tp_comm_overlap", "cp_kind", "virtual_stages")
              if getattr(strategy, key) != getattr(best, key)}
    assert differ and differ <= set(found.compare(strategy).changes()["what"])
