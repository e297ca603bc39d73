"""Shapes of well-known models, as :class:`~sappkit.TransformerConfig` presets (no weights, nothing downloaded).

Each preset cites where its numbers come from: the model's Hugging Face
``config.json`` (the keys :func:`sappkit.read_model_config` reads) or its
paper. ``seq_length`` is the training sequence length the source states.
"""

from __future__ import annotations

from ..errors import InputError
from ..layers import TransformerConfig

__all__ = ["PRESETS", "get", "names"]

#: Preset name -> (config, source).
PRESETS: dict[str, tuple[TransformerConfig, str]] = {
    "gpt3-175b": (
        TransformerConfig(layers=96, hidden_size=12288, num_heads=96, ffn_size=49152, seq_length=2048,
                          vocab_size=50257, name="decoder"),
        "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1 (GPT-3 175B: 96 layers, d_model "
        "12288, 96 heads, d_ff = 4 d_model, context 2048) and sec. 2.1 (the GPT-2 vocabulary, 50257 tokens)"),
    "megatron-22b": (
        TransformerConfig(layers=48, hidden_size=6144, num_heads=64, ffn_size=24576, seq_length=2048,
                          vocab_size=51200, name="decoder"),
        "Korthikanti et al., MLSys 2023, its 22B model as Calculon transcribes it (calculon-ai/calculon "
        "models/megatron-22B.json: 48 blocks, hidden 6144, 64 heads, feed-forward 24576, sequence 2048); vocabulary "
        "51,200 as Narayanan et al. SC'21"),
    "megatron-530b": (
        TransformerConfig(layers=105, hidden_size=20480, num_heads=128, ffn_size=81920, seq_length=2048,
                          vocab_size=51200, name="decoder"),
        "Narayanan et al., SC'21, Table 1 (529.6B: 105 layers, hidden 20480, 128 heads), the MT-NLG shape"),
    "megatron-1t": (
        TransformerConfig(layers=128, hidden_size=25600, num_heads=160, ffn_size=102400, seq_length=2048,
                          vocab_size=51200, name="decoder"),
        "Narayanan et al., SC'21, Table 1 (1008B: 128 layers, hidden 25600, 160 heads)"),
    "llama2-70b": (
        TransformerConfig(layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_size=28672,
                          seq_length=4096, vocab_size=32000, gated_mlp=True, dropout=False, name="decoder"),
        "meta-llama/Llama-2-70b-hf config.json (80 layers, hidden 8192, 64 heads, 8 KV heads, intermediate 28672, "
        "vocabulary 32000); sequence 4096 (Touvron et al. 2023, Table 1)"),
    "llama3-8b": (
        TransformerConfig(layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
                          seq_length=8192, vocab_size=128256, gated_mlp=True, dropout=False, name="decoder"),
        "meta-llama/Meta-Llama-3-8B config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, intermediate "
        "14336, vocabulary 128256, 8192 positions)"),
    "llama3-70b": (
        TransformerConfig(layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_size=28672,
                          seq_length=8192, vocab_size=128256, gated_mlp=True, dropout=False, name="decoder"),
        "meta-llama/Meta-Llama-3-70B config.json (80 layers, hidden 8192, 64 heads, 8 KV heads, intermediate "
        "28672, vocabulary 128256, 8192 positions)"),
    "llama3-405b": (
        TransformerConfig(layers=126, hidden_size=16384, num_heads=128, num_kv_heads=8, ffn_size=53248,
                          seq_length=8192, vocab_size=128256, gated_mlp=True, dropout=False, name="decoder"),
        "meta-llama/Llama-3.1-405B config.json (126 layers, hidden 16384, 128 heads, 8 KV heads, intermediate "
        "53248, vocabulary 128256); pre-training sequence 8192 (The Llama 3 Herd of Models, sec. 3.4.1)"),
    "mixtral-8x7b": (
        TransformerConfig(layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_size=14336,
                          seq_length=4096, vocab_size=32000, gated_mlp=True, dropout=False, experts=8, top_k=2,
                          name="decoder", moe_name="moe_decoder"),
        "mistralai/Mixtral-8x7B-v0.1 config.json (32 layers, hidden 4096, 32 heads, 8 KV heads, 8 local experts "
        "of intermediate 14336, 2 per token, vocabulary 32000); sequence 4096 is sappkit's choice (32768 "
        "positions)"),
    "deepseek-v3": (
        TransformerConfig(layers=61, dense_layers=3, hidden_size=7168, num_heads=128, head_dim=192, v_head_dim=128,
                          q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64, ffn_size=18432, experts=256, top_k=8,
                          shared_experts=1, expert_ffn_size=2048, vocab_size=129280, seq_length=4096,
                          gated_mlp=True, dropout=False, name="dense_decoder", moe_name="moe_decoder"),
        "deepseek-ai/DeepSeek-V3 config.json (61 layers, first 3 dense, hidden 7168, 128 heads, q/kv LoRA ranks "
        "1536/512, QK 128 + 64 rope, V 128, intermediate 18432, 256 routed experts of 2048, 8 per token, 1 shared, "
        "vocabulary 129280); pre-training sequence 4096 (DeepSeek-V3 Technical Report, sec. 4.2)"),
}


def names() -> tuple[str, ...]:
    """The preset names."""
    return tuple(PRESETS)


def get(name: str) -> TransformerConfig:
    """The preset ``name`` (see :data:`PRESETS` for the sources).

    Examples
    --------
    >>> get("llama3-70b").num_kv_heads, get("deepseek-v3").experts
    (8, 256)
    """
    if not isinstance(name, str) or name not in PRESETS:
        raise InputError(f"model must be one of {', '.join(map(repr, PRESETS))}; got {name!r}")
    return PRESETS[name][0]
