"""The engineer's loop on one model (run_loop), table comparison and simulated recompute choices."""

import numpy as np
import pandas as pd
import pytest

import sappkit
from sappkit import (
    InputError, LayerTable, Partition, balance, cell_costs, choose_recompute, even_assignment, fit_memory,
    read_dryrun_csv, read_layers_json, simulate, stage_memory, synthetic_dryruns,
)
from sappkit.demo import simulate_layers
from sappkit.layers.units import format_time
from sappkit.loop import MODES, compare_tables, run_loop, simulate_choice

PIPELINE = dict(stages=16, micro_batches=32)
LIMIT_MB = 58000


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


def test_noiseless_dry_runs_give_back_the_table_they_came_from(llama, observed):
    exact = synthetic_dryruns(llama, observed.drop(columns="memory_mb"))
    loop = run_loop(exact, llama, micro_batches=32, memory_mb=LIMIT_MB)
    assert np.abs(loop.agreement["difference_mb"]).max() < 1e-6
    assert loop.plan.objective == pytest.approx(balance(llama, memory_mb=LIMIT_MB, **PIPELINE).objective)


def test_a_loop_that_cannot_place_stops_at_the_balancer(llama, observed):
    loop = run_loop(observed, llama, micro_batches=32, memory_mb=6000)
    assert loop.plan.status == "infeasible" and loop.choice is None and loop.choices.empty
    assert loop.describe().splitlines()[-1] == f"2. balance: infeasible: {loop.plan.message}"


def test_a_loop_with_no_even_partition_says_so_and_its_plan_fits_the_chooser_too(llama, observed):
    # One memory truth: a plan the balancer calls fitting leaves the chooser a choice (at worst its own options).
    loop = run_loop(observed, llama, micro_batches=32, memory_mb=8500)
    assert loop.plan.status == "optimal" and loop.even_baseline() is None
    lines = loop.describe().splitlines()
    assert lines[13] == f"2. balance: optimal; simulated step time {loop.plans['step_time'].iloc[0]:,.0f} ms; no " \
                        "even partition with one option fits"
    assert loop.choice.chosen and loop.choices["reason"].isna().all()
    assert (loop.choice.stages["memory_mb"] <= 8500 + 1e-6).all()


def test_a_multimodal_loop_balances_but_makes_no_recompute_choice():
    vlm = read_layers_json("data/vlm.json")
    times = LayerTable(vlm.frame[vlm.frame["option"].isin(["none", "selective", "full"])], const_mb=vlm.const_mb)
    loop = run_loop(read_dryrun_csv("data/vlm_dryruns.csv"), times, micro_batches=16, memory_mb=60000)
    assert loop.plan.status == "optimal"
    assert loop.agreement["difference_mb"].abs().max() < 3 * loop.fit.loo_error_mb
    assert loop.choice.reason.startswith("the model is multimodal")
    assert loop.one_mode.mode == "selective"
    assert loop.describe().splitlines()[-1] == (f"3. recompute, no choice per layer: {loop.choice.reason}; one mode "
                                                f"for every layer: selective, simulated step time "
                                                f"{format_time(loop.choices['step_time'].iloc[1], 'ms')}")


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
