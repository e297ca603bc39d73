"""The step time as a longest path: equal to the simulator's, the path that sets it, the stage paths below it."""

import numpy as np
import pandas as pd
import pytest

from sappkit import simulate
from sappkit.pipeline.critical import levels_of, op_ends, step_ends, step_graph, step_runs, step_times
from sappkit.pipeline.paths import critical_path, stage_critical_paths
from sappkit.pipeline.events import step_plan

#: (schedule, p, m, v, k, less_memory): every order the simulator runs; interleaved with m a multiple of p and
#: not, SeqPipe with and without chunks, the V shapes, the split backwards and DualPipe's two directions.
SHAPES = [
    ("1f1b", 4, 8, 1, 1, False), ("1f1b", 5, 3, 1, 1, False), ("interleaved", 4, 8, 2, 1, False),
    ("interleaved", 4, 10, 3, 1, False), ("interleaved", 3, 7, 2, 1, True), ("interleaved", 4, 12, 3, 1, True),
    ("seqpipe", 4, 4, 1, 2, False), ("seqpipe", 4, 6, 2, 2, False), ("dualpipev", 3, 8, 2, 1, False),
    ("zbv", 3, 8, 2, 1, False), ("zb_interleaved", 4, 8, 2, 1, False), ("dualpipev_split", 3, 8, 2, 1, False),
    ("gpipe", 3, 5, 1, 1, False), ("looped_bfs", 3, 5, 2, 1, False), ("dualpipe", 4, 10, 2, 1, False),
    ("dualpipe", 6, 12, 2, 1, False),
]


def random_cells(rng, p, v):
    """A costs frame with random forward, backward, recompute and split-backward times per cell."""
    forward = rng.uniform(0.5, 3.0, v * p)
    backward = rng.uniform(1.0, 6.0, v * p)
    recompute = backward * rng.uniform(0.0, 0.3, v * p)
    weight = (backward - recompute) * rng.uniform(0.2, 0.8, v * p)
    return pd.DataFrame(dict(stage=np.tile(np.arange(p), v), chunk=np.repeat(np.arange(v), p),
                             forward_time=forward, backward_time=backward, recompute_time=recompute,
                             backward_input_time=backward - weight, backward_weight_time=weight,
                             activation_mb=1.0))


def durations_of(costs, schedule, p, m, v, k, less_memory):
    """The duration vector of ``costs``: each phase's times in model order."""
    cells = step_plan(schedule, p, m, v, k, less_memory).cells
    row = {(c, s): i for i, (c, s) in enumerate(zip(costs.chunk, costs.stage))}
    order = [row[cell] for cell in cells]
    columns = ("forward_time", "backward_time", "backward_input_time", "backward_weight_time")
    return np.concatenate([costs[column].to_numpy()[order] for column in columns])


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("p2p_time", [0.0, 0.37])
def test_the_longest_path_is_the_simulated_step(rng, shape, p2p_time):
    schedule, p, m, v, k, less_memory = shape
    graph = step_graph(*shape)
    batch, simulated = [], []
    for _ in range(5):
        costs = random_cells(rng, p, v)
        simulation = simulate(costs, schedule=schedule, micro_batches=m, seq_split=k, less_memory=less_memory,
                              static_mb=0, p2p_time=p2p_time)
        simulated.append((simulation.step_time, simulation.timeline["end"].sum()))
        batch.append(durations_of(costs, *shape))
    times, ends = step_ends(graph, np.array(batch), p2p_time)
    np.testing.assert_allclose(times, [t for t, _ in simulated], rtol=1e-12)
    np.testing.assert_allclose(ends, [e for _, e in simulated], rtol=1e-12)
    assert step_times(graph, np.array(batch), p2p_time).tolist() == times.tolist()
    for durations, step in zip(batch, times):
        path = critical_path(graph, durations, p2p_time)
        # Without transfer time the path's ops add up to the step; with it, the transfers make up the rest.
        # (a path of one stage's ops alone may sum to the step in another order: a rounding apart)
        assert (path @ durations == pytest.approx(step, rel=1e-12) if not p2p_time
                else path @ durations <= step * (1 + 1e-12))
        assert path.sum() >= 2 * m * k  # a stage's ops at least, a unit's forward and backward on every cell


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("p2p_time", [0.0, 0.37])
def test_the_level_sweep_is_the_op_by_op_arithmetic_exactly(rng, shape, p2p_time):
    graph = step_graph(*shape)
    layout = levels_of(graph)
    # a level's ops fill consecutive rows, and every op's inputs lie in the rows of earlier levels
    assert sorted(layout.row[:-1].tolist()) == list(range(graph.ops)) and layout.row[-1] == graph.ops
    for lo, hi, inputs, _ in layout.levels:
        assert ((inputs < lo) | (inputs == graph.ops)).all()
    durations = rng.uniform(0.0, 5.0, (6, graph.durations))
    times, _, ends = step_runs(graph, durations, p2p_time)
    one_by_one = np.array([op_ends(graph, row, p2p_time) for row in durations])
    assert (ends[layout.row[:-1]].T == one_by_one).all() and (ends[-1] == 0).all()
    assert times.tolist() == one_by_one.max(axis=1).tolist()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
