"""Fuzzing the newer surfaces: trainer configs (Megatron-LM scripts and layouts, torchtitan recipes and settings,
MindFormers and HyperParallel documents), model config.json files, profiler traces and evaluate_strategy.

Each reader gets generated cases (valid shapes with one field corrupted, and the bomb shapes: doubling variables,
long and deep ``$((...))``, repeats inside repeats, deep recipes) and must answer with a result its check accepts
or one InputError naming the reader or the key. Work is bounded by counts (sizes, repeats, terms), never by time.
"""

from __future__ import annotations

import json
import math

from hypothesis import given
from hypothesis import strategies as st

from sappkit import Strategy, TransformerConfig, evaluate_strategy, read_profile_times
from sappkit.limits import MAX_CHUNKS, MAX_EXPANDED_CHARS, MAX_LAYERS, MAX_MICRO_BATCHES, MAX_STAGES, MAX_TIME
from sappkit.models.config_json import read_model_config
from sappkit.trainers import parse_layout
from sappkit.trainers.hyperparallel import read_hyperparallel
from sappkit.trainers.megatron import MEGATRON_FLAGS, read_megatron
from sappkit.trainers.mindformers import read_mindformers
from sappkit.trainers.torchtitan_import import python_settings, read_torchtitan

from .support import BAD, bad_or, fresh, fuzz, refused_or_valid

#: Values a config's field may hold once corrupted, TOML/YAML/JSON typed.
VALUES = st.one_of(st.sampled_from(BAD[:-1]), st.integers(-3, 70), st.sampled_from(["yes", "no", "false", "0.0", "op"]),
                   st.integers(2**31, 2**80))


def check_config(config) -> None:
    """What every trainer config sappkit returns holds: degrees and layers within the limits, counts that add up."""
    s = config.strategy
    assert 1 <= s.pipeline_parallel <= MAX_STAGES and 1 <= s.virtual_stages <= MAX_CHUNKS, s
    assert 0 <= config.built_layers <= MAX_LAYERS * 2, config.built_layers
    assert 1 <= config.micro_batches <= MAX_MICRO_BATCHES, config.micro_batches
    assert len(config.options) == config.built_layers, (len(config.options), config.built_layers)
    assert all(isinstance(flag, bool) for flag in (s.sequence_parallel,)), s


# ------------------------------------------------------------------------------------------------ Megatron-LM


@st.composite
def launch_scripts(draw) -> str:
    """A launch script: variables (some doubling, some arithmetic), then flags that use them."""
    lines = [f"N={draw(st.integers(-2, 40))}", f"GPUS={draw(st.sampled_from([1, 2, 8, 0]))}"]
    for _ in range(draw(st.integers(0, 24))):  # doubling lines: past ~20 they exceed MAX_EXPANDED_CHARS
        lines.append('A="$A $A"' if lines[-1].startswith("A=") else "A=x")
    terms = draw(st.integers(1, 3000))
    lines.append("T=$((" + draw(st.sampled_from(["+", "*", "-", "**"])).join(
        [draw(st.sampled_from(["1", "2", "N", "GPUS", "0x" + "f" * draw(st.integers(1, 30))]))] * terms) + "))")
    lines.append("D=$((" + draw(st.sampled_from(["(", "-", "2**"])) * draw(st.integers(0, 200)) + "1))")
    words = []
    for _ in range(draw(st.integers(1, 8))):
        flag = draw(st.sampled_from(sorted(MEGATRON_FLAGS)))
        words += [flag, draw(st.sampled_from(["$N", "$T", "$D", "$GPUS", "${GPUS:-4}", "$((GPUS*N))", "$((N/0))",
                                              "4", "0", "1000000000", "x", "E|tt|tL"]))]
    return "\n".join(lines + ["torchrun --nproc-per-node $GPUS pretrain_gpt.py --num-layers $N " + " ".join(words)])


@fuzz(25)
@given(launch_scripts())
def test_megatron_launch_scripts(script):
    refused_or_valid(lambda: read_megatron(script), ["Megatron-LM arguments", "launch script", "$((", "world_size",
                                                     "pipeline layout", "virtual_stages", "pipeline_parallel=1",
                                                     "must be", "sequence_parallel"], check_config)


def expanded_size(text: str) -> None:
    layout = parse_layout(text)
    assert sum(map(len, layout.stages)) <= MAX_EXPANDED_CHARS


@fuzz(150)
@given(st.builds(lambda head, group, repeat, count, tail: f"{head}({group}*{repeat}|)*{count}{tail}",
                 st.sampled_from(["E", "Et*3|", "", "(", "x"]), st.sampled_from(["t", "tt", "m", "(t", "E", ""]),
                 st.integers(0, 10**7), st.integers(0, 10**7), st.sampled_from(["L", "tL", "|L", ")*2", "*9"])))
