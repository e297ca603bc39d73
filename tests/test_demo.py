"""The demo and its loop, the tour's dashboard and the ``sappkit simulate`` / ``sappkit demo`` commands."""

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

import sappkit
from sappkit import (
    InputError,
    LayerTable,
    Partition,
    balance,
    cell_costs,
    choose_recompute,
    even_assignment,
    fit_memory,
    read_dryrun_csv,
    read_layers_json,
    simulate,
    stage_memory,
    synthetic_dryruns,
)
from sappkit.cli import main
from sappkit.demo import (
    MODES,
    bundled,
    compare_tables,
    headline,
    run_demo,
    run_loop,
    simulate_choice,
    simulate_layers,
    tour_simulation,
)
from sappkit.report import default_notebooks

LLAMA = "data/llama2_70b.json"
DRYRUNS = "data/llama2_70b_dryruns.csv"
PIPELINE = dict(stages=16, micro_batches=32)
LIMIT_MB = 58000


@pytest.fixture(scope="module")
def llama():
    return read_layers_json(LLAMA)


@pytest.fixture(scope="module")
def observed():
    return read_dryrun_csv(DRYRUNS)


@pytest.fixture(scope="module")
def demo():
    return run_demo()


def test_simulate_layers_is_even_placement_costs_and_simulation(llama):
    sim = simulate_layers(llama, stages=8, micro_batches=16, schedule="interleaved", chunks=2, option="full",
                          limit_mb=50000)
    plan = even_assignment(llama, stages=8, chunks=2, schedule="interleaved", option="full")
    direct = simulate(cell_costs(llama, plan, stages=8, chunks=2, schedule="interleaved"), schedule="interleaved",
                      micro_batches=16, limit_mb=50000)
    assert sim.step_time == direct.step_time
    pd.testing.assert_frame_equal(sim.stages, direct.stages)


def test_tour_simulation_takes_the_chunks_the_schedule_fixes(llama):
    settings = dict(stages=4, micro_batches=8, chunks=3, option="selective")
    assert tour_simulation(llama, schedule="1f1b", **settings).chunks == 1
    assert tour_simulation(llama, schedule="dualpipev", **settings).chunks == 2
    assert tour_simulation(llama, schedule="interleaved", **settings).chunks == 3


def test_headline_reads_each_simulation(llama):
    sims = {"plain": simulate_layers(llama, stages=4, micro_batches=8, option="none", limit_mb=20000),
            "no limit": simulate_layers(llama, stages=4, micro_batches=8, option="full")}
    table = headline(sims)
    plain = sims["plain"]
    assert table.loc[0].to_dict() == dict(
        run="plain", schedule="1f1b", chunks=1, step_time=plain.step_time, bubble=plain.bubbles["real"],
        ideal=plain.bubbles["ideal"], imbalance=plain.bubbles["imbalance"], recompute=plain.bubbles["recompute"],
        peak_mb=plain.stages.memory_mb.max(), peak_stage=0, fits=False)
    assert table.loc[1, "fits"] is pd.NA


def test_bundled_names_a_missing_file():
    with pytest.raises(InputError) as caught:
        bundled("nope.json")
    assert str(caught.value).startswith("bundled data file 'nope.json' is not in ")


# ---------------------------------------------------------------- the demo


def test_demo_simulates_the_tours_two_schedules(demo, llama):
    assert demo.summary["run"].tolist() == ["1f1b", "interleaved x2"]
    for label, schedule, chunks in (("1f1b", "1f1b", 1), ("interleaved x2", "interleaved", 2)):
        expected = simulate_layers(llama, schedule=schedule, chunks=chunks, option="selective", limit_mb=LIMIT_MB,
                                   **PIPELINE)
        assert demo.simulations[label].step_time == expected.step_time
    lines = demo.describe().splitlines()
    assert lines[0] == ("data/llama2_70b.json: 16 stages, 32 micro-batches, selective recompute, layers placed "
                        "evenly, 58000 MB devices (times in ms, memory in MB)")
    gain = 1 - demo.summary["step_time"].iloc[1] / demo.summary["step_time"].iloc[0]
    assert lines[4] == f"interleaved x2 is {gain:.1%} faster than 1f1b" and gain > 0
    assert lines[5] == "" and lines[6:] == demo.loop.describe().splitlines()


