"""The schedule simulator against closed forms, the in-flight formulas and its own event rules."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sappkit import InputError, in_flight, simulate
from sappkit.pipeline.orders import stage_orders
from sappkit.pipeline.schedules import in_flight_counts, model_order


def uniform_costs(p, v=1, *, forward=1.0, backward=2.0, activation=1.0, recompute=0.0):
    return pd.DataFrame(dict(stage=np.tile(np.arange(p), v), chunk=np.repeat(np.arange(v), p),
                             forward_time=forward, backward_time=backward, recompute_time=recompute,
                             activation_mb=activation))


def random_costs(rng, p, v):
    costs = uniform_costs(p, v)
    costs["forward_time"] = rng.uniform(0.5, 2.0, len(costs))
    costs["backward_time"] = costs["forward_time"] * rng.uniform(1.5, 3.0, len(costs))
    costs["recompute_time"] = costs["backward_time"] * rng.uniform(0.0, 0.3, len(costs))
    costs["activation_mb"] = rng.uniform(1.0, 100.0, len(costs))
    return costs


def held_counts(timeline, p, v):
    """Units held per cell ``[chunk, stage]`` and per stage at their peaks, recounted from the timeline alone.

    A unit is held from its forward's start to the end of its backward (or
    weight pass); at equal times a release comes before a new forward (ops on a
    stage do not overlap).
    """
    phase = timeline["phase"].to_numpy()
    forward = phase == "forward"
    time = np.where(forward, timeline["start"], timeline["end"])
    delta = np.select([forward, phase == "backward_input"], [1, 0], -1)
    stage, chunk = timeline["stage"].to_numpy(), timeline["chunk"].to_numpy()

    def peaks(group):
        order = np.lexsort((delta, time, group))
        group = group[order]
        running = np.cumsum(delta[order])  # every group nets zero, so the running sum restarts at each
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        return group[starts], np.maximum.reduceat(running, starts)

    cells, cell_peaks = peaks(chunk * p + stage)
    grid = np.zeros(v * p, dtype=int)
    grid[cells] = cell_peaks
    _, stage_peaks = peaks(stage)
    return grid.reshape(v, p), stage_peaks


def counts_at_first_backward(timeline, p, v):
    """What each cell ``[chunk, stage]`` holds when its stage starts its first backward (the end of warm-up)."""
    first_backward = timeline[timeline.phase == "backward"].groupby("stage")["start"].min()
    before = timeline[(timeline.phase == "forward") & (timeline.start < timeline.stage.map(first_backward))]
    counts = np.zeros((v, p), dtype=int)
    np.add.at(counts, (before["chunk"].to_numpy(), before["stage"].to_numpy()), 1)
    return counts


# --- the micro-batches in flight ---------------------------------------------------------------

EXACT_SHAPES = (
    [("1f1b", p, m, 1, False, 1) for p in range(2, 7) for m in range(1, 3 * p + 1)]
    + [("dualpipev", p, m, 2, False, 1) for p in range(2, 7) for m in range(2 * p, 3 * p + 2)]
    + [("seqpipe", p, m, 1, False, k) for p in range(2, 6) for m in range(1, 2 * p + 1) for k in (2, 3)]
    + [(schedule, p, m, v, False, 1) for schedule, v in (("gpipe", 1), ("looped_bfs", 3), ("zbv", 2))
       for p in range(2, 6) for m in range(1, 3 * p + 1)]
    + [("dualpipev_split", p, m, 2, False, 1) for p in range(2, 6) for m in range(2 * p, 3 * p + 2)]
    + [("zb_interleaved", p, m, v, False, 1) for v in (1, 2, 3) for p in range(2, 6) for m in range(1, 3 * p + 1)
       if m % max(1, m // p) == 0]
)


@pytest.mark.parametrize("schedule, p, m, v, less_memory, k", EXACT_SHAPES)
def test_peak_in_flight_equals_the_formula(schedule, p, m, v, less_memory, k):
    sim = simulate(uniform_costs(p, v), schedule=schedule, micro_batches=m, less_memory=less_memory, seq_split=k)
    expected = in_flight(schedule, p, m, chunks=v, less_memory=less_memory, seq_split=k)
    pd.testing.assert_frame_equal(sim.in_flight, expected)
    cell, _ = held_counts(sim.timeline, p, v)
    np.testing.assert_array_equal(cell, in_flight_counts(schedule, p, m, v, less_memory, k))


INTERLEAVED_SHAPES = [(p, m, v, less_memory) for p in range(2, 7) for v in (2, 3) for less_memory in (False, True)
                      for m in range(p, 3 * p + 1)]


@pytest.mark.parametrize("p, m, v, less_memory", INTERLEAVED_SHAPES)
def test_interleaved_holds_the_formula_at_the_end_of_warmup(p, m, v, less_memory):
    """m multiple of p: each cell holds in_flight as the steady state starts, and the stage never more in all.

    Otherwise the first group is p + r long and the stage holds (v - 1) r more.
    """
    sim = simulate(uniform_costs(p, v), schedule="interleaved", micro_batches=m, less_memory=less_memory)
    formula = in_flight_counts("interleaved", p, m, v, less_memory)
    cell, stage = held_counts(sim.timeline, p, v)
    extra = (v - 1) * (m % p)
    np.testing.assert_array_equal(stage, formula.sum(axis=0) + extra)
    np.testing.assert_array_equal(sim.stages["memory_mb"], formula.sum(axis=0) + extra)
    np.testing.assert_array_equal(cell, sim.in_flight["in_flight"].to_numpy().reshape(v, p))
    if m % p == 0:
        np.testing.assert_array_equal(counts_at_first_backward(sim.timeline, p, v), formula)
        assert (cell >= formula).all() and (cell <= min(2 * p, m)).all()


@pytest.mark.parametrize("p, m, v, less_memory, k", [
    (p, m, v, less_memory, k) for p in range(2, 6) for v in (2, 3) for less_memory in (False, True)
    for k in (1, 2, 3) for m in range(-(-3 * p // k), -(-3 * p // k) + 4)])
def test_interleaved_seqpipe_holds_the_formula_total(p, m, v, less_memory, k):
    """Chunks and slices: a stage's peak is Σ in_flight + (v - 1)(first group - p), group g = k ceil(p / k)."""
    sim = simulate(uniform_costs(p, v), schedule="seqpipe", micro_batches=m,
                   less_memory=less_memory, seq_split=k)
    group = k * -(-p // k)
    first_group = group + (m * k) % group
    formula = in_flight_counts("seqpipe", p, m, v, less_memory, k)
    expected = formula.sum(axis=0) + (v - 1) * (first_group - p)
    _, stage = held_counts(sim.timeline, p, v)
    np.testing.assert_array_equal(stage, expected)
    np.testing.assert_allclose(sim.stages["memory_mb"], expected)


# --- step time and bubbles ---------------------------------------------------------------------

@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 5, 8, 16])
def test_uniform_1f1b_step_time_and_bubble(p, m):
    f, b = 3.0, 5.0
    sim = simulate(uniform_costs(p, forward=f, backward=b), schedule="1f1b", micro_batches=m)
    assert sim.step_time == (m + p - 1) * (f + b)
    idle_share = sim.stages["idle_time"].sum() / (p * sim.step_time)
    assert idle_share == pytest.approx((p - 1) / (m + p - 1))
    assert sim.bubbles["real"] == pytest.approx((p - 1) / m)
    assert sim.bubbles["ideal"] == pytest.approx((p - 1) / m)
    assert sim.bubbles["imbalance"] == pytest.approx(0, abs=1e-12)
    np.testing.assert_allclose(sim.stages["busy_time"], m * (f + b))


