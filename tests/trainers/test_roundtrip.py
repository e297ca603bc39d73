"""Every export reads back through its importer to the same plan, on every schedule the trainer runs.

Plans are built independently of the exporters (``plan_from_offsets``: cells
and per-cell recompute counts), exported, written where the trainer reads a
file, read back with ``read_trainer_config`` and priced: the placement
(layers per kind, option and cell) and the pipeline must be the original's.
"""

import numpy as np
import pytest
import yaml

from sappkit import Strategy, plan_from_offsets, read_trainer_config
from sappkit.layers import KernelConfig
from sappkit.trainers import export_config, hyperparallel_config, mindformers_config, torchtitan_config
from sappkit.trainers.megatron import megatron_args

from .tables import table

SEQ_PARAMS = dict(batch_size=1, num_heads=8, seq_length=1024, head_dim=64, hidden_size=512, vocab_size=1000,
                  model_parallel=1)


#: Cells [chunk][stage] per chunk count: uneven on purpose (first and last stages differ, chunks differ).
LAYOUTS = {1: [[5, 6, 7, 6]], 2: [[3, 4, 3, 2], [2, 3, 3, 4]], 3: [[2, 2, 2, 1], [2, 3, 2, 1], [2, 2, 2, 3]]}


def recompute(policy, layout):
    """Per-cell ``recompute`` and ``select_recompute`` counts for a policy (cells as in ``layout``)."""
    counts = np.array(layout)
    if policy == "selective":
        return {"recompute": 0, "select_recompute": counts.tolist()}
    full = {"none": 0 * counts, "full": counts, "block2": np.minimum(counts, 2)}.get(policy)
    if full is None:  # every 2nd block a rank builds, counted over its chunks in chunk order
        before = np.cumsum(counts, axis=0) - counts
        full = (before + counts) // 2 - before // 2
    return {"recompute": full.tolist() if len(layout) > 1 else full[0].tolist()}


def make_plan(schedule, chunks, policy, memory=10_000, micro_batches=8, seq_split=1):
    layout = LAYOUTS[chunks]
    total = int(np.sum(layout))
    base = total // (4 * chunks)
    offset = (np.array(layout) - base).tolist()
    lists = recompute(policy, layout)
    if chunks == 1:
        offset = offset[0]
        lists = {key: value[0] if isinstance(value, list) and isinstance(value[0], list) else value
                 for key, value in lists.items()}
    return plan_from_offsets(table(total), stages=4, micro_batches=micro_batches, memory_mb=memory, chunks=chunks,
                             schedule=schedule, offset=offset, seq_split=seq_split,
                             seq_params=SEQ_PARAMS if seq_split > 1 else None, **lists)


def same(original, back):
    assert back.setup.schedule == original.setup.schedule
    assert (back.setup.stages, back.setup.chunks, back.setup.micro_batches, back.setup.seq_split) == (
        original.setup.stages, original.setup.chunks, original.setup.micro_batches, original.setup.seq_split)
    assert np.array_equal(back.counts, original.counts)
    assert back.objective == pytest.approx(original.objective)


MEGATRON = [(schedule, chunks, policy) for schedule, chunks in (("1f1b", 1), ("interleaved", 2), ("interleaved", 3))
            for policy in ("none", "selective", "full", "block2")]


@pytest.mark.parametrize("schedule, chunks, policy", MEGATRON)
def test_megatron_arguments_read_back_to_the_plan(schedule, chunks, policy):
    plan = make_plan(schedule, chunks, policy)
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=chunks, data_parallel=2,
                        schedule=schedule)
    args = megatron_args(plan, strategy=strategy)
    assert not any(note.startswith("recompute not set") for note in args.notes)
    back = read_trainer_config(list(args.args), world_size=16, layers=table(int(np.sum(LAYOUTS[chunks]))),
                               memory_mb=10_000)
    assert back.strategy == strategy
    same(plan, back.plan)


