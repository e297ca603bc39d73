"""Reading each trainer's config: launch scripts, TOML and Python recipes, YAML; what is refused and why."""

import pandas as pd
import pytest
import yaml

from sappkit import InputError, KernelConfig, Strategy, export_config, plan_from_offsets, read_trainer_config
from sappkit.trainers.megatron import read_megatron
from sappkit.trainers.mindformers import read_mindformers
from sappkit.trainers.torchtitan_import import python_settings, read_torchtitan, split_layers

SCRIPT = """#!/bin/bash
# a Megatron-LM launch script, as people write them
export TP=2
PP=4
GPUS_PER_NODE=8
NNODES=${NNODES:-2}
WORLD_SIZE=$(($GPUS_PER_NODE*$NNODES))
MODEL_ARGS=(
    --num-layers 32   # the decoder
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size ${PP}
    --micro-batch-size 2 --global-batch-size=64
    --sequence-parallel --use-distributed-optimizer --bf16
)
RECOMPUTE="--recompute-granularity full --recompute-method block --recompute-num-layers 3"
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py \\
    ${MODEL_ARGS[@]} $RECOMPUTE
"""


def test_a_launch_script_is_read_with_its_variables_arrays_and_arithmetic():
    config = read_megatron(SCRIPT)
    assert config.strategy == Strategy(tensor_parallel=2, pipeline_parallel=4, data_parallel=2, micro_batch_size=2,
                                       zero=1, sequence_parallel=True, dtype="bf16")
    assert config.micro_batches == 16 and config.global_batch == 64
    assert config.layer_counts == ((8, 8, 8, 8),)
    assert config.options == (("full",) * 3 + ("none",) * 5) * 4
    assert config.notes == ()


@pytest.mark.parametrize("source, message", [
    ("--num-layers $LAYERS --pipeline-model-parallel-size 2",
     "Megatron-LM arguments: --num-layers is '$LAYERS', which uses $LAYERS and the script never sets it; set it in "
     "the script or pass the arguments themselves"),
    (["--num-layers", "eight"], "Megatron-LM arguments: --num-layers must be an integer; got 'eight'"),
    (["--pipeline-model-parallel-size", "2"], "Megatron-LM arguments: --num-layers is missing (sappkit needs the "
                                              "decoder layer count)"),
    (["--num-layers", "8", "--recompute-granularity", "full"],
     "Megatron-LM arguments: --recompute-granularity full needs --recompute-method uniform|block and "
     "--recompute-num-layers; got None and None"),
    (["--num-layers", "8", "--global-batch-size", "6", "--micro-batch-size", "4"],
     "Megatron-LM arguments: --global-batch-size 6 is not a multiple of data-parallel size x --micro-batch-size = "
     "1 x 4"),
    (["--num-layers"], "Megatron-LM arguments: --num-layers needs a value"),
    (["--num-layers", "8", "--cp-comm-type", "a2a+p2p"],
     "Megatron-LM arguments: --cp-comm-type must be one of 'p2p', 'allgather', 'a2a' for every layer; got 'a2a+p2p'"),
    (["--num-layers", "8", "--cp-comm-type", "p2p", "a2a"],
     "Megatron-LM arguments: --cp-comm-type must be one of 'p2p', 'allgather', 'a2a' for every layer; got 'p2p a2a'"),
    (["--num-layers", "8", "--attention-backend", "cudnn"],
     "Megatron-LM arguments: --attention-backend must be one of 'fused', 'flash', 'unfused', 'local', 'auto'; got "
     "'cudnn'"),
])
def test_megatron_arguments_that_cannot_be_read_are_refused(source, message):
    with pytest.raises(InputError) as caught:
        read_megatron(source)
    assert str(caught.value) == message


