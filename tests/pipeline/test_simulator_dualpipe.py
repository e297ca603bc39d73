"""DualPipe simulated: the report's bubble and activation columns, and each direction's dependencies."""

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, balance, cell_costs, even_assignment, simulate, stage_memory
from sappkit.pipeline.memory_events import memory_events
from sappkit.pipeline.schedules import in_flight_counts
from sappkit.pipeline.zero_bubble import dualpipe

#: (p, m): even ranks, and from the fewest micro-batches DualPipe takes (2p) to many.
SHAPES = [(p, m) for p in (2, 4, 6, 8) for m in (2 * p, 2 * p + 2, 4 * p, 4 * p + 6)]


def costs_of(p, *, forward, backward, weight, activation=1.0):
    """Equal cells: every stage of both model copies runs the same layers."""
    return pd.DataFrame(dict(stage=np.tile(np.arange(p), 2), chunk=np.repeat([0, 1], p), forward_time=forward,
                             backward_time=backward, backward_weight_time=weight, activation_mb=activation))


@pytest.mark.parametrize("p, m", SHAPES)
@pytest.mark.parametrize("weight", [0.25, 0.5, 1.0])
def test_the_bubble_is_the_reports_closed_form(p, m, weight):
    """DeepSeek-V3 report, Table 2: bubble (PP/2 - 1)(F&B + B - 3W), B the whole backward. A pair runs its
    forward then its backward, F&B = F + B; the form is exact where the input pass takes the forward's time
    (its figure's equal F and B chunks, W any)."""
    forward = 1.5
    backward = forward + weight
    sim = simulate(costs_of(p, forward=forward, backward=backward, weight=weight), schedule="dualpipe",
                   micro_batches=m, static_mb=0)
    bubble = (p / 2 - 1) * ((forward + backward) + backward - 3 * weight)
    assert sim.step_time == pytest.approx(m * (forward + backward) + bubble)
    np.testing.assert_allclose(sim.stages["idle_time"], bubble, atol=1e-9)  # every rank idles as long


@pytest.mark.parametrize("p, m", SHAPES)
def test_each_rank_holds_pp_plus_one_stage_activations(rng, p, m):
    """Table 2's activation column, PP + 1, in 1F1B's unit (its PP): one micro-batch's activation of one
    stage of the model; each rank holds two stages, one of each copy."""
    sim = simulate(costs_of(p, forward=1.0, backward=2.0, weight=1.0), schedule="dualpipe", micro_batches=m,
                   static_mb=0)
    assert sim.stages["activation_mb"].tolist() == [p + 1] * p
    assert sim.in_flight["in_flight"].tolist() == in_flight_counts("dualpipe", p, m, 2).ravel().tolist()
    # The order's memory events give the same peaks for any cells' activations.
    activation = rng.uniform(1.0, 10.0, (2, p))
    costs = costs_of(p, forward=1.0, backward=2.0, weight=1.0).assign(activation_mb=activation.ravel())
    peaks = simulate(costs, schedule="dualpipe", micro_batches=m, static_mb=0).stages["activation_mb"]
    events = memory_events("dualpipe", p, m, 2)
    np.testing.assert_allclose([e.peak(activation[:, s], np.zeros(2)).max() for s, e in enumerate(events)], peaks)


@pytest.mark.parametrize("p, m", [(4, 8), (6, 14), (8, 16)])
def test_each_micro_batch_runs_its_own_direction(rng, p, m):
    """The first m/2 micro-batches run chunk 0 from rank 0 down, the others chunk 1 from rank p - 1 up; a
    forward follows the forward on the rank before in its direction, a backward's (or input pass's) the
    gradient of the rank after, a weight pass its own input pass; a paired op's output leaves with the next
    op's."""
    costs = costs_of(p, forward=1.0, backward=2.0, weight=1.0).assign(
        forward_time=rng.uniform(0.5, 2.0, 2 * p), backward_time=rng.uniform(2.0, 4.0, 2 * p))
    timeline = simulate(costs, schedule="dualpipe", micro_batches=m, static_mb=0, p2p_time=0.1).timeline
    half = m // 2
    assert (timeline["chunk"] == (timeline["micro_batch"] >= half)).all()
    # Where each op's output is ready: its end, or for a paired op the end of the op after it.
    ready = timeline["end"].copy()
    for s in range(p):
        rows = timeline.index[timeline["stage"] == s]
        for position in dualpipe(p, m, s)[1]:
            ready[rows[position]] = timeline.loc[rows[position + 1], "end"]
    at = {(row.phase, row.micro_batch, row.stage): (row.start, ready[i]) for i, row in timeline.iterrows()}
    for row in timeline.itertuples():
        direction = 1 if row.chunk == 0 else -1
        before, after = row.stage - direction, row.stage + direction
        if row.phase == "forward" and 0 <= before < p:
            assert row.start >= at["forward", row.micro_batch, before][1] + 0.1 - 1e-9
        if row.phase in ("backward", "backward_input") and 0 <= after < p:
            gradient = at.get(("backward", row.micro_batch, after)) or at["backward_input", row.micro_batch, after]
            assert row.start >= gradient[1] + 0.1 - 1e-9
        if row.phase in ("backward", "backward_input") and not 0 <= after < p:
            assert row.start >= at["forward", row.micro_batch, row.stage][1] - 1e-9
        if row.phase == "backward_weight":
            assert row.start >= at["backward_input", row.micro_batch, row.stage][1] - 1e-9


def _two_copies(model):
    return (f"schedule 'dualpipe' is not modelled by {model}: it runs two copies of the model in opposite "
            "directions; give another schedule, or simulate it with sappkit.simulate on per-cell costs")


def test_the_balancer_refuses_dualpipe(llama):
    with pytest.raises(InputError) as caught:
        balance(llama, stages=4, micro_batches=8, chunks=2, schedule="dualpipe", memory_mb=80000)
    assert str(caught.value) == _two_copies("the balancer")


@pytest.mark.parametrize("p, m", [(4, 8), (8, 20)])
def test_a_layer_table_runs_as_two_mirrored_copies(llama, p, m):
    """One copy placed as 1F1B places it; rank s runs its stage s (chunk 0) and stage p - 1 - s (chunk 1), the
    report's 2x parameters a rank; stage_memory, from the order's events, is the simulated peak."""
    plan = even_assignment(llama, stages=p, chunks=2, schedule="dualpipe")
    assert plan.equals(even_assignment(llama, stages=p))
    one = cell_costs(llama, plan, stages=p)
    costs = cell_costs(llama, plan, stages=p, chunks=2, schedule="dualpipe")
    other = costs[costs["chunk"] == 1].reset_index(drop=True)
    for column in ("forward_time", "backward_time", "activation_mb", "param_mb", "working_mb"):
        assert other[column].tolist() == one[column].tolist()[::-1]
    assert (costs.groupby("stage")["const_mb"].sum() == llama.const_mb).all()  # once a rank
    sim = simulate(costs, schedule="dualpipe", micro_batches=m)
    assert sim.stages["param_mb"].tolist() == (one["param_mb"] + one["param_mb"][::-1].to_numpy()).tolist()
    memory = stage_memory(llama, plan, stages=p, micro_batches=m, chunks=2, schedule="dualpipe")
    np.testing.assert_allclose(memory["memory_mb"], sim.stages["memory_mb"])
