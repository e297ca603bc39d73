"""Hostile and malformed configs, traces and arguments: each ends in one InputError naming what and why.

One case per shape: expansion bombs, limits, field types, values read as their opposite, strategies no trainer
runs, quadratic inputs, valid inputs that must be read, outputs that must not break, and messages.
"""

import ast
import json
import tomllib

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sappkit
from sappkit import InputError, Strategy, TransformerConfig, evaluate_strategy, search_strategies
from sappkit.models.config_json import read_model_config
from sappkit.trainers import check_config, export_config, parse_layout, read_profile_times, torchtitan_config
from sappkit.trainers.hyperparallel import read_hyperparallel
from sappkit.trainers.megatron import read_megatron
from sappkit.trainers.mindformers import read_mindformers
from sappkit.trainers.torchtitan_import import python_settings, read_torchtitan

from .tables import table

GPT = TransformerConfig(layers=32, hidden_size=2048, num_heads=16, ffn_size=8192, seq_length=2048, vocab_size=51200)
LLAMA = dict(model_type="llama", num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
             num_key_value_heads=8, intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192,
             hidden_act="silu")
#: DeepSeek-V2-Lite's config.json as published (huggingface.co/deepseek-ai/DeepSeek-V2-Lite): q_lora_rank null.
DEEPSEEK_V2_LITE = dict(model_type="deepseek_v2", num_hidden_layers=27, hidden_size=2048, num_attention_heads=16,
                        num_key_value_heads=16, intermediate_size=10944, moe_intermediate_size=1408,
                        vocab_size=102400, max_position_embeddings=163840, hidden_act="silu", q_lora_rank=None,
                        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                        n_routed_experts=64, num_experts_per_tok=6, n_shared_experts=2, first_k_dense_replace=1,
                        attention_dropout=0.0)
BASE = ["--num-layers", "8"]
X = "sappkit.limits."


def mindformers(model=None, parallel=None):
    return read_mindformers({"model": {"model_config": {"num_layers": 8, **(model or {})}},
                             "parallel_config": parallel or {}})


