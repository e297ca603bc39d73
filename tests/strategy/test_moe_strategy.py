"""MoE strategies: the a2a overlap priced end to end, and the legality check's MoE overlap rules."""

from dataclasses import replace

import pytest

from sappkit import InputError, Strategy, TransformerConfig, evaluate_strategy
from sappkit.strategy.legality import check_strategy_fits

MOE = TransformerConfig(layers=4, dense_layers=1, hidden_size=512, num_heads=8, ffn_size=2048, experts=8, top_k=2,
                        shared_experts=1, expert_ffn_size=512, seq_length=256, vocab_size=8000, gated_mlp=True)


def test_a_strategy_with_the_a2a_overlap_steps_faster_by_the_dispatch_it_hides():
    model = TransformerConfig(layers=4, hidden_size=1024, num_heads=16, ffn_size=4096, experts=16, top_k=2,
                              expert_ffn_size=1024, seq_length=2048, vocab_size=32000, gated_mlp=True)
    base = Strategy(data_parallel=16, expert_parallel=16, micro_batch_size=1)
    times = {on: evaluate_strategy(model, replace(base, moe_a2a_overlap=on), cluster="dgx-h100", global_batch=64)
             for on in (False, True)}
    plain, hidden = (times[on].breakdown["ep_comm_ms"].sum() for on in (False, True))
    assert 0 < hidden < plain
    assert times[False].step_time - times[True].step_time == pytest.approx(plain - hidden, rel=1e-6)
    assert "a2a-overlap" in times[True].strategy.label


@pytest.mark.parametrize("fields, message", [
    ({"data_parallel": 4, "moe_a2a_overlap": True},
     "moe_a2a_overlap=True needs expert_parallel > 1 (it overlaps the expert all-to-all)"),
    ({"data_parallel": 4, "expert_parallel": 4, "pipeline_parallel": 2, "moe_a2a_overlap": True},
     "moe_a2a_overlap=True with pipeline_parallel=2 needs virtual_stages > 1 (Megatron-Core pairs micro-batches "
     "across model chunks)"),
    ({"data_parallel": 4, "expert_parallel": 4, "moe_a2a_overlap": True, "moe_shared_expert_overlap": True},
     "moe_a2a_overlap=True and moe_shared_expert_overlap=True exclude each other (Megatron-Core refuses both)"),
])
def test_the_legality_check_holds_megatrons_a2a_overlap_rules(fields, message):
    strategy = Strategy(**fields)
    with pytest.raises(InputError) as error:
        check_strategy_fits(strategy, [MOE], global_batch=64)
    assert str(error.value) == f"strategy {strategy.label} breaks the 'experts' rule: {message}"
    fine = Strategy(data_parallel=4, expert_parallel=4, pipeline_parallel=2, virtual_stages=2,
                    schedule="interleaved", moe_a2a_overlap=True)
    assert check_strategy_fits(fine, [MOE], global_batch=64) == 16


def test_shared_expert_overlap_needs_shared_experts_and_the_overlaps_a_moe_model():
    no_shared = replace(MOE, shared_experts=0)
    strategy = Strategy(data_parallel=4, expert_parallel=4, moe_shared_expert_overlap=True)
    with pytest.raises(InputError) as error:
        check_strategy_fits(strategy, [no_shared], global_batch=64)
    assert str(error.value).endswith("moe_shared_expert_overlap=True needs shared experts (this model has none)")
    dense = TransformerConfig(layers=2, hidden_size=512, num_heads=8, ffn_size=2048, seq_length=256, vocab_size=800)
    with pytest.raises(InputError) as error:
        check_strategy_fits(Strategy(data_parallel=4, moe_a2a_overlap=True), [dense], global_batch=64)
    assert str(error.value).endswith("moe_a2a_overlap=True needs a MoE model (this one has no experts)")