@pytest.mark.parametrize("p", [2, 4, 5, 8])
@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("less_memory", [False, True])
def test_interleaving_shrinks_the_bubble_to_ideal(p, v, groups, less_memory):
    m = groups * p
    sim = simulate(uniform_costs(p, v, forward=1.0 / v, backward=2.0 / v), schedule="interleaved",
                   micro_batches=m, less_memory=less_memory)
    assert sim.bubbles["real"] == pytest.approx((p - 1) / (v * m))
    assert sim.bubbles["imbalance"] == pytest.approx(0, abs=1e-9)
    plain = simulate(uniform_costs(p, forward=1.0, backward=2.0), schedule="1f1b", micro_batches=m)
    assert sim.step_time < plain.step_time


@pytest.mark.parametrize("k", [1, 2, 4])
def test_uniform_seqpipe_runs_m_k_slices(k):
    """Costs are per slice: the step is 1F1B over m k slices."""
    p, m, f, b = 4, 6, 2.0, 4.0
    sim = simulate(uniform_costs(p, forward=f, backward=b), schedule="seqpipe", micro_batches=m, seq_split=k)
    assert sim.step_time == (m * k + p - 1) * (f + b)
    assert sim.bubbles["ideal"] == pytest.approx((p - 1) / (m * k))
    assert sim.bubbles["real"] == pytest.approx((p - 1) / (m * k))
    assert sorted(sim.timeline["slice"].unique()) == list(range(k))
    assert sorted(sim.timeline["micro_batch"].unique()) == list(range(m))


