"""Plans as torchtitan configs: model parts in PyTorch's stage order, the names each version uses, checkpointing,
notes."""

import re

import pandas as pd
import pytest

from sappkit import InputError, TorchtitanConfig, balance, plan_from_offsets, torchtitan_config

ROWS = [dict(kind="block", role="body", count=8, param_mb=100, option=option, forward_time=1.0,
             backward_time=backward, activation_mb=activation)
        for option, backward, activation in (("none", 2.0, 40.0), ("full", 3.0, 4.0))]
TABLE = pd.DataFrame(ROWS)


def parts(config):
    return config.settings["parallelism"]["module_fqns_per_model_part"]


@pytest.mark.parametrize("schedule, name", [("interleaved", "Interleaved1F1B"), ("zbv", "ZBVZeroBubble"),
                                            ("zb_interleaved", "InterleavedZeroBubble"), ("looped_bfs", "LoopedBFS"),
                                            ("dualpipev_split", "DualPipeV")])
def test_model_parts_follow_the_plans_cells_in_model_order(schedule, name):
    plan = balance(TABLE, stages=2, micro_batches=4, chunks=2, schedule=schedule, memory_mb=2000)
    config = torchtitan_config(plan, microbatch_size=2)
    per_cell = plan.assignment.groupby(["chunk", "stage"], sort=False)["layers"].sum()
    found = parts(config)
    assert [len(part) for part in found] == [per_cell[cell] + (cell == (0, 0)) + 2 * (cell == plan.setup.cells[-1])
                                             for cell in plan.setup.cells]
    assert [m for part in found for m in part] == ["tok_embeddings", *(f"layers.{i}" for i in range(8)), "norm",
                                                   "output"]
    assert config.settings["parallelism"] | {"module_fqns_per_model_part": None} == {
        "pipeline_parallel_degree": 2, "pipeline_parallel_schedule": name, "pipeline_parallel_microbatch_size": 2,
        "module_fqns_per_model_part": None}
    assert config.settings["training"] == {"local_batch_size": 8}  # 4 micro-batches of 2 samples


def test_one_recompute_option_everywhere_is_torchtitans_mode_and_the_toml_reads_back():
    plan = plan_from_offsets(TABLE, stages=2, micro_batches=2, memory_mb=2000, recompute=[4, 4])
    config = torchtitan_config(plan, head_modules=("embed",), layer_module="blocks.{}", tail_modules=("head",))
    assert config.settings["activation_checkpoint"] == {"mode": "full"}
    assert config.notes[-1] == "activation checkpointing: every block runs full"
    assert config.to_toml() == "\n".join([
        "[parallelism]", "pipeline_parallel_degree = 2", 'pipeline_parallel_schedule = "1F1B"',
        "pipeline_parallel_microbatch_size = 1", "module_fqns_per_model_part = [",
        '  ["embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3"],',
        '  ["blocks.4", "blocks.5", "blocks.6", "blocks.7", "head"],', "]", "",
        "[training]", "local_batch_size = 2", "",
        "[activation_checkpoint]", 'mode = "full"'])
    assert config.to_python() == "\n".join([
        "config.parallelism.pipeline_parallel_degree = 2", 'config.parallelism.pipeline_parallel_schedule = "1F1B"',
        'config.parallelism.module_fqns_per_model_part = [["embed", "blocks.0", "blocks.1", "blocks.2", '
        '"blocks.3"], ["blocks.4", "blocks.5", "blocks.6", "blocks.7", "head"]]',
        "config.parallelism.num_pp_microbatches = 2", "config.activation_checkpoint = FullAC.Config()"])


