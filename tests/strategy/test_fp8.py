"""FP8 as Transformer Engine runs it: the recipes, which GEMMs run in FP8, the casts and the amax history, the
memory of the FP8 copies, and the device rule. Each cost is checked against its closed form by hand."""

import dataclasses

import numpy as np
import pytest

from sappkit import InputError, Strategy, TransformerConfig, evaluate_strategy
from sappkit.columns import SAPP_OPTIONS
from sappkit.hardware import Cluster, DeviceConfig, collective_ms
from sappkit.layers import KernelConfig, ParallelConfig
from sappkit.layers.comm import FP8_WEIGHT_CAST_BYTES, OPTIMIZER_BYTES, dense_sizes, layer_comm, optimizer_ms
from sappkit.layers.configs import FP8_RECIPES
from sappkit.layers.ops import AMAX_HISTORY, layer_ops, tail_ops
from sappkit.layers.param_memory import param_bytes
from sappkit.layers.shapes import layer_shape
from sappkit.strategy.search.strategies import search_strategies
from sappkit.strategy.search.tasks import STRATEGY_FIELDS, Setting, even_pass, price
from sappkit.trainers.megatron import megatron_args, read_megatron

LLAMA = TransformerConfig(layers=8, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
                          seq_length=4096, vocab_size=128256, gated_mlp=True, dropout=False)
H100, B200 = DeviceConfig.preset("h100-sxm"), DeviceConfig.preset("b200")
FLASH = KernelConfig(attention="flash")


def _ops(device, **parallel):
    return {(op.name, op.phase, i): op for i, op in enumerate(layer_ops(LLAMA, False, ParallelConfig(**parallel),
                                                                        device, FLASH))}


def _named(ops, name, phase):
    return [op for (n, p, _), op in ops.items() if n == name and p == phase]


def test_a_linear_gemm_runs_at_the_fp8_peak_with_fp8_inputs_and_a_bf16_output():
    device = dataclasses.replace(H100, mfu=0.65, matmul_half_gflop=7.5, fp8_mfu=0.5, fp8_matmul_half_gflop=20.0)
    ops = _ops(device, dtype="fp8", fp8_recipe="current", tensor_parallel=2)
    m, n, k = 4096, 14336 / 2, 4096  # fc2: the tokens, the hidden size, the ffn width per rank
    (forward,) = _named(ops, "fc2", "forward")
    flops = 2 * 4096 * 4096 * 7168
    nbytes = 1 * (4096 * 7168 + 7168 * 4096) + 2 * 4096 * 4096
    efficiency = 0.5 * flops / (flops + 20e9)
    assert forward.nbytes == nbytes and (m, n, k) == (4096, 7168, 4096)
    assert forward.time_ms == pytest.approx(flops / (1978.9e12 * efficiency) * 1e3 + 5e-3, rel=1e-12)
    bf16 = _named(_ops(device, tensor_parallel=2), "fc2", "forward")[0]
    assert bf16.time_ms == pytest.approx(flops / (989.4e12 * 0.65 * flops / (flops + 7.5e9)) * 1e3 + 5e-3)
    assert forward.time_ms != bf16.time_ms


def test_attention_the_norms_and_the_lm_head_stay_in_bf16():
    fp8, bf16 = _ops(H100, dtype="fp8"), _ops(H100)
    for name in ("attention", "norm1", "norm2", "act", "dropout_add1"):
        assert [op.time_ms for op in _named(fp8, name, "forward")] == [op.time_ms for op in _named(bf16, name,
                                                                                                   "forward")]
    heads = [tail_ops(LLAMA, ParallelConfig(dtype=dtype), H100) for dtype in ("fp8", "bf16")]
    assert [op.time_ms for op in heads[0]] == [op.time_ms for op in heads[1]]


