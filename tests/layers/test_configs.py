"""Settings of an analytic layer estimate: bad transformer, parallel and device configs."""

from __future__ import annotations

import re

import pytest

from sappkit import DeviceConfig, InputError, KernelConfig, ParallelConfig, TransformerConfig


@pytest.mark.parametrize("settings, message", [
    (dict(layers=0), "layers must be an int >= 1; got 0"),
    (dict(num_kv_heads=3), "num_kv_heads must divide num_heads=4 (and equal it under MLA); got 3"),
    (dict(hidden_size=18), "hidden_size=18 is not a multiple of num_heads=4; give head_dim explicitly"),
    (dict(rope_head_dim=8), "rope_head_dim and q_lora_rank are MLA settings; set kv_lora_rank > 0 to use MLA, "
                            "got kv_lora_rank=0 with rope_head_dim=8, q_lora_rank=0"),
    (dict(kv_lora_rank=8, rope_head_dim=4), "rope_head_dim must be < head_dim=4 (it is part of it); got 4"),
    (dict(experts=4), "top_k must be an int >= 1; got 0 (a MoE layer routes each token to top_k experts)"),
    (dict(experts=4, top_k=5), "top_k must be <= experts=4; got 5"),
    (dict(experts=4, top_k=1, dense_layers=3), "dense_layers must be < layers=3 (a MoE stack needs a MoE layer); "
                                               "got 3"),
    (dict(top_k=2), "top_k, shared_experts, dense_layers and expert_ffn_size are MoE settings; set experts > 0 "
                    "to use them (got top_k=2, shared_experts=0, dense_layers=0, expert_ffn_size=None)"),
    (dict(name=""), "name must be a non-empty string; got ''"),
    (dict(vocab_size=-1), "vocab_size must be an int >= 0; got -1"),
    (dict(hidden_dropout=0), "hidden_dropout must be a bool or None; got 0"),
])
def test_bad_transformer_config(settings, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        TransformerConfig(**{**dict(layers=3, hidden_size=16, num_heads=4, ffn_size=64, seq_length=8,
                                    vocab_size=32), **settings})


def test_a_config_replaced_keeps_what_it_resolved():
    from dataclasses import replace
    from sappkit.models import get

    for name in ("llama3-8b", "deepseek-v3", "mixtral-8x7b"):
        model = get(name)
        longer = replace(model, seq_length=2 * model.seq_length)
        assert replace(longer, seq_length=model.seq_length) == model
    with pytest.raises(InputError, match="^top_k, shared_experts, dense_layers and expert_ffn_size are MoE"):
        replace(get("llama3-8b"), expert_ffn_size=1024)


@pytest.mark.parametrize("make, message", [
    (lambda: ParallelConfig(tensor_parallel=0), "tensor_parallel must be an int >= 1; got 0"),
    (lambda: ParallelConfig(zero=4), "zero must be one of 0, 1, 2, 3; got 4"),
    (lambda: ParallelConfig(dtype="int8"), "dtype must be one of 'bf16', 'fp16', 'fp32', 'fp8'; got 'int8'"),
    (lambda: ParallelConfig(dtype="fp8", fp8_recipe="nvfp4"),
     "fp8_recipe must be one of 'delayed', 'current', 'mxfp8'; got 'nvfp4'"),
    (lambda: ParallelConfig(fp8_recipe="current"),
     "fp8_recipe is an FP8 setting; set dtype='fp8' to use it (got dtype='bf16', fp8_recipe='current')"),
    (lambda: ParallelConfig(sequence_parallel=1), "sequence_parallel must be a bool; got 1"),
    (lambda: ParallelConfig(data_parallel=2, expert_parallel=4),
     "expert_parallel * expert_tensor_parallel = 4 * 1 must divide tensor_parallel * context_parallel * "
     "data_parallel = 2"),
    (lambda: DeviceConfig(tflops=0), "tflops must be a finite number > 0; got 0"),
    (lambda: DeviceConfig(mfu=1.5), "mfu must be in (0, 1]; got 1.5"),
    (lambda: KernelConfig(attention="sdpa"), "attention must be one of 'paper', 'eager', 'math', 'flash', 'fa2', "
                                             "'fa3', 'cudnn'; got 'sdpa'"),
    (lambda: DeviceConfig(fa3_forward=1.2), "fa3_forward must be in (0, 1]; got 1.2"),
    (lambda: ParallelConfig(cp_kind="ulysses"), "cp_kind must be one of 'ring', 'allgather', 'a2a'; got 'ulysses'"),
    (lambda: KernelConfig(norm="rms"), "norm must be one of 'paper', 'hf'; got 'rms'"),
    (lambda: KernelConfig(moe="megatron"), "moe must be one of 'paper', 'hf'; got 'megatron'"),
    (lambda: KernelConfig(dropout_mask=1), "dropout_mask must be one of 'bool', 'dtype'; got 1"),
    (lambda: KernelConfig(fused_mlp="yes"), "fused_mlp must be a bool; got 'yes'"),
    (lambda: KernelConfig(fused_elementwise=1), "fused_elementwise must be a bool; got 1"),
])
def test_bad_parallel_or_device_config(make, message):
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        make()