@pytest.mark.parametrize("overlap, flag", [("moe_a2a_overlap", "--overlap-moe-expert-parallel-comm"),
                                           ("moe_shared_expert_overlap", "--moe-shared-expert-overlap")])
def test_megatron_moe_overlaps_are_written_and_read_back(overlap, flag):
    plan = make_plan("interleaved", 2, "none")
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=2, data_parallel=2, expert_parallel=2,
                        schedule="interleaved", **{overlap: True})
    args = list(megatron_args(plan, strategy=strategy).args)
    assert flag in args
    back = read_trainer_config(args, world_size=16, layers=table(24), memory_mb=10_000)
    assert back.strategy == strategy
    assert flag not in megatron_args(plan, strategy=Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=2,
                                                             data_parallel=2, schedule="interleaved")).args


@pytest.mark.parametrize("tp_overlap, cp_kind, attention, flags", [
    (True, "ring", "cudnn", ["--tp-comm-overlap", "--attention-backend", "fused"]),
    (False, "allgather", "fa2", ["--cp-comm-type", "allgather", "--attention-backend", "flash"]),
    (True, "a2a", "paper", ["--tp-comm-overlap", "--cp-comm-type", "a2a", "--attention-backend", "unfused"]),
    (False, "ring", None, []),
])
def test_megatron_tp_overlap_cp_kind_and_attention_are_written_and_read_back(tp_overlap, cp_kind, attention, flags):
    plan = make_plan("interleaved", 2, "none")
    strategy = Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=2, context_parallel=2,
                        schedule="interleaved", tp_comm_overlap=tp_overlap, cp_kind=cp_kind)
    args = list(megatron_args(plan, strategy=strategy, attention=attention).args)
    assert args[-len(flags) or len(args):] == flags
    back = read_trainer_config(args, world_size=16, layers=table(24), memory_mb=10_000)
    assert (back.strategy, back.attention) == (strategy, attention)
    assert back.kernels == (None if attention is None else KernelConfig(attention=attention))
    same(plan, back.plan)


