"""The scalar legality check of one strategy against the frame check the search runs on many."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, Strategy, TransformerConfig
from sappkit.pipeline.schedules import SCHEDULES, TWO_DIRECTIONS
from sappkit.strategy.legality import (MICRO_BATCHES, REASON, RULE, RULES, RuledModel, apply_rules,
                                       check_strategy_fits, first_broken_rule)

DENSE = TransformerConfig(layers=12, hidden_size=1024, num_heads=16, num_kv_heads=4, ffn_size=4096,
                          seq_length=2048, vocab_size=32000)
MOE = TransformerConfig(layers=8, dense_layers=1, hidden_size=512, num_heads=8, ffn_size=2048, experts=8, top_k=2,
                        shared_experts=1, expert_ffn_size=512, seq_length=768, vocab_size=8000, gated_mlp=True)
GLOBAL_BATCH = 96


def _random_strategies(seed: int, count: int) -> list[Strategy]:
    """Strategies drawn over every field the rules read (those Strategy accepts), the values that break no rule
    drawn more often so that every rule is some strategy's first."""
    rng = np.random.default_rng(seed)
    choices = dict(tensor_parallel=[1, 2, 3, 4, 8, 16], pipeline_parallel=[1, 2, 3, 4, 8], virtual_stages=[1, 2, 3, 4],
                   data_parallel=[1, 2, 3, 4, 8, 64], context_parallel=[1, 1, 2, 3, 4], expert_parallel=[1, 1, 1, 2, 3, 4, 8],
                   expert_tensor_parallel=[1, 1, 2], micro_batch_size=[1, 2, 4],
                   schedule=[name for name in SCHEDULES if name not in TWO_DIRECTIONS],  # those Strategy prices
                   sequence_parallel=[True, False], tp_comm_overlap=[False, False, True],
                   cp_kind=["ring", "allgather", "a2a"], moe_a2a_overlap=[False, False, False, True],
                   moe_shared_expert_overlap=[False, False, False, True])
    strategies = []
    while len(strategies) < count:
        fields = {name: values[rng.integers(len(values))] for name, values in choices.items()}
        fields = {name: value.item() if isinstance(value, np.generic) else value for name, value in fields.items()}
        try:
            strategies.append(Strategy(**fields))
        except InputError:
            continue
    return strategies


def _frame_rules(strategies: list[Strategy], model: RuledModel, devices_per_node: int,
                 tensor_across_nodes: bool) -> pd.DataFrame:
    """:func:`apply_rules` on one frame of all of them, as the search runs it (its ``m`` column likewise)."""
    fields = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "context_parallel",
              "expert_parallel", "expert_tensor_parallel", "micro_batch_size", "sequence_parallel", "schedule",
              "tp_comm_overlap", "cp_kind", "moe_a2a_overlap", "moe_shared_expert_overlap")
    frame = pd.DataFrame([{name: getattr(s, name) for name in fields} for s in strategies])
    frame[MICRO_BATCHES] = GLOBAL_BATCH // (frame["data_parallel"] * frame["micro_batch_size"])
    frame[RULE], frame[REASON] = None, ""
    apply_rules(frame, model, devices_per_node, GLOBAL_BATCH, tensor_across_nodes)
    return frame


@pytest.mark.parametrize("stacks", [[DENSE], [MOE]], ids=["dense", "moe"])
@pytest.mark.parametrize("tensor_across_nodes", [False, True])
def test_the_scalar_check_keeps_the_frame_checks_rule_and_reason_for_every_strategy(stacks, tensor_across_nodes):
    strategies = _random_strategies(seed=28 + tensor_across_nodes, count=1500)
    model = RuledModel.of(stacks)
    frame = _frame_rules(strategies, model, 2, tensor_across_nodes)
    for strategy, rule, reason, m in zip(strategies, frame[RULE], frame[REASON], frame[MICRO_BATCHES]):
        broken = first_broken_rule(strategy, model, micro_batches=int(m), devices_per_node=2,
                                   global_batch=GLOBAL_BATCH, tensor_across_nodes=tensor_across_nodes)
        assert broken == (None if rule is None else (rule, reason)), strategy.label
    seen = set(frame[RULE].dropna())
    assert seen >= set(RULES) - {"size", "node"}  # the draw reaches the rules
    assert ("node" in seen) != tensor_across_nodes


def test_check_strategy_fits_raises_the_first_broken_rule_and_returns_m_otherwise():
    with pytest.raises(InputError, match=r"breaks the 'heads' rule: tensor_parallel=8 does not divide num_kv_heads=4"):
        check_strategy_fits(Strategy(tensor_parallel=8), [DENSE], global_batch=GLOBAL_BATCH)
    with pytest.raises(InputError, match=r"breaks the 'node' rule"):
        check_strategy_fits(Strategy(tensor_parallel=4), [DENSE], global_batch=GLOBAL_BATCH, devices_per_node=2)
    with pytest.raises(InputError, match=r"breaks the 'schedule' rule: .*"):
        check_strategy_fits(Strategy(pipeline_parallel=4, virtual_stages=2, schedule="interleaved", data_parallel=32),
                            [DENSE], global_batch=GLOBAL_BATCH)
    assert check_strategy_fits(Strategy(tensor_parallel=4, pipeline_parallel=2, data_parallel=4), [DENSE],
                               global_batch=GLOBAL_BATCH) == 24
