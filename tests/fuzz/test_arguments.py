"""Fuzzing the arguments of the public functions: valid combinations, and each argument in turn replaced by a bad
value. A plan or a choice that comes back must fit its memory limit."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from sappkit import (
    LayerTable, Partition, SolverOptions, balance, choose_recompute, even_assignment, fit_memory, in_flight,
    plan_dryruns, plan_from_offsets, read_dryrun_csv, simulate, sweep_memory, sweep_recompute,
)
from sappkit.columns import SAPP_OPTIONS
from sappkit.pipeline.costs import cell_costs

from ..bundled import DATA
from .support import BAD, bad_or, fuzz, refused_or_valid

TABLE = LayerTable(pd.DataFrame([
    dict(kind="embed", role="head", count=1, param_mb=50, option="none", forward_time=1, backward_time=2,
         activation_mb=3),
    *[dict(kind="block", role="body", count=12, param_mb=100, option=o, forward_time=1, backward_time=t,
           activation_mb=a) for o, t, a in (("none", 2, 50), ("selective", 2.2, 20), ("full", 3, 5))],
]))
OBSERVED = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
#: Quick solves: a fuzz case must not wait on a solver.
SOLVER = SolverOptions(time_limit=5)


@st.composite
def arguments(draw, valid: st.SearchStrategy) -> tuple[dict, list[str]]:
    """A valid combination of arguments, or one with one argument replaced by a bad value; what a refusal may name.

    A bad value may happen to be valid (``False`` for a flag); the call then runs on it, and a refusal of the
    combination names that argument.
    """
    values = draw(valid)
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(values)))
        values[name] = draw(st.sampled_from(BAD))
        return values, [name]
    return values, list(values)


@st.composite
def pipelines(draw) -> dict:
    """A pipeline every model accepts: each schedule with the chunks, slices and micro-batches it allows."""
    schedule = draw(st.sampled_from(["1f1b", "interleaved", "dualpipev", "seqpipe"]))
    stages = draw(st.integers(2, 4))
    chunks = {"1f1b": 1, "dualpipev": 2}.get(schedule) or draw(st.integers(1, 3))
    least = 2 * stages if schedule == "dualpipev" else stages if chunks > 1 else 1
    return dict(schedule=schedule, stages=stages, chunks=chunks, micro_batches=draw(st.integers(least, 12)),
                seq_split=draw(st.integers(1, 3)) if schedule == "seqpipe" else 1,
                less_memory=schedule in ("interleaved", "seqpipe") and draw(st.booleans()))


#: The model SeqPipe's rescaling reads (a small one, so that rescaled layers stay small).
SEQ_PARAMS = dict(batch_size=1, num_heads=4, seq_length=64, head_dim=16, hidden_size=64, vocab_size=100,
                  model_parallel=1)


@st.composite
def balance_arguments(draw) -> dict:
    """A pipeline, a memory limit and an objective (and SeqPipe's model where it splits sequences)."""
    values = {**draw(pipelines()), "memory_mb": draw(st.sampled_from([400.0, 2e3, 1e5])),
              "objective": draw(st.sampled_from(["sapp", "step"])), "optimization_level": draw(st.integers(0, 2))}
    if values["seq_split"] > 1:
        values["seq_params"] = SEQ_PARAMS
    return values


def _fits(plan) -> None:
    assert plan.status in ("optimal", "feasible", "time_limit", "infeasible", "failed")
    assert not plan.has_plan or plan.fits, plan.describe()


@fuzz(40)
@given(case=arguments(balance_arguments()))
def test_balance(case):
    values, culprits = case
    refused_or_valid(lambda: balance(TABLE, solver=SOLVER, **values), [*culprits, "seq_params", "layers"], _fits)


LIST = st.one_of(st.integers(-3, 6), st.booleans(), st.lists(bad_or(st.integers(-3, 6)), max_size=4),
                 st.lists(st.lists(st.integers(-2, 4), max_size=3), max_size=3))


@fuzz(30)
@given(stages=st.integers(2, 4), lists=st.fixed_dictionaries(
    {}, optional={"offset": LIST, "recompute": LIST, "select_recompute": LIST, "select_comm_recompute": LIST}))
def test_plan_from_offsets(stages, lists):
    def evaluated(plan):
        assert plan.status == "evaluated"
        counts = plan.assignment.groupby("stage")["layers"].sum()
        assert counts.sum() == TABLE.body_layers and (counts >= 0).all()

    refused_or_valid(lambda: plan_from_offsets(TABLE, stages=stages, micro_batches=4, memory_mb=1e5, **lists),
                     [*lists, "offset"], evaluated)


MODES = st.sampled_from([("off", "full"), ("off", "selective", "full"), {"a": "none", "b": "full"}])


@st.composite
def choose_arguments(draw) -> dict:
    """Options to choose among: a kind's front (no modes), or modes, one for all or one per layer."""
    per_layer = draw(st.booleans())
    return dict(per_layer=per_layer, modes=draw(MODES if per_layer else st.one_of(st.none(), MODES)),
                memory_mb=draw(st.sampled_from([200.0, 900.0, 1e5])), fsdp_holds_grads=draw(st.booleans()),
                bucket_mb=draw(st.sampled_from([0.5, 1.0, 7.0])))
PARTITION = Partition.from_assignment(even_assignment(TABLE, stages=3), stages=3, micro_batches=6)


@fuzz(40)
@given(case=arguments(choose_arguments()))
def test_choose_recompute(case):
    values, culprits = case

    def fits(choice):
        if choice.chosen:
            assert (choice.stages["memory_mb"] <= choice.stages["limit_mb"] + 1e-6).all()

    refused_or_valid(lambda: choose_recompute(TABLE, PARTITION, **values), [*culprits, "modes"], fits)


SIMULATE = st.fixed_dictionaries(dict(micro_batches=st.integers(1, 40), schedule=st.sampled_from(["1f1b", "seqpipe"]),
                                      p2p_time=st.sampled_from([0.0, 0.5]), limit_mb=st.sampled_from([None, 500.0]),
                                      static_mb=st.sampled_from([1000.0, [1000.0, 1200.0, 1400.0]])))
COSTS = cell_costs(TABLE, even_assignment(TABLE, stages=3), stages=3).drop(columns="static_mb")


@fuzz(30)
@given(case=arguments(SIMULATE))
def test_simulate(case):
    values, culprits = case
    def stepped(sim):
        assert np.isfinite(sim.step_time) and sim.step_time > 0, sim.step_time

    refused_or_valid(lambda: simulate(COSTS, **values), [*culprits, "chunks", "stages"], stepped)


LIMITS = st.one_of(st.lists(bad_or(st.floats(100, 1e5)), max_size=5), st.sampled_from(BAD))


@fuzz(30)
@given(limits=LIMITS, recompute=st.booleans())
def test_sweeps(limits, recompute):
    def row_per_limit(frame):
        assert len(frame) == len(limits), (len(frame), limits)

    if recompute:
        refused_or_valid(lambda: sweep_recompute(TABLE, PARTITION, memory_mb=limits), ["memory_mb"], row_per_limit)
    else:
        refused_or_valid(lambda: sweep_memory(TABLE, memory_mb=limits, stages=2, micro_batches=4, progress=False),
                         ["memory_mb"], row_per_limit)


FIT = st.fixed_dictionaries(dict(const=st.sampled_from(["auto", True, False]),
                                 schedule=st.sampled_from(["1f1b", "interleaved"]),
                                 options=st.sampled_from([None, list(SAPP_OPTIONS)]),
                                 tolerance=st.sampled_from([0.02, 0.5])))


@fuzz(30)
@given(case=arguments(FIT))
def test_fit_memory(case):
    values, culprits = case
    refused_or_valid(lambda: fit_memory(OBSERVED, **values), [*culprits, "fit_memory", "chunk"])


OPTIONS = st.sampled_from([["none"], ["none", "full"], ["none", "selective", "full"]])
PLANNER = st.fixed_dictionaries(dict(stages=st.integers(2, 8), layers=st.integers(2, 40), options=OPTIONS,
                                     const=st.booleans(), max_runs=st.integers(1, 4)))


@fuzz(30)
@given(case=arguments(PLANNER))
def test_plan_dryruns(case):
    values, culprits = case
    stages, layers, options = (values.pop(name) for name in ("stages", "layers", "options"))
    refused_or_valid(lambda: plan_dryruns(stages, layers, options, **values),
                     [*culprits, "plan_dryruns", "const=True", "layers must be"])


@fuzz(30)
@given(case=arguments(pipelines()))
def test_in_flight(case):
    values, culprits = case

    def cell_each(frame):
        assert (frame["in_flight"] >= 1).all()
        assert len(frame) == frame["stage"].nunique() * frame["chunk"].nunique()

    refused_or_valid(lambda: in_flight(**values), culprits, cell_each)