def test_stage_paths_bound_the_step_and_meet_it_on_uniform_cells(rng, shape):
    graph = step_graph(*shape)
    durations = rng.uniform(0.0, 5.0, (200, graph.durations)) * (rng.random((200, graph.durations)) < 0.9)
    assert ((durations @ graph.paths.T).max(axis=1) <= step_times(graph, durations) * (1 + 1e-12)).all()
    uniform = np.ones((1, graph.durations))
    bound, step = (uniform @ graph.paths.T).max(), step_times(graph, uniform)[0]
    # DualPipe's longest path crosses both model copies; the stage paths follow the first one only.
    assert bound == pytest.approx(step) if shape[0] != "dualpipe" else bound <= step


def test_one_f_one_b_round_trip_is_the_textbook_bound():
    # 1F1B: stage s's round trip is Σ (F + B) + (m - 1) B_s + (m - p + s) F_s.
    p, m = 4, 8
    graph = step_graph("1f1b", p, m, 1, 1, False)
    forward, backward = np.arange(1.0, p + 1), np.arange(2.0, 2 * p + 1, 2)
    durations = np.concatenate([forward, backward, np.zeros(2 * p)])
    through, trip = (graph.paths @ durations).reshape(p, 2).T
    expected = [(forward + backward).sum() + (m - 1) * backward[s] + (m - p + s) * forward[s] for s in range(p)]
    assert trip.tolist() == expected
    # Through stage s: the forwards before it, all its ops, the backwards before it.
    assert through.tolist() == [m * (forward[s] + backward[s]) + (forward + backward)[:s].sum() for s in range(p)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("p2p_time", [0.0, 1e-4, 0.37])
def test_the_paths_through_every_stage_are_paths_of_the_graph(rng, shape, p2p_time):
    """Each path's ops add up to at most the step (their own durations and any others: a cut), the path
    through the stage that sets the step is a longest path, and every path crosses its stage."""
    graph = step_graph(*shape)
    durations = rng.uniform(0.0, 5.0, (6, graph.durations)) * (rng.random((6, graph.durations)) < 0.9)
    times, paths = stage_critical_paths(graph, durations, p2p_time)
    np.testing.assert_allclose(times, step_times(graph, durations, p2p_time), rtol=1e-12)
    lengths = np.einsum("rsd,rd->rs", paths, durations)
    assert (lengths <= times[:, None] * (1 + 1e-12)).all()
    if p2p_time < 1e-3:  # a longest path: its ops and at most one transfer per op on it
        np.testing.assert_allclose(lengths.max(axis=1), times, rtol=1e-12, atol=p2p_time * graph.ops)
    others = rng.uniform(0.0, 5.0, (50, graph.durations))
    assert ((others @ paths.reshape(-1, graph.durations).T).max(axis=1)
            <= step_times(graph, others) * (1 + 1e-12)).all()
    stage = np.concatenate([np.full(len(ops), s) for s, ops in enumerate(step_plan(*shape).stage_ops)])
    for s in range(shape[1]):
        on_stage = np.zeros(graph.durations, dtype=bool)
        on_stage[graph.duration[stage == s]] = True
        assert (paths[:, s][:, on_stage].sum(axis=1) >= 1).all()


def test_a_one_f_one_b_path_through_the_last_stage_crosses_every_stage():
    # Uniform cells, p = 3, m = 4: the last stage's longest path is the textbook (m + p - 1)(F + B).
    graph = step_graph("1f1b", 3, 4, 1, 1, False)
    durations = np.concatenate([np.ones(3), 2 * np.ones(3), np.zeros(6)])
    times, paths = stage_critical_paths(graph, durations)
    assert times.tolist() == [18.0] and paths[0, 2] @ durations == 18.0
