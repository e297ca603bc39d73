"""Every drawing takes the caller's Axes or makes its own, checks the numbers it is given, and refuses frames of the
wrong shape in one line."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from sappkit import (
    InputError, plot_alternatives, plot_fit, plot_fit_observations, plot_fit_params, plot_fit_residuals,
    plot_memory_sweep, plot_plan_comparison, plot_stage_memory, plot_stage_times, plot_time_saved,
)

STAGES = pd.DataFrame(dict(stage=[0, 1], param_mb=100.0, activation_mb=[50.0, 20.0], overhead_mb=0.0, working_mb=0.0,
                           const_mb=10.0, memory_mb=[160.0, 130.0], limit_mb=150.0))
TIMES = pd.DataFrame(dict(stage=[0, 1], forward_time=[2.0, 3.0], backward_time=[4.0, 7.0], recompute_time=[0.0, 1.0],
                          time=[6.0, 10.0]))
SWEEP = pd.DataFrame(dict(memory_mb=[400.0, 600.0], status=["infeasible", "optimal"], objective=[np.nan, 15.0],
                          step_time=[np.nan, 69.0]))
COMPARISON = pd.DataFrame(dict(plan=["a", "b"], step_time=[10.0, 9.0], peak_mb=[90.0, 120.0], limit_mb=100.0,
                               fits=[True, False]))
PARAMS = pd.DataFrame({"name": ["const_mb", "param_mb"], "value_mb": [3000.0, 760.0], "stderr_mb": [20.0, np.nan]})
OBSERVED = pd.DataFrame(dict(run="r", stage=[0, 1], memory_mb=[10.0, 9.0], predicted_mb=[10.5, 8.5],
                             residual_mb=[-0.5, 0.5]))
SAVED = pd.DataFrame(dict(memory_mb=[100, 200], feasible=[False, True], mode=None, time=[np.nan, 5.0],
                          time_saved=[np.nan, 0.0], time_saved_vs_full=[np.nan, 2.0], baseline=[None, "configured"]))
FOUND = pd.DataFrame(dict(stage=[0, 2], kind="block", from_mode=["off", "selective"], memory_freed_mb=[1200.0, 400.0],
                          time_cost=[6.0, 2.5], memory_mb=[5000.0, 5400.0]))
#: Each drawing, a frame it draws and a number column it reads.
DRAWINGS = [(plot_stage_memory, STAGES, "memory_mb"), (plot_stage_times, TIMES, "time"),
            (plot_memory_sweep, SWEEP, "memory_mb"), (plot_plan_comparison, COMPARISON, "limit_mb"),
            (plot_fit_params, PARAMS, "value_mb"), (plot_fit_observations, OBSERVED, "predicted_mb"),
            (plot_fit_residuals, OBSERVED, "residual_mb"), (plot_time_saved, SAVED, "memory_mb"),
            (plot_alternatives, FOUND, "time_cost")]


@pytest.mark.parametrize("draw, frame, column", DRAWINGS)
def test_the_callers_axes_or_a_new_one_and_nothing_else(draw, frame, column):
    _, ax = plt.subplots()
    assert draw(frame, ax=ax) is ax
    assert draw(frame) is not ax
    with pytest.raises(InputError) as error:
        draw(frame, ax=3)
    assert str(error.value) == "ax must be a matplotlib Axes or None; got 3"


@pytest.mark.parametrize("draw, frame, column", DRAWINGS)
def test_a_number_column_holding_text_is_named(draw, frame, column):
    name = draw.__code__.co_varnames[0]
    with pytest.raises(InputError) as error:
        draw(frame.assign(**{column: ["lots", "x"]}))
    assert str(error.value) == f"{name} row 0 column {column!r} is 'lots'; expected a finite number"


@pytest.mark.parametrize("call, message", [
    (lambda: plot_stage_memory(STAGES, limit_mb="x"), "limit_mb must be a finite number; got 'x'"),
    (lambda: plot_time_saved(SAVED, current_mb=float("inf")), "current_mb must be a finite number; got inf"),
    (lambda: plot_alternatives(FOUND, peak_mb=True), "peak_mb must be a finite number; got True"),
    (lambda: plot_alternatives(FOUND, labels="x"), "labels must be an int >= 0; got 'x'"),
    (lambda: plot_alternatives(FOUND, labels=-1), "labels must be an int >= 0; got -1"),
    (lambda: plot_fit_params(PARAMS, errors=-1), "errors must be a finite number >= 0; got -1"),
    (lambda: plot_fit(None), "fit must be a MemoryFit (sappkit.fit_memory); got NoneType"),
    (lambda: plot_stage_times(TIMES.iloc[:0]), "stages has no rows; expected a plan's stages frame with a row per "
                                               "stage"),
    (lambda: plot_stage_memory(STAGES.assign(stage=[0, None])), "stages row 1 column 'stage' is nan; expected a "
                                                               "whole number >= 0"),
])
def test_numbers_and_objects_the_drawings_are_given(call, message):
    with pytest.raises(InputError) as error:
        call()
    assert str(error.value) == message
