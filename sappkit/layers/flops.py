"""Model FLOPs of a training step: the count throughput and MFU are reported in.

A step's model FLOPs are three times its forward FLOPs (each matmul runs
forward, for the input gradient and for the weight gradient), recompute not
counted. The forward FLOPs per token are ``2`` per matmul parameter (the
projections, the MLP or the experts a token is routed to and the shared ones,
the MoE router, the LM head; not the embedding) plus the attention core,
``2·(d + d_v)`` per (query, key) pair and head: ``QKᵀ`` and ``PV``.

``causal=True`` counts the pairs a causal mask keeps (half), as Megatron-LM's
``num_floating_point_operations`` does today (``megatron/training/training.py``);
``causal=False`` counts all of them, as Narayanan et al. (SC'21, eq. 3: ``72
B s l h² (1 + s/6h + V/16lh)`` with the recompute of their Table 1 adding a
fourth pass, ``96 B s l h² (...)``) and Korthikanti et al. (MLSys'23, sec. 6)
do.
"""

from __future__ import annotations

from ..errors import InputError
from .configs import TransformerConfig
from .shapes import kinds

__all__ = ["model_flops", "megatron_sc21_flops"]


def model_flops(*models: TransformerConfig, batch: int, causal: bool = True) -> float:
    """Model FLOPs of one training step over ``batch`` samples of the stacks ``models`` (module docstring).

    Examples
    --------
    Narayanan et al.'s 1T model, without recompute (their eq. 3):

    >>> gpt = TransformerConfig(layers=128, hidden_size=25600, num_heads=160, ffn_size=102400,
    ...                         seq_length=2048, vocab_size=51200)
    >>> b, s, l, h, v = 3072, 2048, 128, 25600, 51200
    >>> eq3 = 72 * b * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))
    >>> abs(model_flops(gpt, batch=b, causal=False) / eq3 - 1) < 1e-3  # biases and norms aside
    True
    """
    if not models or not all(isinstance(model, TransformerConfig) for model in models):
        raise InputError("model_flops needs TransformerConfig stacks; got "
                         f"{', '.join(type(model).__name__ for model in models) or 'none'}")
    forward = 0.0
    for model in models:
        tokens = batch * model.seq_length
        for _, count, moe in kinds(model):
            forward += count * tokens * (2 * _matmul_params(model, moe) + _core_per_token(model, causal))
    last = models[-1]
    forward += 2 * batch * last.seq_length * last.hidden_size * last.vocab_size
    return 3 * forward


def _matmul_params(model: TransformerConfig, moe: bool) -> float:
    """Matmul parameters one token runs through in a layer (routed experts: the ``top_k`` it reaches)."""
    h, a, d, dv = model.hidden_size, model.num_heads, model.head_dim, model.v_head_dim
    q_r, kv_r, rope = model.q_lora_rank, model.kv_lora_rank, model.rope_head_dim
    if kv_r:
        query = h * q_r + q_r * a * d if q_r else h * a * d
        attention = query + h * (kv_r + rope) + kv_r * a * (d - rope + dv) + a * dv * h
    else:
        attention = h * a * d + h * model.num_kv_heads * (d + dv) + a * dv * h
    m = 3 if model.gated_mlp else 2
    if moe:
        mlp = h * model.experts + (model.top_k + model.shared_experts) * m * h * model.expert_ffn_size
    else:
        mlp = m * h * model.ffn_size
    return attention + mlp


def _core_per_token(model: TransformerConfig, causal: bool) -> float:
    pairs = model.seq_length / (2 if causal else 1)
    return 2 * model.num_heads * (model.head_dim + model.v_head_dim) * pairs


def megatron_sc21_flops(model: TransformerConfig, *, batch: int, recompute: bool = True) -> float:
    """Narayanan et al.'s step FLOPs (SC'21, eq. 3): ``72 B s l h² (1 + s/6h + V/16lh)``, ``96`` with full recompute.

    The count their Table 1's teraFLOP/s per GPU divide by; GPT shapes (``f = 4h``) only.

    Examples
    --------
    >>> gpt = TransformerConfig(layers=24, hidden_size=2304, num_heads=24, ffn_size=9216,
    ...                         seq_length=2048, vocab_size=51200)
    >>> round(megatron_sc21_flops(gpt, batch=512) / 1e15, 2)
    15.47
    """
    b, s, l, h, v = batch, model.seq_length, model.layers, model.hidden_size, model.vocab_size
    return (96 if recompute else 72) * b * s * l * h**2 * (1 + s / (6 * h) + v / (16 * l * h))
