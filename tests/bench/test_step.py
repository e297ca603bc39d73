"""The step bench's random instances and its reference search."""

import numpy as np
import pytest

from sappkit.balancer.step.local_search import valid
from sappkit.balancer.optimise import optimise
from sappkit.balancer.plan import make_plan
from sappkit.balancer.setup import make_setup
from sappkit.balancer.ilp.solver import SolverOptions
from sappkit.bench.step import random_instance, reference_search
from sappkit.pipeline.costs import even_assignment, stage_memory


def test_random_instances_sit_between_full_and_no_recompute():
    rng = np.random.default_rng(3)
    for _ in range(5):
        table, pipeline = random_instance(rng)
        p, v, m = pipeline["stages"], pipeline["chunks"], pipeline["micro_batches"]
        assert p in (4, 8, 16) and v in (1, 2, 3) and m in (p, 2 * p, 4 * p)
        schedule = "1f1b" if v == 1 else "interleaved"
        peaks = [stage_memory(table, even_assignment(table, stages=p, chunks=v, schedule=schedule, option=option),
                              stages=p, micro_batches=m, chunks=v, schedule=schedule,
                              const_mb=pipeline["const_mb"])["memory_mb"].max() for option in ("full", "none")]
        assert peaks[0] < pipeline["memory_mb"] < peaks[1]


def test_the_reference_search_finds_valid_placements_no_slower_than_its_starts():
    table, pipeline = random_instance(np.random.default_rng(11))
    setup = make_setup(table, **pipeline)
    start = optimise(setup, SolverOptions()).counts
    found, time = reference_search(setup, [start], 0.5, np.random.default_rng(0))
    assert valid(setup, found[None])[0]
    simulated = make_plan(setup, found, status="evaluated", gap=None, solve_seconds=0.0, method="reference")
    assert time == pytest.approx(simulated.simulate().step_time, rel=1e-9)
    start_time = make_plan(setup, start, status="evaluated", gap=None, solve_seconds=0.0, method="sapp")
    assert time <= start_time.simulate().step_time * (1 + 1e-12)