def test_the_loop_is_the_public_steps_one_after_another(demo, llama, observed):
    loop = demo.loop
    fit = fit_memory(observed)
    pd.testing.assert_frame_equal(loop.fit.params, fit.params)
    pd.testing.assert_frame_equal(loop.layers.frame, fit.to_layers(llama).frame)
    plan = balance(loop.layers, memory_mb=LIMIT_MB, **PIPELINE)
    assert (loop.plan.status, loop.plan.objective) == ("optimal", plan.objective)
    pd.testing.assert_frame_equal(loop.plan.assignment, plan.assignment)
    assert loop.plans["step_time"].iloc[0] == plan.simulate().step_time
    partition = plan.partition()
    per_layer = choose_recompute(loop.layers, partition, memory_mb=LIMIT_MB, modes=MODES, per_layer=True)
    pd.testing.assert_frame_equal(loop.choice.layer_options, per_layer.layer_options)
    assert loop.one_mode.mode == choose_recompute(loop.layers, partition, memory_mb=LIMIT_MB, modes=MODES).mode
    assert len(loop.alternatives.frame) == len(sappkit.alternatives(per_layer).frame) > 0


def test_even_partitions_agree_with_the_pipeline_model_and_the_fastest_that_fits_is_the_baseline(demo):
    loop = demo.loop
    even = loop.plans[loop.plans["plan"].str.startswith("even")]
    assert even["plan"].tolist() == [f"even, {o}" for o in ("none", "selective", "comm", "both", "full")]
    for row in even.itertuples(index=False):
        option = row.plan.removeprefix("even, ")
        sim = simulate_layers(loop.layers, option=option, limit_mb=LIMIT_MB, **PIPELINE)
        memory = stage_memory(loop.layers, even_assignment(loop.layers, stages=16, option=option), **PIPELINE)
        assert row.step_time == pytest.approx(sim.step_time)
        assert row.peak_mb == pytest.approx(memory["memory_mb"].max())
        assert row.fits == (memory["memory_mb"].max() <= LIMIT_MB)
    fitting = even[even["fits"]]
    baseline = loop.even_baseline()
    assert baseline["step_time"] == fitting["step_time"].min() and baseline["plan"] == "even, selective"
    assert loop.plans["step_time"].iloc[0] <= baseline["step_time"]


def test_a_mode_per_layer_never_loses_to_one_mode_and_is_simulated_as_run(demo):
    loop = demo.loop
    choices = loop.choices.set_index("choice")
    assert choices.loc["one mode", "mode"] == "selective" and choices.loc["a mode per layer", "mode"] == "(per layer)"
    assert choices.loc["a mode per layer", "time_saved"] >= choices.loc["one mode", "time_saved"]
    assert choices.loc["a mode per layer", "step_time"] <= choices.loc["one mode", "step_time"]
    # The balanced partition here is the even one, so one mode everywhere simulates as the even selective partition.
    assert loop.plan.offsets()["offset"] == [0] * 16
    even = simulate_layers(loop.layers, option="selective", limit_mb=LIMIT_MB, **PIPELINE)
    assert choices.loc["one mode", "step_time"] == pytest.approx(even.step_time)
    assert choices.loc["a mode per layer", "peak_mb"] <= LIMIT_MB