def test_every_nth_block_is_the_releases_layer_checkpointing():
    plan = plan_from_offsets(TABLE, stages=2, micro_batches=2, memory_mb=2000, recompute=[2, 2])
    config = torchtitan_config(plan)
    assert config.settings["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
    assert config.notes[-1] == ("activation checkpointing: the blocks at positions 2, 4, ... of those a rank builds, "
                                "counted across its model parts, fully checkpointed (the release's "
                                "selective_ac_option; the main branch has no such policy)")
    assert "activation_checkpoint" not in config.to_python()


def test_a_per_layer_choice_torchtitan_cannot_run_is_said_and_left_unset():
    plan = plan_from_offsets(TABLE, stages=2, micro_batches=2, memory_mb=2000, recompute=[3, 1])
    config = torchtitan_config(plan)
    assert config.settings["activation_checkpoint"] == {}
    assert "[activation_checkpoint]" not in config.to_toml()
    assert config.notes[-1] == (
        "activation checkpointing not set: torchtitan runs one mode on every block, or fully checkpoints every N-th "
        "block a rank builds, and this plan runs ['full', 'none'] otherwise; plan with balance(..., "
        "trainer='torchtitan') or set it per block in the model code")


def test_where_torchtitan_runs_another_schedule_the_notes_say_so():
    dual = torchtitan_config(balance(TABLE, stages=2, micro_batches=4, chunks=2, schedule="dualpipev",
                                     memory_mb=2000))
    assert dual.settings["parallelism"]["pipeline_parallel_schedule"] == "DualPipeV"
    assert dual.notes[0] == ("torchtitan's DualPipeV splits the backward into input and weight passes (sappkit's "
                             "'dualpipev_split'); simulate that schedule to see what it runs")
    less = torchtitan_config(balance(TABLE, stages=2, micro_batches=4, chunks=2, less_memory=True, memory_mb=2000))
    assert less.notes[0].startswith("torchtitan's Interleaved1F1B has no less-memory variant")
    tight = torchtitan_config(balance(TABLE, stages=2, micro_batches=2, memory_mb=10))
    assert tight.notes[0] == "the plan does not fit memory_mb=10"


@pytest.mark.parametrize("make, message", [
    (lambda plan: torchtitan_config("plan"), "expected a Plan (sappkit.balance) or a RecomputeChoice "
                                             "(sappkit.choose_recompute); got str"),
    (lambda plan: torchtitan_config(plan, microbatch_size=0), "microbatch_size must be an int >= 1; got 0"),
    (lambda plan: torchtitan_config(plan, microbatch_size=2**70),
     "microbatch_size must be an int <= 1048576 (sappkit.limits.MAX_MICROBATCH_SIZE); got 1180591620717411303424"),
    (lambda plan: torchtitan_config(plan, head_modules=None),
     "head_modules must be a list of module names (strings); got None"),
    (lambda plan: torchtitan_config(plan, head_modules="tok_embeddings"),
     "head_modules must be a list of module names (strings); got 'tok_embeddings'"),
    (lambda plan: torchtitan_config(plan, tail_modules=("norm", "")),
     "tail_modules[1] must be a non-empty module name; got ''"),
    (lambda plan: torchtitan_config(plan, layer_module=7),
     "layer_module must be a string with one '{}' where the layer index goes; got 7"),
    *[(lambda plan, pattern=pattern: torchtitan_config(plan, layer_module=pattern),
       "layer_module must be a string with one '{}' where the layer index goes (write other braces as '{{' and "
       f"'}}}}'); got {pattern!r}") for pattern in ("layers", "{}{}", "layers.{0}", "layers.{", "layers.{!r}")],
])
def test_bad_input_is_refused(make, message):
    plan = balance(TABLE, stages=2, micro_batches=2, memory_mb=2000)
    with pytest.raises(InputError, match=f"^{re.escape(message)}$"):
        make(plan)


def test_seqpipe_has_no_torchtitan_schedule():
    plan = balance(TABLE, stages=2, micro_batches=2, memory_mb=2000, schedule="seqpipe")
    with pytest.raises(InputError) as err:
        torchtitan_config(plan)
    assert str(err.value) == ("torchtitan runs no 'seqpipe' schedule; plan for one of '1f1b', 'interleaved', "
                              "'gpipe', 'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev', 'dualpipev_split'")
    assert isinstance(torchtitan_config(balance(TABLE, stages=2, micro_batches=2, memory_mb=2000)), TorchtitanConfig)


def test_the_toml_of_a_long_model_fits_100_columns_and_reads_back(llama):
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    config = torchtitan_config(balance(llama, stages=8, micro_batches=16, memory_mb=60000))
    text = config.to_toml()
    assert max(map(len, text.splitlines())) <= 100 and len(text.splitlines()) < 40
    assert tomllib.loads(text)["parallelism"] == config.settings["parallelism"]