def test_megatron_notes_what_sappkit_prices_differently():
    config = read_megatron(["--num-layers", "4", "--recompute-granularity", "full", "--recompute-method", "uniform",
                            "--recompute-num-layers", "2"])
    assert config.options == ("full",) * 4
    assert config.notes == ("no world size given: data-parallel size taken as 1 (pass world_size=)",
                            "--recompute-method uniform --recompute-num-layers 2 checkpoints groups of 2 layers; "
                            "sappkit prices every layer fully recomputed (it keeps a little more)")
    selective = read_megatron(["--num-layers", "2", "--recompute-activations"], world_size=1)
    assert selective.options == ("selective", "selective") and selective.notes == ()


@pytest.mark.parametrize("backend, attention", [("fused", "cudnn"), ("flash", "fa2"), ("unfused", "paper"),
                                                ("local", "paper"), ("auto", None)])
def test_megatron_attention_backends_are_read_as_the_kernels_sappkit_prices(backend, attention):
    config = read_megatron(["--num-layers", "2", "--attention-backend", backend, "--cp-comm-type", "allgather",
                            "--tp-comm-overlap"], world_size=1)
    assert (config.attention, config.strategy.cp_kind, config.strategy.tp_comm_overlap) == (attention, "allgather",
                                                                                          True)
    assert (read_megatron(["--num-layers", "2"], world_size=1).attention,
            read_megatron(["--num-layers", "2"], world_size=1).strategy.cp_kind) == (None, "ring")


@pytest.mark.parametrize("settings, fused", [
    ({}, False), ({"compile": {"enable": True}}, True), ({"compile": {"enable": True, "components": ["loss"]}}, False),
    ({"compile": {"enable": False, "components": ["model"]}}, False), ({"training": {"compile": True}}, True),
], ids=["default", "enable", "loss-only", "disabled", "older-training-key"])
def test_torchtitan_prices_an_uncompiled_model_as_eager_elementwise_ops(settings, fused):
    config = read_torchtitan({"training": {"local_batch_size": 8}, **settings} if "training" not in settings
                             else settings, num_layers=4)
    assert config.fused_elementwise is fused
    assert config.kernels == (None if fused else KernelConfig(attention="flash", fused_elementwise=False))


def test_torchtitan_refuses_compile_components_that_are_not_names():
    with pytest.raises(InputError) as error:
        read_torchtitan({"compile": {"enable": True, "components": "model"}}, num_layers=4)
    assert str(error.value) == "torchtitan config: compile.components must be a list of names; got 'model'"


@pytest.mark.parametrize("policy, stages, reshard", [
    ("default", 1, True), ("default", 2, False), ("always", 2, True), ("never", 1, False)])
def test_torchtitan_reads_fsdp_resharding_as_its_parallelize_applies_it(policy, stages, reshard):
    # torchtitan's "default" reshards after the forward unless a pipeline runs (parallelize.py: not pp_enabled)
    settings = {"parallelism": {"pipeline_parallel_degree": stages, "fsdp_reshard_after_forward": policy,
                                "data_parallel_shard_degree": 4, "tensor_parallel_degree": 2,
                                "enable_async_tensor_parallel": True},
                "training": {"local_batch_size": 8}}
    strategy = read_torchtitan(settings, num_layers=4).strategy
    assert (strategy.zero, strategy.reshard_after_forward, strategy.tp_comm_overlap) == (3, reshard, True)
    assert read_torchtitan({"training": {"local_batch_size": 8}}, num_layers=4).strategy.tp_comm_overlap is False
    with pytest.raises(InputError) as error:
        read_torchtitan({"parallelism": {"fsdp_reshard_after_forward": "sometimes"}}, num_layers=4)
    assert str(error.value) == ("torchtitan config: parallelism.fsdp_reshard_after_forward must be 'default', "
                                "'always' or 'never'; got 'sometimes'")


