"""Defaults a modern user expects: flash attention, the card's usable memory, the sharding stated, and the search
and evaluate_strategy pricing and accepting strategies alike."""

import numpy as np
import pytest

from sappkit import InputError, Strategy, TransformerConfig, evaluate_strategy
from sappkit.columns import SAPP_OPTIONS
from sappkit.hardware import Cluster, DeviceConfig
from sappkit.layers import KernelConfig
from sappkit.strategy.legality import check_strategy_fits
from sappkit.strategy.search.space import enumerate_strategies
from sappkit.strategy.search.tasks import STRATEGY_FIELDS, Setting, even_pass, price

GPT = TransformerConfig(layers=8, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048, vocab_size=32000)


def test_the_presets_report_memory_as_the_cards_do_less_the_reserve():
    reported = {"a100-80g": 81920, "a100-40g": 40960, "h100-sxm": 81559, "h200": 143771, "b200": 183359}
    for name, mib in reported.items():
        device = DeviceConfig.preset(name)
        assert (device.total_mb, device.usable_mb) == (mib, mib - 2048)
    assert DeviceConfig.preset("ascend-910b").total_mb == 64e9 / 2**20  # not sourced: the datasheet's bytes
    with pytest.raises(InputError) as error:
        DeviceConfig(hbm_gb=1.0, reserved_mib=1000.0)
    assert str(error.value) == "reserved_mib must be less than the device's 954 MiB; got 1000.0"


def test_evaluate_and_the_search_fit_the_usable_memory_by_default():
    result = evaluate_strategy(GPT, Strategy(data_parallel=8), cluster="dgx-h100", global_batch=64)
    assert result.memory_mb == result.stages["limit_mb"].iloc[0] == 81559 - 2048


def test_flash_attention_is_the_default():
    strategy = Strategy(tensor_parallel=2, data_parallel=4)
    default = evaluate_strategy(GPT, strategy, cluster="dgx-h100", global_batch=64)
    flash = evaluate_strategy(GPT, strategy, cluster="dgx-h100", global_batch=64,
                              kernels=KernelConfig(attention="flash"))
    paper = evaluate_strategy(GPT, strategy, cluster="dgx-h100", global_batch=64, kernels=KernelConfig())
    assert default.step_time == flash.step_time != paper.step_time
    assert default.peak_memory_mb == flash.peak_memory_mb < paper.peak_memory_mb


def test_every_result_states_its_sharding():
    for zero, reshard, words in ((1, True, "ZeRO 1"), (3, True, "ZeRO 3, resharded after forward"),
                                 (3, False, "ZeRO 3, not resharded after forward")):
        strategy = Strategy(data_parallel=8, zero=zero, reshard_after_forward=reshard)
        line = evaluate_strategy(GPT, strategy, cluster="dgx-h100", global_batch=64).describe().splitlines()[0]
        assert line == f"{strategy.label} on 8 x h100-sxm, global batch 64, {words}"
    assert Strategy(zero=3, reshard_after_forward=False).label.endswith("zero3 no-reshard")


def test_the_search_and_evaluate_price_an_fsdp_strategy_identically():
    """An 8B-class model under ZeRO 3 on a zero-bubble schedule, whose split backward's weight pass is the backward
    less its recompute: evaluate_strategy once compiled only the placed option, so its recompute share was 0 and
    its step up to 1% off the search's cheap pass."""
    model = TransformerConfig(layers=16, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
                              seq_length=4096, vocab_size=128256, gated_mlp=True)
    strategy = Strategy(pipeline_parallel=2, virtual_stages=2, data_parallel=4, zero=3, schedule="zb_interleaved")
    cluster = Cluster.preset("dgx-h100")
    setting = Setting(models=(model,), cluster=cluster, global_batch=32, memory_mb=cluster.device.usable_mb,
                      dtype="bf16")
    priced = price(setting, (1, 1, 1, 1, 1, True, False, "ring"))
    row = (0, *(getattr(strategy, name) for name in STRATEGY_FIELDS))
    for index, option in enumerate(SAPP_OPTIONS):
        only = np.where(np.arange(len(SAPP_OPTIONS)) == index, 0.0, np.inf)
        (searched,) = even_pass(setting, priced, [row], only[None, :])
        evaluated = evaluate_strategy(model, strategy, cluster=cluster, global_batch=32, recompute=option)
        assert (searched.recompute, searched.step_ms) == (option, evaluated.step_time)


def test_evaluate_refuses_what_the_search_refuses():
    model = TransformerConfig(layers=94, hidden_size=1024, num_heads=16, ffn_size=4096, seq_length=2048,
                              vocab_size=32000)
    strategy = Strategy(pipeline_parallel=8, virtual_stages=12, data_parallel=4, schedule="interleaved")
    reason = ("pipeline_parallel * virtual_stages = 8 * 12 = 96 cells exceed the 94 body layers (each cell holds "
              "at least one)")
    with pytest.raises(InputError) as error:
        evaluate_strategy(model, strategy, cluster="dgx-h100", global_batch=64)
    assert str(error.value) == f"strategy {strategy.label} breaks the 'cells' rule: {reason}"
    space = enumerate_strategies([model], devices=32, devices_per_node=8, global_batch=64,
                                 dims={"tensor_parallel": [1], "pipeline_parallel": [8], "virtual_stages": [12],
                                       "context_parallel": [1], "micro_batch_size": [1], "zero": [1]},
                                 schedules=["interleaved"])
    assert space["rule"].tolist() == ["cells"] and space["reason"].tolist() == [reason]
    with pytest.raises(InputError) as refused:
        check_strategy_fits(strategy, [model], global_batch=64)
    assert str(refused.value) == str(error.value)
