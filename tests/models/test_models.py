"""Model presets and Hugging Face config.json files, written here from the published configs' keys."""

import json

import pytest

import sappkit
from sappkit import InputError, read_model_config
from sappkit.models import PRESETS, get, names

# The keys of the published config.json files (values as the model repositories give them).
LLAMA3_70B = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=8192, intermediate_size=28672,
                  num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                  max_position_embeddings=8192, hidden_act="silu", attention_dropout=0.0, rms_norm_eps=1e-5,
                  rope_theta=500000.0)
QWEN25_72B = dict(model_type="qwen2", hidden_size=8192, intermediate_size=29568, num_hidden_layers=80,
                  num_attention_heads=64, num_key_value_heads=8, vocab_size=152064, max_position_embeddings=32768,
                  hidden_act="silu", attention_dropout=0.0)
QWEN2_57B_A14B = dict(model_type="qwen2_moe", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                      num_attention_heads=28, num_key_value_heads=4, vocab_size=151936, max_position_embeddings=32768,
                      hidden_act="silu", num_experts=64, num_experts_per_tok=8, moe_intermediate_size=2560,
                      shared_expert_intermediate_size=20480, mlp_only_layers=[], attention_dropout=0.0)
MIXTRAL = dict(model_type="mixtral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768,
               hidden_act="silu", num_local_experts=8, num_experts_per_tok=2, attention_dropout=0.0)
DEEPSEEK_V3 = dict(model_type="deepseek_v3", hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
                   num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128, n_shared_experts=1,
                   n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3, q_lora_rank=1536,
                   kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, vocab_size=129280,
                   max_position_embeddings=163840, hidden_act="silu", attention_dropout=0.0)


def _write(tmp_path, keys, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(keys))
    return path


@pytest.mark.parametrize("keys, preset, seq", [(LLAMA3_70B, "llama3-70b", None), (MIXTRAL, "mixtral-8x7b", 4096),
                                               (DEEPSEEK_V3, "deepseek-v3", 4096)])
def test_a_published_config_reads_as_its_preset(tmp_path, keys, preset, seq):
    model = read_model_config(_write(tmp_path, keys), seq_length=seq)
    want = get(preset)
    for field in ("layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "v_head_dim", "ffn_size",
                  "vocab_size", "seq_length", "gated_mlp", "dropout", "experts", "top_k", "shared_experts",
                  "expert_ffn_size", "dense_layers", "q_lora_rank", "kv_lora_rank", "rope_head_dim"):
        assert getattr(model, field) == getattr(want, field), field


def test_qwen_dense_and_moe_and_a_multimodal_text_config(tmp_path):
    dense = read_model_config(_write(tmp_path, QWEN25_72B), seq_length=4096)
    assert (dense.layers, dense.num_kv_heads, dense.ffn_size, dense.seq_length) == (80, 8, 29568, 4096)
    moe = read_model_config(_write(tmp_path, QWEN2_57B_A14B))
    assert (moe.experts, moe.top_k, moe.expert_ffn_size, moe.shared_experts, moe.dense_layers) == (64, 8, 2560, 8, 0)
    wrapped = read_model_config(_write(tmp_path, dict(model_type="llava", text_config=LLAMA3_70B)))
    assert wrapped == read_model_config(_write(tmp_path, LLAMA3_70B))


def test_presets_carry_sources_and_price_end_to_end():
    assert set(names()) >= {"gpt3-175b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b", "deepseek-v3"}
    assert all(len(source) > 40 for _, source in PRESETS.values())
    assert sappkit.models.get("llama3-405b").layers == 126
    table = sappkit.estimate_layers(get("deepseek-v3"), parallel=sappkit.ParallelConfig(
        tensor_parallel=4, data_parallel=16, expert_parallel=64), cluster="dgx-h100")
    assert table.body_kinds == ("dense_decoder", "moe_decoder")