def test_torchtitan_export_writes_resharding_and_async_tp_and_reads_them_back(tmp_path):
    rows = [dict(kind="block", role="body", count=4, param_mb=100, option="none", forward_time=1, backward_time=2,
                 activation_mb=5)]
    plan = plan_from_offsets(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=10_000)
    for reshard, overlap in ((False, True), (True, False)):
        strategy = Strategy(tensor_parallel=2, pipeline_parallel=2, data_parallel=4, zero=3,
                            reshard_after_forward=reshard, tp_comm_overlap=overlap)
        path = tmp_path / f"{reshard}-{overlap}.toml"
        path.write_text(export_config(plan, trainer="torchtitan", strategy=strategy).text)
        back = read_trainer_config(path, world_size=16).strategy
        assert (back.reshard_after_forward, back.tp_comm_overlap) == (reshard, overlap)


def test_torchtitans_own_split_is_reproduced():
    assert split_layers(2, 3, input_weight=2, output_weight=2) == [2, 1]  # its docstring's example
    assert split_layers(4, 8) == [2, 3, 2, 1]
    assert split_layers(1, 5) == [5]
    config = read_torchtitan({"parallelism": {"pipeline_parallel_degree": 2,
                                              "pipeline_parallel_schedule": "Interleaved1F1B",
                                              "pipeline_parallel_layers_per_stage": 3},
                              "training": {"local_batch_size": 8}}, num_layers=10)
    # ceil((10 + 1 + 1) / 3) = 4 stages, 2 per rank: 12 effective layers 3 a stage, less 1 on the ends
    assert config.layer_counts == ((2, 3), (3, 2)) and config.strategy.virtual_stages == 2
    # the release's default is selective with option "2": every 2nd block a rank builds, over its two parts
    # (rank 0 builds layers 0 1 then 5 6 7, rank 1 layers 2 3 4 then 8 9)
    assert config.options == ("none", "full", "none", "full", "none", "none", "full", "none", "full", "none")
    with pytest.raises(InputError) as caught:
        read_torchtitan({"parallelism": {"pipeline_parallel_degree": 2}})
    assert str(caught.value) == ("torchtitan config: module_fqns_per_model_part is not set, so torchtitan splits "
                                 "the model's layers itself: give num_layers (or the layer table) to read it")


def test_a_python_recipe_is_read_without_running_it():
    settings = python_settings("""
from torchtitan.config import ParallelismConfig
def recipe():
    config = base()
    config.parallelism = ParallelismConfig(pipeline_parallel_degree=2, num_pp_microbatches=4,
                                           module_fqns_per_model_part=[["tok_embeddings", "layers.0"],
                                                                       ["layers.1", "norm", "output"]])
    config.training.num_tokens_per_microbatch_per_dp_rank = 8192
    config.training.max_context_length = 4096
    config.activation_checkpoint = None
    os.system("not run")
    return config
""")
    config = read_torchtitan(settings)
    assert (config.micro_batches, config.strategy.micro_batch_size, config.options) == (4, 2, ("none", "none"))
    with pytest.raises(InputError) as caught:
        python_settings("config.parallelism.pipeline_parallel_degree = int('2')")
    assert str(caught.value) == ("torchtitan config: parallelism.pipeline_parallel_degree is set to an expression "
                                 "sappkit does not evaluate (int('2')); write it as a literal")


def test_torchtitans_data_parallel_leftover_needs_the_world_size():
    settings = {"parallelism": {"pipeline_parallel_degree": 2, "tensor_parallel_degree": 4,
                                "module_fqns_per_model_part": [["layers.0"], ["layers.1"]]},
                "training": {"local_batch_size": 4}}
    assert read_torchtitan(settings, world_size=64).strategy.data_parallel == 8
    alone = read_torchtitan(settings)
    assert alone.strategy.data_parallel == 1 and alone.notes[0].startswith("data_parallel_shard_degree = -1")