def test_megatron_layouts_and_their_bombs(text):
    def check(layout):
        assert sum(map(len, layout.stages)) <= MAX_EXPANDED_CHARS, len(layout.stages)

    refused_or_valid(lambda: parse_layout(text), ["pipeline layout"], check)


# ------------------------------------------------------------------------------------------------ torchtitan


@st.composite
def recipes(draw) -> str:
    """A Python recipe: literal settings, expressions, deep sums and attribute chains, a byte-order mark."""
    field = draw(st.sampled_from(["pipeline_parallel_degree", "num_pp_microbatches", "tensor_parallel_degree",
                                  "enable_sequence_parallel", "module_fqns_per_model_part"]))
    value = draw(st.sampled_from(["2", "True", "'false'", "10**30", "[['layers.0'], ['layers.1']]", "x + 1",
                                  "+".join(["1"] * draw(st.integers(1, 3000))), "a" + ".b" * draw(st.integers(0, 6000)),
                                  "[" * draw(st.integers(1, 300)) + "]" * draw(st.integers(1, 300))]))
    body = f"config.parallelism.{field} = {value}\nconfig.activation_checkpoint = FullAC.Config()\n"
    return draw(st.sampled_from(["", "\ufeff"])) + body


@fuzz(120)
@given(recipes())
def test_torchtitan_recipes(text):
    def check(settings):
        assert isinstance(settings, dict) and set(settings) <= {"parallelism", "training", "activation_checkpoint"}

    refused_or_valid(lambda: python_settings(text), ["torchtitan config"], check)


@fuzz(150)
@given(st.dictionaries(st.sampled_from(["pipeline_parallel_degree", "pipeline_parallel_microbatch_size",
                                        "num_pp_microbatches", "tensor_parallel_degree", "enable_sequence_parallel",
                                        "data_parallel_shard_degree", "pipeline_parallel_layers_per_stage",
                                        "module_fqns_per_model_part", "context_parallel_degree"]),
                       VALUES, max_size=4),
       st.dictionaries(st.sampled_from(["local_batch_size", "global_batch_size"]), VALUES, max_size=2),
       st.dictionaries(st.sampled_from(["mode", "selective_ac_option"]), st.one_of(VALUES, st.sampled_from(
           ["full", "selective", "none", "op", "1", "2"])), max_size=2),
       bad_or(st.integers(1, 64)))
def test_torchtitan_settings(parallelism, training, checkpoint, num_layers):
    settings = {"parallelism": parallelism, "training": training, "activation_checkpoint": checkpoint}
    refused_or_valid(lambda: read_torchtitan(settings, num_layers=num_layers, world_size=16),
                     ["torchtitan config", "num_layers", "world_size", "virtual_stages", "pipeline_parallel=1",
                      "Strategy", "schedule"], check_config)


# ------------------------------------------------------------------------------------------------ MindSpore


@fuzz(150)
@given(st.dictionaries(st.sampled_from(["pipeline_stage", "micro_batch_num", "data_parallel", "model_parallel",
                                        "use_seq_parallel", "seq_split_num", "expert_parallel"]), VALUES, max_size=4),
       st.dictionaries(st.sampled_from(["num_layers", "offset", "pp_interleave_num", "num_heads", "hidden_size",
                                        "seq_length"]), st.one_of(VALUES, st.lists(st.integers(-3, 3), max_size=4)),
                       max_size=4),
       st.dictionaries(st.sampled_from(["recompute", "select_recompute"]),
                       st.one_of(VALUES, st.lists(st.integers(-1, 3), max_size=4)), max_size=2))
def test_mindformers_documents(parallel, model, recompute):
    document = {"parallel_config": parallel, "model": {"model_config": {"num_layers": 8, **model}},
                "recompute_config": recompute}
    refused_or_valid(lambda: read_mindformers(document), ["MindFormers config", "virtual_stages", "world_size",
                                                          "pipeline_parallel=1", "Strategy"], check_config)


@fuzz(120)
@given(st.dictionaries(st.sampled_from(["pp_size", "tp_size", "cp_size", "ep_size", "sequence_parallel"]), VALUES,
                       max_size=3),
       st.dictionaries(st.sampled_from(["mode", "layers"]), st.one_of(VALUES, st.sampled_from(["off", "full"]),
                                                                      st.dictionaries(st.sampled_from(["0", "1-2", "x",
                                                                                                       "0-99999999"]),
                                                                                      VALUES, max_size=2)),
                       max_size=2),
       bad_or(st.integers(1, 64)), bad_or(st.integers(1, 64)))
def test_hyperparallel_documents(accelerator, checkpoint, num_layers, world_size):
    document = {"accelerator": accelerator, "activation_checkpoint": checkpoint}
    refused_or_valid(lambda: read_hyperparallel(document, num_layers=num_layers, world_size=world_size),
                     ["HyperParallel config", "num_layers", "world_size", "Strategy"], check_config)