def test_recompute_splits_the_bubble():
    """Uniform 1F1B with recompute r in the backward: real = (m+p-1)(f+b) / (m (f+b-r)) - 1."""
    p, m, f, b, r = 4, 8, 1.0, 3.0, 1.0
    sim = simulate(uniform_costs(p, forward=f, backward=b, recompute=r), schedule="1f1b", micro_batches=m)
    assert sim.bubbles["real"] == pytest.approx((m + p - 1) * (f + b) / (m * (f + b - r)) - 1)
    assert sim.bubbles["recompute"] == pytest.approx(r / (f + b - r))
    b_ = sim.bubbles
    assert b_["real"] == pytest.approx(b_["ideal"] + b_["imbalance"] + b_["recompute"])
    backward = sim.timeline[sim.timeline.phase == "backward"]
    assert (backward["recompute_time"] == r).all()
    assert (sim.timeline.loc[sim.timeline.phase == "forward", "recompute_time"] == 0).all()


def test_p2p_time_adds_two_hops_per_stage_for_one_micro_batch():
    p, c = 5, 0.25
    sim = simulate(uniform_costs(p), schedule="1f1b", micro_batches=1, p2p_time=c)
    assert sim.step_time == pytest.approx(p * 3.0 + 2 * (p - 1) * c)


def test_interleaved_p2p_crosses_from_the_last_stage_to_the_first():
    """Model order goes (0, p-1) -> (1, 0): a stage change, so it pays p2p; DualPipeV's turn does not."""
    p, c = 2, 10.0
    interleaved = simulate(uniform_costs(p, 2), schedule="interleaved", micro_batches=2, p2p_time=c)
    t = interleaved.timeline.set_index(["stage", "chunk", "micro_batch", "phase"])
    assert t.loc[(0, 1, 0, "forward"), "start"] >= t.loc[(1, 0, 0, "forward"), "end"] + c
    dual = simulate(uniform_costs(p, 2), schedule="dualpipev", micro_batches=4, p2p_time=c)
    d = dual.timeline.set_index(["stage", "chunk", "micro_batch", "phase"])
    assert d.loc[(1, 1, 0, "forward"), "start"] == d.loc[(1, 0, 0, "forward"), "end"]


# --- the event rules, checked op by op -------------------------------------------------------

SCHEDULE_SHAPES = st.sampled_from([
    ("1f1b", 1, False, 1), ("interleaved", 2, False, 1), ("interleaved", 3, True, 1),
    ("dualpipev", 2, False, 1), ("seqpipe", 1, False, 2), ("seqpipe", 2, False, 2),
    ("gpipe", 1, False, 1), ("looped_bfs", 2, False, 1), ("zb_interleaved", 2, False, 1), ("zbv", 2, False, 1),
    ("dualpipev_split", 2, False, 1),
])
#: The costs column each phase takes its duration from.
DURATION = {"forward": "forward_time", "backward": "backward_time", "backward_input": "backward_input_time",
            "backward_weight": "backward_weight_time"}


@settings(max_examples=40, deadline=None)
@given(shape=SCHEDULE_SHAPES, p=st.integers(2, 5), extra=st.integers(0, 5), p2p=st.sampled_from([0.0, 0.3]),
       seed=st.integers(0, 2**16))