@pytest.mark.parametrize("device, recipe, per_element", [
    (H100, "delayed", 2 + 2),  # one BF16 read, the rowwise and the transposed FP8 copy
    (H100, "current", 4 + 2),  # an amax pass and a cast pass over the BF16 tensor
    (B200, "current", 4 + 1),  # Blackwell runs FP8 GEMMs in every layout: one copy
    (B200, "mxfp8", 2 + 2 + 2 / 32),  # rowwise and columnwise quantizations, one E8M0 scale per 32 each
])
def test_each_gemm_input_and_output_gradient_is_cast_once(device, recipe, per_element):
    ops = _ops(device, dtype="fp8", fp8_recipe=recipe)
    (forward,), (backward,) = _named(ops, "qkv_cast", "forward"), _named(ops, "qkv_cast", "backward")
    tokens, width = 4096, 4096 + 2 * 8 * 128  # the input is h wide, the output gradient q + k + v wide
    assert forward.nbytes == pytest.approx(per_element * tokens * 4096)
    assert backward.nbytes == pytest.approx(per_element * tokens * width)
    assert forward.time_ms == pytest.approx(forward.nbytes / (device.hbm_gbs * 1e6 * 0.6125) + 5e-3)
    assert {name for name, _, _ in ops if name.endswith("_cast")} == {"qkv_cast", "out_cast", "fc1_cast",
                                                                        "fc2_cast"}


def test_only_delayed_scaling_updates_an_amax_history():
    delayed = _named(_ops(H100, dtype="fp8"), "amax_history", "forward")
    assert [op.nbytes for op in delayed] == [3 * 4 * 2 * 4 * AMAX_HISTORY]  # 3 tensors x 4 GEMMs, fp32 in and out
    assert AMAX_HISTORY == 1024
    for recipe in ("current",):
        assert not _named(_ops(H100, dtype="fp8", fp8_recipe=recipe), "amax_history", "forward")


def test_the_recipes_price_different_steps_and_delayed_is_the_default():
    steps = {recipe: evaluate_strategy(LLAMA, Strategy(data_parallel=8, dtype="fp8", fp8_recipe=recipe),
                                       cluster="dgx-b200", global_batch=64).step_time for recipe in FP8_RECIPES}
    default = evaluate_strategy(LLAMA, Strategy(data_parallel=8, dtype="fp8"), cluster="dgx-b200", global_batch=64)
    bf16 = evaluate_strategy(LLAMA, Strategy(data_parallel=8), cluster="dgx-b200", global_batch=64)
    assert default.strategy.fp8_recipe == "delayed" and default.step_time == steps["delayed"]
    assert len(set(steps.values())) == 3 and max(steps.values()) < bf16.step_time
    assert default.strategy.label == "t1 p1 v1 dp8 cp1 ep1 b1 1f1b zero1 fp8-delayed"


def test_the_sequence_parallel_gathers_move_the_quantized_tensor():
    cluster, tp4 = Cluster.preset("dgx-h100"), ParallelConfig(tensor_parallel=4)
    ranks, link = cluster.group(dense_sizes(tp4), "tp")
    elements = 4096 * 4096  # tokens x hidden size
    for dtype, gathered in (("bf16", 2), ("fp8", 1)):
        comm = layer_comm(LLAMA, False, dataclasses.replace(tp4, dtype=dtype), cluster, (1.0, 1.0))
        step = (collective_ms("all_gather", gathered * elements, ranks, link)
                + collective_ms("reduce_scatter", 2 * elements, ranks, link))
        assert comm.tp == pytest.approx((2 * step, 2 * step))


def test_the_weights_are_cast_once_per_step_with_the_optimizer():
    cluster = Cluster.preset("dgx-h100")
    params = 1e9
    for recipe, per_param in FP8_WEIGHT_CAST_BYTES.items():
        parallel = ParallelConfig(data_parallel=8, dtype="fp8", fp8_recipe=recipe)
        expected = (OPTIMIZER_BYTES * params / 8 + per_param * params) / (3350e9 * 0.6125) * 1e3 + 5e-3
        assert optimizer_ms(params, 0.0, parallel, cluster) == pytest.approx(expected)
    assert FP8_WEIGHT_CAST_BYTES == {"delayed": 4, "current": 6, "mxfp8": 4 + 2 / 32}


def test_fp8_keeps_two_weight_copies_and_saves_its_linear_inputs_in_one_byte():
    zero1 = ParallelConfig(data_parallel=4, zero=1)
    for recipe, copies in (("delayed", 2), ("current", 2), ("mxfp8", 2 + 2 / 32)):
        fp8 = dataclasses.replace(zero1, dtype="fp8", fp8_recipe=recipe)
        assert param_bytes(1000, 0, fp8)[0] - param_bytes(1000, 0, zero1)[0] == pytest.approx(1000 * copies)
        assert param_bytes(1000, 0, fp8, body=False) == param_bytes(1000, 0, zero1)  # embedding, LM head: BF16
    bf16, fp8 = layer_shape(LLAMA, False, 2, FLASH), layer_shape(LLAMA, False, 2, FLASH, fp8=True)
    h, f, attention_out = 4096, 14336, 32 * 128
    assert bf16.replicated - fp8.replicated == 2 * (2 - 1) * h  # the qkv and fc1 inputs (the norms' outputs)
    assert bf16.split - fp8.split == (2 - 1) * (attention_out + f)  # the out and fc2 inputs
    assert bf16.dropped_by_comm - fp8.dropped_by_comm == 2 * h and bf16.kept_by_full == fp8.kept_by_full