@pytest.mark.parametrize("keys, message", [
    ({**LLAMA3_70B, "num_hidden_layers": "80"}, "key 'num_hidden_layers' must be a whole number in "
                                                "0..2048 (sappkit.limits.MAX_LAYERS); got '80'"),
    ({**LLAMA3_70B, "hidden_size": 10**30}, "key 'hidden_size' must be a whole number in 0..16777216 "
                                            "(sappkit.limits.MAX_WIDTH); got 1000000000000000000000000000000"),
    ({**LLAMA3_70B, "attention_dropout": "0.0"}, "key 'attention_dropout' must be a number in [0, 1) (a "
                                                 "probability, unquoted); got '0.0'"),
    ({**LLAMA3_70B, "hidden_act": ["silu"]}, "key 'hidden_act' must be an activation's name (e.g. 'silu'); got "
                                             "['silu']"),
    ({**QWEN2_57B_A14B, "moe_intermediate_size": 0}, "key 'moe_intermediate_size' must be a whole number in "
                                                     "1..16777216 (sappkit.limits.MAX_WIDTH); got 0"),
    ({k: v for k, v in LLAMA3_70B.items() if k != "hidden_size"}, "missing key 'hidden_size' (a whole number)"),
    ({**LLAMA3_70B, "num_key_value_heads": 7}, "num_kv_heads must divide num_heads=64 (and equal it under MLA); "
                                               "got 7"),
    ({**QWEN2_57B_A14B, "mlp_only_layers": [3]}, "key 'mlp_only_layers' must list the leading layers 0, 1, ... "
                                                 "(sappkit puts dense layers first); got [3]"),
    ([1, 2], "a model config must be a JSON object; got list"),
])
def test_bad_configs_name_the_file_and_the_key(tmp_path, keys, message):
    path = _write(tmp_path, keys)
    with pytest.raises(InputError) as error:
        read_model_config(path)
    assert str(error.value) == f"{path}: {message}"


def test_unknown_presets_are_refused():
    with pytest.raises(InputError, match=r"^model must be one of 'gpt3-175b', .*; got 'llama5'$"):
        get("llama5")


def test_deepseek_v3s_multi_token_prediction_layer_is_read(tmp_path):
    # deepseek-ai/DeepSeek-V3's config.json ships "num_nextn_predict_layers": 1 (its one MTP module)
    model = read_model_config(_write(tmp_path, {**DEEPSEEK_V3, "num_nextn_predict_layers": 1}), seq_length=4096)
    assert (model.mtp_layers, model.layers) == (1, 61)
    assert read_model_config(_write(tmp_path, DEEPSEEK_V3), seq_length=4096).mtp_layers == 0
    with pytest.raises(InputError) as caught:
        read_model_config(_write(tmp_path, {**DEEPSEEK_V3, "num_nextn_predict_layers": "1"}))
    assert str(caught.value) == (f"{tmp_path / 'config.json'}: key 'num_nextn_predict_layers' must be a whole "
                                 "number in 0..2048 (sappkit.limits.MAX_LAYERS); got '1'")


def test_gpt_oss_sliding_layers_are_read_from_layer_types(tmp_path):
    # openai/gpt-oss-120b's config.json as transformers' GptOssConfig reads it (sliding_window 128, layer_types
    # alternating sliding and full attention from the first layer).
    keys = dict(model_type="gpt_oss", num_hidden_layers=36, hidden_size=2880, num_attention_heads=64,
                num_key_value_heads=8, head_dim=64, intermediate_size=2880, vocab_size=201088,
                max_position_embeddings=131072, hidden_act="silu", num_local_experts=128, num_experts_per_tok=4,
                sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 18)
    model = read_model_config(_write(tmp_path, keys), seq_length=4096)
    assert (model.attention_window, model.windowed_layers, model.experts) == (128, 18, 128)
    assert read_model_config(_write(tmp_path, {**keys, "layer_types": None}), seq_length=4096).attention_window == 0
    with pytest.raises(InputError, match="'layer_types' must list"):
        read_model_config(_write(tmp_path, {**keys, "layer_types": "sliding_attention"}))
