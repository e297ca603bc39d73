"""One memory truth for every schedule: stage memory is the peak over the stage's memory events.

The events come from the step order alone (:mod:`sappkit.pipeline.memory_events`);
here their peak is checked against a direct step-through of the order and
against the simulator, and a balanced plan's ``stages`` against the
simulated plan and the recompute chooser's pricing of its partition, on
random small interleaved (two and three chunks; ``m = p``, a multiple of
``p`` and not), less-memory and DualPipeV instances with heads, tails and
working sets.
"""

from __future__ import annotations


import numpy as np
import pandas as pd
import pytest

import sappkit
from sappkit.balancer.exact.stage_bounds import fixed_memory
from sappkit.balancer.evaluate import stage_memory
from sappkit.balancer.setup import make_setup
from sappkit.pipeline.memory_events import memory_events
from sappkit.pipeline.orders import stage_orders
from sappkit.pipeline.phases import BACKWARD, BACKWARD_INPUT, BACKWARD_WEIGHT, FORWARD
from sappkit.pipeline.schedules import in_flight_counts

from .test_working_set import chooser_stages, random_table

#: (schedule, stages, micro_batches, chunks, less_memory): interleaved with m = p, m a multiple of p and not,
#: three chunks, the less-memory order, DualPipeV.
SHAPES = [
    ("interleaved", 2, 2, 2, False), ("interleaved", 3, 6, 2, False), ("interleaved", 3, 4, 2, False),
    ("interleaved", 2, 5, 3, False), ("interleaved", 3, 3, 3, False), ("interleaved", 3, 5, 2, True),
    ("interleaved", 2, 4, 3, True), ("dualpipev", 2, 4, 2, False), ("dualpipev", 3, 7, 2, False),
]


def stepped_peaks(schedule, p, m, v, less_memory, k, activation, working):
    """Per stage the highest memory above static, stepping each op of the order: a forward adds its cell's
    activation as it starts; a backward (or input pass) holds its cell's working set while it runs; a unit's
    activation goes when its backward (or weight pass) ends."""
    peaks = []
    for s, ops in enumerate(stage_orders(schedule, p, m, v, less_memory, k)):
        held, peak = 0.0, 0.0
        for phase, chunk, _ in ops:
            if phase == FORWARD:
                held += activation[chunk, s]
            if phase in (BACKWARD, BACKWARD_INPUT):
                peak = max(peak, held + working[chunk, s])
            peak = max(peak, held)
            if phase in (BACKWARD, BACKWARD_WEIGHT):
                held -= activation[chunk, s]
        peaks.append(peak)
    return np.array(peaks)


@pytest.mark.parametrize("schedule, p, m, v, less_memory, k", [
    *((*shape, 1) for shape in SHAPES), ("1f1b", 4, 3, 1, False, 1), ("seqpipe", 3, 4, 2, False, 2),
    ("seqpipe", 3, 4, 1, False, 3), ("zbv", 3, 6, 2, False, 1), ("zb_interleaved", 2, 4, 2, False, 1),
    ("gpipe", 3, 4, 1, False, 1), ("dualpipev_split", 2, 4, 2, False, 1),
])
def test_event_peak_equals_a_step_through_and_the_simulator(rng, schedule, p, m, v, less_memory, k):
    events = memory_events(schedule, p, m, v, less_memory, k)
    for _ in range(20):
        activation, working = rng.uniform(0, 50, (v, p)), rng.uniform(0, 50, (v, p)) * rng.integers(0, 2, (v, p))
        peaks = np.array([events[s].peak(activation[:, s], working[:, s]).max() for s in range(p)])
        np.testing.assert_allclose(peaks, stepped_peaks(schedule, p, m, v, less_memory, k, activation, working),
                                   rtol=0, atol=1e-9)
        costs = pd.DataFrame(dict(stage=np.tile(np.arange(p), v), chunk=np.repeat(np.arange(v), p), forward_time=1.0,
                                  backward_time=rng.uniform(1, 3, p * v), activation_mb=activation.ravel(),
                                  working_mb=working.ravel()))
        simulated = sappkit.simulate(costs, schedule=schedule, micro_batches=m, less_memory=less_memory,
                                     seq_split=k, static_mb=0).stages["memory_mb"]
        np.testing.assert_allclose(peaks, simulated, rtol=0, atol=1e-9)


