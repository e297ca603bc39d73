"""Fuzzing the frames users pass in: layer tables, dry-run observations, simulator costs, partition cells and the
frames the plots draw, each with one column corrupted, repeated or stacked under a second level."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from sappkit import (
    LayerTable, Partition, balance, fit_memory, plot_memory_sweep, plot_plan_comparison, plot_stage_memory,
    plot_stage_times, plot_time_saved, read_dryrun_csv, simulate,
)
from sappkit.limits import MAX_LAYERS

from ..bundled import DATA
from .support import BAD, fuzz, refused_or_valid

LAYERS = pd.DataFrame([
    dict(kind="embed", role="head", count=1, param_mb=50, option="none", forward_time=1, backward_time=2,
         activation_mb=3),
    *[dict(kind="block", role="body", count=6, param_mb=100, option=o, forward_time=1, backward_time=t,
           activation_mb=a) for o, t, a in (("none", 2, 50), ("selective", 2.2, 20), ("full", 3, 5))],
    dict(kind="head", role="tail", count=1, param_mb=60, option="none", forward_time=2, backward_time=4,
         activation_mb=9),
])
OBSERVED = read_dryrun_csv(DATA / "llama2_70b_dryruns.csv")
COSTS = pd.DataFrame(dict(stage=[0, 1, 2], chunk=0, forward_time=[1.0, 2.0, 1.5], backward_time=[2.0, 4.0, 3.0],
                          recompute_time=[0.0, 1.0, 0.5], activation_mb=[10.0, 8.0, 6.0], static_mb=100.0))
CELLS = pd.DataFrame({"chunk": 0, "stage": [0, 1, 1], "kind": ["block", "block", "block"], "layers": [3, 2, 1]})
PLOTS = {
    "stages": (plot_stage_memory, pd.DataFrame(dict(stage=[0, 1], param_mb=100.0, activation_mb=[50.0, 20.0],
                                                    overhead_mb=0.0, working_mb=0.0, const_mb=10.0,
                                                    memory_mb=[160.0, 130.0], limit_mb=150.0))),
    "times": (plot_stage_times, pd.DataFrame(dict(stage=[0, 1], forward_time=[2.0, 3.0], backward_time=[4.0, 7.0],
                                                  recompute_time=[0.0, 1.0], time=[6.0, 10.0]))),
    "sweep": (plot_memory_sweep, pd.DataFrame(dict(memory_mb=[400.0, 600.0], status=["infeasible", "optimal"],
                                                   objective=[np.nan, 15.0], step_time=[np.nan, 69.0]))),
    "comparison": (plot_plan_comparison, pd.DataFrame(dict(plan=["a", "b"], step_time=[10.0, 9.0],
                                                           peak_mb=[90.0, 120.0], limit_mb=100.0, fits=[True, False]))),
    "saved": (plot_time_saved, pd.DataFrame(dict(memory_mb=[100, 200], feasible=[False, True], mode=None,
                                                 time=[np.nan, 5.0], time_saved=[np.nan, 0.0],
                                                 time_saved_vs_full=[np.nan, 2.0],
                                                 baseline=[None, "configured"]))),
}


@st.composite
def corrupted(draw, frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``frame`` with one column corrupted, and what a refusal may name: that column or the frame's shape."""
    frame = frame.copy()
    column = draw(st.sampled_from(list(frame.columns)))
    how = draw(st.sampled_from(["cell", "column", "twice", "levels", "drop", "rows"]))
    if how == "cell":
        values = frame[column].astype(object).tolist()
        values[draw(st.integers(0, len(frame) - 1))] = draw(st.sampled_from(BAD))
        frame[column] = pd.Series(values, index=frame.index, dtype=object)
    elif how == "column":
        frame[column] = draw(st.sampled_from([v for v in BAD if not isinstance(v, list | dict)]))
    elif how == "twice":
        frame = pd.concat([frame, frame[[column]]], axis=1)
    elif how == "levels":
        frame.columns = pd.MultiIndex.from_tuples([(c, "") for c in frame.columns])
    elif how == "drop":
        frame = frame.drop(columns=column)
    else:
        frame = frame.iloc[draw(st.integers(0, len(frame))):]
    # The column by name, alone or in a tuple of columns ("repeats (kind, option)").
    return frame, [repr(column), f"({column}, ", f", {column})", "levels of column names", "has no rows",
                   "no body kind"]


@fuzz(40)
@given(case=corrupted(LAYERS), data=st.data())
def test_layer_tables_then_balance(case, data):
    frame, culprits = case
    table = refused_or_valid(lambda: LayerTable(frame), culprits)
    if table is None:
        return
    assert table.body_layers <= MAX_LAYERS
    memory = data.draw(st.sampled_from([300.0, 1500.0, 1e5]))

    def fits(plan):
        assert plan.status in ("optimal", "time_limit", "infeasible", "failed")
        assert not plan.has_plan or plan.fits

    # A table that reads may still be one a pipeline cannot hold (fewer layers than stages, no time at all).
    refused_or_valid(lambda: balance(table, stages=2, micro_batches=4, memory_mb=memory),
                     ["layers", "stages", "costs", "kind"], fits)


@fuzz(30)
@given(case=corrupted(OBSERVED))
def test_observations(case):
    frame, culprits = case
    refused_or_valid(lambda: fit_memory(frame), [*culprits, "fit_memory", "counts", "run", "stage"])


@fuzz(30)
@given(case=corrupted(COSTS), micro_batches=st.integers(1, 6))
def test_costs(case, micro_batches):
    frame, culprits = case
    def stepped(sim):
        assert np.isfinite(sim.step_time), sim.step_time

    refused_or_valid(lambda: simulate(frame, micro_batches=micro_batches), [*culprits, "costs", "stages", "static_mb"],
                     stepped)


@fuzz(30)
@given(case=corrupted(CELLS), configured=st.sampled_from([None, "full", ("none",) * 6, ("none", 3), 7]))
def test_partition_cells(case, configured):
    frame, culprits = case
    refused_or_valid(lambda: Partition(stages=2, micro_batches=4, cells=frame, configured=configured),
                     [*culprits, "cells", "configured"])


@fuzz(30)
@given(name=st.sampled_from(sorted(PLOTS)), data=st.data())
def test_plot_frames(name, data):
    draw, frame = PLOTS[name]
    frame, culprits = data.draw(corrupted(frame))
    refused_or_valid(lambda: draw(frame), culprits)
    plt.close("all")