@pytest.mark.parametrize("layout, flags", [
    ([[4, 7, 7, 6]], ["--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers", "6"]),
    ([[2, 3, 3, 4], [2, 3, 3, 4]], ["--num-virtual-stages-per-pipeline-rank", "2",
                                    "--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers",
                                    "8"]),
    ([[6, 6, 6, 6]], []),
])
def test_megatron_states_uneven_first_and_last_stages_with_their_own_flags(layout, flags):
    chunks = len(layout)
    schedule = "interleaved" if chunks > 1 else "1f1b"
    offset = (np.array(layout) - 24 // (4 * chunks)).tolist()
    plan = plan_from_offsets(table(24), stages=4, micro_batches=8, memory_mb=10_000, chunks=chunks,
                             schedule=schedule, offset=offset if chunks > 1 else offset[0])
    args = list(megatron_args(plan).args)
    assert args[4:4 + len(flags)] == flags and "--pipeline-model-parallel-layout" not in args
    same(plan, read_trainer_config(args, layers=table(24), memory_mb=10_000).plan)


def test_megatron_launch_script_reads_back_like_the_argument_list(tmp_path):
    plan = make_plan("interleaved", 2, "block2")
    args = megatron_args(plan, strategy=Strategy(tensor_parallel=2, pipeline_parallel=4, virtual_stages=2,
                                                 data_parallel=2, schedule="interleaved"))
    script = tmp_path / "pretrain.sh"
    script.write_text("#!/bin/bash\nGPUS_PER_NODE=8\nNNODES=2\nMODEL_ARGS=(\n" + args.shell().replace(" \\\n", "\n")
                      + "\n)\ntorchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES pretrain_gpt.py "
                        "${MODEL_ARGS[@]}\n")
    back = read_trainer_config(script, layers=table(24), memory_mb=10_000)
    assert back.strategy.data_parallel == 2
    same(plan, back.plan)


TORCHTITAN = [(schedule, chunks, policy) for schedule, chunks in (
    ("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("looped_bfs", 2), ("zb_interleaved", 2), ("zbv", 2),
    ("dualpipev_split", 2), ("interleaved", 3)) for policy in ("none", "selective", "full", "every2")]


@pytest.mark.parametrize("schedule, chunks, policy", TORCHTITAN)
@pytest.mark.parametrize("form", ["toml", "python"])
def test_torchtitan_configs_read_back_to_the_plan(schedule, chunks, policy, form, tmp_path):
    if form == "python" and policy == "every2":
        pytest.skip("torchtitan's main branch has no every-N-th-block policy (its Python form cannot state it)")
    plan = make_plan(schedule, chunks, policy, micro_batches=8)
    exported = export_config(plan, "torchtitan", form=form)
    assert not any(note.startswith("activation checkpointing not set") for note in exported.notes)
    path = tmp_path / ("job.toml" if form == "toml" else "recipe.py")
    path.write_text(exported.text if form == "toml" else
                    "def recipe():\n    config = base()\n" +
                    "".join(f"    {line}\n" for line in exported.text.splitlines()) + "    return config\n")
    back = read_trainer_config(path, layers=table(int(np.sum(LAYOUTS[chunks]))), memory_mb=10_000)
    same(plan, back.plan)


def test_torchtitans_dualpipev_is_read_as_the_split_backward_it_runs():
    plan = make_plan("dualpipev", 2, "full")
    config = torchtitan_config(plan)
    back = read_trainer_config(config.settings, trainer="torchtitan", layers=table(24), memory_mb=10_000)
    assert back.strategy.schedule == "dualpipev_split"
    assert np.array_equal(back.plan.counts, plan.counts)


MINDFORMERS = [("1f1b", 1, 1), ("interleaved", 2, 1), ("interleaved", 3, 1), ("seqpipe", 1, 2), ("seqpipe", 2, 2),
               ("zbv", 2, 1)]


@pytest.mark.parametrize("schedule, chunks, seq_split", MINDFORMERS)
@pytest.mark.parametrize("policy", ["none", "selective", "full", "block2"])
def test_mindformers_yaml_reads_back_to_the_plan(schedule, chunks, seq_split, policy, tmp_path):
    if seq_split > 1 and policy in ("full", "block2"):
        pytest.skip("SeqPipe drops full recompute")
    plan = make_plan(schedule, chunks, policy, seq_split=seq_split)
    path = tmp_path / "run.yaml"
    path.write_text(mindformers_config(plan).to_yaml())
    back = read_trainer_config(path)  # SeqPipe's model sizes are not in these sections: given to plan_for
    priced = back.plan_for(table(int(np.sum(LAYOUTS[chunks]))), memory_mb=10_000, seq_params=SEQ_PARAMS)
    same(plan, priced)
    scheduler = yaml.safe_load(path.read_text())["parallel"]["pipeline_config"]["pipeline_scheduler"]
    assert scheduler == {("1f1b", 1): "1f1b", ("interleaved", 2): "1f1b", ("interleaved", 3): "1f1b",
                         ("seqpipe", 1): "seqpipe", ("seqpipe", 2): "seqvpp", ("zbv", 2): "zero_bubble_v"}[
        (schedule, chunks)]


@pytest.mark.parametrize("policy", ["none", "selective", "full", "block2"])
def test_hyperparallel_layer_plans_read_back_to_the_plan(policy):
    layout = [[6, 6, 6, 6]]  # HyperParallel sets pp_size only: an even split
    plan = plan_from_offsets(table(24), stages=4, micro_batches=4, memory_mb=10_000,
                             **{key: value[0] if isinstance(value, list) and isinstance(value[0], list) else value
                                for key, value in recompute(policy, layout).items()})
    config = hyperparallel_config(plan)
    back = read_trainer_config(yaml.safe_load(config.to_yaml()), trainer="hyperparallel", layers=table(24),
                               memory_mb=10_000, micro_batches=4)
    same(plan, back.plan)
