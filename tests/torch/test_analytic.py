"""The analytic model against the measurement: estimate_layers keeps what transformers' layers keep.

Each kernel difference (KernelConfig) is checked on its own — the submodule or the
pair of implementations it concerns, measured — and then all together on the
whole Llama decoder layer over sequence lengths, widths and dtypes, and on a
Mixtral MoE layer. Measured and analytic bytes agree exactly (to rounding).
"""

from contextlib import nullcontext
from functools import lru_cache

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

from sappkit import KernelConfig, ParallelConfig, estimate_layers
from sappkit.torch import measure_layers

from .models import BATCH, DTYPES, llama, mixtral

MB = 2**20
#: What transformers and PyTorch's CPU kernels run, apart from the attention.
HF = dict(norm="hf", fused_mlp=False, dropout_mask="dtype", moe="hf")
#: transformers' attention implementation and SDPA backend for each KernelConfig.attention.
ATTENTION = {"eager": ("eager", None), "flash": ("sdpa", None), "math": ("sdpa", SDPBackend.MATH)}


def measured(block, options=("none", "full"), **extra) -> dict[str, float]:
    """Bytes kept per token, per option."""
    table = measure_layers(block.layer, block.example, kwargs=block.kwargs, options=options, repeats=1, **extra)
    rows = table.frame[table.frame["role"] == "body"].set_index("option")
    return (rows["activation_mb"] * MB / block.tokens).to_dict()


def estimated(block, dtype, options=("none", "full"), **kernels) -> dict[str, float]:
    table = estimate_layers(block.twin, parallel=ParallelConfig(micro_batch_size=BATCH, dtype=DTYPES[dtype]),
                            options=options, kernels=KernelConfig(**{**HF, **kernels}))
    rows = table.rows(table.body_kinds[0])
    return (rows["activation_mb"] * MB / block.tokens).to_dict()


@lru_cache(maxsize=None)
def run(attention: str, dtype, hidden: int = 64, seq: int = 64, dropout: float = 0.0) -> tuple[dict, dict]:
    """Measured and estimated bytes per token of a Llama layer under one attention kernel (measured once)."""
    implementation, backend = ATTENTION[attention]
    # transformers' eager attention is plain ops: no SDPA call for 'selective' to recompute.
    options = ("none", "full") if attention == "eager" else ("none", "selective", "full")
    block = llama(attention=implementation, dtype=dtype, hidden=hidden, seq=seq, dropout=dropout)
    with sdpa_kernel(backend) if backend else nullcontext():
        kept = measured(block, options)
    return kept, estimated(block, dtype, options, attention=attention)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("hidden, seq", [(64, 64), (96, 128)])
@pytest.mark.parametrize("attention", ["eager", "flash", "math"])
def test_llama_layer_keeps_what_the_estimate_says(attention, hidden, seq, dtype):
    kept, estimate = run(attention, dtype, hidden, seq)
    assert kept == pytest.approx(estimate, rel=1e-12)


def test_the_papers_count_misses_transformers_layer_by_more_than_five_percent():
    kept, _ = run("eager", torch.bfloat16, 96, 128)
    block = llama(hidden=96, seq=128)
    paper = estimate_layers(block.twin, parallel=ParallelConfig(micro_batch_size=BATCH),
                            options=("none",)).rows(block.twin.name)["activation_mb"].iloc[0] * MB / block.tokens
    assert kept["none"] / paper > 1.05


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_rmsnorm_keeps_an_fp32_copy_the_normalised_input_and_the_rstd(dtype):
    hidden, e = 64, torch.finfo(dtype).bits // 8
    norm = LlamaRMSNorm(hidden).to(dtype)
    table = measure_layers(norm, torch.randn(BATCH, 16, hidden, dtype=dtype), options=("none",), repeats=1)
    assert table.frame["activation_mb"].iloc[0] * MB / (BATCH * 16) == 4 * hidden + e * hidden + 4
    block = llama(hidden=hidden, dtype=dtype)
    gap = estimated(block, dtype, norm="hf")["none"] - estimated(block, dtype, norm="paper")["none"]
    assert gap == 2 * (4 * hidden + 4)  # two norms, each beyond the paper's e·h


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unfused_swiglu_also_keeps_the_activation_output(dtype):
    block = llama(dtype=dtype)
    e, hidden, ffn = torch.finfo(dtype).bits // 8, block.twin.hidden_size, block.twin.ffn_size
    mlp = LlamaMLP(block.layer.mlp.config).to(dtype)
    table = measure_layers(mlp, torch.randn(BATCH, 16, hidden, dtype=dtype), options=("none",), repeats=1)
    # The input (gate and up read it), gate and up outputs, SiLU output, the product (down reads it).
    assert table.frame["activation_mb"].iloc[0] * MB / (BATCH * 16) == e * hidden + 4 * e * ffn
    gap = estimated(block, dtype, fused_mlp=False)["none"] - estimated(block, dtype, fused_mlp=True)["none"]
    assert gap == e * ffn


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("attention", ["eager", "math"])
def test_plain_op_attention_keeps_repeated_kv_and_fp32_scores_that_flash_does_not(attention, dtype):
    # The difference between two attention kernels on one layer isolates what the kernel keeps.
    kept, estimate = run(attention, dtype)
    flash_kept, flash_estimate = run("flash", dtype)
    assert kept["none"] - flash_kept["none"] == estimate["none"] - flash_estimate["none"]
    assert kept["none"] - flash_kept["none"] > 64 * 4 * 4  # at least the fp32 scores: s·a·4 per token


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("attention", ["eager", "math"])
def test_attention_dropout_keeps_its_noise_in_the_dtype_it_runs_in(attention, dtype):
    with_dropout, estimate = run(attention, dtype, dropout=0.1)
    without, estimate_without = run(attention, dtype)
    assert with_dropout["none"] - without["none"] == estimate["none"] - estimate_without["none"]
    # CPU dropout keeps noise in its compute dtype, not a 1-byte mask: more than the paper's mask.
    mask = estimated(llama(dropout=0.1), dtype, ("none",), attention=attention, dropout_mask="bool")["none"]
    assert estimate["none"] > mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("top_k", [1, 2])
def test_mixtral_layer_keeps_the_routing_bookkeeping_of_transformers_expert_loop(top_k, dtype):
    block = mixtral(top_k=top_k, dtype=dtype)
    kept = measured(block, experts=("mlp.experts",))
    assert kept == pytest.approx(estimated(block, dtype, attention="flash"), rel=1e-12)
    paper_moe = estimated(block, dtype, attention="flash", moe="paper")["none"]
    assert 1.02 < kept["none"] / paper_moe < 1.08
