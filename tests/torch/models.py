"""Small transformers blocks with random weights (no downloads), each with its analytic twin."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import LlamaConfig, MixtralConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
from transformers.models.mixtral.modeling_mixtral import MixtralDecoderLayer

from sappkit import TransformerConfig

DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16"}
BATCH = 2


@dataclass
class Block:
    """A decoder layer, its example micro-batch, its keyword inputs and the TransformerConfig describing it."""

    layer: torch.nn.Module
    example: torch.Tensor
    kwargs: dict
    twin: TransformerConfig

    @property
    def tokens(self) -> int:
        return self.example.shape[0] * self.example.shape[1]


def _ffn(hidden: int) -> int:
    return hidden * 11 // 4


def llama(*, hidden=64, seq=32, heads=4, kv_heads=2, attention="sdpa", dtype=torch.float32, dropout=0.0) -> Block:
    """transformers' Llama decoder layer (GQA, SwiGLU, RMSNorm), ``attention`` "eager" or "sdpa"."""
    config = LlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         intermediate_size=_ffn(hidden), vocab_size=256, num_hidden_layers=1,
                         attention_dropout=dropout, attn_implementation=attention)
    twin = TransformerConfig(layers=1, hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads,
                             ffn_size=_ffn(hidden), seq_length=seq, vocab_size=256, gated_mlp=True,
                             dropout=dropout > 0, hidden_dropout=False)
    return _block(LlamaDecoderLayer(config, 0), LlamaRotaryEmbedding(config), seq, hidden, dtype, twin)


def mixtral(*, hidden=64, seq=32, experts=4, top_k=2, attention="sdpa", dtype=torch.float32) -> Block:
    """transformers' Mixtral decoder layer: Llama's attention and a top-k routed MoE of SwiGLU experts."""
    config = MixtralConfig(hidden_size=hidden, num_attention_heads=4, num_key_value_heads=2,
                           intermediate_size=_ffn(hidden), num_local_experts=experts, num_experts_per_tok=top_k,
                           vocab_size=256, num_hidden_layers=1, attn_implementation=attention)
    twin = TransformerConfig(layers=1, hidden_size=hidden, num_heads=4, num_kv_heads=2, ffn_size=_ffn(hidden),
                             seq_length=seq, vocab_size=256, gated_mlp=True, dropout=False, experts=experts,
                             top_k=top_k)
    return _block(MixtralDecoderLayer(config, 0), LlamaRotaryEmbedding(config), seq, hidden, dtype, twin)


def _block(layer, rotary, seq, hidden, dtype, twin) -> Block:
    torch.manual_seed(0)
    for parameter in layer.parameters():  # transformers leaves some weights uninitialised outside from_pretrained
        torch.nn.init.normal_(parameter, std=0.02)
    layer = layer.to(dtype)
    example = torch.randn(BATCH, seq, hidden, dtype=dtype)
    cos, sin = rotary(example, torch.arange(seq)[None].expand(BATCH, seq))
    return Block(layer, example, {"position_embeddings": (cos, sin)}, twin)
