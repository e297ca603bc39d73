"""The strategies a trainer accepts: every rule refuses by name with its numbers, the defaults lay out what runs."""

import pytest

from sappkit import InputError, Strategy, TransformerConfig
from sappkit.limits import MAX_CHUNKS
from sappkit.pipeline.schedules import SCHEDULES
from sappkit.strategy.search.space import DIMENSIONS, RULES, SEARCHED_SCHEDULES, default_dims, enumerate_strategies

GQA = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_size=4096, seq_length=2048,
                        vocab_size=32000)
MOE = TransformerConfig(layers=6, dense_layers=1, hidden_size=512, num_heads=8, ffn_size=2048, experts=6, top_k=2,
                        seq_length=1024, vocab_size=32000)


def _space(model=GQA, devices=64, **dims):
    return enumerate_strategies([model], devices=devices, devices_per_node=8, global_batch=64, dims=dims or None)


@pytest.mark.parametrize("model, devices, dims, rule, reason", [
    (GQA, 64, dict(tensor_parallel=[16]), "heads", "tensor_parallel=16 does not divide num_kv_heads=4 (whole "
                                                   "key/value heads per rank)"),
    (TransformerConfig(layers=8, hidden_size=960, num_heads=12, ffn_size=3840, seq_length=2048, vocab_size=100), 64,
     dict(tensor_parallel=[8]), "heads", "tensor_parallel=8 does not divide num_heads=12"),
    (TransformerConfig(layers=8, hidden_size=1024, num_heads=32, ffn_size=4096, seq_length=2048, vocab_size=100), 64,
     dict(tensor_parallel=[16]), "node", "tensor_parallel=16 does not divide devices_per_node=8 (a "
                                         "tensor-parallel group stays inside a node)"),
    (TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2044, vocab_size=100), 64,
     dict(context_parallel=[4]), "sequence", "seq_length=2044 does not split into 2 * context_parallel = 8 equal "
                                             "chunks (Megatron-LM's load-balanced ring attention)"),
    (TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2052, vocab_size=100), 64,
     dict(tensor_parallel=[8], context_parallel=[1]), "sequence",
     "seq_length / context_parallel = 2052 does not split over tensor_parallel=8 (sequence parallelism)"),
    (GQA, 64, dict(expert_parallel=[2]), "experts", "expert_parallel=2 needs a MoE model (this one has no experts)"),
    (MOE, 64, dict(expert_parallel=[4]), "experts", "expert_parallel=4 does not divide the 6 routed experts"),
    (MOE, 4, dict(expert_parallel=[3], pipeline_parallel=[2]), "experts",
     "expert_parallel * expert_tensor_parallel = 3 does not divide tensor_parallel * context_parallel * "
     "data_parallel = 2"),
    (GQA, 64, dict(micro_batch_size=[128]), "batch", "data_parallel * micro_batch_size = 64 * 128 = 8192 does not "
                                                     "divide global_batch=64"),
    (GQA, 64, dict(pipeline_parallel=[2], virtual_stages=[8]), "cells",
     "pipeline_parallel * virtual_stages = 2 * 8 = 16 cells exceed the 8 body layers (each cell holds at least "
     "one)"),
    (GQA, 64, dict(pipeline_parallel=[2], tensor_parallel=[1], context_parallel=[1], micro_batch_size=[1]),
     "schedule", "micro_batches must be >= 2 * stages = 4 for schedule 'dualpipev'; got 2 (DualPipeV's step order "
                 "needs two micro-batches per stage)"),
])
def test_each_rule_rejects_with_its_numbers(model, devices, dims, rule, reason):
    space = _space(model, devices, **dims)
    assert reason in set(space.loc[space["rule"] == rule, "reason"])