def test_every_op_starts_as_soon_as_its_stage_and_input_allow(shape, p, extra, p2p, seed):
    schedule, v, less_memory, k = shape
    m = (2 * p if schedule.startswith("dualpipev") else p) + extra
    if schedule == "zb_interleaved":
        m -= m % max(1, m // p)
    rng = np.random.default_rng(seed)
    costs = random_costs(rng, p, v)
    weight_share = rng.uniform(0.2, 0.8, len(costs))
    costs["backward_weight_time"] = (costs["backward_time"] - costs["recompute_time"]) * weight_share
    costs["backward_input_time"] = costs["backward_time"] - costs["backward_weight_time"]
    sim = simulate(costs, schedule=schedule, micro_batches=m, less_memory=less_memory, seq_split=k,
                   p2p_time=p2p)
    timeline = sim.timeline
    cells = model_order(schedule, p, v)
    position = {cell: i for i, cell in enumerate(cells)}
    # A whole backward and an input pass both hand the gradient on: key them alike.
    ends = {(row.phase.replace("backward_input", "backward"), row.chunk, row.stage, row.micro_batch, row.slice):
            row.end for row in timeline.itertuples()}
    cost = costs.set_index(["chunk", "stage"])
    for stage, ops in timeline.groupby("stage", sort=True):
        free = 0.0
        for row in ops.itertuples():
            i = position[(row.chunk, stage)]
            if row.phase == "forward":
                source = (("forward", *cells[i - 1]) if i > 0 else None)
            elif row.phase == "backward_weight":
                source = ("backward", *cells[i])
            elif i == len(cells) - 1:
                source = ("forward", *cells[i])
            else:
                source = ("backward", *cells[i + 1])
            ready = 0.0
            if source is not None:
                ready = ends[(*source, row.micro_batch, row.slice)] + (p2p if source[2] != stage else 0.0)
            assert row.start == pytest.approx(max(free, ready))
            assert row.end - row.start == pytest.approx(cost.loc[(row.chunk, stage), DURATION[row.phase]])
            free = row.end
    assert sim.step_time == pytest.approx(timeline["end"].max())


@pytest.mark.parametrize("schedule, p, m, v, less_memory, k", [
    ("1f1b", 4, 3, 1, False, 1), ("interleaved", 4, 10, 3, False, 1), ("interleaved", 3, 6, 2, True, 1),
    ("dualpipev", 3, 7, 2, False, 1), ("seqpipe", 3, 4, 1, False, 3), ("seqpipe", 4, 3, 2, True, 3),
    ("gpipe", 3, 5, 1, False, 1), ("looped_bfs", 3, 5, 3, False, 1), ("zb_interleaved", 4, 10, 3, False, 1),
    ("zbv", 3, 4, 2, False, 1), ("zbv", 4, 11, 2, False, 1), ("dualpipev_split", 4, 9, 2, False, 1),
])
def test_each_stage_runs_every_op_once_forward_before_backward(schedule, p, m, v, less_memory, k):
    for ops in stage_orders(schedule, p, m, v, less_memory, k):
        # Each unit: a forward, then a whole backward or an input pass followed by a weight pass.
        phases = {}
        for phase, c, u in ops:
            phases.setdefault((c, u), []).append(phase)
        assert sorted(phases) == [(c, u) for c in range(v) for u in range(m * k)]
        assert {tuple(run) for run in phases.values()} <= {(0, 1), (0, 2, 3)}


@pytest.mark.parametrize("schedule, p, m, v, less_memory, k", [
    ("1f1b", 4, 6, 1, False, 1), ("interleaved", 4, 8, 3, False, 1), ("interleaved", 3, 7, 2, True, 1),
    ("dualpipev", 3, 7, 2, False, 1), ("seqpipe", 4, 3, 2, True, 3), ("zbv", 4, 11, 2, False, 1),
    ("dualpipev_split", 4, 9, 2, False, 1),
])
def test_the_stage_time_is_the_stages_forward_and_backward_per_micro_batch(rng, schedule, p, m, v, less_memory,
                                                                         k):
    # sappkit's one stage time (a plan's and a recompute choice's ``time``): each cell's forward + backward
    # (recompute included) summed over the stage's chunks, which the stage runs once per unit of the step.
    costs = random_costs(rng, p, v)
    sim = simulate(costs, schedule=schedule, micro_batches=m, less_memory=less_memory, seq_split=k, p2p_time=0.3)
    expected = (costs["forward_time"] + costs["backward_time"]).groupby(costs["stage"]).sum()
    np.testing.assert_allclose(sim.stages["time"], expected.to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(sim.stages["busy_time"], expected.to_numpy() * m * k, rtol=1e-12)
    assert (sim.stages["time"] * m * k <= sim.step_time * (1 + 1e-12)).all()


# --- memory ------------------------------------------------------------------------------------

def seed_two_chunk_overhead(p, m, s, a0, a1, less_memory):
    """SAPP's pipeline balancer's interleaved overhead for two chunks (``init_overhead_variables``), dropped
    when m = p."""
    if m == p:
        return 0.0
    factor = p - s if less_memory else p - abs(p - 2 * s - 1)
    return max(0.0, factor * (a0 - a1))


@pytest.mark.parametrize("schedule, v, m_of", [("1f1b", 1, lambda p: [1, p - 1, p, 3 * p]),
                                                ("dualpipev", 2, lambda p: [2 * p, 2 * p + 3])])
@pytest.mark.parametrize("p", [2, 3, 5])
def test_peak_memory_is_static_plus_activation_times_in_flight(rng, schedule, v, m_of, p):
    for m in m_of(p):
        costs = random_costs(rng, p, v)
        static = rng.uniform(0, 1000, p)
        sim = simulate(costs, schedule=schedule, micro_batches=m, static_mb=static.tolist())
        counts = in_flight_counts(schedule, p, m, v)
        activation = costs.set_index(["chunk", "stage"])["activation_mb"].to_numpy().reshape(v, p)
        np.testing.assert_allclose(sim.stages["memory_mb"], static + (activation * counts).sum(axis=0))


@pytest.mark.parametrize("p", [2, 3, 4, 6])
@pytest.mark.parametrize("groups", [1, 2, 3])
@pytest.mark.parametrize("less_memory", [False, True])
def test_two_chunk_peak_adds_the_seeds_overhead(rng, p, groups, less_memory):
    m = groups * p
    costs = random_costs(rng, p, 2)
    sim = simulate(costs, schedule="interleaved", micro_batches=m, less_memory=less_memory)
    counts = in_flight_counts("interleaved", p, m, 2, less_memory)
    a = costs.set_index(["chunk", "stage"])["activation_mb"].to_numpy().reshape(2, p)
    overhead = [seed_two_chunk_overhead(p, m, s, a[0, s], a[1, s], less_memory) for s in range(p)]
    np.testing.assert_allclose(sim.stages["memory_mb"], (a * counts).sum(axis=0) + overhead)


@pytest.mark.parametrize("v, less_memory", [(3, False), (3, True), (4, False)])
def test_more_chunks_peak_lies_between_the_formula_and_the_cell_peaks(rng, v, less_memory):
    p, m = 4, 8
    costs = random_costs(rng, p, v)
    sim = simulate(costs, schedule="interleaved", micro_batches=m, less_memory=less_memory)
    a = costs.set_index(["chunk", "stage"])["activation_mb"].to_numpy().reshape(v, p)
    lower = (a * in_flight_counts("interleaved", p, m, v, less_memory)).sum(axis=0)
    upper = (a * sim.in_flight["in_flight"].to_numpy().reshape(v, p)).sum(axis=0)
    memory = sim.stages["memory_mb"].to_numpy()
    assert (memory >= lower - 1e-9).all() and (memory <= upper + 1e-9).all()
    equal_chunks = costs.assign(activation_mb=np.tile(a[0], v))
    flat = simulate(equal_chunks, schedule="interleaved", micro_batches=m, less_memory=less_memory)
    np.testing.assert_allclose(flat.stages["memory_mb"], (a[0] * in_flight_counts(
        "interleaved", p, m, v, less_memory)).sum(axis=0))


def test_memory_timeline_steps_through_the_peak_and_back():
    p, m = 3, 4
    sim = simulate(uniform_costs(p, activation=10.0), schedule="1f1b", micro_batches=m, static_mb=100.0,
                   limit_mb=500)
    memory = sim.memory
    for stage, rows in memory.groupby("stage"):
        assert rows["time"].is_monotonic_increasing and rows["time"].is_unique and rows["time"].iloc[0] == 0
        assert rows["memory_mb"].iloc[-1] == pytest.approx(100.0)
        assert rows["memory_mb"].max() == sim.stages.loc[stage, "memory_mb"]
    first = memory[memory.stage == 0]
    assert first["memory_mb"].iloc[0] == 110.0  # stage 0 starts its first forward at time 0
    assert memory[memory.stage == 2]["memory_mb"].iloc[0] == 100.0
    assert (sim.stages["limit_mb"] == 500).all()


def test_stage_frame_splits_static_memory():
    costs = uniform_costs(2, activation=10.0).assign(static_mb=[300.0, 200.0], param_mb=[100.0, 150.0],
                                                     memory_once_mb=[5.0, 0.0])
    stages = simulate(costs, schedule="1f1b", micro_batches=4).stages
    assert stages["param_mb"].tolist() == [100.0, 150.0]
    assert stages["activation_mb"].tolist() == [25.0, 10.0]
    assert stages["const_mb"].tolist() == [195.0, 50.0]
    assert stages["memory_mb"].tolist() == [320.0, 210.0]
    assert stages["limit_mb"].isna().all()
    assert (stages[["overhead_mb", "working_mb"]] == 0).all().all()


def test_static_mb_as_a_series_by_stage():
    sim = simulate(uniform_costs(3), schedule="1f1b", micro_batches=3,
                   static_mb=pd.Series([7.0, 8.0, 9.0], index=[2, 0, 1]))
    assert sim.stages["memory_mb"].tolist() == [8.0 + 3, 9.0 + 2, 7.0 + 1]


def test_a_bubble_longer_than_the_compute_reads_as_a_multiple_not_a_percentage_over_100():
    """8 stages, 4 micro-batches: SAPP's ideal bubble (p - 1) / m = 7/4 of the compute, 7/11 of the step."""
    sim = simulate(uniform_costs(8, activation=10.0), schedule="1f1b", micro_batches=4, static_mb=100)
    assert sim.bubbles["real"] == pytest.approx(7 / 4) and sim.bubbles["of_step"] == pytest.approx(7 / 11)
    assert sim.describe().splitlines()[2] == ("bubble 1.75x the compute = ideal 1.75x + imbalance 0.0% + recompute "
                                              "0.0%; idle 63.6% of the step")


def test_describe_names_the_pipeline_the_unit_and_the_peak():
    sim = simulate(uniform_costs(4, activation=10.0), schedule="1f1b", micro_batches=8, static_mb=100)
    assert sim.describe() == ("1f1b: 4 stages, 1 chunk(s), 8 micro-batches\nstep time 33 time units\n"
                              "bubble 37.5% of the compute = ideal 37.5% + imbalance 0.0% + recompute 0.0%; idle "
                              "27.3% of the step\npeak memory 140 MB on stage 0")
    over = simulate(uniform_costs(4, activation=10.0), schedule="1f1b", micro_batches=8, static_mb=100,
                    limit_mb=1234, time_unit="us")
    assert over.describe().splitlines()[1:4:2] == ["step time 33 us", "peak memory 140 MB on stage 0 of 1,234 MB"]
    assert simulate(uniform_costs(4), micro_batches=8, static_mb=200, limit_mb=100).describe().endswith(
        "of 100 MB, over the limit")


def test_the_time_unit_comes_from_the_argument_or_the_costs_and_marks_every_frame():
    costs = uniform_costs(2)
    assert simulate(costs, micro_batches=2).time_unit == "time units"
    costs.attrs["time_unit"] = "ms"
    sim = simulate(costs, micro_batches=2)
    assert sim.time_unit == "ms"
    assert {frame.attrs["time_unit"] for frame in (sim.timeline, sim.memory, sim.stages)} == {"ms"}
    assert simulate(costs, micro_batches=2, time_unit="us").time_unit == "us"


# --- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("change, kwargs, message", [
    (lambda c: c.drop(columns="activation_mb"), {},
     "costs is missing column(s) 'activation_mb'; a costs frame needs stage, chunk, forward_time, "
     "backward_time, activation_mb"),
    (lambda c: c.iloc[0:0], {}, "costs has no rows; it needs one row per (chunk, stage) cell"),
    (lambda c: c.assign(forward_time=[1.0, -1.0]), {},
     "costs row 1 column 'forward_time' is -1.0; expected a finite number >= 0"),
    (lambda c: c.assign(stage=[0, 0.5]), {},
     "costs row 1 column 'stage' is 0.5; expected a whole number >= 0"),
    (lambda c: c.assign(stage=[0, 0]), {},
     "costs row 1 repeats cell (chunk, stage) = (0, 0); each cell has one row"),
    (lambda c: c.assign(stage=[0, 2]), {},
     "costs has no row for cell (chunk, stage) = (0, 1); stages 0..2 and chunks 0..0 need a row each"),
    (lambda c: c.assign(recompute_time=[0.0, 3.0]), {},
     "costs row 1 has recompute_time 3.0 above its backward_time 2.0; the recompute is part of the backward"),
    (lambda c: c.assign(forward_time=0.0, backward_time=0.0), {},
     "costs has no compute time: forward_time + backward_time - recompute_time sums to 0 over the cells"),
    (lambda c: c.assign(static_mb=1.0), {"static_mb": 5},
     "static_mb is given both as an argument and as a costs column; give one"),
    (lambda c: c, {"static_mb": [1, 2, 3]}, "static_mb must be one number or 2 (one per stage); got [1, 2, 3]"),
    (lambda c: c, {"static_mb": [1, -2]}, "static_mb[1] must be a finite number >= 0; got -2"),
    (lambda c: c, {"static_mb": pd.Series([1.0, 2.0], index=[1, 2])},
     "static_mb must be indexed by stages 0..1; got index [1, 2]"),
    (lambda c: c, {"p2p_time": -1}, "p2p_time must be a finite number >= 0; got -1"),
    (lambda c: c, {"limit_mb": 0}, "limit_mb must be a finite number > 0; got 0"),
    (lambda c: c, {"schedule": "pipedream"},
     "schedule must be one of '1f1b', 'interleaved', 'dualpipev', 'seqpipe', 'gpipe', "
     "'looped_bfs', 'zb_interleaved', 'zbv', 'dualpipev_split', 'dualpipe'; got 'pipedream'"),
    (lambda c: c, {"micro_batches": 0}, "micro_batches must be an int >= 1; got 0"),
    (lambda c: c, {"schedule": "dualpipev"}, "chunks must be 2 for schedule 'dualpipev' (the V); got 1"),
    (lambda c: c.assign(static_mb=[10.0, 10.0], param_mb=[20.0, 0.0]), {},
     "static memory of stage 0 (10 MB) is less than its param_mb + memory_once_mb (20 MB); "
     "static_mb includes both"),
])
def test_bad_input_names_the_argument(change, kwargs, message):
    arguments = dict(schedule="1f1b", micro_batches=4) | kwargs
    with pytest.raises(InputError) as caught:
        simulate(change(uniform_costs(2)), **arguments)
    assert str(caught.value) == message