def test_the_device_must_run_the_recipe():
    with pytest.raises(InputError) as error:
        evaluate_strategy(LLAMA, Strategy(data_parallel=8, dtype="fp8", fp8_recipe="mxfp8"), cluster="dgx-h100",
                          global_batch=64)
    assert str(error.value) == ("fp8_recipe='mxfp8' needs block-scaled FP8 tensor cores (Blackwell); device "
                                "'h100-sxm' has none (its mxfp8_tflops is None): use 'delayed' or 'current'")
    with pytest.raises(InputError) as error:
        evaluate_strategy(LLAMA, Strategy(data_parallel=8, dtype="fp8"), cluster="dgx-a100", global_batch=64)
    assert str(error.value) == ("dtype='fp8' needs FP8 tensor cores; device 'a100-80g' has none (its fp8_tflops is "
                                "None): use 'bf16'")
    with pytest.raises(InputError) as error:
        search_strategies(LLAMA, cluster="dgx-h100", devices=8, global_batch=64, dtype="fp8", fp8_recipe="mxfp8",
                          progress=False)
    assert str(error.value).startswith("fp8_recipe='mxfp8' needs block-scaled FP8 tensor cores (Blackwell)")
    with pytest.raises(InputError) as error:
        Strategy(fp8_recipe="delayed")
    assert str(error.value) == ("fp8_recipe is an FP8 setting; set dtype='fp8' to use it (got dtype='bf16', "
                                "fp8_recipe='delayed')")


def test_the_search_and_evaluate_price_an_fp8_strategy_identically():
    strategy = Strategy(pipeline_parallel=2, data_parallel=4, dtype="fp8", fp8_recipe="mxfp8")
    cluster = Cluster.preset("dgx-b200")
    setting = Setting(models=(LLAMA,), cluster=cluster, global_batch=32, memory_mb=cluster.device.usable_mb,
                      dtype="fp8", fp8_recipe="mxfp8")
    priced = price(setting, (1, 1, 1, 1, 1, True, False, "ring"))
    row = (0, *(getattr(strategy, name) for name in STRATEGY_FIELDS))
    only = np.where(np.arange(len(SAPP_OPTIONS)) == 0, 0.0, np.inf)
    (searched,) = even_pass(setting, priced, [row], only[None, :])
    evaluated = evaluate_strategy(LLAMA, strategy, cluster=cluster, global_batch=32, recompute=SAPP_OPTIONS[0])
    assert searched.step_ms == evaluated.step_time
    bf16 = evaluate_strategy(LLAMA, dataclasses.replace(strategy, dtype="bf16", fp8_recipe=None), cluster=cluster,
                             global_batch=32, recompute=SAPP_OPTIONS[0])
    assert evaluated.step_time < bf16.step_time


@pytest.mark.parametrize("recipe, flag", [("delayed", "delayed"), ("current", "tensorwise"), ("mxfp8", "mxfp8")])
def test_megatron_arguments_carry_the_recipe_both_ways(recipe, flag):
    strategy = Strategy(tensor_parallel=2, data_parallel=4, dtype="fp8", fp8_recipe=recipe)
    args = list(megatron_args(strategy, global_batch=32, num_layers=8).args)
    assert args[-5:] == ["--bf16", "--fp8-format", "hybrid", "--fp8-recipe", flag]
    assert read_megatron(args, world_size=8).strategy == strategy
    with pytest.raises(InputError) as error:
        read_megatron(["--num-layers", "8", "--fp8-format", "e4m3", "--fp8-recipe", "blockwise"], world_size=8)
    assert str(error.value) == ("Megatron-LM arguments: --fp8-recipe must be one of 'delayed', 'tensorwise', "
                                "'mxfp8'; got 'blockwise'")
