"""``sappkit search``: the fastest strategies in 100 columns with units, for people, CSV or JSON; a config.json
model; a Dask scheduler that does not answer is refused in one line."""

import json
import shlex
import sys

import numpy as np
import pytest

import sappkit
from sappkit import KernelConfig, read_model_config, read_trainer_config, search_strategies
from sappkit.cli import main

LLAMA = dict(model_type="llama", num_hidden_layers=8, hidden_size=1024, num_attention_heads=16,
             num_key_value_heads=4, intermediate_size=4096, vocab_size=32000, max_position_embeddings=2048,
             hidden_act="silu")


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    return path


def _search(config, *extra):
    return main(["search", "--model", str(config), "--devices", "16", "--global-batch", "64", "--device", "a100-80g",
                 "--memory", "2000", "--top", "5", "--balance-top", "2", *extra])


def test_cli_search_prints_the_fastest_strategies_with_units_and_the_limits(config, capsys):
    assert _search(config) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "config.json on 16 x a100-80g (dgx-a100), global batch 64 x 2,048 tokens, memory 2,000 MB"
    assert out[-1].startswith("searched in ") and out[-1].endswith(" s")
    assert out[1] == "assumptions: bf16, attention kernel 'flash', dims narrowed: none (every value a trainer accepts)"
    assert out[2].split() == ["strategy", "step", "(ms)", "tokens/s/dev", "TFLOP/s/dev", "MFU", "peak", "(MB)"]
    assert len([line for line in out[3:] if line.startswith("t")]) == 5
    assert out[8].endswith("rejected") and out[9].startswith("best: t")
    assert sum(line.startswith("- ") for line in out) == 4
    assert all(len(line) <= 100 for line in out)


def test_cli_search_narrows_the_dims_and_sets_the_kernel_and_dtype_as_python_does(config, capsys):
    assert _search(config, "--dims", "t=2", "--dims", "zero=1", "--dims", "sp=false", "--dims", "cp_kind=ring",
                   "--attention", "flash", "--dtype", "fp16", "--format", "json") == 0
    shown = json.loads(capsys.readouterr().out)["strategies"]
    found = search_strategies(read_model_config(config), devices=16, global_batch=64,
                              device="a100-80g", memory_mb=2000, balance_top=2, progress=False,
                              dims={"tensor_parallel": [2], "zero": [1], "sequence_parallel": [False],
                                    "cp_kind": ["ring"]},
                              kernels=KernelConfig(attention="flash"), dtype="fp16")
    expected = found.frame.head(5)
    assert [row["label"] for row in shown] == expected["label"].tolist()
    assert [row["peak_memory_mb"] for row in shown] == pytest.approx(expected["peak_memory_mb"].tolist())
    assert {(row["tensor_parallel"], row["zero"], row["sequence_parallel"]) for row in shown} == {(2, 1, False)}
    assert all(row["label"].endswith(" fp16") for row in shown)
    # the kernel is not ignored: the paper's attention keeps the softmax output, flash its log-sum-exp only
    assert _search(config, "--dims", "t=2", "--dims", "zero=1", "--dims", "sp=false", "--dims", "cp_kind=ring",
                   "--attention", "paper", "--dtype", "fp16", "--format", "json") == 0
    paper = {row["label"]: row["peak_memory_mb"] for row in json.loads(capsys.readouterr().out)["strategies"]}
    both = [(paper[row["label"]], row["peak_memory_mb"]) for row in shown if row["label"] in paper]
    assert any(by_paper > by_flash for by_paper, by_flash in both)
    assert _search(config, "--dims", "tensor_parallel=2", "--dims", "b=1,2") == 0
    assert "assumptions: bf16, attention kernel 'flash', dims narrowed: tensor_parallel=2 b=1,2" in (
        capsys.readouterr().out)


@pytest.mark.parametrize("dims, message", [
    ("t", "--dims takes NAME=V1,V2 (e.g. t=4,8); got 't'"),
    ("x=1", "--dims 'x=1': unknown dimension 'x'; expected one of b, cp, dp, ep, etp, p, reshard, sp, t, "
            "tp_overlap, v (or the full names)"),
    ("reshard=sometimes", "--dims 'reshard=sometimes': 'sometimes' is not true or false"),
    ("t=two", "--dims 't=two': 'two' is not a whole number"),
    ("sp=maybe", "--dims 'sp=maybe': 'maybe' is not true or false"),
])
def test_cli_search_refuses_bad_dims_in_one_line(config, capsys, dims, message):
    assert _search(config, "--dims", dims) == 2
    assert capsys.readouterr().err == f"sappkit search: {message}\n"