def test_costs_must_be_a_frame():
    with pytest.raises(InputError) as caught:
        simulate([1, 2], schedule="1f1b", micro_batches=2)
    assert str(caught.value) == ("costs must be a DataFrame with columns stage, chunk, forward_time, "
                                 "backward_time, activation_mb; got list")


def test_two_chunks_need_an_interleaved_schedule():
    with pytest.raises(InputError) as caught:
        simulate(uniform_costs(2, 2), schedule="1f1b", micro_batches=4)
    assert str(caught.value) == "chunks must be 1 for schedule '1f1b'; got 2 (use schedule='interleaved')"


# --- split backwards and the schedules PyTorch runs --------------------------------------------

@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 16), (8, 16), (8, 32)])
def test_zbv_has_a_smaller_bubble_than_1f1b_at_the_same_peak_memory(p, m):
    # The same layers: 1F1B runs them as one chunk per stage, ZB-V as two halves (F = I = W, Qi et al. sec. 6).
    one = simulate(uniform_costs(p, forward=2.0, backward=4.0, activation=2.0), schedule="1f1b", micro_batches=m)
    zbv = simulate(uniform_costs(p, 2), schedule="zbv", micro_batches=m)
    assert one.step_time == (m + p - 1) * 6  # (m + p - 1)(F + B)
    assert zbv.step_time == m * 6 + (p - 1) * 1  # every unit's work, plus one chunk forward per hop
    assert zbv.stages["memory_mb"].tolist() == [2.0 * p] * p == [one.stages["memory_mb"].max()] * p
    assert zbv.bubbles["real"] < one.bubbles["real"] / 3