def test_describe_reads_the_headline_numbers_off_the_frames(demo):
    loop = demo.loop
    lines = loop.describe().splitlines()
    assert lines[0] == ("The loop on data/llama2_70b_dryruns.csv and the times of data/llama2_70b.json: 1f1b, "
                        "16 stages, 32 micro-batches, 58000 MB devices")
    assert lines[1] == f"1. memory fit: {loop.fit.describe()}"
    assert lines[2].split() == ["name", "value_mb", "stderr_mb"] and lines[3].split()[0] == "const_mb"
    worst = loop.agreement["difference_mb"].abs().max()
    assert 0 < worst < loop.fit.loo_error_mb
    assert lines[12] == ("   layer table: the fitted memory predicts the even partitions' stage memory within "
                         f"{worst:.1f} MB of the times table's own (leave-one-out error {loop.fit.loo_error_mb:.1f} MB)")
    step, even = loop.plans["step_time"].iloc[0], loop.even_baseline()["step_time"]
    assert lines[13] == (f"2. balance: optimal; simulated step time {step:.1f} against {even:.1f} for the even "
                         f"partition with selective recompute, the fastest even partition that fits: "
                         f"{1 - step / even:.1%} faster")
    choices = loop.choices.set_index("choice")
    mine, one = choices.loc["a mode per layer"], choices.loc["one mode"]
    assert lines[-2] == (f"3. recompute, a mode per layer (off, selective, full): simulated step time "
                         f"{mine.step_time:.1f} against {one.step_time:.1f} with one mode (selective) on every layer: "
                         f"{1 - mine.step_time / one.step_time:.1%} faster; "
                         f"{mine.time_saved - one.time_saved:.1f} less forward + backward per micro-batch over the "
                         f"stages")
    assert lines[-1] == (f"4. one more fully recomputed layer: {len(loop.alternatives.frame)} distinct plans still "
                         f"fit (stage {loop.alternatives.binding_stage} binds at {loop.choice.memory_mb:.1f} MB)")


def test_noiseless_dry_runs_give_back_the_table_they_came_from(llama, observed):
    exact = synthetic_dryruns(llama, observed.drop(columns="memory_mb"))
    loop = run_loop(exact, llama, micro_batches=32, memory_mb=LIMIT_MB)
    assert np.abs(loop.agreement["difference_mb"]).max() < 1e-6
    assert loop.plan.objective == pytest.approx(balance(llama, memory_mb=LIMIT_MB, **PIPELINE).objective)


def test_a_loop_that_cannot_place_stops_at_the_balancer(llama, observed):
    loop = run_loop(observed, llama, micro_batches=32, memory_mb=6000)
    assert loop.plan.status == "infeasible" and loop.choice is None and loop.choices.empty
    assert loop.describe().splitlines()[-1] == f"2. balance: infeasible: {loop.plan.message}"


def test_a_loop_with_no_even_partition_and_no_recompute_choice_says_so(llama, observed):
    loop = run_loop(observed, llama, micro_batches=32, memory_mb=7700)
    assert loop.plan.status == "optimal" and loop.even_baseline() is None
    lines = loop.describe().splitlines()
    assert lines[13] == f"2. balance: optimal; simulated step time {loop.plans['step_time'].iloc[0]:.1f}; no even " \
                        "partition with one option fits"
    assert lines[-1] == f"3. recompute, no choice: {loop.choice.reason}"
    assert loop.alternatives is None and loop.choices["step_time"].isna().all()


def test_a_multimodal_loop_balances_but_makes_no_recompute_choice():
    vlm = read_layers_json("data/vlm.json")
    times = LayerTable(vlm.frame[vlm.frame["option"].isin(["none", "selective", "full"])], const_mb=vlm.const_mb)
    loop = run_loop(read_dryrun_csv("data/vlm_dryruns.csv"), times, micro_batches=16, memory_mb=60000)
    assert loop.plan.status == "optimal"
    assert loop.agreement["difference_mb"].abs().max() < 3 * loop.fit.loo_error_mb
    assert loop.choice.reason.startswith("the model is multimodal")
    assert loop.describe().splitlines()[-1] == f"3. recompute, no choice: {loop.choice.reason}"


def test_run_loop_refuses_dry_runs_of_several_pipelines(llama, observed):
    mixed = pd.concat([observed, observed.assign(run="other", stages=8)])
    with pytest.raises(InputError) as caught:
        run_loop(mixed, llama, micro_batches=32, memory_mb=LIMIT_MB)
    assert str(caught.value) == ("observations hold dry runs of [8, 16] stages; the loop balances the pipeline the "
                                 "dry runs ran (the fitted head and tail hold activations at that shape), so give runs "
                                 "of one stage count")
    with pytest.raises(InputError) as caught:
        run_loop([1, 2], llama, micro_batches=32, memory_mb=LIMIT_MB)
    assert str(caught.value) == ("observations must be a DataFrame of dry-run observations with a 'stages' column "
                                 "(sappkit.read_dryrun_csv)")


# ------------------------------------------------------- the loop's helpers