# ------------------------------------------------------------------------------------------------ models, traces

LLAMA = dict(model_type="llama", num_hidden_layers=4, hidden_size=256, num_attention_heads=8, num_key_value_heads=4,
             intermediate_size=512, vocab_size=1000, max_position_embeddings=512, hidden_act="silu")
MOE = dict(LLAMA, model_type="qwen2_moe", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
           shared_expert_intermediate_size=128)
DEEPSEEK = dict(LLAMA, model_type="deepseek_v2", num_key_value_heads=8, q_lora_rank=None, kv_lora_rank=64,
                qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, n_routed_experts=8, num_experts_per_tok=2,
                n_shared_experts=1, moe_intermediate_size=64, first_k_dense_replace=1)


@fuzz(150)
@given(st.sampled_from([LLAMA, MOE, DEEPSEEK]), st.dictionaries(st.sampled_from(sorted(set(DEEPSEEK) | set(MOE))),
                                                                 VALUES, max_size=2))
def test_model_configs(tmp_path, base, corrupted):
    path = fresh(tmp_path) / "config.json"
    path.write_text(json.dumps({**base, **corrupted}, default=str, allow_nan=True))

    def check(model):
        assert 1 <= model.layers <= MAX_LAYERS and model.hidden_size >= 1, model
        assert isinstance(model.gated_mlp, bool) and isinstance(model.dropout, bool), model

    refused_or_valid(lambda: read_model_config(path), [str(path)], check)


@st.composite
def traces(draw) -> list:
    spans = draw(st.integers(1, 30))
    events = [{"ph": "X", "name": f"layer{i % 4}", "pid": 1, "tid": 1, "ts": 100 * i, "dur": 50, "args": {}}
              for i in range(spans)]
    events += [{"ph": "X", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 100 * i + 1, "dur": 2,
                "args": {"Sequence number": i}} for i in range(spans)]
    events += [{"ph": "X", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1, "tid": 2,
                "ts": 10**5 + 10 * i, "dur": 5, "args": {"Sequence number": i}} for i in range(spans)]
    for _ in range(draw(st.integers(0, 3))):  # corrupt one field of one event
        event = events[draw(st.integers(0, len(events) - 1))]
        key = draw(st.sampled_from(["ts", "dur", "args", "pid", "name", "Sequence number"]))
        value = draw(st.one_of(st.sampled_from(BAD[:-1]), st.just("abc"), st.just(["Scope Layer"])))
        (event["args"] if key == "Sequence number" and isinstance(event["args"], dict) else event)[key] = value
    return events


@fuzz(150)
@given(traces(), st.sampled_from([r"layer(\d+)", r"^(a+)+$", r"(layer\d)*", r"(x|y)+", "(", "", r"layer\d"]))
def test_traces(tmp_path, events, pattern):
    path = fresh(tmp_path) / "trace.json"
    path.write_text(json.dumps(events, default=str))

    def check(frame):
        assert len(frame) >= 1 and (frame["passes"] >= 1).all(), frame
        assert frame[["forward_time", "backward_time"]].map(math.isfinite).all().all(), frame
        assert (frame[["forward_time", "backward_time"]] >= 0).all().all(), frame

    refused_or_valid(lambda: read_profile_times(path, pattern), [str(path), "layer_pattern"], check)


# ------------------------------------------------------------------------------------------------ evaluate

GPT = TransformerConfig(layers=8, hidden_size=512, num_heads=8, ffn_size=2048, seq_length=512, vocab_size=1000)
DEGREES = ("tensor_parallel", "pipeline_parallel", "data_parallel", "expert_parallel", "micro_batch_size")


@fuzz(40)
@given(st.fixed_dictionaries({key: st.sampled_from([1, 2, 4, 16]) for key in DEGREES}),
       st.sampled_from(["1f1b", "interleaved", "zbv"]), bad_or(st.sampled_from([64, 128])),
       bad_or(st.sampled_from([None, 80_000.0])), bad_or(st.sampled_from(["none", "full", ("none", "full")])))
def test_evaluate_strategy(degrees, schedule, batch, memory_mb, recompute):
    def strategy():
        v = 2 if schedule != "1f1b" else 1
        return Strategy(**degrees, virtual_stages=v, schedule=schedule if degrees["pipeline_parallel"] > 1 else "1f1b")

    def call():
        s = strategy() if degrees["pipeline_parallel"] > 1 or schedule == "1f1b" else Strategy(**degrees)
        return evaluate_strategy(GPT, s, cluster="dgx-h100", global_batch=batch, memory_mb=memory_mb,
                                 recompute=recompute)

    def check(result):
        assert 0 < result.step_time <= MAX_TIME and isinstance(result.fits, bool), result

    refused_or_valid(call, ["strategy", "global_batch", "memory_mb", "recompute", "virtual_stages", "rule",
                            "devices", *DEGREES], check)