def test_the_input_pass_keeps_only_what_the_weight_pass_needs():
    costs = uniform_costs(2, 2, activation=10.0).assign(weight_pass_mb=4.0, backward_input_time=1.5,
                                                        backward_weight_time=0.5)
    sim = simulate(costs, schedule="zbv", micro_batches=1)
    memory = sim.memory[sim.memory["stage"] == 1].set_index("time")["memory_mb"]
    timeline = sim.timeline[sim.timeline["stage"] == 1].set_index(["chunk", "phase"])
    # Stage 1 runs F0 F1 I1 W1 I0 W0: two units held, then 10 - 4 freed after I1, 4 after W1, ...
    assert memory.loc[timeline.loc[(1, "backward_input"), "end"]] == 14.0
    assert memory.loc[timeline.loc[(1, "backward_weight"), "end"]] == 10.0
    assert timeline.loc[(1, "backward_input"), "end"] - timeline.loc[(1, "backward_input"), "start"] == 1.5
    assert sim.stages["memory_mb"].tolist() == [20.0, 20.0]


def test_the_default_split_gives_the_weight_pass_half_the_backward_beyond_recompute():
    costs = uniform_costs(2, 2, backward=3.0, recompute=1.0)
    timeline = simulate(costs, schedule="zbv", micro_batches=2).timeline
    duration = (timeline["end"] - timeline["start"]).groupby(timeline["phase"]).unique()
    assert duration.to_dict() == {"backward_input": [2.0], "backward_weight": [1.0], "forward": [1.0]}
    assert timeline.loc[timeline["phase"] == "backward_input", "recompute_time"].eq(1.0).all()


