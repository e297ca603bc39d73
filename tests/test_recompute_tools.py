"""The recompute chooser's CLI, dashboard callback, plots and bench helpers, on the bundled models."""

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from sappkit.bench.recompute import _dense_least_time
from sappkit.cli import main
from sappkit.errors import InputError
from sappkit.layers.formats import read_layers_json
from sappkit.pipeline.costs import even_assignment
from sappkit.plots.recompute import plot_before_after, plot_layer_options, plot_time_saved
from sappkit.recompute.chooser import HostLink, choose_recompute, sweep_recompute
from sappkit.recompute.knapsack import build_front
from sappkit.recompute.partition import Partition
from sappkit.recompute.pricing import price
from sappkit.widgets.recompute import recompute_view

DATA = Path(__file__).resolve().parents[1] / "data"
MODES = ("off", "selective", "full")


@pytest.fixture(scope="module")
def llama():
    return read_layers_json(DATA / "llama2_70b.json")


@pytest.fixture(scope="module")
def deepseek():
    return read_layers_json(DATA / "deepseek_v3.json")


def _partition(table, stages=8, micro_batches=16):
    assignment = even_assignment(table, stages=stages, option="full")
    return Partition.from_assignment(assignment, stages=stages, micro_batches=micro_batches,
                                     kind_order=table.body_kinds)


def test_cli_prints_the_choice_and_the_trainer_plan(capsys):
    code = main(["choose", str(DATA / "llama2_70b.json"), "--stages", "8", "--micro-batches", "16",
                 "--memory", "60000", "--per-layer"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].startswith("time saved ")
    assert "trainer plan: activation_checkpoint.mode = " in out
    assert "megatron: " in out and "torchtitan: " in out


def test_cli_reads_offsets_yaml_nested_or_flat(tmp_path, capsys, llama):
    nested = tmp_path / "plan.yaml"
    nested.write_text("model:\n  model_config:\n    offset: [1, 0, 0, -1]\nrecompute_config:\n"
                      "  recompute: [true, 4, 2, 0]\n")
    flat = tmp_path / "flat.yaml"
    flat.write_text("offset: [1, 0, 0, -1]\nrecompute: [true, 4, 2, 0]\n")
    outputs = []
    for path in (nested, flat):
        code = main(["choose", str(DATA / "llama2_70b.json"), "--stages", "4", "--micro-batches", "8",
                     "--memory", "60000", "--offsets", str(path), "--json"])
        assert code == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1]
    part = Partition.from_offsets(llama, stages=4, micro_batches=8, offset=[1, 0, 0, -1], recompute=[True, 4, 2, 0])
    assert outputs[0]["ranges"] == choose_recompute(llama, part, memory_mb=60000).to_records()


@pytest.mark.parametrize("arguments, message", [
    (["--offsets", "missing.yaml"], "sappkit choose: --offsets file 'missing.yaml' does not exist"),
    (["--modes", "off,quick"], "sappkit choose: modes names an unknown mode 'quick'; the default modes are 'off', "
                               "'selective', 'full' (pass a mapping mode -> option for others)"),
    (["--link-gbps", "0"], "sappkit choose: gbps must be a finite number > 0; got 0.0"),
])
def test_cli_refuses_with_one_line(capsys, arguments, message):
    code = main(["choose", str(DATA / "llama2_70b.json"), "--stages", "4", "--micro-batches", "8",
                 "--memory", "60000", *arguments])
    assert code == 2
    assert capsys.readouterr().err.strip() == message


