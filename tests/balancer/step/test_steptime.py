"""The balancer's step timer equals the simulated step of the plan, for every schedule and many placements."""

import numpy as np
import pytest

from sappkit.balancer.plan import make_plan
from sappkit.balancer.setup import make_setup
from sappkit.balancer.step.steptime import step_timer

from ..test_optimise import table

SEQ = dict(batch_size=1, num_heads=8, seq_length=4096, head_dim=128, hidden_size=512, vocab_size=1000,
           model_parallel=8)

PIPELINES = [
    dict(stages=3, micro_batches=6), dict(stages=4, micro_batches=4), dict(stages=3, micro_batches=7, chunks=2),
    dict(stages=3, micro_batches=9, chunks=3, less_memory=True), dict(stages=3, micro_batches=6, chunks=2,
                                                                     schedule="dualpipev"),
    dict(stages=3, micro_batches=3, schedule="seqpipe", seq_split=2, seq_params=SEQ),
    dict(stages=3, micro_batches=6, chunks=2, schedule="zbv"), dict(stages=3, micro_batches=6, chunks=2,
                                                                   schedule="zb_interleaved"),
    dict(stages=3, micro_batches=6, chunks=2, schedule="dualpipev_split"), dict(stages=3, micro_batches=4,
                                                                               schedule="gpipe"),
]


def random_placement(rng, setup):
    """Every body layer on a random cell and a random option of its kind."""
    counts = np.zeros((len(setup.items), setup.chunks, setup.stages), dtype=int)
    for k, kind in enumerate(setup.kinds):
        items = setup.item_indices(kind)
        for _ in range(int(setup.counts[k])):
            counts[rng.choice(items), rng.integers(setup.chunks), rng.integers(setup.stages)] += 1
    return counts


@pytest.mark.parametrize("pipeline", PIPELINES, ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()
                                                                     if k != "seq_params"))
def test_the_timer_equals_the_plans_simulation(rng, pipeline):
    frame = table(rng, kinds=2, counts=(5, 4), options=("none", "selective", "full"), equal_forward=False)
    if pipeline.get("schedule") in ("zbv", "zb_interleaved", "dualpipev_split"):
        # Given split-backward times on some rows, the simulator's defaults on the others.
        frame["backward_weight_time"] = np.where(rng.random(len(frame)) < 0.5, frame.backward_time / 3, np.nan)
    setup = make_setup(frame, memory_mb=1e6, **pipeline)
    timer = step_timer(setup)
    placements = np.array([random_placement(rng, setup) for _ in range(6)])
    simulated = [make_plan(setup, counts, status="evaluated", gap=None, solve_seconds=0.0,
                           method="random").simulate().step_time for counts in placements]
    np.testing.assert_allclose(timer.times(placements), simulated, rtol=1e-9)
    assert timer.time(placements[0]) == pytest.approx(simulated[0], rel=1e-9)


def test_cell_weights_give_the_paths_lengths(rng):
    setup = make_setup(table(rng, counts=(9,)), stages=3, micro_batches=6, chunks=2, memory_mb=1e6)
    timer = step_timer(setup)
    counts = random_placement(rng, setup)
    paths = timer.graph.paths
    fixed = paths @ timer.durations(np.zeros_like(counts))
    by_weights = np.einsum("piq,iq->p", timer.cell_weights(paths), counts.reshape(len(setup.items), -1)) + fixed
    np.testing.assert_allclose(by_weights, paths @ timer.durations(counts), rtol=1e-12)
    # The critical path's length is the step time (no transfer time here).
    assert timer.critical(counts) @ timer.durations(counts) == pytest.approx(timer.time(counts), rel=1e-12)


@pytest.mark.parametrize("pipeline", PIPELINES[:5], ids=lambda p: "-".join(f"{k}={v}" for k, v in p.items()))
def test_the_runs_op_ends_give_each_placements_longest_path_as_timing_it_alone_does(rng, pipeline):
    setup = make_setup(table(rng, counts=(9,)), memory_mb=1e6, **pipeline)
    timer = step_timer(setup)
    placements = np.array([random_placement(rng, setup) for _ in range(5)])
    times, sums, ends = timer.runs(placements)
    np.testing.assert_allclose(times, timer.times(placements), rtol=1e-12)
    for k, counts in enumerate(placements):
        path = timer.critical(counts, ends[:, k])
        assert path.tolist() == timer.critical(counts).tolist()
        assert path @ timer.durations(counts) == pytest.approx(times[k], rel=1e-12)
    # another placement's ends walk another path: the given ends are the ones walked
    assert any(timer.critical(placements[0], ends[:, k]).tolist() != timer.critical(placements[0]).tolist()
               for k in range(1, 5))


def test_a_plan_for_the_step_objective_reports_its_simulated_step(rng):
    setup = make_setup(table(rng, counts=(8,)), stages=2, micro_batches=4, memory_mb=1e6, objective="step")
    counts = random_placement(rng, setup)
    plan = make_plan(setup, counts, status="evaluated", gap=None, solve_seconds=0.0, method="offsets")
    assert plan.objective == pytest.approx(plan.simulate().step_time, rel=1e-12)
