"""Sliding-window attention (GPT-OSS's alternate layers): the pairs a fused kernel computes, by brute force."""

import dataclasses

import numpy as np
import pytest

from sappkit import InputError, KernelConfig, ParallelConfig, TransformerConfig
from sappkit.hardware import DeviceConfig
from sappkit.layers.ops import layer_ops

BASE = TransformerConfig(layers=6, hidden_size=512, num_heads=8, num_kv_heads=2, head_dim=64, ffn_size=1024,
                         seq_length=1024, vocab_size=8000, gated_mlp=True, dropout=False)


def _pairs(s: int, w: int) -> int:
    """(query, key) pairs of a causal window of ``w`` keys (the query's own included), counted one by one."""
    query, key = np.meshgrid(np.arange(s), np.arange(s), indexing="ij")
    return int(((key <= query) & (key > query - w)).sum())


@pytest.mark.parametrize("s, w, windowed", [(64, 8, 6), (64, 8, 3), (100, 37, 2), (64, 64, 6), (64, 500, 1)])
def test_the_pair_share_is_the_windowed_pairs_over_the_causal_half(s, w, windowed):
    model = dataclasses.replace(BASE, seq_length=s, attention_window=w, windowed_layers=windowed)
    per_layer = min(1.0, _pairs(s, min(w, s)) / (s * s / 2))
    assert model.causal_pair_share == pytest.approx((windowed * per_layer + 6 - windowed) / 6, rel=1e-12)


def test_a_fused_kernel_computes_the_share_and_a_materialised_one_every_pair():
    device = DeviceConfig.preset("h100-sxm")
    windowed = dataclasses.replace(BASE, attention_window=128, windowed_layers=3)
    share = windowed.causal_pair_share
    assert share == pytest.approx((3 * (1024 * 128 - 128 * 127 / 2) / (1024 * 1024 / 2) + 3) / 6)
    for kernels, expected in ((KernelConfig(attention="cudnn"), share), (KernelConfig(attention="paper"), 1.0)):
        core, rest = {}, {}
        for name, model in (("full", BASE), ("windowed", windowed)):
            ops = layer_ops(model, False, ParallelConfig(micro_batch_size=2), device, kernels)
            core[name] = [op.flops for op in ops if op.core and op.matmul]
            rest[name] = [(op.name, op.flops, op.nbytes) for op in ops if not op.core]
        assert np.array(core["windowed"]) == pytest.approx(expected * np.array(core["full"]), rel=1e-12)
        assert rest["windowed"] == rest["full"]


def test_windows_are_checked():
    every = dataclasses.replace(BASE, attention_window=128)  # all layers by default
    assert every.causal_pair_share == dataclasses.replace(every, windowed_layers=6).causal_pair_share < 1
    assert BASE.causal_pair_share == 1.0
    with pytest.raises(InputError, match="windowed_layers must be <= layers=6; got 7"):
        dataclasses.replace(BASE, attention_window=128, windowed_layers=7)
    with pytest.raises(InputError, match="needs attention_window > 0"):
        dataclasses.replace(BASE, windowed_layers=2)
    with pytest.raises(InputError, match="attention_window must be an int >= 0"):
        dataclasses.replace(BASE, attention_window=-1)
