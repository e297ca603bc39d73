"""The exact search over runs of several body kinds: the same optimum as brute force and as the ILP.

With one chunk every stage holds one run of the model, which may span the
end of one kind and the start of the next; these tests check the runs'
fronts hold every mix a stage could want, the closed-form least memory, and
the optimum against an enumeration of every placement (judged by
:func:`~sappkit.balancer.evaluate.evaluate` itself) and against the integer
program.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sappkit import balance
from sappkit.balancer.exact import segments
from sappkit.balancer.exact.cells import Cache
from sappkit.balancer.evaluate import evaluate
from sappkit.balancer.exact import why_not_applicable, least_memory, search
from sappkit.balancer.setup import make_setup
from sappkit.layers.units import format_mb

from .test_enumeration import assert_search_proves_brute_force, judged, with_working_sets
from ..test_optimise import loose_limit, placements, solve_both_ways, table


def every_placement(setup):
    """(largest stage memory, ``sapp`` objective) of every placement in model order of its kinds."""
    per_kind = []
    for k, kind in enumerate(setup.kinds):
        items = setup.item_indices(kind)
        per_kind.append(placements(int(setup.counts[k]), len(items) * setup.stages).reshape(-1, len(items), 1,
                                                                                        setup.stages))
    return judged(setup, (np.concatenate(parts, axis=0) for parts in itertools.product(*per_kind)
                          if _in_model_order(parts)))


def _in_model_order(parts) -> bool:
    """No stage holds a kind once a later kind has started on an earlier stage."""
    by_kind = np.array([part.sum(axis=(0, 1)) for part in parts])  # [kind, stage]
    started = np.cumsum(by_kind, axis=1) - by_kind > 0  # the kind has layers on an earlier stage
    return not (started[1:] & (by_kind[:-1] > 0)).any()


def two_kinds(rng, counts, options, *, working, tail=True):
    frame = table(rng, kinds=len(counts), counts=counts, options=options, tail=tail)
    return with_working_sets(rng, frame) if working else frame


@pytest.mark.parametrize("counts, options", [((2, 3), ("none", "full")), ((2, 2), ("none", "selective", "full")),
                                             ((1, 2, 2), ("none", "full"))], ids=["2+3", "3 options", "3 kinds"])
@pytest.mark.parametrize("working", [False, True], ids=["no working set", "working set"])
def test_the_search_over_runs_equals_brute_force(counts, options, working):
    rng = np.random.default_rng(7)
    for trial in range(2):
        frame = two_kinds(rng, counts, options, working=working, tail=bool(trial % 2))
        assert_search_proves_brute_force(frame, (0.7, 1.0, 1.4), listed=every_placement, stages=3, micro_batches=4,
                                         working_set=working, consistent_recompute=False)


@pytest.mark.parametrize("working", [False, True], ids=["no working set", "working set"])
def test_the_search_over_runs_agrees_with_the_ilp(rng, working):
    for _ in range(2):
        frame = two_kinds(rng, (7, 11), ("none", "selective", "full"), working=working)
        limit = loose_limit(frame, stages=4, micro_batches=8)
        for scale in (0.6, 0.9):
            fast, ilp, status = solve_both_ways(frame, stages=4, micro_batches=8, memory_mb=limit * scale,
                                                working_set=working)
            assert status in ("optimal", "infeasible")
            assert fast is not None and fast == pytest.approx(ilp, rel=1e-6)


def test_run_fronts_hold_every_mix_a_stage_could_want(rng):
    # Against every mix of a run's layers: each is matched or beaten on backward, activation and the working
    # set of the run's last layer (which belongs to its last kind).
    setup = make_setup(with_working_sets(rng, table(rng, kinds=2, counts=(3, 3), options=("none", "comm", "full"))),
                       stages=2, micro_batches=2, memory_mb=1e9, working_set=True, consistent_recompute=False)
    order = setup.cell_order
    for composition in [(1, 0), (0, 2), (2, 1), (3, 3), (1, 3)]:
        front = segments.run_front(setup, composition, Cache(), working=True)
        ranges = [range(n + 1) for k, n in enumerate(composition) for _ in setup.item_indices(setup.kinds[k])]
        for mix in itertools.product(*ranges):
            mix = np.array(mix)
            if [mix[setup.item_indices(kind)].sum() for kind in setup.kinds] != list(composition):
                continue
            last = [i for i in order if mix[i]][-1]
            b, a, w = mix @ setup.backward, mix @ setup.activation, setup.working[last]
            assert ((front.backward <= b + 1e-9) & (front.activation <= a + 1e-9)
                    & (front.working <= w + 1e-9)).any(), (composition, mix.tolist())
        for point, mix in enumerate(front.mix):
            assert [mix[setup.item_indices(kind)].sum() for kind in setup.kinds] == list(composition)
            assert front.working[point] == setup.working[[i for i in order if mix[i]][-1]]


def test_the_least_memory_in_closed_form_is_the_least_over_every_mix(rng):
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(3, 4), options=("none", "selective", "full")))
    setup = make_setup(frame, stages=3, micro_batches=4, memory_mb=1e9, working_set=True, consistent_recompute=False)
    runs = segments._runs(setup, 7)
    closed = segments._least_memory(setup, runs)
    for r in range(len(runs.start)):
        front = segments.run_front(setup, runs.composition(r), Cache(), working=True)
        every = segments._stage_memory(setup, runs.layers[r], front.activation, front.charged())
        assert closed[:, r] == pytest.approx(every.min(axis=1), rel=1e-12)


def test_least_memory_and_infeasible_limits(rng):
    frame = with_working_sets(rng, table(rng, kinds=2, counts=(2, 3), options=("none", "full")))
    setup = make_setup(frame, stages=3, micro_batches=4, memory_mb=1.0, working_set=True, consistent_recompute=False)
    placed = every_placement(setup)
    counts = least_memory(setup)
    assert evaluate(setup, counts).stages["memory_mb"].max() == pytest.approx(placed[0].min(), rel=1e-9)
    found = search(setup)
    assert found.proven and found.counts is None
    plan = balance(frame, stages=3, micro_batches=4, memory_mb=1.0, consistent_recompute=False)
    assert plan.status == "infeasible" and plan.method == "exact search"
    assert plan.message == (f"no placement fits 1 MB; the least-memory placement needs {format_mb(placed[0].min())} on "
                            f"stage {plan.binding_stage}")


@pytest.mark.parametrize("change, reason", [
    (dict(consistent_recompute=True), "recompute consistency between body kinds"),
    (dict(optimization_level=2), "optimization_level >= 2"),
])
def test_where_the_search_over_runs_does_not_apply(rng, change, reason):
    frame = table(rng, kinds=2, counts=(4, 4), options=("none", "full"))
    setup = make_setup(frame, **{**dict(stages=2, micro_batches=4, memory_mb=1e9, consistent_recompute=False),
                                 **change})
    assert why_not_applicable(setup) == reason
    assert search(setup) is None
