"""The step bench's random instances, its reference search and the stored reference plans."""

import itertools
import json
import re

import numpy as np
import pytest

from sappkit.balancer.step.moves import valid
from sappkit.balancer.optimise import optimise
from sappkit.balancer.plan import make_plan
from sappkit.balancer.setup import make_setup
from sappkit.balancer.ilp.solver import SolverOptions
from sappkit._files import bundled
from sappkit.bench.step import _case_row
from sappkit.bench.step_cases import (BENCH_CASES, FAMILIES, HELD_OUT_CASES, ISSUE_SHAPES, STRESS_CASES, STRESS_FAMILIES,
                                      family_instance, random_instance, step_cases, stress_instance)
from sappkit.bench.step_reference import (CHECKPOINT_ROUNDS, REFERENCE_FILE, reference_search, search_case,
                                          search_seconds, stored_references)
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
    found, time, _ = reference_search(setup, [start], np.random.default_rng(0), seconds=0.5)
    assert valid(setup, found[None])[0]
    simulated = make_plan(setup, found, status="evaluated", gap=None, solve_seconds=0.0, method="reference")
    assert time == pytest.approx(simulated.simulate().step_time, rel=1e-9)
    start_time = make_plan(setup, start, status="evaluated", gap=None, solve_seconds=0.0, method="sapp")
    assert time <= start_time.simulate().step_time * (1 + 1e-12)


def test_the_held_out_families_cover_every_combination_in_turn():
    rng = np.random.default_rng(28)
    assert len(FAMILIES) == 16
    for k in range(16):
        memory, layers, chunks, options = FAMILIES[k]
        table, pipeline = family_instance(rng, FAMILIES[k])
        p, v, m = pipeline["stages"], pipeline["chunks"], pipeline["micro_batches"]
        assert p in (8, 16) and v == chunks and m in (p, 2 * p, 4 * p)
        body = table[table.role == "body"]
        assert body["count"].iloc[0] == layers and len(body) == options
        schedule = "1f1b" if v == 1 else "interleaved"
        full, none = [stage_memory(table, even_assignment(table, stages=p, chunks=v, schedule=schedule, option=o),
                                   stages=p, micro_batches=m, chunks=v, schedule=schedule,
                                   const_mb=pipeline["const_mb"])["memory_mb"].max() for o in ("full", "none")]
        share = {"tight": 0.25, "loose": 0.6}[memory]
        assert pipeline["memory_mb"] == round(full + share * (none - full))


@pytest.fixture(scope="module")
def all_cases():
    """Every case, generated once for the module (about 6 CPU seconds each time: 87 random instances)."""
    return list(step_cases())


def test_the_stress_families_fix_their_shape_and_take_turns(all_cases):
    cases = [case for case in all_cases if case.index >= BENCH_CASES + HELD_OUT_CASES]
    assert len(cases) == STRESS_CASES == 5 * len(STRESS_FAMILIES)
    rng = np.random.default_rng(37)
    for k, case in enumerate(cases):
        memory, layers, options, p, m, v = STRESS_FAMILIES[k % len(STRESS_FAMILIES)]
        body = case.table[case.table.role == "body"]
        assert (body["count"].iloc[0], len(body)) == (layers, options)
        assert (case.pipeline["stages"], case.pipeline["micro_batches"], case.pipeline["chunks"]) == (p, m, v)
        assert case.benchmark.endswith(f"stress {memory} {layers}L {options} options p{p} m{m} v{v}")
        assert case.seconds == (120.0 if k < ISSUE_SHAPES else 30.0)
        table, pipeline = stress_instance(rng, STRESS_FAMILIES[k % len(STRESS_FAMILIES)])
        assert table.equals(case.table) and pipeline == case.pipeline


def test_a_search_re_run_for_its_rounds_finds_the_same_placement():
    case = next(step_cases())._replace(seconds=0.3)
    timed = search_case(case)
    assert timed["rounds"] > CHECKPOINT_ROUNDS
    again = search_case(case, rounds=timed["rounds"])
    assert again == timed
    assert search_case(case, rounds=CHECKPOINT_ROUNDS) == {k: v for k, v in timed.items()
                                                           if k not in ("rounds", "step_time_ms", "counts")}


def test_every_case_has_a_stored_reference_that_fits_and_simulates_to_its_stored_time(all_cases):
    stored = stored_references()
    assert sorted(stored) == list(range(BENCH_CASES + HELD_OUT_CASES + STRESS_CASES))
    assert json.loads(bundled(REFERENCE_FILE).read_text())["command"] == "python data/make_step_references.py"
    for case in all_cases:
        reference = stored[case.index]
        assert (reference["benchmark"], reference["pipeline"]) == (case.benchmark, case.pipeline)
        setup = make_setup(case.table, **case.pipeline)
        counts = np.reshape(reference["counts"], reference["shape"])
        assert valid(setup, counts[None])[0]
        plan = make_plan(setup, counts, status="evaluated", gap=None, solve_seconds=0.0, method="reference")
        assert plan.simulate().step_time == pytest.approx(reference["step_time_ms"], rel=1e-9)
        assert reference["rounds"] > CHECKPOINT_ROUNDS
        assert reference["step_time_ms"] <= reference["checkpoint"]["step_time_ms"]
        assert reference["seconds"] >= case.seconds and search_seconds(case, reference) == reference["seconds"]
    longer = [k for k, reference in stored.items() if reference["seconds"] > 30 and k >= BENCH_CASES + HELD_OUT_CASES]
    assert len(longer) > ISSUE_SHAPES  # stress cases searched again for 120 s, beyond the three the cases ask


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 4, BENCH_CASES + 5, BENCH_CASES + 14])
def test_stored_checkpoints_are_regenerated_identically(index):
    case = next(itertools.islice(step_cases(), index, None))
    assert search_case(case, rounds=CHECKPOINT_ROUNDS)["checkpoint"] == stored_references()[index]["checkpoint"]


def test_a_row_says_when_its_stored_reference_no_longer_simulates_to_its_stored_time():
    case = next(itertools.islice(step_cases(), 1, None))._replace(seconds=0.2)
    stored = search_case(case)
    fresh = _case_row(case, stored)
    assert re.search(r"; 0.2 s search [\d.]+ \(stored, [+-][\d.]+%\);", fresh["detail"])
    longer = _case_row(case, dict(stored, seconds=120.0))
    assert re.search(r"; 120 s search [\d.]+ \(stored, [+-][\d.]+%\);", longer["detail"])
    stale = _case_row(case, dict(stored, step_time_ms=stored["step_time_ms"] * 1.01))
    assert "(stored, STALE: rewrite it, " in stale["detail"] and stale["passed"] is False


def test_case_rows_name_their_set_and_memory_in_a_benchmark_short_enough_for_100_columns(all_cases):
    from sappkit.bench.step import _shown

    shown = {_shown(case.benchmark) for case in all_cases}
    assert shown == {"balance step vs search", "balance step held-out tight", "balance step held-out loose",
                     "balance step stress tight", "balance step stress loose"}