def event(name, ts, dur, args=None):
    return {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def refused(call, message):
    with pytest.raises(InputError) as caught:
        call()
    assert str(caught.value) == message


DOUBLING = "A=1\n" + "A=\"$A $A\"\n" * 22 + "torchrun pretrain_gpt.py --num-layers 8 $A\n"
TERMS = "N=$((" + "+".join(["1"] * 3000) + "))\n--num-layers $N"


@pytest.mark.parametrize("call, message", [
    # 1. expansion bombs
    (lambda: parse_layout("(t*999999|)*100000"), "pipeline layout '(t*999999|)*100000' expands to more than "
                                                 f"1000000 ({X}MAX_EXPANDED_CHARS) layer characters"),
    (lambda: read_megatron(DOUBLING), f"the launch script expands to more than 1000000 ({X}MAX_EXPANDED_CHARS) "
                                      "characters once its variables are substituted; sappkit reads scripts within "
                                      "that"),
    (lambda: read_megatron(TERMS), f"Megatron-LM arguments: --num-layers must be an int <= 2048 ({X}MAX_LAYERS); "
                                   "got 3000"),
    (lambda: read_megatron("N=$((0x" + "f" * 5000 + "))\n--num-layers $N"),
     "a $((...)) of 5,002 characters: operand a str of 5002 characters has more digits than a 64-bit integer, "
     "which is all a shell computes"),
    (lambda: read_megatron("N=$((9**9**9**9))\n--num-layers $N"),
     "$((9**9**9**9)) overflows a 64-bit integer, which is all a shell computes"),
    (lambda: read_megatron("N=$((" + "2**" * 150 + "1))\n--num-layers $N"),
     f"a $((...)) of 451 characters nests deeper than 100 ({X}MAX_NESTING) levels"),
    (lambda: python_settings("x = " + "+".join(["1"] * 3000)),
     f"torchtitan config: the recipe nests its expressions deeper than 100 ({X}MAX_NESTING) levels; sappkit reads "
     "recipes of literal settings"),
    (lambda: python_settings("x = a" + ".b" * 5000),
     f"torchtitan config: the recipe nests its expressions deeper than 100 ({X}MAX_NESTING) levels; sappkit reads "
     "recipes of literal settings"),
    # 2. limits, as each value is read
    (lambda: read_megatron(BASE + ["--pipeline-model-parallel-size", "1000000000"]),
     f"Megatron-LM arguments: --pipeline-model-parallel-size must be an int <= 256 ({X}MAX_STAGES); got 1000000000"),
    (lambda: read_megatron(BASE + ["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank",
                                   "100000000"]),
     f"Megatron-LM arguments: --num-virtual-stages-per-pipeline-rank must be an int <= 32 ({X}MAX_CHUNKS); got "
     "100000000"),
    (lambda: read_megatron(["--num-layers", "100000000"]),
     f"Megatron-LM arguments: --num-layers must be an int <= 2048 ({X}MAX_LAYERS); got 100000000"),
    (lambda: read_megatron(BASE + ["--global-batch-size", str(10**12)]),
     f"Megatron-LM arguments: --global-batch-size must be an int <= 16777216 ({X}MAX_GLOBAL_BATCH); got "
     "1000000000000"),
    (lambda: mindformers(model={"offset": 10**12}), "MindFormers config: offset must be an int, a list of 1 ints or "
                                                    "1 such lists; got 1000000000000 (each within +-2048 "
                                                    f"({X}MAX_LAYERS))"),
    (lambda: mindformers(parallel={"data_parallel": 10**30}), "MindFormers config: data_parallel must be an int <= "
                                                              f"1048576 ({X}MAX_DEVICES); got {10**30}"),
    (lambda: read_torchtitan({"parallelism": {"pipeline_parallel_microbatch_size": 2**63 - 1}}, num_layers=4),
     "torchtitan config: pipeline_parallel_microbatch_size must be an int <= 1048576 "
     f"({X}MAX_MICROBATCH_SIZE); got {2**63 - 1}"),
    (lambda: read_torchtitan({"parallelism": {"pipeline_parallel_microbatch_size": 2.5}}, num_layers=4),
     "torchtitan config: pipeline_parallel_microbatch_size must be an int >= 1; got 2.5"),
    (lambda: search_strategies(GPT, devices=10**9, global_batch=64, progress=False),
     f"devices must be an int <= 1048576 ({X}MAX_DEVICES); got 1000000000"),
    (lambda: evaluate_strategy(GPT, Strategy(), global_batch=10**30),
     f"global_batch must be an int <= 16777216 ({X}MAX_GLOBAL_BATCH); got {10**30}"),
    (lambda: search_strategies(GPT, devices=8, global_batch=64, seq_length=10**30, progress=False),
     f"seq_length must be an int <= 16777216 ({X}MAX_SEQ_LENGTH); got {10**30}"),
    # 3. fields trusted as their type
    (lambda: mindformers(model={"num_heads": "32", "hidden_size": 4096, "seq_length": 4096, "vocab_size": 10}),
     "MindFormers config: num_heads must be an int >= 1; got '32'"),
    (lambda: read_megatron(BASE, world_size="64"), "world_size must be an int >= 1; got '64'"),
    (lambda: evaluate_strategy(GPT, Strategy(), global_batch=8, recompute=5),
     "recompute must be an option or a sequence of options among 'none', 'selective', 'comm', 'both', 'full', "
     "'selective_op'; got 5"),
    (lambda: export_config(Strategy(), "megatron", strategy={"tensor_parallel": 2}),
     "strategy must be a sappkit.Strategy (e.g. Strategy(tensor_parallel=2)); got {'tensor_parallel': 2}"),
    # 4. read as the opposite
    (lambda: read_torchtitan({"parallelism": {"enable_sequence_parallel": "false"}}, num_layers=4),
     "torchtitan config: enable_sequence_parallel must be true or false (a boolean, unquoted); got 'false'"),
    (lambda: read_hyperparallel({"accelerator": {"sequence_parallel": "no"}}, num_layers=4),
     "HyperParallel config: sequence_parallel must be true or false (a boolean, unquoted); got 'no'"),
    (lambda: read_torchtitan({"activation_checkpoint": {"mode": "selective", "selective_ac_option": "0"}},
                             num_layers=4),
     "torchtitan config: activation_checkpoint.selective_ac_option must be 'op' or a positive layer count as a "
     "string ('2': every second layer), as torchtitan requires; got '0'"),
    (lambda: mindformers(model={"num_layers": 24.7}), "MindFormers config: num_layers must be an int >= 1; got 24.7"),
    # 5. priced though no trainer runs it
    (lambda: evaluate_strategy(GPT, Strategy(pipeline_parallel=64), global_batch=64),
     "strategy t1 p64 v1 dp1 cp1 ep1 b1 1f1b zero1 breaks the 'cells' rule: pipeline_parallel * virtual_stages = "
     "64 * 1 = 64 cells exceed the 32 body layers (each cell holds at least one)"),
    (lambda: evaluate_strategy(GPT, Strategy(expert_parallel=8, data_parallel=8), global_batch=64),
     "strategy t1 p1 v1 dp8 cp1 ep8 b1 1f1b zero1 breaks the 'experts' rule: expert_parallel=8 needs a MoE model "
     "(this one has no experts)"),
    (lambda: evaluate_strategy(GPT, Strategy(), global_batch=8, memory_mb=float("nan")),
     "memory_mb must be a finite number > 0; got nan"),
    (lambda: evaluate_strategy(GPT, Strategy(), global_batch=8, memory_mb=-1),
     "memory_mb must be a finite number > 0; got -1"),
    (lambda: evaluate_strategy(GPT, Strategy(), global_batch=8, memory_mb="x"),
     "memory_mb must be a finite number > 0; got 'x'"),
    (lambda: evaluate_strategy(GPT, Strategy(), global_batch=8, cluster=sappkit.hardware.Cluster.preset(
        "dgx-h100", device=sappkit.DeviceConfig.preset("h100-sxm", tflops=1e-290))),
     None),
    # 9. messages
    (lambda: search_strategies(GPT, devices=16, global_batch=64, dims={"tensor_parallel": [3]}, progress=False),
     "no strategy was laid out: no t * cp * p * dp of the searched values makes 16 devices (dims="
     "{'tensor_parallel': [3]}); search other values"),
])
def test_each_hostile_input_is_one_named_refusal(call, message):
    with pytest.raises(InputError) as caught:
        call()
    if message is None:  # a layer priced past the limit: its value depends on the device model, its wording not
        assert str(caught.value).startswith("layers row 1 (kind 'layer') column 'forward_time' is "), caught.value
        assert str(caught.value).endswith(f"; expected at most 1000000000000000 ({X}MAX_TIME)")
    else:
        assert str(caught.value) == message


@pytest.mark.parametrize("keys, message", [
    ({**LLAMA, "attention_dropout": "0.0"}, "key 'attention_dropout' must be a number in [0, 1) (a probability, "
                                            "unquoted); got '0.0'"),
    ({**LLAMA, "hidden_act": ["silu"]}, "key 'hidden_act' must be an activation's name (e.g. 'silu'); got ['silu']"),
    ({**LLAMA, "model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 0},
     f"key 'moe_intermediate_size' must be a whole number in 1..16777216 ({X}MAX_WIDTH); got 0"),
])
def test_model_config_fields_are_checked_against_their_type(tmp_path, keys, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(keys))
    refused(lambda: read_model_config(path), f"{path}: {message}")


@pytest.mark.parametrize("events, message", [
    ([event("layer0", 0, 10, 5)], "trace event 0 ('layer0'): args must be an object; got 5"),
    ([event("layer0", 0, 10), event("aten::mm", 1, 2, {"Sequence number": "abc"})],
     "trace event 1 ('aten::mm'): args 'Sequence number' must be a whole number >= 0; got 'abc'"),
    ([{"ph": "M", "name": "process_name", "pid": 9, "args": ["Scope Layer"]}, event("layer0", 0, 10)],
     "trace event 0 ('process_name'): args must be an object; got ['Scope Layer']"),
])
def test_trace_fields_are_checked_against_their_type(tmp_path, events, message):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(events))
    refused(lambda: read_profile_times(path, r"layer(\d+)"), f"{path}: {message}")


def test_a_pattern_that_backtracks_exponentially_is_refused(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([event("a" * 40 + "b", 0, 1)]))
    refused(lambda: read_profile_times(path, "^(a+)+$"),
            "layer_pattern '^(a+)+$' backtracks exponentially on names that almost match: the repeat 'a+' inside a "
            "repeat may end where it could go on; write each repeat so that the next character tells its "
            "iterations apart (e.g. '(a+)+' as 'a+')")
    assert len(read_profile_times(path, r"^a+b$")) == 1  # one repeat is linear, and still read


# Each measured on CPython 3.11 against a near miss ("a" * 40 + "!", "ab" * 20 + "!", ...): the refused ones take
# seconds by 30 characters and double with each few more; the accepted ones take microseconds at thousands.
@pytest.mark.parametrize("pattern, why", [
    (r"^(a*)*$", "the repeat 'a*' inside a repeat may end where it could go on"),
    (r"(.*a)+", "the repeat '.*' inside a repeat may end where it could go on"),
    (r"(\w+\d?)+", "the repeat '\\w+' inside a repeat may end where it could go on"),
    (r"(x|x)+y", "an alternation inside a repeat has two branches that start alike"),
    (r"(ab|\wb)+!", "an alternation inside a repeat has two branches that start alike"),
    (r"(a?b?)+c", "the optional 'a?' inside a repeat may match what comes next"),
    (r"((ab)+)+", "the repeat '(ab)+' inside a repeat may end where it could go on"),
    (r".*.*.*.*.*x", "5 repeats may each end in many places (more than 4), and each multiplies the work by a "
                     "name's length"),
])
def test_repeats_that_split_a_name_many_ways_are_refused_with_the_repeat(tmp_path, pattern, why):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([event("layer1", 0, 1)]))
    refused(lambda: read_profile_times(path, pattern),
            f"layer_pattern {pattern!r} backtracks exponentially on names that almost match: {why}; write each "
            "repeat so that the next character tells its iterations apart (e.g. '(a+)+' as 'a+')")


