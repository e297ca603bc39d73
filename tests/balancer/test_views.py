"""The balancer's views: memory sweeps, plan comparisons, plots, the dashboard and the command line."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import sappkit
from sappkit.balancer import views
from sappkit.balancer.views import compare_plans, dashboard_plan, even_plan, sweep_memory
from sappkit.cli import main
from sappkit.layers.units import UNSTATED, format_time
from sappkit.plots.balance import plot_memory_sweep, plot_plan_comparison, plot_stage_times

ROWS = [dict(kind="block", role="body", count=12, param_mb=100, option=o, forward_time=1, backward_time=b,
             activation_mb=a) for o, b, a in (("none", 2, 50), ("selective", 2.2, 20), ("full", 3, 5))]
TABLE = pd.DataFrame(ROWS)
PIPELINE = dict(stages=3, micro_batches=6)


def test_sweep_reuses_plans_and_matches_single_solves():
    limits = [900, 1200, 1500, 1800, 2400]
    sweep = sweep_memory(TABLE, memory_mb=limits[::-1], progress=False, **PIPELINE)
    assert sweep.memory_mb.tolist() == limits
    for row in sweep.itertuples():
        single = sappkit.balance(TABLE, memory_mb=row.memory_mb, **PIPELINE)
        assert row.status == single.status
        if single.status == "optimal":
            assert row.objective == pytest.approx(single.objective)
            assert row.peak_mb <= row.memory_mb
        else:
            assert np.isnan(row.objective) and row.memory_needed_mb == single.memory_needed_mb
    assert "reused" in set(sweep.method)
    assert (np.diff(sweep.objective.dropna()) <= 1e-9).all()
    assert sweep.attrs["time_unit"] == "time units"


def test_sweep_refuses_bad_limits():
    with pytest.raises(sappkit.InputError) as error:
        sweep_memory(TABLE, memory_mb=[], **PIPELINE)
    assert str(error.value) == "memory_mb must list at least one memory limit; got an empty sequence"
    with pytest.raises(sappkit.InputError) as error:
        sweep_memory(TABLE, memory_mb=[1000, -1], **PIPELINE)
    assert str(error.value) == "memory_mb[1] must be a finite number > 0; got -1"


@pytest.mark.parametrize("arguments, message", [
    (dict(memory_mb=None), "memory_mb must be a sequence of memory limits in MB; got None"),
    (dict(memory_mb=["a"]), "memory_mb[0] must be a finite number > 0; got 'a'"),
    (dict(memory_mb=[1500], chunk=2), "sweep_memory got 'chunk', which is not one of balance's arguments (stages, "
                                      "micro_batches, chunks, schedule, less_memory, seq_split, seq_params, const_mb, "
                                      "objective, optimization_level, consistent_recompute, working_set, "
                                      "sapp_compat, trainer, solver)"),
    (dict(memory_mb=[1500], progress=3), "progress must be a bool; got 3"),
    (dict(memory_mb=[1500], stages=16, micro_batches=65536), "simulating 16 stages x 1 chunk(s) x 65536 micro-batches "
                                                             "runs 1,048,576 forward passes; sappkit simulates at most "
                                                             "1000000 (sappkit.limits.MAX_SIMULATED_PASSES): lower "
                                                             "micro_batches"),
])
def test_sweep_refuses_bad_arguments_before_solving(arguments, message):
    with pytest.raises(sappkit.InputError) as error:
        sweep_memory(TABLE, **{**PIPELINE, **arguments})
    assert str(error.value) == message


@pytest.mark.parametrize("plans, message", [
    (None, "plans must be a mapping of label to Plan, e.g. {'balanced': plan}; got None"),
    ([1], "plans must be a mapping of label to Plan, e.g. {'balanced': plan}; got [1]"),
    ({"even": "plan"}, "plans['even'] must be a Plan (from balance or plan_from_offsets); got str"),
])
def test_compare_plans_refuses_what_is_not_plans(plans, message):
    with pytest.raises(sappkit.InputError) as error:
        compare_plans(plans)
    assert str(error.value) == message


def test_sweep_reports_progress_on_the_terminal_through_tqdm(capsys):
    sweep_memory(TABLE, memory_mb=[1500, 1800], progress=True, **PIPELINE)
    err = capsys.readouterr().err
    assert "sweep_memory:" in err and "/2 [" in err  # tqdm's bar: done/total [elapsed<left, rate]
    sweep_memory(TABLE, memory_mb=[1500, 1800], progress=False, **PIPELINE)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("progress, disable, delay", [(None, False, 1.0), (True, False, 0.0), (False, True, 1.0)])
def test_sweep_shows_its_bar_by_default_only_after_a_second(monkeypatch, progress, disable, delay):
    # The default's bar waits a second: checked on tqdm's arguments, not the clock (the machine may be slow).
    given, real_tqdm = [], views.tqdm

    def recording_tqdm(**kwargs):
        given.append(kwargs)
        return real_tqdm(**{**kwargs, "disable": True})

    monkeypatch.setattr(views, "tqdm", recording_tqdm)
    sweep_memory(TABLE, memory_mb=[1500, 1800], progress=progress, **PIPELINE)
    assert [(kwargs["disable"], kwargs["delay"]) for kwargs in given] == [(disable, delay)]


def test_compare_balanced_with_even_partitions():
    limit = 900
    plans = {"balanced": sappkit.balance(TABLE, memory_mb=limit, **PIPELINE),
             "none": even_plan(TABLE, option="none", memory_mb=limit, **PIPELINE),
             "full": even_plan(TABLE, option="full", memory_mb=limit, **PIPELINE)}
    frame = compare_plans(plans)
    assert frame.plan.tolist() == ["balanced", "none", "full"]
    assert frame.fits.tolist() == [True, False, True]
    assert frame.step_time[0] < frame.step_time[2]
    assert frame.recompute_time[1] == 0 and frame.recompute_time[2] == pytest.approx(12 * 1.0)
    assert plot_plan_comparison(frame).texts[1].get_text() == "1,050 MB > 900"
    assert frame.attrs["time_unit"] == "time units"
    in_ms = even_plan(sappkit.LayerTable(TABLE, time_unit="ms"), option="full", memory_mb=limit, **PIPELINE)
    assert compare_plans({"ms": in_ms}).attrs["time_unit"] == "ms"
    with pytest.raises(sappkit.InputError, match="^plans have times in different units \\('ms', 'time units'\\); "
                                                 "compare plans of layer tables in one unit$"):
        compare_plans({**plans, "ms": in_ms})


def test_plots_draw_plan_frames():
    plan = sappkit.balance(TABLE, memory_mb=1500, **PIPELINE)
    ax = plot_stage_times(plan.stages)
    assert len(ax.patches) == 3 * 3
    sweep = sweep_memory(TABLE, memory_mb=[300, 1500], progress=False, **PIPELINE)
    assert sweep.status.tolist() == ["infeasible", "optimal"]
    ax = plot_memory_sweep(sweep)
    needed = sweep.memory_needed_mb[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["simulated step time",
                                                                   f"no plan fits below {needed:,.0f} MB"]
    with pytest.raises(sappkit.InputError) as error:
        plot_stage_times(plan.stages.drop(columns="time"))
    assert str(error.value) == ("stages is missing column(s) 'time'; a plan's stages frame needs stage, "
                                "forward_time, backward_time, recompute_time, time")


def test_dashboard_callback():
    cache = {}
    plan, status = dashboard_plan(TABLE, schedule="1f1b", stages=3, chunks=4, micro_batches=6, memory_mb=1500,
                                  cache=cache)
    assert plan.setup.chunks == 1 and plan.status == "optimal"
    assert plan.step_time == pytest.approx(plan.simulate().step_time, rel=1e-12)
    assert status == ("optimal: simulated step time 96 time units (sapp objective 12 time units), peak 1,050 MB on "
                      "stage 0 of 1,500 MB, exact search")
    plan, status = dashboard_plan(TABLE, schedule="1f1b", stages=3, chunks=1, micro_batches=6, memory_mb=1500,
                                  objective="step", cache=cache)
    assert status.startswith(f"{plan.status}: simulated step time {format_time(plan.step_time, UNSTATED)} (proven "
                             f"lower bound {format_time(plan.lower_bound, UNSTATED)}, gap {plan.gap:.1%}), peak ")
    assert status.endswith(f"of 1,500 MB, {plan.method}")
    assert list(cache) == [("1f1b", 3, 1, 6, "sapp"), ("1f1b", 3, 1, 6, "step")]
    plan, status = dashboard_plan(TABLE, schedule="interleaved", stages=3, chunks=2, micro_batches=2,
                                  memory_mb=1500)
    assert plan is None
    assert status == "micro_batches must be >= stages = 3 for an interleaved schedule with 2 chunks; got 2"


def test_dashboard_redraws_when_the_slider_moves():
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.balance import BalanceDashboard

    dashboard = BalanceDashboard(TABLE, memory_mb=1500, stages=3, micro_batches=6, memory_range=(200, 3000))
    first, html = dashboard.status, dashboard.status_html.value
    assert dashboard.last.status == "optimal" and "green" in html
    assert html.startswith(f'<div style="font-size:1.3em"><b>simulated step time '
                           f'{format_time(dashboard.last.simulate().step_time, UNSTATED)}</b></div>')
    dashboard.controls["memory_mb"].value = 300
    assert dashboard.last.status == "infeasible" and dashboard.status != first
    assert "red" in dashboard.status_html.value
    dashboard.controls["objective"].value = "step"
    dashboard.controls["memory_mb"].value = 2500
    assert dashboard.last.objective_name == "step" and dashboard.last.fits


def test_cli_balance(tmp_path, capsys):
    path = tmp_path / "layers.csv"
    sappkit.write_layers_csv(sappkit.LayerTable(TABLE, time_unit="ms"), path)
    out = tmp_path / "plan.yaml"
    assert main(["balance", str(path), "--stages", "3", "--micro-batches", "6", "--memory", "1500",
                 "--yaml", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    plan = sappkit.balance(TABLE, memory_mb=1500, **PIPELINE)
    simulated = plan.simulate()
    step = sappkit.balance(TABLE, memory_mb=1500, objective="step", **PIPELINE).simulate().step_time
    assert step == simulated.step_time
    assert printed[:4] == ["1f1b: 3 stages, 1 chunk(s), 6 micro-batches, 1,500 MB devices: optimal for SAPP's objective (a",
                           f"  proxy); its simulated step {step:.0f} ms is as fast as --objective step "
                           "finds",
                           f"simulated step time {simulated.step_time:.0f} ms, bubble "
                           f"{simulated.bubbles['real']:.1%} of the compute (idle "
                           f"{simulated.bubbles['of_step']:.1%} of the step)",
                           "peak stage memory 1,050 MB on stage 0 of 1,500 MB"]
    assert printed[4].split() == ["stage", "layers", "layers", "per", "option", "memory_mb", "time", "per",
                                  "micro-batch", "(ms)"]
    assert printed[-1] == f"MindFormers config written to {out}"
    assert out.read_text() == plan.to_yaml(strict=False)
    assert main(["balance", str(path), "--stages", "3", "--micro-batches", "6", "--memory", "300"]) == 1
    infeasible = sappkit.balance(TABLE, memory_mb=300, **PIPELINE)
    assert capsys.readouterr().out.splitlines()[:2] == [
        "1f1b: 3 stages, 1 chunk(s), 6 micro-batches, 300 MB devices: infeasible for the sapp objective",
        infeasible.message]
    assert main(["balance", str(path), "--stages", "1", "--micro-batches", "6", "--memory", "500"]) == 2
    assert capsys.readouterr().err == ("sappkit balance: stages must be an int >= 2; got 1 (a pipeline needs at "
                                       "least two stages)\n")
