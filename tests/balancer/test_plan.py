"""Plan: frames recomputed independently, the simulator's peaks, offsets round trips, exports."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import yaml

import sappkit
from sappkit.balancer.plan import make_plan
from sappkit.balancer.setup import make_setup
from sappkit.pipeline.costs import stage_memory

from ..bundled import DATA, MODES
from .test_optimise import reference_in_flight, reference_overhead_terms

ROWS = [dict(kind="embed", role="head", count=1, param_mb=40, option="none", forward_time=1, backward_time=2,
             activation_mb=6),
        *[dict(kind="block", role="body", count=16, param_mb=20, option=o, forward_time=2, backward_time=bt,
               activation_mb=a) for o, bt, a in (("none", 4, 30), ("selective", 5, 12), ("full", 7, 3))],
        dict(kind="lm_head", role="tail", count=1, param_mb=50, option="none", forward_time=3, backward_time=6,
             activation_mb=10)]
TABLE = sappkit.LayerTable(pd.DataFrame(ROWS), const_mb=100)
#: What the layer ending warm-up holds once, per option it runs (its activation at one micro-batch).
WORKING_MB = {"none": 30, "selective": 12, "full": 30, "tail": 10}


def reference_memory(plan, *, stages, micro_batches, chunks=1, schedule="1f1b", less_memory=False, working_set=True):
    """Per-stage memory recomputed from the assignment frame alone (docs/design.md "One memory model"):
    SAPP's pipeline balancer's model, with the end-of-warm-up working set when ``working_set`` (the default
    model for one chunk)."""
    p, v, m = stages, chunks, micro_batches
    flight = reference_in_flight(schedule, p, m, v, less_memory)
    rows = TABLE.frame.set_index(["kind", "option"])
    act = np.zeros((v, p))
    memory = np.full(p, TABLE.const_mb)
    for r in plan.assignment.itertuples():
        act[r.chunk, r.stage] += r.layers * rows.loc[(r.kind, r.option), "activation_mb"]
        memory[r.stage] += r.layers * rows.loc[(r.kind, r.option), "param_mb"]
    memory += (flight * act).sum(axis=0)
    memory[0] += 40 + 6 * flight[0, 0]
    tail = (1, 0) if schedule == "dualpipev" else (v - 1, p - 1)
    memory[tail[1]] += 50 + 10 * flight[tail]
    if v > 1 and m != p:
        for s in range(p):
            expr = sum(f * (act[a, s] - act[b, s]) for f, a, b in reference_overhead_terms(p, v, s, less_memory))
            memory[s] += max(0, np.ceil(expr - 1e-6))
    # The working set of the layer that ends each stage's warm-up: the tail where the last-chunk cell ends with
    # it, else that cell's last layer (a cell runs full, then selective, then none layers), at one micro-batch
    # of what it keeps (full rebuilds the plain layer: none's 30 MB).
    for s in range(p if working_set else 0):
        if (v - 1, s) == tail:
            memory[s] += WORKING_MB["tail"]
            continue
        last = [r.option for r in plan.assignment.itertuples() if (r.chunk, r.stage) == (v - 1, s)]
        if last:
            memory[s] += WORKING_MB[max(last, key=["full", "selective", "none"].index)]
    return memory


def exactly(message: str) -> str:
    """A pattern matching ``message`` whole."""
    return f"^{re.escape(message)}$"


@pytest.mark.parametrize("pipeline", [
    dict(stages=4, micro_batches=8), dict(stages=4, micro_batches=8, chunks=2),
    dict(stages=4, micro_batches=8, chunks=2, less_memory=True), dict(stages=4, micro_batches=4, chunks=2),
    dict(stages=2, micro_batches=4, chunks=2, schedule="dualpipev"),
], ids=str)
def test_stage_memory_recomputed_from_the_assignment(pipeline):
    # SAPP's pipeline balancer's model by hand; the default model is the simulated peak (by hand too for one chunk).
    schedule = pipeline.get("schedule", "1f1b" if pipeline.get("chunks", 1) == 1 else "interleaved")
    for working_set in (False, True):
        plan = sappkit.balance(TABLE, memory_mb=2500, working_set=working_set, **pipeline)
        assert plan.status == "optimal"
        if not working_set or pipeline.get("chunks", 1) == 1:
            expected = reference_memory(plan, **{**pipeline, "schedule": schedule}, working_set=working_set)
            np.testing.assert_allclose(plan.stages.memory_mb, expected)
        if working_set:
            np.testing.assert_allclose(plan.stages.memory_mb, plan.simulate().stages.memory_mb, rtol=0, atol=1e-6)
        parts = ["param_mb", "activation_mb", "overhead_mb", "working_mb", "const_mb"]
        np.testing.assert_allclose(plan.stages[parts].sum(axis=1), plan.stages.memory_mb)
        assert (plan.stages.memory_mb <= 2500 + 1e-6).all() and plan.fits


def test_memory_matches_the_pipeline_model_and_the_simulated_peak_for_1f1b():
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, memory_mb=2500)
    model = stage_memory(TABLE, plan.assignment, stages=4, micro_batches=8, const_mb=100)
    np.testing.assert_allclose(plan.stages.memory_mb, model.memory_mb)
    np.testing.assert_allclose(plan.simulate().stages.memory_mb, plan.stages.memory_mb)


def test_two_chunk_peak_includes_the_seeds_overhead():
    # The simulator measures static + Σ activation x in-flight + overhead for two chunks, m a multiple of p.
    # SAPP's overhead weighs body activations only, so the match holds where head and tail keep none; and
    # without working sets (SAPP's model), since a later first-chunk backward can peak with its own.
    table = TABLE.with_frame(TABLE.frame.assign(activation_mb=TABLE.frame.activation_mb.where(
        TABLE.frame.role == "body", 0.0)))
    # stage 0's first chunk one layer heavier than the second: the overhead bites there
    plan = sappkit.plan_from_offsets(table, stages=2, micro_batches=4, chunks=2, memory_mb=1500, working_set=False,
                                     offset=[[1, -1], [0, 0]])
    assert plan.stages.overhead_mb.tolist() == [30.0, 0.0]
    simulated = sappkit.simulate(plan.costs().assign(working_mb=0.0), schedule="interleaved", micro_batches=4)
    np.testing.assert_allclose(simulated.stages.memory_mb, plan.stages.memory_mb)


def test_times_per_stage():
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, chunks=2, memory_mb=2500)
    stages = plan.stages
    rows = TABLE.frame.set_index(["kind", "option"])
    forward, backward = np.zeros((2, 4)), np.zeros((2, 4))
    for r in plan.assignment.itertuples():
        forward[r.chunk, r.stage] += r.layers * rows.loc[(r.kind, r.option), "forward_time"]
        backward[r.chunk, r.stage] += r.layers * rows.loc[(r.kind, r.option), "backward_time"]
    forward[0, 0] += 1
    backward[0, 0] += 2
    forward[1, 3] += 3
    backward[1, 3] += 6
    np.testing.assert_allclose(stages.forward_time, forward.sum(axis=0))
    recompute = plan.assignment.assign(extra=plan.assignment.option.map({"none": 0, "selective": 1, "full": 3})
                                       * plan.assignment.layers).groupby("stage").extra.sum()
    np.testing.assert_allclose(stages.recompute_time, recompute.reindex(range(4), fill_value=0))
    # The stage time is the stage's work per micro-batch over both chunks; the sapp objective (level 1, m != p)
    # is the largest of SAPP's stage terms, max_c F + max_c B, which is smaller with two chunks.
    np.testing.assert_allclose(stages.time, forward.sum(axis=0) + backward.sum(axis=0))
    assert plan.objective == pytest.approx((forward.max(axis=0) + backward.max(axis=0)).max())
    assert plan.objective < stages.time.max()


@pytest.mark.parametrize("case", ["two chunks, head and tail", "bundled Llama-2-70B"])
def test_one_plan_reads_the_same_in_balance_offsets_the_chooser_alternatives_and_the_simulator(case):
    # One stage time (forward + backward per micro-batch over the stage's chunks, head and tail included) and
    # one stage memory, whichever way the plan is read back.
    if case == "bundled Llama-2-70B":
        layers = sappkit.read_layers_json(DATA / "llama2_70b.json")
        shape, memory = dict(stages=16, micro_batches=32), 58000
    else:
        layers, shape, memory = TABLE, dict(stages=4, micro_batches=8, chunks=2), 2500
    plan = sappkit.balance(layers, memory_mb=memory, **shape)
    lists = plan.offsets()
    configured = sappkit.plan_from_offsets(layers, memory_mb=memory, **shape, **lists)
    partition = sappkit.Partition.from_offsets(layers, **shape, **lists)
    choice = sappkit.choose_recompute(layers, partition, memory_mb=memory)
    per_layer = sappkit.choose_recompute(layers, partition, memory_mb=memory, modes=MODES, per_layer=True)
    found = sappkit.alternatives(per_layer)
    simulated = plan.simulate()
    assert choice.pricing.baseline.name == "configured"
    time, held = plan.stages["time"].to_numpy(), plan.stages["memory_mb"].to_numpy()
    np.testing.assert_allclose(time, plan.stages["forward_time"] + plan.stages["backward_time"])
    for other in (configured.stages, simulated.stages, choice.baseline_stages()):
        np.testing.assert_allclose(other["time"], time, rtol=1e-12)
        np.testing.assert_allclose(other["memory_mb"], held, rtol=1e-12)
    # The simulator's stage time is its busy time per micro-batch; the step is at least m of the slowest.
    np.testing.assert_allclose(simulated.stages["busy_time"], time * shape["micro_batches"], rtol=1e-12)
    # Every choice and alternative carries the baseline's memory (here the balancer's plan) beside its own, and
    # its stage times differ from the plan's by exactly the time it saves.
    for chosen in (choice, per_layer, *found.plans[:3]):
        np.testing.assert_allclose(chosen.stages["baseline_memory_mb"], held, rtol=1e-12)
        np.testing.assert_allclose(chosen.stages["time"] + chosen.stages["time_saved"], time, rtol=1e-12)


@pytest.mark.parametrize("chunks", [1, 2])
def test_offsets_round_trip(chunks):
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, chunks=chunks, memory_mb=1900)
    lists = plan.offsets()
    assert set(lists) == {"offset", "recompute", "select_recompute", "select_comm_recompute"}
    assert isinstance(lists["offset"][0], list) == (chunks > 1)
    back = sappkit.plan_from_offsets(TABLE, stages=4, micro_batches=8, chunks=chunks, memory_mb=1900, **lists)
    assert back.status == "evaluated" and back.fits
    pd.testing.assert_frame_equal(back.assignment, plan.assignment)
    pd.testing.assert_frame_equal(back.stages, plan.stages)
    assert back.objective == plan.objective
    assert yaml.safe_load(plan.to_yaml())["model"]["model_config"]["offset"] == lists["offset"]


def _mixed_plan(options):
    """Stage 0 holds one selective and one comm layer without 'both': the lists would overlap them."""
    costs = dict(none=(4, 30), selective=(5, 12), comm=(5, 14), both=(6, 8))
    rows = [dict(kind="b", role="body", count=8, param_mb=10, option=o, forward_time=2, backward_time=costs[o][0],
                 activation_mb=costs[o][1]) for o in options]
    setup = make_setup(pd.DataFrame(rows), stages=2, micro_batches=4, memory_mb=1000)
    counts = np.zeros((len(options), 1, 2), dtype=int)
    counts[:3, 0] = [[2, 4], [1, 0], [1, 0]]
    return make_plan(setup, counts, status="evaluated", gap=None, solve_seconds=0.0, method="test")


@pytest.mark.parametrize("options, message", [
    (("none", "selective", "comm", "both"),
     "MindFormers' recompute lists cannot express cell (chunk 0, stage 0) (b selective x1, b comm x1, b none x2): "
     "they recompute a cell's first layers, so selective and comm layers overlap into 'both' and earlier kinds "
     "recompute first; use offsets(strict=False) for the nearest config"),
    (("none", "selective", "comm"),
     "MindFormers' recompute lists cannot express this plan: read back, the recompute lists (select_recompute and "
     "select_comm_recompute) configure body layer 0 (kind 'b') as 'both', but kind 'b' has no such option (its "
     "options: 'none', 'selective', 'comm'); use offsets(strict=False) for the nearest config"),
])
def test_offsets_refuse_what_mindformers_cannot_run(options, message):
    mixed = _mixed_plan(options)
    with pytest.raises(sappkit.InputError) as error:
        mixed.offsets()
    assert str(error.value) == message
    assert mixed.offsets(strict=False) == dict(offset=[0, 0], recompute=[0, 0], select_recompute=[1, 0],
                                               select_comm_recompute=[1, 0])


def test_plan_from_offsets_evaluates_an_overflowing_config():
    plan = sappkit.plan_from_offsets(TABLE, stages=4, micro_batches=8, memory_mb=600, offset=[0, 0, 0, 0])
    assert plan.status == "evaluated" and not plan.fits and not plan.has_plan
    assert plan.stages.layers.tolist() == [4, 4, 4, 4]
    with pytest.raises(sappkit.InputError) as error:
        sappkit.plan_from_offsets(TABLE, stages=4, micro_batches=8, memory_mb=900, offset=[1, 0, 0, 0])
    assert str(error.value) == "offset places 17 body layers; the layer table has 16 (so the offsets must sum to 0)"


def test_exports(tmp_path):
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, chunks=2, memory_mb=2500)
    partition = plan.partition()
    assert isinstance(partition, sappkit.Partition)
    assert partition.layer_count == 16 and partition.chunks == 2
    assert sorted(partition.configured) == sorted(np.repeat(plan.assignment.option, plan.assignment.layers))
    path = tmp_path / "plan.lp"
    plan.write_lp(path)
    text = path.read_text()
    assert "memory_cap_3" in text and "stage_time" in text
    lines = plan.describe().splitlines()
    assert len(lines) == 6
    assert plan.objective == 18.0 and plan.time_unit == "time units"
    assert lines[0] == "interleaved: p=4, v=2, m=8, limit 2,500 MB: optimal, sapp objective 18 time units"
    assert lines[1] == "found by: exact search"
    timed = sappkit.balance(sappkit.LayerTable(TABLE.frame, time_unit="ms"), stages=4, micro_batches=8, chunks=2,
                            memory_mb=2500)
    assert timed.describe().splitlines()[0].endswith("objective 18 ms")
    assert timed.stages.attrs["time_unit"] == timed.simulate().time_unit == "ms"
    simulation = plan.simulate(p2p_time=0.5)
    assert simulation.step_time > plan.simulate().step_time


def test_a_plan_written_as_lp_and_yaml_is_whole_or_refused(tmp_path):
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, memory_mb=2500)
    plan.write_yaml(tmp_path / "plan.yaml")
    plan.write_lp(tmp_path / "plan.lp")
    assert (tmp_path / "plan.yaml").read_text() == plan.to_yaml()
    assert (tmp_path / "plan.lp").read_text().startswith("\\* ")
    for write in (plan.write_yaml, plan.write_lp):
        with pytest.raises(sappkit.InputError, match=exactly(f"{tmp_path}/none/plan: cannot write (No such file or "
                                                             "directory); expected a writable file path")):
            write(tmp_path / "none" / "plan")
        with pytest.raises(sappkit.InputError,
                           match=exactly("path must be a file path (a str or a pathlib.Path); got 3")):
            write(3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.lp", "plan.yaml"]


@pytest.mark.parametrize("lists, message", [
    (dict(recompute=[-1, 0, 0, 0]), "recompute[0][0] is -1; cell (chunk 0, stage 0) holds 4 layers (a count is "
                                    "between 0 and the cell's layers)"),
    (dict(offset=[0.5, -0.5, 0, 0]), "offset[0][0] is 0.5; expected an int"),
    (dict(select_comm_recompute=[0, 0, 0, 2**70]), "select_comm_recompute[0][3] is 1180591620717411303424; expected a "
                                                   "bool or an int from -2048 to 2048 (sappkit.limits.MAX_LAYERS)"),
])
def test_plan_from_offsets_refuses_negative_and_non_integer_counts(lists, message):
    with pytest.raises(sappkit.InputError, match=exactly(message)):
        sappkit.plan_from_offsets(TABLE, stages=4, micro_batches=8, memory_mb=900, **lists)


def test_a_plan_without_placement_says_so():
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, memory_mb=100)
    assert plan.status == "infeasible" and plan.counts is not None
    failed = make_plan(plan.setup, None, status="failed", gap=None, solve_seconds=1.0, method="x",
                                    message="no incumbent")
    with pytest.raises(sappkit.InputError) as error:
        failed.offsets()
    assert str(error.value) == "this plan has no placement (status 'failed': no incumbent)"



def test_the_step_time_is_simulated_when_first_read_and_kept_never_while_balancing(monkeypatch):
    import dataclasses

    import sappkit.balancer.plan as plan_module

    timed = []
    real = plan_module.step_timer
    monkeypatch.setattr(plan_module, "step_timer", lambda setup: timed.append(setup) or real(setup))
    plan = sappkit.balance(TABLE, stages=4, micro_batches=8, memory_mb=1900)
    assert plan.objective_name == "sapp" and timed == []  # balance simulates nothing
    assert plan.step_time == pytest.approx(plan.simulate().step_time, rel=1e-12) and len(timed) == 1
    assert plan.step_time == pytest.approx(plan.simulate().step_time, rel=1e-12) and len(timed) == 1  # kept
    # Frozen and hashed by identity, as before.
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.step_time = 1.0
    assert {plan: 1}[plan] == 1 and plan != dataclasses.replace(plan)
    # The step objective's plan carries the balancer's own value; an infeasible solve's is its least-memory
    # placement's, as its frames; a solve without a placement has none.
    fast = sappkit.balance(TABLE, stages=4, micro_batches=8, memory_mb=1900, objective="step")
    assert fast.step_time == fast.objective == pytest.approx(fast.simulate().step_time) and len(timed) == 1
    short = sappkit.balance(TABLE, stages=4, micro_batches=8, memory_mb=100)
    assert short.status == "infeasible" and short.step_time == pytest.approx(short.simulate().step_time)
    failed = make_plan(short.setup, None, status="failed", gap=None, solve_seconds=1.0, method="x")
    assert failed.step_time is None
    assert plan.step_time == 309 and "</p><p>simulated step time 309 time units</p>" in plan._repr_html_()