@pytest.mark.parametrize("pattern, name, layer", [
    (r"((x|y)+)_(\d+)", "xyyx_3", "xyyx"),  # an alternation whose branches start apart
    (r"((?:attn|mlp)+)\.\d+", "attnmlp.3", "attnmlp"),
    (r"^(?:\w+\.)*layers\.(\d+)$", "model.decoder.layers.7", "7"),  # a module path: each part ends at a dot
    (r"((?:\d+,)+)end", "1,22,333,end", "1,22,333,"),
    (r"(?:a|ab)+(\d)", "aabab1", "1"),  # after an "a", the next character tells the branches apart
    (r"nn\.Module: (Block_\d+)", "nn.Module: Block_3", "Block_3"),
    (r"(?i)(?:A|a)+_(\d+)", "aAa_2", "2"),  # one character either case: a character class
])
def test_repeats_whose_iterations_the_next_character_tells_apart_are_read(tmp_path, pattern, name, layer):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps([event(name, 0, 1)]))
    assert read_profile_times(path, pattern)["layer"].tolist() == [layer]


def test_many_spans_find_their_ops_by_bisection(tmp_path, monkeypatch):
    """20 000 spans and ops: each span bisects for its ops once (counted), never scanning every op."""
    import sappkit.trainers.profiles as profiles
    spans = [event(f"layer{i}", 10 * i, 5) for i in range(20_000)]
    ops = [event("aten::mm", 10 * i + 1, 1, {"Sequence number": i}) for i in range(20_000)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(spans + ops))
    looked = []
    real = profiles.bisect.bisect_right
    monkeypatch.setattr(profiles.bisect, "bisect_right", lambda *a, **k: looked.append(1) or real(*a, **k))
    frame = read_profile_times(path, r"layer(\d+)")
    assert len(frame) == 20_000 and len(looked) == 20_000