def test_compare_tables_finds_a_known_difference(llama):
    assert compare_tables(llama, llama, **PIPELINE)["difference_mb"].eq(0).all()
    heavier = LayerTable(llama.frame.assign(param_mb=llama.frame["param_mb"] + 1.0), const_mb=llama.const_mb + 10)
    frame = compare_tables(llama, heavier, **PIPELINE)
    assert frame["option"].unique().tolist() == ["none", "selective", "comm", "both", "full"]
    # five layers per stage, the head on stage 0 and the tail on stage 15, 10 MB more constant everywhere
    expected = np.array([16.0] + [15.0] * 14 + [16.0])
    for _, rows in frame.groupby("option"):
        np.testing.assert_allclose(rows["difference_mb"], expected)
    np.testing.assert_allclose(frame["fitted_mb"] - frame["reference_mb"], frame["difference_mb"])


def test_compare_tables_refuses_two_models(llama):
    other = LayerTable(llama.frame.assign(count=np.where(llama.frame["role"] == "body", 40, 1)))
    with pytest.raises(InputError) as caught:
        compare_tables(llama, other, **PIPELINE)
    assert str(caught.value) == ("fitted has body kinds and counts [('decoder', 40)] but reference has "
                                 "[('decoder', 80)]; compare tables of one model")


def test_simulate_choice_runs_the_options_chosen(llama):
    partition = Partition.from_assignment(even_assignment(llama, stages=4, option="full"), stages=4, micro_batches=8)
    choice = choose_recompute(llama, partition, memory_mb=30000, modes=MODES, per_layer=True)
    counts = choice.layer_options.groupby(["stage", "option"]).size().rename("layers").reset_index()
    assignment = counts.assign(kind="decoder", chunk=0)
    expected = simulate(cell_costs(llama, assignment, stages=4), schedule="1f1b", micro_batches=8, limit_mb=30000)
    sim = simulate_choice(choice)
    assert sim.step_time == expected.step_time and sim.stages["limit_mb"].eq(30000).all()
    assert set(choice.layer_options["option"]) == {"none", "selective", "full"}
    uniform = choose_recompute(llama, partition, memory_mb=30000, modes=("full",))
    assert simulate_choice(uniform).step_time == simulate_layers(llama, stages=4, micro_batches=8,
                                                                 option="full").step_time


def test_simulate_choice_refuses_what_it_cannot_run(llama):
    partition = Partition.from_assignment(even_assignment(llama, stages=4, option="full"), stages=4, micro_batches=8)
    none_fits = choose_recompute(llama, partition, memory_mb=1000, modes=("off", "full"))
    link = sappkit.HostLink.from_gbps(50.0, time_unit_ms=1.0)
    offloads = choose_recompute(llama, partition, memory_mb=25000, modes=MODES, per_layer=True, link=link)
    assert (offloads.layer_options["offloaded_mb"] > 0).any()
    cases = [(none_fits, f"choice made no choice to simulate: {none_fits.reason}"),
             (offloads, "choice offloads activations to the host, which the simulator does not model; simulate a "
                        "choice made without a link"),
             (partition, "choice must be a RecomputeChoice (sappkit.choose_recompute); got Partition")]
    for choice, message in cases:
        with pytest.raises(InputError) as caught:
            simulate_choice(choice)
        assert str(caught.value) == message


# ------------------------------------------------------------ the commands


def test_cli_simulate_prints_the_stage_frame_and_saves_the_figure(tmp_path, capsys):
    figure = tmp_path / "sim.png"
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "8", "--chunks", "2", "--schedule",
                 "interleaved", "--option", "full", "--limit-mb", "60000", "--save", str(figure)]) == 0
    out = capsys.readouterr().out.splitlines()
    sim = simulate_layers(read_layers_json(LLAMA), stages=4, micro_batches=8, schedule="interleaved", chunks=2,
                          option="full", limit_mb=60000)
    assert out[:4] == sim.describe().splitlines()
    assert out[4].split() == list(sim.stages.columns)
    assert len(out) == 4 + 1 + 4 + 1 and out[-1] == f"figure saved to {figure}"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []


def test_cli_simulate_reads_csv_and_refuses_other_files(tmp_path, capsys):
    from sappkit import write_layers_csv

    write_layers_csv(read_layers_json(LLAMA), tmp_path / "layers.csv")
    assert main(["simulate", str(tmp_path / "layers.csv"), "--stages", "2", "--micro-batches", "2"]) == 0
    assert capsys.readouterr().out.startswith("1f1b: 2 stages")
    assert main(["simulate", "layers.txt", "--stages", "2", "--micro-batches", "2"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: LAYERS must be a .json (MindFormers layer description) "
                                       "or .csv layer table; got 'layers.txt'\n")
    assert main(["simulate", LLAMA, "--stages", "4", "--micro-batches", "4", "--schedule", "dualpipev"]) == 2
    assert capsys.readouterr().err == ("sappkit simulate: chunks must be 2 for schedule 'dualpipev' (the V); "
                                       "got 1\n")


@pytest.fixture()
def writer(monkeypatch, demo):
    """A stand-in for write_report that records its call and says where it would have written (and the demo
    computed once)."""
    calls = []

    def write_report(notebooks, out, *, force=False, progress=None, with_input=False):
        calls.append(dict(notebooks=list(notebooks), out=out, force=force, with_input=with_input))
        progress(f"[1/1] {Path(calls[-1]['notebooks'][0]).name}: executing")
        return Path(out) / "index.html"

    monkeypatch.setattr("sappkit.commands.demo.write_report", write_report)
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: demo)
    return calls


def test_cli_demo_prints_the_headline_and_no_report_when_asked(demo, capsys):
    assert main(["demo", "--no-report"]) == 0
    assert capsys.readouterr().out == demo.describe() + "\n"


def test_cli_demo_writes_the_report_of_every_notebook_by_default(demo, writer, capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert writer == [dict(notebooks=default_notebooks(), out=Path("reports"), force=False, with_input=False)]
    assert out == (demo.describe() + "\n\nwriting the report to reports\n"
                   f"[1/1] {default_notebooks()[0].name}: executing\n"
                   f"report written to reports (open {Path('reports') / 'index.html'})\n")


def test_cli_demo_passes_out_force_and_notebooks(writer, tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path / "r"), "--force", "--notebooks", "notebooks/00_tour.ipynb"]) == 0
    assert writer == [dict(notebooks=[Path("notebooks/00_tour.ipynb")], out=tmp_path / "r", force=True,
                           with_input=False)]
    assert capsys.readouterr().out.splitlines()[-1] == f"report written to {tmp_path / 'r'} (open " \
                                                        f"{tmp_path / 'r' / 'index.html'})"


def test_cli_demo_reports_a_refused_report_folder(demo, monkeypatch, capsys):
    def refuse(notebooks, out, **options):
        raise InputError(f"out: {str(out)!r} already exists and is not empty")

    monkeypatch.setattr("sappkit.commands.demo.write_report", refuse)
    monkeypatch.setattr("sappkit.commands.demo.run_demo", lambda: demo)
    assert main(["demo"]) == 2
    assert capsys.readouterr().err == "sappkit demo: out: 'reports' already exists and is not empty\n"


def test_tour_dashboard_follows_its_controls(llama):
    pytest.importorskip("ipywidgets")
    from sappkit.widgets.tour import TourDashboard

    dashboard = TourDashboard(llama, stages=4, micro_batches=8, option="selective", limit_mb=58000)
    assert dashboard.last.schedule == "interleaved" and dashboard.last.chunks == 2
    dashboard.controls["schedule"].value = "dualpipev"
    assert dashboard.last.schedule == "dualpipev" and dashboard.last.micro_batches == 8
    dashboard.controls["micro_batches"].value = 6
    assert dashboard.last is None
    assert dashboard.message == ("micro_batches must be >= 2 * stages = 8 for schedule 'dualpipev'; got 6 "
                                 "(DualPipeV's step order needs two micro-batches per stage)")
    dashboard.controls["micro_batches"].value = 12
    assert dashboard.last.schedule == "dualpipev" and dashboard.last.micro_batches == 12 and dashboard.message == ""
    expected = tour_simulation(llama, schedule="dualpipev", stages=4, micro_batches=12, chunks=2, option="selective",
                               limit_mb=58000)
    assert dashboard.last.step_time == expected.step_time
    assert plt.get_fignums() == []