def test_events_keep_only_undominated_ones():
    for shape in SHAPES:
        for events in memory_events(*shape):
            held, running = events.held, events.running
            for a in range(len(running)):
                for b in range(len(running)):
                    covers = (held[a] >= held[b]).all() and running[a] == running[b]
                    assert a == b or not covers, (shape, held[a], held[b])


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "dualpipev", "seqpipe", "zbv", "gpipe"])
def test_some_event_holds_the_least_in_flight_count_of_every_chunk(schedule):
    # What the exact search's layer cap relies on (stage_bounds.fixed_memory): a stage of n body layers holds
    # at least n layers at its least in-flight count, all at one event.
    for p in range(2, 6):
        for m in range(p, 3 * p + 2):
            v = {"1f1b": 1, "gpipe": 1, "dualpipev": 2, "zbv": 2}.get(schedule, 3)
            k = 2 if schedule == "seqpipe" else 1
            counts = in_flight_counts(schedule, p, max(m, 2 * p) if v == 2 else m, v, False, k)
            for s, events in enumerate(memory_events(schedule, p, max(m, 2 * p) if v == 2 else m, v, False, k)):
                assert events.held.min(axis=1).max() >= counts[:, s].min()


def random_instance(rng, shape):
    """A random small layer table (head, one or two body kinds, maybe a tail, working sets) and the pipeline of
    ``shape``."""
    schedule, p, m, v, less_memory = shape
    kinds = int(rng.integers(1, 3))
    layers = sappkit.LayerTable(random_table(rng, kinds=kinds, count=(p * v + int(rng.integers(1, 4))) // kinds + 1,
                                             tail=bool(rng.integers(2))))
    return layers, dict(schedule=schedule, stages=p, micro_batches=m, chunks=v, less_memory=less_memory)


def test_fixed_memory_is_what_an_empty_stage_holds(rng):
    for shape in SHAPES:
        layers, pipeline = random_instance(rng, shape)
        setup = make_setup(layers, memory_mb=1e6, **pipeline)
        empty = np.zeros((len(setup.items), setup.chunks))
        for s in range(setup.stages):
            assert fixed_memory(setup, s) <= stage_memory(setup, empty, np.array(s)).total + 1e-9


@pytest.mark.parametrize("shape", [pytest.param(shape, marks=pytest.mark.slow) if shape[3] == 3 else shape
                                   for shape in SHAPES],  # three chunks take seconds each: the slow lane
                         ids=[f"{s}-p{p}-m{m}-v{v}{'-less' if lm else ''}" for s, p, m, v, lm in SHAPES])
def test_balanced_plan_memory_is_simulated_and_priced_alike(shape):
    rng = np.random.default_rng(hash(shape) % 2**32)
    for _ in range(2):
        layers, pipeline = random_instance(rng, shape)
        needed = sappkit.balance(layers, memory_mb=1.0, **pipeline).memory_needed_mb
        most = sappkit.balance(layers, memory_mb=1e9, **pipeline).stages["memory_mb"].max()
        limit = needed + 0.3 * (most - needed)
        plan = sappkit.balance(layers, memory_mb=limit, **pipeline)
        assert plan.status == "optimal"
        simulated = plan.simulate().stages
        np.testing.assert_allclose(plan.stages["memory_mb"], simulated["memory_mb"], rtol=0, atol=1e-6)
        np.testing.assert_allclose(plan.stages["working_mb"], simulated["working_mb"], rtol=0, atol=1e-6)
        # The shared schema's parts add up to the peak.
        parts = plan.stages[["param_mb", "activation_mb", "overhead_mb", "working_mb", "const_mb"]].sum(axis=1)
        np.testing.assert_allclose(parts, plan.stages["memory_mb"], rtol=0, atol=1e-6)
        assert plan.fits and (simulated["memory_mb"] <= limit + 1e-6).all()
        if shape[0] == "interleaved":
            chooser = chooser_stages(layers, plan.partition(), limit)
            np.testing.assert_allclose(chooser["memory_mb"], plan.stages["memory_mb"], rtol=0, atol=1e-6)
            assert (chooser["memory_mb"] <= limit + 1e-6).all()