@pytest.mark.parametrize("validate_row, message", [
    ({"measured": 0}, "runs row 0 ('sc21-1.7b'): measured must be a finite number > 0; got 0.0"),
    ({"recompute": None}, "runs row 0 ('sc21-1.7b'): recompute must be an option or a sequence of options among "
                          "'none', 'selective', 'comm', 'both', 'full', 'selective_op'; got nan"),
    ({"layers": 24.7}, "runs row 0 ('sc21-1.7b'): layers must be an int >= 0; got 24.7"),
    ({"sequence_parallel": "yes"}, "runs row 0 ('sc21-1.7b'): sequence_parallel must be true or false; got 'yes'"),
])
def test_validate_names_the_row_of_every_refusal(tmp_path, validate_row, message):
    runs = sappkit.strategy.published_runs().iloc[:1].copy()
    for key, value in validate_row.items():
        runs[key] = value
    runs.to_csv(tmp_path / "runs.csv", index=False)
    refused(lambda: sappkit.validate(sappkit.strategy.published_runs(tmp_path / "runs.csv")), message)


def test_validate_refuses_a_table_without_rows():
    refused(lambda: sappkit.validate(sappkit.strategy.published_runs().iloc[:0]),
            "runs holds no rows: there is nothing to compare")


# ---------------------------------------------------------------------------------------------- 7. valid input


