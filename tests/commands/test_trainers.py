"""The trainers on the command line: balance --trainer --export, choose --export, check-config, layers --from-trace."""

import json

import pytest

from sappkit import read_trainer_config
from sappkit.cli import main

from ..bundled import DATA

LLAMA = str(DATA / "llama2_70b.json")
BALANCE = ["balance", LLAMA, "--stages", "8", "--micro-batches", "16", "--memory", "60000"]


def test_balance_plans_within_megatrons_grammar_and_exports_the_arguments(capsys, tmp_path):
    assert main([*BALANCE, "--trainer", "megatron", "--export", "megatron"]) == 0
    text = capsys.readouterr().out
    assert "trainer grammar: megatron (" in text and "vs the unconstrained plan" in " ".join(text.split())
    assert "MindFormers lists" not in text  # a Megatron-LM user is shown Megatron-LM's words only
    arguments = text.split("megatron config (arguments):\n")[1].split("\nnote:")[0]
    script = tmp_path / "run.sh"
    script.write_text(arguments + "\n")
    config = read_trainer_config(script, layers=__import__("sappkit").read_layers_json(LLAMA), memory_mb=60000)
    assert config.plan.fits and config.strategy.pipeline_parallel == 8
    assert all(len(line) <= 100 for line in text.splitlines() if not line.startswith("--"))


@pytest.mark.parametrize("objective, what", [
    ("sapp", "of SAPP's proxy"),
    ("step", "of the simulated step")])
def test_the_cost_of_a_trainers_grammar_names_the_objective_it_is_counted_in(capsys, objective, what):
    """Issue 39: 'costs 2.86 ms (2.3%)' was SAPP's per-micro-batch proxy, read as the step's."""
    from sappkit import balance, read_layers_json
    from sappkit.layers.units import format_time

    plan = balance(read_layers_json(LLAMA), stages=8, micro_batches=16, memory_mb=60000, trainer="megatron",
                   objective=objective)
    cost = plan.constraint_cost
    assert cost.objective == objective
    assert cost.describe() == (f"megatron ({cost.policy}) costs {format_time(cost.time, 'ms')} "
                               f"({cost.percent:.1f}%) {what} vs the unconstrained plan")
    if objective == "step":
        assert cost.constrained == pytest.approx(plan.simulate().step_time)


@pytest.mark.parametrize("trainer, first", [("torchtitan", "[parallelism]"), ("mindformers", "parallel_config:"),
                                            ("hyperparallel", "accelerator:")])
def test_balance_exports_to_every_trainer(capsys, trainer, first):
    assert main([*BALANCE, "--export", trainer]) == 0
    text = capsys.readouterr().out
    assert text.split(f"{trainer} config (")[1].splitlines()[1].startswith(first)


def test_the_export_is_in_the_json_document(capsys):
    assert main([*BALANCE, "--trainer", "torchtitan", "--export", "torchtitan", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["export"]["trainer"] == "torchtitan" and document["export"]["form"] == "toml"
    assert document["constraint_cost"]["trainer"] == "torchtitan" and document["constraint_cost"]["time"] >= 0


def test_choose_exports_the_choice(capsys):
    assert main(["choose", LLAMA, "--stages", "8", "--micro-batches", "16", "--memory", "60000", "--per-layer",
                 "--export", "hyperparallel"]) == 0
    text = capsys.readouterr().out
    assert "hyperparallel config (yaml):\naccelerator:\n  pp_size: 8\nactivation_checkpoint:\n" in text


def test_check_config_names_the_traps_and_fails_on_errors(capsys, tmp_path):
    args = ["check-config", "--layers", LLAMA, "--memory", "60000", "--megatron-args",
            "--num-layers 80 --pipeline-model-parallel-size 8 --num-layers-per-virtual-pipeline-stage 4 "
            "--global-batch-size 16"]
    assert main(args) == 1
    text = capsys.readouterr().out
    assert "error: layers_dropped: Megatron builds 64 of the 80 layers" in text
    assert all(len(line) <= 100 for line in text.splitlines())
    assert main([*args, "--format", "csv"]) == 1
    assert capsys.readouterr().out.splitlines()[0] == "finding,severity,message,fix"


def test_check_config_reads_a_file(capsys, tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[parallelism]\npipeline_parallel_degree = 8\npipeline_parallel_layers_per_stage = 11\n'
                    '[training]\nlocal_batch_size = 16\n[activation_checkpoint]\nmode = "full"\n')
    assert main(["check-config", str(path), "--layers", LLAMA, "--memory", "60000"]) == 0
    assert capsys.readouterr().out.startswith("torchtitan config: t1 p8 v1 dp1 cp1 ep1 b1 1f1b zero0, m=16\n")


def test_check_config_takes_a_file_or_arguments(capsys):
    assert main(["check-config", "--layers", LLAMA, "--memory", "60000"]) == 2
    assert capsys.readouterr().err == ("sappkit check-config: check-config takes a CONFIG file or --megatron-args "
                                       "(one of them)\n")


def test_layers_from_a_mindspore_trace(capsys, tmp_path):
    from ..trainers.test_profiles import trace_view

    document, expected = trace_view()
    trace = tmp_path / "trace_view.json"
    trace.write_text(json.dumps(document))
    out = tmp_path / "layers.json"
    assert main(["layers", "--from-trace", str(trace), "--layer-pattern", r"(\d+)-LlamaDecodeLayer",
                 "--into", LLAMA, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert ": forward 0.110 ms, backward 0.310 ms per micro-batch on average" in " ".join(text.split())
    table = __import__("sappkit").read_layers_json(out)
    assert table.rows("decoder").loc["none", "forward_time"] == pytest.approx(0.11)


def test_check_config_flags_full_recompute_where_a_lighter_uniform_option_fits_and_is_faster(capsys):
    """Issue 39: the bundled torchtitan config recomputes every layer fully at 9.4 GB of 58 GB and was 'no
    findings'; selective on every layer fits and simulates faster, both plans priced here by the API."""
    from dataclasses import replace

    from sappkit import read_layers_json

    layers = read_layers_json(LLAMA)
    config = read_trainer_config(DATA / "torchtitan_llama2_70b.toml", layers=layers, memory_mb=58000)
    assert set(config.options) == {"full"}
    full = config.plan
    selective = replace(config, options=("selective",) * len(config.options)).plan_for(layers, memory_mb=58000)
    slow, fast = full.simulate().step_time, selective.simulate().step_time
    assert selective.fits and fast < slow
    assert main(["check-config", str(DATA / "torchtitan_llama2_70b.toml"), "--layers", LLAMA, "--memory",
                 "58000"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (f"warning: recompute_more_than_needed: every layer recomputes 'full', peaking at "
            f"{full.stages['memory_mb'].max():,.0f} MB of 58,000 MB; 'selective' on every layer fits too (peak "
            f"{selective.stages['memory_mb'].max():,.0f} MB) and the simulated step is {1 - fast / slow:.0%} faster "
            f"({fast:,.0f} ms against {slow:,.0f} ms) fix: set 'selective' recompute (sappkit choose finds the "
            "fastest per-layer options)") in text
