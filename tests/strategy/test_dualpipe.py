"""DualPipe priced end to end: the even plan is the simulator's, a rank holds both copies' stages, and the
settings it cannot run are refused."""

import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, Strategy, cell_costs, evaluate_strategy, even_assignment, simulate
from sappkit import plan_from_offsets
from sappkit.balancer.evaluate import counts_from_assignment
from sappkit.balancer.setup import make_setup
from sappkit.balancer.views import even_plan

LLAMA = "llama3-70b"


def _uniform(layers, *, forward, backward):
    """Equal body layers only (no head, tail or constant), one option: every cell of both copies is alike."""
    return pd.DataFrame([dict(kind="block", role="body", count=layers, param_mb=10.0, option="none",
                              forward_time=forward, backward_time=backward, activation_mb=1.0)])


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 14), (6, 12), (8, 20)])
def test_the_even_plan_runs_the_reports_bubble(p, m):
    """DeepSeek-V3 report, Table 2: bubble (PP/2 - 1)(F&B + B - 3W). With the weight pass half the backward
    and the backward twice the forward, the input pass takes the forward's time, where the form is exact."""
    forward, per_stage = 1.0, 3
    plan = even_plan(_uniform(per_stage * p, forward=forward, backward=2 * forward), option="none", stages=p,
                     micro_batches=m, memory_mb=1e6, chunks=2, schedule="dualpipe")
    f, b = per_stage * forward, per_stage * 2 * forward
    w = b / 2
    assert plan.step_time == pytest.approx(m * (f + b) + (p / 2 - 1) * ((f + b) + b - 3 * w))
    # Both copies' parameters on every rank (the report's 2x), activations PP + 1 stages' worth.
    assert plan.stages["param_mb"].tolist() == [2 * per_stage * 10.0] * p
    assert plan.stages["activation_mb"].tolist() == [(p + 1) * per_stage * 1.0] * p


@pytest.mark.parametrize("p, m", [(4, 8), (6, 14), (8, 20)])
def test_the_even_plan_is_the_simulated_layer_table(llama, p, m):
    """Head and tail on both copies' ends, the second copy mirroring the first: the balancer's even plan
    prices exactly what the simulator runs on cell_costs' two copies."""
    option = llama.options(llama.body_kinds[0])[0]
    plan = even_plan(llama, option=option, stages=p, micro_batches=m, memory_mb=1e6, chunks=2,
                     schedule="dualpipe")
    costs = cell_costs(llama, even_assignment(llama, stages=p, chunks=2, schedule="dualpipe", option=option),
                       stages=p, chunks=2, schedule="dualpipe")
    sim = simulate(costs, schedule="dualpipe", micro_batches=m)
    assert plan.step_time == pytest.approx(sim.step_time)
    np.testing.assert_allclose(plan.stages["memory_mb"], sim.stages["memory_mb"])


def _evaluate(schedule, *, p=4, batch=16, **options):
    v = 1 if schedule == "1f1b" else 2
    strategy = Strategy(tensor_parallel=8, pipeline_parallel=p, virtual_stages=v, schedule=schedule)
    return evaluate_strategy(LLAMA, strategy, global_batch=batch, recompute="full", **options)


def test_a_rank_holds_its_two_stages_parameters():
    """Rank s holds 1F1B's stage s and stage p - 1 - s: their parameters, gradients and optimizer state
    (the layer table's param_mb) summed; the time is the plan's simulated step plus what follows it."""
    one, two = _evaluate("1f1b"), _evaluate("dualpipe")
    params = one.stages["param_mb"].to_numpy()
    np.testing.assert_allclose(two.stages["param_mb"], params + params[::-1])
    costs = cell_costs(two.layers, even_assignment(two.layers, stages=4, chunks=2, schedule="dualpipe",
                                                   option="full"), stages=4, chunks=2, schedule="dualpipe")
    assert two.plan.step_time == pytest.approx(simulate(costs, schedule="dualpipe", micro_batches=16).step_time)
    assert two.step_time > two.plan.step_time