def test_valid_inputs_are_read():
    assert read_megatron(BASE).strategy.pipeline_parallel == 1
    assert read_torchtitan({"parallelism": {"pipeline_parallel_degree": 1}}, num_layers=4).strategy.label == \
        "t1 p1 v1 dp1 cp1 ep1 b1 1f1b zero0"
    script = "GPUS_PER_NODE=8\nNNODES=2\nWORLD_SIZE=$((GPUS_PER_NODE*NNODES))\nX=$(( (7 + 1) % 5 * -2 ))\n" \
             "--num-layers 8 --tensor-model-parallel-size $WORLD_SIZE --pipeline-model-parallel-size $((0x2))"
    config = read_megatron(script)
    assert (config.strategy.tensor_parallel, config.strategy.pipeline_parallel) == (16, 2)
    assert sappkit.DeviceConfig.preset("h100-sxm", name="x").name == "x"
    assert sappkit.profile_layer_table is sappkit.trainers.profile_layer_table


def test_bash_arithmetic_is_bash_s():
    from sappkit.trainers.shell import shell_tokens
    cases = {"7/2": 3, "-7/2": -3, "-7%3": -1, "2**10": 1024, "1+2*3-4": 3, "(1+2)*3": 9, "0x10+010": 26,
             "+".join(["1"] * 3000): 3000}
    for expression, value in cases.items():
        assert shell_tokens(f"echo $(({expression}))") == ["echo", str(value)], expression


def test_deepseek_v2_lite_reads_with_its_null_q_lora_rank(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DEEPSEEK_V2_LITE))
    model = read_model_config(path)
    assert (model.q_lora_rank, model.kv_lora_rank, model.experts, model.dense_layers) == (0, 512, 64, 1)


def test_a_recipe_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "recipe.py"
    path.write_text("\ufeffconfig.parallelism.pipeline_parallel_degree = 2\n", encoding="utf-8")
    assert python_settings(path.read_text(encoding="utf-8")) == {"parallelism": {"pipeline_parallel_degree": 2}}


def test_a_config_without_a_pipeline_is_priced_as_one_stage(tmp_path):
    # Megatron's default p = 1: every layer on one device, micro-batch after micro-batch (1F1B on one stage).
    # By hand: parameters 8 x 100 + 50 + 80 = 930 MB; one micro-batch in flight, 8 x 40 + 10 + 20 = 350 MB;
    # the layer ending warm-up is the LM head (the cell ends with it), 20 MB; a micro-batch takes
    # 8 x (1 + 2) + (0.5 + 1) + (0.8 + 1.5) = 27.8, and the step 4 x 27.8 = 111.2, no bubble.
    path = tmp_path / "a.sh"
    path.write_text("--num-layers 8 --micro-batch-size 1 --global-batch-size 4\n")
    checked = check_config(path, table(8), memory_mb=1e4)
    assert checked.describe() == (
        "megatron config: t1 p1 v1 dp1 cp1 ep1 b1 1f1b zero0 no-sp fp32, m=4\n"
        "simulated step 111 time units, peak 1,300 MB of 10,000 MB\n"
        "stage  0:   8 layers,  1,300 MB, time 27.8 time units\n"
        "no findings")
    stage = checked.plan.stages.iloc[0]
    assert (stage["param_mb"], stage["activation_mb"], stage["working_mb"]) == (930.0, 350.0, 20.0)
    assert checked.step_time == pytest.approx(111.2) == checked.plan.simulate().step_time
    refused(lambda: check_config(path, None, memory_mb=1e4),
            "layers must be the model's layer table (a LayerTable or its DataFrame), which prices the config; got "
            "None")