def test_orders_given_run_instead_of_the_schedules_own():
    costs = random_costs(np.random.default_rng(1), 3, 2)
    own = simulate(costs, schedule="zbv", micro_batches=5)
    given = simulate(costs, schedule="zbv", micro_batches=5, orders=[list(o) for o in stage_orders("zbv", 3, 5, 2)])
    assert given.step_time == own.step_time
    pd.testing.assert_frame_equal(given.timeline, own.timeline)
    # 1F1B run GPipe-style: every forward first, then every backward.
    gpipe = simulate(uniform_costs(2), schedule="1f1b", micro_batches=3, orders=stage_orders("gpipe", 2, 3))
    assert gpipe.in_flight["in_flight"].tolist() == [3, 3]


@pytest.mark.parametrize("orders, message", [
    ([[]], "orders must hold one sequence of ops per stage (2); got [[]]"),
    ([[(0, 0, 0), (1, 0)], []], "orders[0][1] must be (phase, chunk, unit) with phase in 0..3, chunk in 0..0 and "
                                "unit >= 0; got (1, 0)"),
    ([[(0, 0, 0), (1, 0, 0)], [(0, 0, 0), (4, 0, 0)]], "orders[1][1] must be (phase, chunk, unit) with phase in "
                                                       "0..3, chunk in 0..0 and unit >= 0; got (4, 0, 0)"),
    ([[(0, 0, 0), (1, 0, 0)], [(0, 0, 0), (2, 0, 0)]], "orders run cell (chunk, stage) = (0, 1) unit 0 as phases "
                                                       "[0, 2]; each unit needs one forward (0) and one backward "
                                                       "(1), or one input pass (2) and one weight pass (3)"),
    ([[(0, 0, 0), (1, 0, 0)], [(0, 0, 3), (1, 0, 0)]], "orders run unit 3 on stage 1; the step has units 0..0"),
    ([[(1, 0, 0), (0, 0, 0)], [(0, 0, 0), (1, 0, 0)]], "the step orders deadlock: each stage's next op waits for "
                                                       "an op that never runs first (stage: position of its next "
                                                       "op in its order) {0: 0, 1: 0}"),
])
def test_bad_orders_are_refused(orders, message):
    with pytest.raises(InputError) as caught:
        simulate(uniform_costs(2), schedule="1f1b", micro_batches=1, orders=orders)
    assert str(caught.value) == message