def test_mindformers_lists_are_read_as_mindformers_applies_them():
    document = {"parallel_config": {"pipeline_stage": 2, "micro_batch_num": 4},
                "parallel": {"pipeline_config": {"pipeline_interleave": True, "pipeline_scheduler": "1f1b"}},
                "model": {"model_config": {"num_hidden_layers": 8, "pp_interleave_num": 2}},
                "recompute_config": {"recompute": [3, True],  # per stage, dealt over the chunks one layer a turn
                                     "select_recompute": {"feed_forward\\.mul": [[2, 2], [2, 2]],
                                                          "feed_forward\\.w1": [[1, 0], [0, 0]]}}}
    config = read_mindformers(document)
    # stage 0: 3 full dealt chunk 0, chunk 1, chunk 0 -> (2, 1); stage 1: every layer
    assert config.options == ("full", "full", "full", "full", "full", "selective", "full", "full")
    assert config.notes == ("recompute_config.select_recompute gives its operator patterns different lists: "
                            "sappkit prices the largest per cell",)
    with pytest.raises(InputError) as caught:
        read_mindformers({**document, "parallel": {"pipeline_config": {"pipeline_scheduler": "gpipe"}}})
    assert str(caught.value) == ("MindFormers config: parallel.pipeline_config.pipeline_scheduler 'gpipe' is not "
                                 "one MindFormers runs (1f1b, seqpipe, seqvpp, zero_bubble_v)")


def test_a_mindformers_list_of_the_wrong_shape_is_refused_by_its_key():
    # two stages, one chunk: [0] is neither 2 per-stage counts nor one list of 2 (the fuzz's example)
    document = {"parallel_config": {"pipeline_stage": 2},
                "model": {"model_config": {"num_layers": 8}},
                "recompute_config": {"recompute": True, "select_recompute": [0]}}
    with pytest.raises(InputError) as caught:
        read_mindformers(document)
    assert str(caught.value) == ("MindFormers config: recompute_config.select_recompute must be a bool, a list of 2 "
                                 "counts or 1 such lists; got [0]")
    document["recompute_config"]["select_recompute"] = [[1, 0]]  # one chunk's list of 2 is read
    assert read_mindformers(document).options == ("full",) * 8


def test_the_trainer_is_known_by_the_file(tmp_path):
    yaml_path = tmp_path / "train.yaml"
    yaml_path.write_text(yaml.safe_dump({"accelerator": {"pp_size": 2, "tp_size": 4},
                                         "activation_checkpoint": {"mode": "full", "layers": {"0-1": "off"}}}))
    rows = [dict(kind="block", role="body", count=4, param_mb=1, option=o, forward_time=1, backward_time=b,
                 activation_mb=1) for o, b in (("none", 2), ("full", 3))]
    config = read_trainer_config(yaml_path, layers=pd.DataFrame(rows), memory_mb=100, micro_batches=4)
    assert config.trainer == "hyperparallel" and config.options == ("none", "none", "full", "full")
    assert config.findings[0].name == "layer_plan_ignored"
    with pytest.raises(InputError) as caught:
        read_trainer_config(tmp_path / "run.json")
    assert str(caught.value) == (f"{tmp_path / 'run.json'}: give trainer= for a config named like this (sappkit "
                                 "reads .sh Megatron-LM .toml/.py torchtitan, .yaml MindFormers or HyperParallel)")


def test_what_an_export_cannot_say_is_refused():
    strategy = Strategy(pipeline_parallel=2)
    with pytest.raises(InputError) as caught:
        export_config(strategy, "torchtitan")
    assert str(caught.value) == ("a strategy alone exports to megatron (its arguments split the layers evenly); "
                                 "torchtitan needs the plan's stages: export a plan (sappkit.balance) with strategy=")
    assert export_config(strategy, "megatron").text == ("--pipeline-model-parallel-size 2 \\\n--micro-batch-size 1 "
                                                        "\\\n--use-distributed-optimizer \\\n--bf16")
    with pytest.raises(InputError) as caught:
        export_config(strategy, "megatron", form="python")
    assert str(caught.value) == ("form must be 'toml' or 'python', for trainer 'torchtitan' only; got "
                                 "form='python' with trainer 'megatron'")