@pytest.mark.parametrize("p, batch, options, message", [
    (4, 16, dict(placement="balanced"),
     "placement='balanced' does not apply to schedule 'dualpipe': its second model copy mirrors the first "
     "(rank s also holds stage p - 1 - s), which the balancer's solvers do not model; give placement='even'"),
    (5, 20, {}, "strategy t8 p5 v2 dp1 cp1 ep1 b1 dualpipe zero1 breaks the 'schedule' rule: stages must be even "
     "for schedule 'dualpipe'; got 5 (ranks pair up, s with p - 1 - s)"),
    *[(4, batch, {}, "strategy t8 p4 v2 dp1 cp1 ep1 b1 dualpipe zero1 breaks the 'schedule' rule: micro_batches "
       f"must be even and >= 2 * stages = 8 for schedule 'dualpipe'; got {batch} (half run in each direction, "
       "and DualPipe's step order needs p per direction)") for batch in (6, 9)],
])
def test_settings_dualpipe_cannot_run_are_refused(p, batch, options, message):
    with pytest.raises(InputError) as caught:
        _evaluate("dualpipe", p=p, batch=batch, **options)
    assert str(caught.value) == message



def test_placements_the_mirror_cannot_hold_are_refused(llama):
    """Offsets place each chunk on its own, and an assignment's second copy would be overwritten by the
    mirror: both are refused rather than priced as something DualPipe does not run."""
    with pytest.raises(InputError) as caught:
        plan_from_offsets(llama, stages=4, micro_batches=8, chunks=2, schedule="dualpipe", memory_mb=1e6,
                          offset=[[0] * 4] * 2)
    assert str(caught.value) == (
        "schedule 'dualpipe' is not modelled by offsets: it runs two copies of the model in opposite directions; "
        "give another schedule, or simulate it with sappkit.simulate on per-cell costs")
    setup = make_setup(llama, stages=4, micro_batches=8, chunks=2, schedule="dualpipe", memory_mb=1e6)
    both = even_assignment(llama, stages=4, chunks=2, schedule="interleaved")
    with pytest.raises(InputError) as caught:
        counts_from_assignment(setup, both)
    layers = int(both.loc[both["chunk"] == 1, "layers"].sum())
    assert str(caught.value) == ("an assignment for schedule 'dualpipe' places one model copy, on chunk 0 (the "
                                 f"other mirrors it); got {layers} layers on chunk 1")


def _rank_params(evaluation) -> np.ndarray:
    """Parameters on each rank, both copies' stages: the plan's layers times each kind's, head and tails too."""
    setup, counts = evaluation.plan.setup, evaluation.plan.counts
    per_item = evaluation.layers.breakdown.set_index(["kind", "option"])["params"]
    params = np.einsum("ics,i->s", counts, per_item.loc[list(setup.items)].to_numpy())
    for end in setup.fixed:
        params[end.stage] += per_item.xs(end.kind, level="kind").iloc[0]
    return params


def test_the_copies_gradients_are_summed_over_the_pipeline_link():
    """Without data parallelism the only gradient traffic is the copies' sum: an all-reduce over two ranks,
    bytes / bandwidth + two latency steps, of 4-byte gradients (bf16 training) of a rank's two stages, on
    the DGX H100's inter-node link (the pipeline's ranks are t = 8 apart). The breakdown adds up to the step:
    each copy runs half the micro-batches."""
    two = _evaluate("dualpipe")
    cluster = two.cluster
    gbs, latency_ms = cluster.inter_node_gbs * cluster.inter_efficiency, cluster.inter_latency_us / 1e3
    expected = 4 * _rank_params(two) / (gbs * 1e9) * 1e3 + 2 * latency_ms
    np.testing.assert_allclose(two.breakdown["dp_comm_ms"], expected)
    parts = ["compute_ms", "tp_comm_ms", "cp_comm_ms", "ep_comm_ms", "zero_comm_ms", "pp_comm_ms", "dp_comm_ms",
             "optimizer_ms", "idle_ms"]
    np.testing.assert_allclose(two.breakdown[parts].sum(axis=1), two.step_time)