def test_a_step_too_large_to_simulate_is_rejected():
    deep = TransformerConfig(layers=64, hidden_size=512, num_heads=8, ffn_size=2048, seq_length=1024, vocab_size=100)
    space = enumerate_strategies([deep], devices=16, devices_per_node=8, global_batch=2**16,
                                 dims=dict(pipeline_parallel=[16], micro_batch_size=[1], tensor_parallel=[1],
                                           context_parallel=[1], zero=[1]), schedules=["gpipe"])
    assert space["reason"].tolist() == ["p * v * m = 16 * 1 * 65536 = 1,048,576 forward passes; sappkit simulates "
                                        "at most 1000000 (sappkit.limits.MAX_SIMULATED_PASSES)"]


def test_accepted_strategies_build_and_use_every_device():
    space = _space()
    accepted = space[space["rule"].isna()]
    assert set(accepted["schedule"]) == set(SEARCHED_SCHEDULES)
    for row in accepted.sample(200, random_state=0).itertuples():
        strategy = Strategy(**{key: getattr(row, key) for key in DIMENSIONS}, schedule=row.schedule)
        assert strategy.devices == 64
        assert strategy.micro_batches(64) == row.micro_batches
    no_pipeline = accepted[accepted["pipeline_parallel"] == 1]
    assert set(zip(no_pipeline["schedule"], no_pipeline["virtual_stages"])) == {("1f1b", 1)}
    assert (space["reason"] == "").sum() == len(accepted) and set(space["rule"].dropna()) <= set(RULES)


def test_defaults_stop_where_cells_run_out_and_each_schedule_takes_its_chunks():
    dims = default_dims([GQA], 64, 8)
    assert dims["tensor_parallel"] == (1, 2, 4, 8) and dims["pipeline_parallel"] == (1, 2, 4, 8)
    assert dims["virtual_stages"] == tuple(range(1, MAX_CHUNKS + 1)) and dims["zero"] == (0, 1, 2, 3)
    assert default_dims([GQA], 64, 8, tensor_across_nodes=True)["tensor_parallel"] == (1, 2, 4, 8, 16)
    space = _space()
    piped = space[space["pipeline_parallel"] > 1]
    assert (piped["pipeline_parallel"] * piped["virtual_stages"] <= GQA.layers).all()
    chunks = piped.groupby("schedule")["virtual_stages"].agg(set).to_dict()
    # 8 layers: up to 4 chunks on 2 stages, 2 on 4 (8 cells), 1 on 8
    assert chunks == {"1f1b": {1}, "gpipe": {1}, "zbv": {2}, "dualpipev": {2}, "dualpipev_split": {2},
                      "interleaved": {2, 3, 4}, "looped_bfs": {2, 3, 4}, "zb_interleaved": {1, 2, 3, 4}}
    assert "seqpipe" in SCHEDULES and "seqpipe" not in SEARCHED_SCHEDULES


@pytest.mark.parametrize("kwargs, message", [
    (dict(dims=[1, 2]), "dims must be a mapping of dimension to its values, e.g. {'tensor_parallel': [4, 8]}; got "
                        "[1, 2]"),
    (dict(dims={"tp": [2]}), "dims has an unknown dimension 'tp'; expected some of " + ", ".join(DIMENSIONS)),
    (dict(dims={"zero": [4]}), "dims['zero'] must be one of 0, 1, 2, 3; got 4"),
    (dict(dims={"tensor_parallel": []}), "dims['tensor_parallel'] must list at least one value; got an empty "
                                         "sequence"),
    (dict(dims={"tensor_parallel": 2}), "dims['tensor_parallel'] must be a sequence of values; got 2"),
    (dict(schedules=["2f2b"]), "schedules must be one of '1f1b', 'interleaved', 'dualpipev', 'seqpipe', 'gpipe', "
                               "'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev_split', 'dualpipe'; got '2f2b'"),
    (dict(schedules=["1f1b", "dualpipe"]),
     "schedule 'dualpipe' is not modelled by the strategy search: it runs two copies of the model in opposite "
     "directions; give another schedule, or simulate it with sappkit.simulate on per-cell costs"),
])
def test_bad_dims_and_schedules_are_refused(kwargs, message):
    with pytest.raises(InputError) as error:
        enumerate_strategies([GQA], devices=64, devices_per_node=8, global_batch=64, **kwargs)
    assert str(error.value) == message
