"""parse_strategy: a label as the search's table and Strategy.label write it, read back to the same strategy;
each bad token refused by name."""

import pytest

from sappkit import InputError, Strategy
from sappkit.strategy.search.labels import parse_strategy

STRATEGIES = [
    Strategy(),
    Strategy(tensor_parallel=8, pipeline_parallel=16, virtual_stages=2, data_parallel=64, schedule="interleaved"),
    Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=2, schedule="zbv", data_parallel=2,
             context_parallel=2, expert_parallel=4, expert_tensor_parallel=2, zero=3, reshard_after_forward=False,
             sequence_parallel=False, cp_kind="a2a", dtype="fp8", fp8_recipe="current", overlap_grad_reduce=False,
             overlap_p2p_comm=False, overlap_param_gather=False, expert_imbalance=1.5, moe_a2a_overlap=True,
             moe_shared_expert_overlap=True),
    Strategy(tensor_parallel=4, data_parallel=2, micro_batch_size=2, zero=0, tp_comm_overlap=True, dtype="fp16",
             cp_kind="allgather", context_parallel=2),
]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.label)
def test_a_label_reads_back_to_its_strategy(strategy):
    assert parse_strategy(strategy.label) == strategy
    assert parse_strategy(strategy.label, devices=strategy.devices) == strategy


def test_what_a_label_leaves_out_takes_the_defaults_and_dp_fills_the_devices():
    assert parse_strategy("t8 p16 v2", devices=8192) == STRATEGIES[1]
    assert parse_strategy("dp8 zero3", dtype="fp8", fp8_recipe="delayed").label == \
        "t1 p1 v1 dp8 cp1 ep1 b1 1f1b zero3 fp8-delayed"


@pytest.mark.parametrize(("label", "devices", "message"), [
    ("t8 q3", None, "label 't8 q3': unknown token 'q3'; expected a degree"),
    ("t8 t4", None, "label 't8 t4': 't4' sets tensor_parallel a second time; give each once"),
    ("t3 p2", 16, "label 't3 p2': t*cp*p = 6 does not divide devices=16, so no dp fills them"),
    ("t2 dp2", 16, "label 't2 dp2' runs on t*cp*dp*p = 4 devices; expected devices=16"),
    ("zero4", None, "label 'zero4': unknown token 'zero4'; expected a degree"),
    ("  ", None, "label must be a strategy label such as 't8 p16 v2 dp64'; got '  '"),
])
def test_a_bad_label_is_refused_naming_the_token(label, devices, message):
    with pytest.raises(InputError) as raised:
        parse_strategy(label, devices=devices)
    assert str(raised.value).startswith(message)