def test_one_stage_is_still_refused_outside_a_config():
    from sappkit import balance
    refused(lambda: balance(table(8), stages=1, micro_batches=4, memory_mb=1e4),
            "stages must be an int >= 2; got 1 (a pipeline needs at least two stages)")


def test_module_names_with_control_characters_export_as_toml_and_python_that_parse():
    from sappkit import balance
    rows = [dict(kind="block", role="body", count=4, param_mb=100, option=o, forward_time=1, backward_time=b,
                 activation_mb=a) for o, b, a in (("none", 2, 50), ("full", 3, 5))]
    plan = balance(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000)
    name = "tok\nemb\x01\"\\\x7f\u2028é"
    config = torchtitan_config(plan, head_modules=(name,))
    assert tomllib.loads(config.to_toml())["parallelism"]["module_fqns_per_model_part"][0][0] == name
    recipe = ast.parse(config.to_python())
    parts = [node.value for node in recipe.body if isinstance(node.value, ast.List)][0]
    assert ast.literal_eval(parts)[0][0] == name


def test_out_may_not_be_the_trace_it_reads(tmp_path, capsys):
    from sappkit.cli import main
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([event("layer0", 0, 10)]))
    before = trace.read_text()
    code = main(["layers", "--from-trace", str(trace), "--layer-pattern", r"layer(\d+)", "--into", str(trace),
                 "--out", str(trace)])
    assert code == 2 and trace.read_text() == before
    err = capsys.readouterr().err.strip()
    assert err == f"sappkit layers: --out {trace} is the file --from-trace reads; write the table elsewhere", err
    assert "\n" not in err


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab \"'\\#$`;", max_size=12))
def test_an_assigned_value_is_read_as_shlex_reads_it(value):
    import shlex
    from sappkit.trainers.shell import _assigned
    try:
        expected = " ".join(shlex.split(value, comments=True))
    except ValueError:
        expected = ""
    assert _assigned(value) == expected


def test_a_doubling_script_is_refused_before_its_values_are_split_word_by_word(monkeypatch):
    import sappkit.trainers.shell as shell
    split = []
    real = shell.shlex.split
    monkeypatch.setattr(shell.shlex, "split", lambda text, **k: split.append(len(text)) or real(text, **k))
    refused(lambda: read_megatron("A=1\n" + 'A="$A $A"\n' * 22 + "--num-layers 8 $A\n"),
            f"the launch script expands to more than 1000000 ({X}MAX_EXPANDED_CHARS) characters once its variables "
            "are substituted; sappkit reads scripts within that")
    assert split == []  # quoted values are read whole, not fed to shlex (pure Python, seconds on 500,000 characters)


def test_megatrons_mtp_layers_are_read_and_said_to_be_priced_with_the_tail():
    from sappkit import read_trainer_config
    args = ["--num-layers", "8", "--pipeline-model-parallel-size", "2", "--micro-batch-size", "1",
            "--global-batch-size", "4", "--mtp-num-layers", "1"]
    config = read_trainer_config(args, layers=table(8), memory_mb=1e4)
    assert config.mtp_layers == 1
    assert config.plan.notes[-1] == ("the config runs 1 MTP layer(s) on the last stage: they are priced as far as "
                                     "the layer table's tail prices them (estimate_layers with "
                                     "TransformerConfig(mtp_layers=1))")
    assert read_trainer_config(args[:-2]).mtp_layers == 0


def test_mindformers_mtp_depth_is_read():
    # mindspore-lab/mindformers research/deepseek3/deepseek3_671b/pretrain_deepseek3_671b.yaml: mtp_depth: 1
    document = {"parallel_config": {"pipeline_stage": 2, "micro_batch_num": 4},
                "model": {"model_config": {"num_layers": 8, "mtp_depth": 1}}}
    assert read_mindformers(document).mtp_layers == 1
    refused(lambda: read_mindformers({**document, "model": {"model_config": {"num_layers": 8, "mtp_depth": "1"}}}),
            "MindFormers config: mtp_depth must be an int >= 0; got '1'")