def test_cli_offsets_without_offset(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("recompute: [1, 1]\n")
    assert main(["choose", str(DATA / "llama2_70b.json"), "--stages", "2", "--micro-batches", "4", "--memory", "1e5",
                 "--offsets", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (f"sappkit choose: --offsets file {str(path)!r} has no 'offset' "
                                               "(at the top or under model.model_config)")


def test_cli_says_when_nothing_fits(capsys):
    code = main(["choose", str(DATA / "llama2_70b.json"), "--stages", "4", "--micro-batches", "8", "--memory", "5000"])
    assert code == 1
    assert capsys.readouterr().out.startswith("no choice: stage 0 cannot fit")


def test_dashboard_view_is_the_choice_and_the_curve(deepseek):
    part = _partition(deepseek)
    view = recompute_view(deepseek, part, memory_mb=60000, modes="off / selective / full", per_layer=True)
    expected = choose_recompute(deepseek, part, memory_mb=60000, modes=MODES, per_layer=True)
    assert view.choice.to_records() == expected.to_records()
    assert len(view.curve) == 25 and view.curve["memory_mb"].iloc[0] == 30000
    assert view.text.splitlines()[-1].startswith("trainer plan: activation_checkpoint.mode = ")
    again = recompute_view(deepseek, part, memory_mb=50000, modes="off / selective / full", per_layer=True,
                           curve=view.curve)
    assert again.curve is view.curve
    front = recompute_view(deepseek, part, memory_mb=60000, per_layer=True)
    assert front.choice.mode is None and "trainer plan" not in front.text
    with pytest.raises(InputError) as error:
        recompute_view(deepseek, part, memory_mb=60000, modes="everything")
    assert str(error.value) == ("modes must be one of 'front options', 'off / selective / full', "
                                "'selective / full', 'off / full'; got 'everything'")


def test_dashboard_with_a_host_link(llama):
    part = _partition(llama)
    view = recompute_view(llama, part, memory_mb=45000, modes="off / full", per_layer=True, link_gbps=50)
    link = HostLink.from_gbps(50)
    expected = choose_recompute(llama, part, memory_mb=45000, modes=("off", "full"), per_layer=True, link=link)
    assert view.choice.to_records() == expected.to_records()
    assert (view.choice.layer_options["offloaded_mb"] > 0).any()


def test_dashboard_follows_its_controls(llama):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.recompute import RecomputeDashboard

    dashboard = RecomputeDashboard(llama, _partition(llama), memory_mb=50000)
    assert dashboard.last.choice.mode is None
    curve = dashboard.last.curve
    dashboard.controls["memory_mb"].value = 40000
    assert dashboard.last.curve is curve and dashboard.last.choice.pricing.memory_mb == 40000
    dashboard.controls["modes"].value = "selective / full"
    assert dashboard.last.curve is not curve
    assert set(dashboard.last.choice.layer_options["mode"]) <= {"selective", "full"}
    assert plt.get_fignums() == []


def test_plots(llama):
    part = _partition(llama)
    choice = choose_recompute(llama, part, memory_mb=45000, link=HostLink(50.0))
    before, after = plot_before_after(choice)
    assert before.get_title() == "configured recompute" and after.get_title().startswith("chosen: time saved ")
    ax = plot_layer_options(choice)
    assert [t.get_text() for t in ax.get_legend().get_texts()][-1] == "offloaded"
    curve = sweep_recompute(llama, part, memory_mb=np.linspace(20000, 60000, 9))
    ax = plot_time_saved(curve, current_mb=45000)
    assert ax.get_lines()[0].get_label() == "against the configured recompute"
    none = choose_recompute(llama, part, memory_mb=1000)
    assert plot_before_after(none)[1].get_title() == "lightest options (nothing fits)"


@pytest.mark.parametrize("call, message", [
    (lambda: plot_time_saved("curve"), "sweep must be sweep_recompute's frame with columns memory_mb, feasible, mode, "
                                       "time, time_saved, time_saved_vs_full"),
    (lambda: plot_before_after(None), "choice must be a RecomputeChoice; got NoneType"),
    (lambda: plot_layer_options(3), "choice must be a RecomputeChoice; got int"),
])
def test_plots_refuse(call, message):
    with pytest.raises(InputError) as error:
        call()
    assert str(error.value) == message


def test_plot_time_saved_refuses_an_unknown_baseline(llama):
    curve = sweep_recompute(llama, _partition(llama), memory_mb=[50000])
    with pytest.raises(InputError) as error:
        plot_time_saved(curve, against="none")
    assert str(error.value) == "against must be one of 'configured', 'full', 'both'; got 'none'"


def test_bench_dynamic_program_agrees_with_the_knapsack(deepseek):
    pricing = price(deepseek, _partition(deepseek), memory_mb=60000, modes=MODES)
    for groups, budget in zip(pricing.groups, pricing.budgets[0]):
        assert _dense_least_time(groups, int(budget)) == pytest.approx(build_front(groups).least_time(int(budget)))
