"""Hugging Face ``config.json`` files as :class:`~sappkit.TransformerConfig`: Llama, Qwen, Mixtral, DeepSeek-V3.

The keys read, by family (a multimodal config's ``text_config`` is read the same way):

- every family: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``vocab_size``,
  ``max_position_embeddings`` (the sequence length unless ``seq_length`` is given), ``num_key_value_heads``
  (default: the attention heads), ``head_dim`` (default ``hidden_size / num_attention_heads``),
  ``intermediate_size``, ``hidden_act`` (``silu``/``swiglu`` make the MLP gated), ``attention_dropout``;
  ``layer_types`` where it names ``sliding_attention`` layers (GPT-OSS: every other one), with their
  ``sliding_window`` (:attr:`~sappkit.TransformerConfig.attention_window`; a config without ``layer_types``
  is read as attending fully);
- Mixtral: ``num_local_experts``, ``num_experts_per_tok`` (experts of ``intermediate_size``);
- Qwen MoE (``qwen2_moe``, ``qwen3_moe``): ``num_experts``, ``num_experts_per_tok``, ``moe_intermediate_size``,
  ``shared_expert_intermediate_size`` (whole shared experts of the expert size), ``mlp_only_layers`` (leading
  dense layers);
- DeepSeek-V3 (``deepseek_v3``, ``deepseek_v2``): ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``, ``n_routed_experts``, ``num_experts_per_tok``, ``n_shared_experts``,
  ``moe_intermediate_size``, ``first_k_dense_replace``, ``num_nextn_predict_layers`` (its multi-token-prediction
  layers, :attr:`~sappkit.TransformerConfig.mtp_layers`; DeepSeek-V3 ships 1).
"""

from __future__ import annotations

from .._check import as_finite, short
from .._files import as_path, load_json
from ..errors import InputError
from ..layers import TransformerConfig
from ..limits import MAX_LAYERS, MAX_SEQ_LENGTH, MAX_WIDTH, Limit

__all__ = ["read_model_config"]

_GATED = ("silu", "swiglu", "swish")


def read_model_config(path, *, seq_length: int | None = None, name: str = "decoder") -> TransformerConfig:
    """The transformer stack a Hugging Face ``config.json`` describes (keys in the module docstring).

    Parameters
    ----------
    path : str or Path
        The ``config.json``.
    seq_length : int, optional
        Training sequence length (default the config's ``max_position_embeddings``).
    name : str
        Kind name of the dense layers (MoE layers: ``name + "_moe"``).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> keys = dict(model_type="llama", num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
    ...             num_key_value_heads=8, intermediate_size=14336, vocab_size=128256,
    ...             max_position_embeddings=8192, hidden_act="silu")
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "config.json"
    >>> _ = path.write_text(json.dumps(keys))
    >>> model = read_model_config(path)
    >>> model.layers, model.num_kv_heads, model.gated_mlp, model.seq_length
    (32, 8, True, 8192)
    """
    path = as_path("path", path)
    document = load_json(path, "model config")
    if not isinstance(document, dict):
        raise InputError(f"{path}: a model config must be a JSON object; got {type(document).__name__}")
    config = document.get("text_config", document)
    if not isinstance(config, dict):
        raise InputError(f"{path}: 'text_config' must be a JSON object; got {type(config).__name__}")
    keys = _Keys(path, config)
    fields = dict(layers=keys.int("num_hidden_layers", maximum=MAX_LAYERS), hidden_size=keys.int("hidden_size"),
                  num_heads=keys.int("num_attention_heads"), vocab_size=keys.int("vocab_size"),
                  seq_length=keys.int("max_position_embeddings", maximum=MAX_SEQ_LENGTH) if seq_length is None
                  else seq_length,
                  ffn_size=keys.int("intermediate_size"), gated_mlp=keys.activation() in _GATED,
                  dropout=keys.dropout() > 0, name=name)
    fields["num_kv_heads"] = keys.int("num_key_value_heads", fields["num_heads"])
    if "head_dim" in config and config["head_dim"] is not None:
        fields["head_dim"] = keys.int("head_dim")
    fields.update(_sliding_window(keys))
    kind = str(config.get("model_type", ""))
    if kind.startswith("deepseek"):
        fields.update(_deepseek(keys))
    elif "num_local_experts" in config:
        fields.update(experts=keys.int("num_local_experts"), top_k=keys.int("num_experts_per_tok", minimum=1))
    elif "num_experts" in config and keys.int("num_experts", 0):
        fields.update(_qwen_moe(keys))
    try:
        return TransformerConfig(**fields)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None