@pytest.mark.parametrize("column, value, message", [
    ("weight_pass_mb", 2.0, "costs row 0 has weight_pass_mb 2.0 above its activation_mb 1.0; the weight pass "
                            "keeps part of the activation"),
    ("backward_input_time", 0.5, "costs row 0 has recompute_time 1.0 above its backward_input_time 0.5; the "
                                 "recompute runs in the input pass"),
])
def test_split_columns_are_checked(column, value, message):
    costs = uniform_costs(2, recompute=1.0).assign(**{column: value})
    with pytest.raises(InputError) as caught:
        simulate(costs, schedule="1f1b", micro_batches=2)
    assert str(caught.value) == message


#: Every schedule with the chunks it runs, and whether it may take ``less_memory``.
ALL_SCHEDULES = [("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("gpipe", 1), ("looped_bfs", 2),
                 ("zb_interleaved", 2), ("zbv", 2), ("dualpipev", 2), ("dualpipev_split", 2), ("seqpipe", 1),
                 ("dualpipe", 2)]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(case=st.sampled_from(ALL_SCHEDULES), p=st.integers(2, 6), extra=st.integers(0, 8), seed=st.integers(0, 10**6),
       p2p=st.sampled_from([0.0, 0.3]))
def test_no_bubble_term_is_negative_and_they_add_up(case, p, extra, seed, p2p):
    """Each schedule's own ideal: on random cells none of ideal, imbalance, recompute is negative."""
    schedule, v = case
    m = 2 * p + extra  # DualPipeV needs two micro-batches per stage; the others run with fewer too
    if schedule == "zb_interleaved":  # PyTorch runs it in equal rounds of m // p micro-batches
        m = p * (2 + extra % 3)
    if schedule == "dualpipe":  # ranks pair up, and half the micro-batches run in each direction
        p, m = p + p % 2, 2 * (p + p % 2) + 2 * (extra // 2)
    costs = random_costs(np.random.default_rng(seed), p, v)
    b = simulate(costs, schedule=schedule, micro_batches=m, p2p_time=p2p).bubbles
    assert min(b["ideal"], b["imbalance"], b["recompute"]) >= -1e-9, (schedule, b.to_dict())
    assert b["real"] == pytest.approx(b["ideal"] + b["imbalance"] + b["recompute"])
    assert b["of_step"] == pytest.approx(1 - (1 + b["recompute"]) / (1 + b["real"]))


@pytest.mark.parametrize(("schedule", "v"), [("zbv", 2), ("zb_interleaved", 2), ("dualpipev_split", 2)])
def test_the_zero_bubble_orders_have_their_own_ideal(llama, schedule, v):
    """The bundled model on 16 stages: the split-backward orders' ideal is below interleaved's (p - 1) / (v m),
    and the imbalance term is no longer negative (it read -14.3% for ZB-V with the interleaved formula)."""
    from sappkit.demo import simulate_layers

    b = simulate_layers(llama, stages=16, micro_batches=32, schedule=schedule, chunks=v).bubbles
    assert 0 < b["ideal"] < 15 / 64 and b["imbalance"] >= 0


def test_equal_cells_make_the_ideal_the_whole_bubble_and_the_step_share_megatrons():
    """1F1B on equal cells: SAPP's bubble (p - 1) / m of the compute is Megatron's (p - 1) / (m + p - 1) of the
    step."""
    b = simulate(uniform_costs(4), micro_batches=8).bubbles
    assert (b["real"], b["ideal"], b["of_step"]) == (pytest.approx(3 / 8), pytest.approx(3 / 8), pytest.approx(3 / 11))