def test_cli_search_refuses_a_dimension_named_twice(config, capsys):
    assert _search(config, "--dims", "t=1", "--dims", "tensor_parallel=2") == 2
    assert capsys.readouterr().err == ("sappkit search: --dims names 'tensor_parallel' twice; give all its values "
                                       "at once, e.g. tensor_parallel=1,2\n")


def test_cli_search_that_ranks_nothing_says_which_rules_and_exits_1(config, capsys):
    """15 devices: every data-parallel degree is odd, so no whole micro-batch divides the batch of 64."""
    assert main(["search", "--model", str(config), "--devices", "15", "--global-batch", "64", "--device",
                 "a100-80g", "--memory", "2000", "--balance-top", "2"]) == 1
    text = " ".join(capsys.readouterr().out.split())
    # a strategy a layout rule rejects is laid out once, not once per schedule and chunk count
    assert ("0 balanced, 0 evaluated, 0 infeasible, 0 pruned time, 0 pruned memory, 75 rejected no strategy is "
            "accepted: the trainers' rules rejected all 75: batch 75 (e.g. data_parallel * micro_batch_size = "
            "15 * 1 = 15 does not divide global_batch=64)") in text


def test_cli_search_writes_json_and_csv(config, capsys):
    assert _search(config, "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["best"] == document["strategies"][0]["label"] and len(document["strategies"]) == 5
    assert sum(document["statuses"].values()) == document["searched"] and len(document["limits"]) == 4
    assert _search(config, "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tensor_parallel,pipeline_parallel,virtual_stages") and len(lines) == 6


@pytest.mark.parametrize("extra, message", [
    (["--scheduler", "tcp://127.0.0.1:9"], "sappkit search: --scheduler: no Dask scheduler answers at "
                                           "'tcp://127.0.0.1:9'"),
    (["--top", "0"], "sappkit search: --top must be an int >= 1; got 0"),
])
def test_cli_search_refuses_in_one_line(config, capsys, extra, message):
    if "--scheduler" in extra:
        pytest.importorskip("distributed")
    assert _search(config, *extra) == 2
    assert capsys.readouterr().err.startswith(message)


def test_cli_search_refuses_a_model_it_cannot_read(capsys):
    assert main(["search", "--model", "llama9", "--devices", "8", "--global-batch", "8"]) == 2
    assert capsys.readouterr().err == ("sappkit search: --model must be a preset (gpt3-175b, megatron-22b, "
                                       "megatron-530b, megatron-1t, llama2-70b, llama3-8b, llama3-70b, llama3-405b, "
                                       "mixtral-8x7b, deepseek-v3) or a config.json file; got 'llama9'\n")


def test_cli_search_names_the_extra_a_scheduler_needs(config, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as without the [cluster] extra
    assert _search(config, "--scheduler", "tcp://127.0.0.1:9") == 2
    assert capsys.readouterr().err == ("sappkit search: --scheduler needs Dask's distributed scheduler: pip install "
                                       "'sappkit[cluster]'\n")


#: A search whose best runs a pipeline (the memory limit forces one), quick enough for the fast lane.
PIPELINED = ["search", "--model", "llama3-8b", "--devices", "16", "--global-batch", "32", "--seq-length", "2048",
             "--memory", "10000", "--top", "3", "--balance-top", "2"]


@pytest.fixture(scope="module")
def pipelined():
    """The library's answer to PIPELINED with Megatron-LM's schedules (what --export megatron searches)."""
    return search_strategies("llama3-8b", devices=16, global_batch=32, seq_length=2048, memory_mb=10000,
                             balance_top=2, schedules=["1f1b", "interleaved"], progress=False)


def _exported(text: str, trainer: str) -> str:
    return text.split(f"{trainer} config (")[1].split("\n", 1)[1].split("\nnote:")[0].split("\nsearched in")[0]


def test_cli_search_exports_the_best_to_megatron_and_reads_back_to_its_plan(capsys, pipelined):
    assert main([*PIPELINED, "--export", "megatron"]) == 0
    text = capsys.readouterr().out
    best, strategy, plan = pipelined.best, pipelined.strategy(), pipelined.plan(trainer="megatron")
    assert f"the best strategy {best['label']}, its plan within megatron's grammar:" in " ".join(text.split())
    assert "trainer grammar: megatron (" in text and strategy.pipeline_parallel > 1
    back = read_trainer_config(shlex.split(_exported(text, "megatron").replace("\\\n", " ")), world_size=16,
                               layers=pipelined.layers(), memory_mb=10000)
    degrees = ("tensor_parallel", "pipeline_parallel", "virtual_stages", "data_parallel", "context_parallel",
               "expert_parallel", "micro_batch_size", "schedule")
    assert [getattr(back.strategy, name) for name in degrees] == [getattr(strategy, name) for name in degrees]
    assert back.global_batch == 32 and np.array_equal(back.plan.counts, plan.counts)
    assert back.micro_batches == plan.setup.micro_batches
    assert all(len(line) <= 100 for line in text.splitlines())


def test_cli_search_exports_the_best_to_torchtitan_and_reads_back_to_its_plan(capsys, tmp_path):
    assert main([*PIPELINED, "--schedules", "interleaved", "--export", "torchtitan", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    found = search_strategies("llama3-8b", devices=16, global_batch=32, seq_length=2048, memory_mb=10000,
                              balance_top=2, schedules=["interleaved"], progress=False)
    assert document["best"] == found.best["label"] and document["export"]["form"] == "toml"
    assert document["constraint_cost"]["trainer"] == "torchtitan"
    path = tmp_path / "job.toml"
    path.write_text(document["export"]["text"])
    back = read_trainer_config(path, world_size=16, layers=found.layers(), memory_mb=10000)
    strategy = found.strategy()
    assert (back.strategy.pipeline_parallel, back.strategy.virtual_stages, back.strategy.schedule,
            back.strategy.tensor_parallel, back.strategy.context_parallel, back.strategy.micro_batch_size) == (
        strategy.pipeline_parallel, strategy.virtual_stages, strategy.schedule, strategy.tensor_parallel,
        strategy.context_parallel, strategy.micro_batch_size)
    assert back.strategy.data_parallel == strategy.data_parallel  # local_batch_size = m b, global = dp m b
    assert back.strategy.data_parallel * back.micro_batches * back.strategy.micro_batch_size == 32
    assert np.array_equal(back.plan.counts, found.plan(trainer="torchtitan").counts)


def test_cli_search_exports_a_best_without_a_pipeline_as_megatrons_degrees(capsys):
    assert main([*PIPELINED, "--memory", "30000", "--export", "megatron"]) == 0
    text = capsys.readouterr().out
    assert ("the best strategy t2 p1 v1 dp8 cp1 ep1 b2 1f1b zero2 tp-overlap, every layer recomputing 'none':\n"
            "megatron config (arguments):\n--pipeline-model-parallel-size 1 \\\n--tensor-model-parallel-size 2 \\\n"
            "--micro-batch-size 2 \\\n--global-batch-size 32 \\\n") in text
    assert "--tp-comm-overlap" in text  # the searched TP overlap, in Megatron-LM's words


@pytest.mark.parametrize("extra, message", [
    (["--memory", "30000", "--export", "torchtitan"],
     "sappkit search: --export torchtitan: the best strategy t2 p1 v1 dp8 cp1 ep1 b2 1f1b zero2 tp-overlap runs no "
     "pipeline "
     "(pipeline_parallel=1) and sappkit exports a strategy without a plan to megatron only; use --export megatron\n"),
    (["--schedules", "interleaved", "--export", "hyperparallel"],
     "sappkit search: --export hyperparallel: the best strategy t8 p2 v8 dp1 cp1 ep1 b1 interleaved zero0 tp-overlap: "
     "hyperparallel runs no 'interleaved' schedule; plan for one of '1f1b'\n"),
])
def test_cli_search_refuses_an_export_the_trainer_cannot_run(capsys, extra, message):
    assert main([*PIPELINED, *extra]) == 2
    assert capsys.readouterr().err == message


def test_cli_search_names_the_trainers_it_exports_to(capsys):
    assert main([*PIPELINED, "--export", "deepspeed"]) == 2  # a PATH only with --from-config
    assert capsys.readouterr().err == ("sappkit search: --export must be a trainer (megatron, torchtitan, mindformers, "
                                       "hyperparallel), or a PATH with --from-config; got 'deepspeed'\n")


def test_cli_search_prices_fp8_with_the_recipe_the_device_runs(config, capsys):
    assert _search(config, "--device", "b200", "--dtype", "fp8", "--fp8-recipe", "mxfp8", "--dims", "t=2",
                   "--dims", "zero=1", "--format", "json") == 0
    shown = json.loads(capsys.readouterr().out)["strategies"]
    assert shown and all(row["label"].endswith(" fp8-mxfp8") for row in shown)
    assert _search(config, "--device", "b200", "--dtype", "fp8", "--dims", "t=2", "--dims", "zero=1") == 0
    assert "assumptions: fp8 (delayed scaling), attention kernel 'flash'" in capsys.readouterr().out


#: A Megatron-LM launch script for the 8-layer model on 16 devices (p2, dp8), bf16.
SCRIPT = ("torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
          "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 2 --micro-batch-size 1 "
          "--global-batch-size 64 --use-distributed-optimizer --bf16 --sequence-parallel\n")
NARROW = ("--dims", "p=2", "--dims", "zero=1", "--dims", "cp=1", "--dims", "b=1")


def test_cli_search_from_config_prints_the_baseline_against_the_best_and_exports_it(config, tmp_path, capsys):
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    exported = tmp_path / "best.sh"
    assert main(["search", "--model", str(config), "--from-config", str(script), "--device", "a100-80g",
                 "--memory", "2000", "--top", "3", "--balance-top", "2", "--export", str(exported), *NARROW]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines)
    at = lines.index("your config (a) against the best (b):")
    assert lines[at + 1].startswith("a: t1 p2 v1 dp8 cp1 ep1 b1 1f1b zero1: ") and lines[at + 2].startswith("b: ")
    assert any(line.split()[:1] == ["bubble_ms"] for line in lines[at:]) and f"wrote {exported}" in lines
    best = next(line for line in lines if line.startswith("best: "))[len("best: "):]
    read = read_trainer_config(exported, world_size=16).strategy
    labels = {short: value for short, value in
              (("t", read.tensor_parallel), ("p", read.pipeline_parallel), ("v", read.virtual_stages),
               ("dp", read.data_parallel), ("cp", read.context_parallel), ("b", read.micro_batch_size))}
    assert all(f"{short}{value}" in best.split() for short, value in labels.items()), (best, read)
    assert f"zero{read.zero}" in best.split()


def test_cli_search_compares_a_strategy_with_the_best(config, capsys):
    assert _search(config, "--compare", "t2 p2", *NARROW) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("--compare (a) against the best (b):")
    assert lines[at + 1].startswith("a: t2 p2 v1 dp4 cp1 ep1 b1 1f1b zero1: ")
    assert all(len(line) <= 100 for line in lines)


def test_cli_search_compares_at_the_recompute_it_is_given(config, capsys):
    assert _search(config, "--compare", "t2 p2", "--compare-recompute", "full", *NARROW) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("--compare (a) against the best (b):")
    changes = " ".join(lines[at + 4:at + 6])
    assert "recompute full ->" in changes, lines[at:at + 6]
    assert _search(config, "--compare-recompute", "full", *NARROW) == 2
    assert capsys.readouterr().err == ("sappkit search: --compare-recompute prices --compare's strategy; got "
                                       "--compare-recompute 'full' without --compare\n")


def test_cli_search_export_path_needs_a_config(config, capsys):
    assert _search(config, "--export", "best.sh", *NARROW) == 2
    assert capsys.readouterr().err == ("sappkit search: --export must be a trainer (megatron, torchtitan, mindformers, "
                                       "hyperparallel), or a PATH with --from-config; got 'best.sh'\n")


TOML = """[parallelism]
data_parallel_shard_degree = 8
tensor_parallel_degree = 1
pipeline_parallel_degree = 2
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_microbatch_size = 1

[training]
local_batch_size = 8
seq_len = 2048
"""


def test_cli_search_from_a_torchtitan_config_exports_one_that_reads_back_to_the_best(config, tmp_path, capsys):
    job = tmp_path / "job.toml"
    job.write_text(TOML)
    exported = tmp_path / "best.toml"
    assert main(["search", "--model", str(config), "--from-config", str(job), "--device", "a100-80g", "--memory",
                 "2000", "--top", "3", "--balance-top", "2", "--export", str(exported), "--dims", "p=2",
                 "--dims", "cp=1", "--dims", "b=1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "dims narrowed: p=2 cp=1 b=1" in " ".join(" ".join(lines[1:3]).split())
    assert all(len(line) <= 100 for line in lines)
    assert lines[lines.index("your config (a) against the best (b):") + 1].startswith(
        "a: t1 p2 v1 dp8 cp1 ep1 b1 1f1b zero3 no-reshard: ")  # torchtitan's default: no resharding under PP
    best = next(line for line in lines if line.startswith("best: "))[len("best: "):]
    depth = sappkit.estimate_layers(read_model_config(config), options=("none",))
    assert read_trainer_config(exported, layers=depth).strategy.label == best  # ZeRO 3, resharding, async TP kept