class _Keys:
    """A config's values, each read as the type it must have, with the file and key in every refusal."""

    def __init__(self, path, config: dict):
        self.path, self.config = path, config

    def int(self, key: str, default: int | None = None, *, minimum: int = 0, maximum: Limit = MAX_WIDTH,
            null: int | None = None) -> int:
        """``key`` as an int in ``minimum..maximum``; ``null`` stands for a JSON null where the format allows one."""
        value = self.config.get(key, default)
        if value is None and null is not None:
            return null
        if value is None:
            raise InputError(f"{self.path}: missing key {key!r} (a whole number)")
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            raise InputError(f"{self.path}: key {key!r} must be a whole number in {minimum}..{maximum.cited}; "
                             f"got {short(value)}")
        return value

    def activation(self) -> str:
        """``hidden_act`` (default ``gelu``), which must be a name."""
        value = self.config.get("hidden_act", "gelu")
        if not isinstance(value, str) or not value:
            raise InputError(f"{self.path}: key 'hidden_act' must be an activation's name (e.g. 'silu'); got "
                             f"{short(value)}")
        return value

    def dropout(self) -> float:
        """``attention_dropout`` (default 0), a probability written as a number."""
        value = self.config.get("attention_dropout", 0.0)
        number = as_finite(value)
        if number is None or not 0 <= number < 1:
            raise InputError(f"{self.path}: key 'attention_dropout' must be a number in [0, 1) (a probability, "
                             f"unquoted); got {short(value)}")
        return number


def _sliding_window(keys: _Keys) -> dict:
    """The window and the number of ``layer_types``' ``sliding_attention`` layers; none without such layers."""
    types = keys.config.get("layer_types")
    if types is None:
        return {}
    if not isinstance(types, list) or not all(isinstance(kind, str) for kind in types):
        raise InputError(f"{keys.path}: key 'layer_types' must list each layer's attention type (e.g. "
                         f"'sliding_attention', 'full_attention'); got {short(types)}")
    windowed = types.count("sliding_attention")
    if not windowed:
        return {}
    return dict(attention_window=keys.int("sliding_window", minimum=1, maximum=MAX_SEQ_LENGTH),
                windowed_layers=windowed)


def _deepseek(keys: _Keys) -> dict:
    nope, rope = keys.int("qk_nope_head_dim"), keys.int("qk_rope_head_dim")
    heads = keys.int("num_attention_heads")
    return dict(head_dim=nope + rope, v_head_dim=keys.int("v_head_dim"), q_lora_rank=keys.int("q_lora_rank", null=0),
                kv_lora_rank=keys.int("kv_lora_rank"), rope_head_dim=rope, num_kv_heads=heads,
                experts=keys.int("n_routed_experts"), top_k=keys.int("num_experts_per_tok"),
                shared_experts=keys.int("n_shared_experts", 0), expert_ffn_size=keys.int("moe_intermediate_size"),
                dense_layers=keys.int("first_k_dense_replace", 0),
                mtp_layers=keys.int("num_nextn_predict_layers", 0, maximum=MAX_LAYERS))


def _qwen_moe(keys: _Keys) -> dict:
    expert = keys.int("moe_intermediate_size", minimum=1)
    shared = keys.int("shared_expert_intermediate_size", 0)
    dense = keys.config.get("mlp_only_layers") or []
    if not isinstance(dense, list) or dense != list(range(len(dense))):
        raise InputError(f"{keys.path}: key 'mlp_only_layers' must list the leading layers 0, 1, ... (sappkit puts "
                         f"dense layers first); got {dense!r}")
    return dict(experts=keys.int("num_experts"), top_k=keys.int("num_experts_per_tok"), expert_ffn_size=expert,
                shared_experts=round(shared / expert) if shared else 0, dense_layers=len(dense))
