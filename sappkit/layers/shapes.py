"""What one token of a layer kind keeps and holds: the activation and parameter counts behind the estimate.

The formulas and their sources are :mod:`sappkit.layers.estimate`'s module docstring; a :class:`Shape` holds
one kind's counts before parallel splitting.
"""

from __future__ import annotations

from dataclasses import dataclass

from .configs import _BYTES, KernelConfig, ParallelConfig, TransformerConfig

__all__ = ["Shape", "layer_shape", "head_shape", "tail_shape", "kinds", "mask_bytes"]


@dataclass(frozen=True)
class Shape:
    """One kind's costs before parallel splitting: parameters, bytes kept and FLOPs, per token of its stack."""

    seq: float
    """The stack's sequence length ``s``: tokens per sample and keys each query attends to."""
    dense_params: float
    expert_params: float = 0.0
    replicated: float = 0.0
    """``R``: bytes per token split over ``t`` only under sequence parallel."""
    split: float = 0.0
    """``S``: bytes per token split over ``t``."""
    core: float = 0.0
    """Attention-core bytes per (query, key) pair, all heads."""
    core_tokens: float = 0.0
    """Attention-core bytes per token that ``selective`` does not keep either (split over ``t``)."""
    dropped_by_comm: float = 0.0
    """Bytes per token of ``R`` that ``comm`` recompute does not keep."""
    kept_by_full: float = 0.0
    """Bytes per token of ``R`` that ``full`` recompute keeps (the layer input)."""
    flops: float = 0.0
    """Forward matmul FLOPs per token."""
    core_flops: float = 0.0
    """Forward attention-core FLOPs per (query, key) pair."""
    keys: float = 0.0
    """Key elements per token, all key/value heads (``a_kv·d``): what all-gather CP gathers, with ``values``."""
    values: float = 0.0
    """Value elements per token, all key/value heads (``a_kv·d_v``)."""


def layer_shape(model: TransformerConfig, moe: bool, e: int, kernels: KernelConfig, *, fp8: bool = False) -> Shape:
    """One layer kind's counts; ``fp8``: its linear layers save their inputs for the backward in FP8 (1 byte, the
    columnwise copy Transformer Engine keeps for the weight gradient) instead of ``e`` bytes."""
    lin = 1 if fp8 else e  # bytes per element of a saved linear-layer input
    h, a, d, dv = model.hidden_size, model.num_heads, model.head_dim, model.v_head_dim
    q_r, kv_r, rope = model.q_lora_rank, model.kv_lora_rank, model.rope_head_dim
    if kv_r:  # MLA: latents projected up to per-head keys and values
        kv_heads = a
        query = h * q_r + q_r + q_r * a * d if q_r else h * a * d
        key_value = h * (kv_r + rope) + kv_r + kv_r * a * (d - rope + dv)
        latents = 2 * e * q_r + 2 * e * kv_r + e * rope
    else:
        kv_heads = model.num_kv_heads
        query, key_value, latents = h * a * d, h * kv_heads * (d + dv), 0
    attention = query + key_value + a * dv * h
    m = 3 if model.gated_mlp else 2
    kept_m = 4 if model.gated_mlp and not kernels.fused_mlp else m
    f, experts = model.expert_ffn_size, model.experts
    if moe:
        mlp_dense = h * experts + model.shared_experts * m * h * f
        expert = experts * m * h * f
        mlp_kept = (model.top_k * ((e + lin) * h + (kept_m - 1) * e * f + lin * f)
                    + model.shared_experts * ((kept_m - 1) * e * f + lin * f) + 4 * experts)
        if kernels.moe == "hf":
            mlp_kept += model.top_k * (e * h + 4 + 16) + model.top_k * 12 + 4
        mlp_flops = 2 * (h * experts + (model.top_k + model.shared_experts) * m * h * f)
    else:
        mlp_dense, expert = m * h * model.ffn_size, 0.0
        mlp_kept, mlp_flops = ((kept_m - 1) * e + lin) * model.ffn_size, 2 * m * h * model.ffn_size
    qkv = e * (a * d + kv_heads * d + kv_heads * dv)
    core, core_tokens = _attention_core(kernels, e, a, a * (2 * d + dv), qkv, model.dropout)
    norm = e * h if kernels.norm == "paper" else 4 * h + e * h + 4
    hidden_masks = 2 * mask_bytes(kernels, e) * h if model.hidden_dropout else 0
    return Shape(
        seq=model.seq_length, dense_params=attention + mlp_dense + 2 * h, expert_params=expert,
        replicated=2 * norm + 2 * lin * h + hidden_masks + latents,
        split=qkv + lin * a * dv + mlp_kept, core=core, core_tokens=core_tokens,
        dropped_by_comm=2 * lin * h, kept_by_full=e * h, flops=2 * attention + mlp_flops, core_flops=2 * a * (d + dv),
        keys=kv_heads * d, values=kv_heads * dv)


def mask_bytes(kernels: KernelConfig, e: int) -> int:
    """Bytes per element of a dropout mask for a dropout running in ``e``-byte elements."""
    return 1 if kernels.dropout_mask == "bool" else e


def _attention_core(kernels: KernelConfig, e: int, a: int, repeated: int, qkv: float,
                    dropout: bool) -> tuple[float, float]:
    """The attention core's bytes per (query, key) pair and per token (module docstring, "Kernels").

    ``repeated`` is ``a·(2d + d_v)``, Q, K and V at every query head, in
    elements; ``qkv`` the paper's Q, K, V bytes per token.
    """
    if kernels.fused_attention:
        return 0.0, 4 * a
    if kernels.attention == "paper":
        return a * (e + (mask_bytes(kernels, e) + e if dropout else 0)), 0.0
    if kernels.attention == "eager":
        kept_for_values = mask_bytes(kernels, e) + e if dropout else (e if e < 4 else 0)
        return a * (4 + kept_for_values), e * repeated - qkv
    return a * (4 + (mask_bytes(kernels, 4) + 4 if dropout else 0)), 4 * repeated - qkv


def head_shape(models: tuple[TransformerConfig, ...], parallel: ParallelConfig,
                kernels: KernelConfig) -> list[Shape]:
    """The head's parts: the first stack's patch embedding (if any) and the last stack's token embedding."""
    e, parts = _BYTES[parallel.dtype], []
    first, last = models[0], models[-1]
    mask = mask_bytes(kernels, e)
    if first.patch_size:
        pixels = 3 * first.patch_size**2
        parts.append(Shape(seq=first.seq_length,
                            dense_params=pixels * first.hidden_size + first.seq_length * first.hidden_size,
                            replicated=e * pixels + first.hidden_dropout * mask * first.hidden_size,
                            flops=2 * pixels * first.hidden_size))
    parts.append(Shape(seq=last.seq_length, dense_params=last.vocab_size * last.hidden_size,
                        replicated=last.hidden_dropout * mask * last.hidden_size))
    return parts


def tail_shape(model: TransformerConfig, parallel: ParallelConfig) -> list[Shape]:
    e, h, v = _BYTES[parallel.dtype], model.hidden_size, model.vocab_size
    return [Shape(seq=model.seq_length, dense_params=h + v * h, replicated=2 * e * h,
                   split=4 * v, flops=2 * h * v)]


def kinds(model: TransformerConfig) -> list[tuple[str, int, bool]]:
    """(kind, count, is MoE) of a stack, in model order."""
    if not model.experts:
        return [(model.name, model.layers, False)]
    dense = [(model.name, model.dense_layers, False)] if model.dense_layers else []
    return [*dense, (model.moe_name, model.layers - model.dense_layers, True)]
