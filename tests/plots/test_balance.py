"""The memory sweep: one axis of simulated step time, the limits no plan fits shaded up to the memory needed."""

import numpy as np
import pandas as pd

from sappkit import plot_memory_sweep
from sappkit.plots._axes import time_label

SWEEP = pd.DataFrame(dict(memory_mb=[400.0, 600.0, 800.0, 1000.0, 1200.0],
                          status=["infeasible", "infeasible", "optimal", "failed", "optimal"],
                          objective=[np.nan, np.nan, 15.0, np.nan, 12.0],
                          step_time=[np.nan, np.nan, 69.0, np.nan, 60.0],
                          memory_needed_mb=[730.0, 730.0, np.nan, np.nan, np.nan]))
SWEEP.attrs["time_unit"] = "ms"


def test_one_axis_of_step_time_with_the_infeasible_limits_shaded():
    ax = plot_memory_sweep(SWEEP)
    assert ax.figure.axes == [ax]  # no second axis for the objective
    assert ax.get_ylabel() == time_label("simulated step time", "ms") == "simulated step time (ms)"
    (span,) = ax.patches
    assert span.get_x() == ax.get_xlim()[0] < 400 and span.get_x() + span.get_width() == 730
    (line,) = ax.get_lines()
    assert line.get_xdata().tolist() == [800.0, 1200.0] and line.get_ydata().tolist() == [69.0, 60.0]
    (failed,) = ax.collections
    assert failed.get_offsets()[:, 0].tolist() == [1000.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "simulated step time", "no plan fits below 730 MB", "no plan found"]


def test_without_the_memory_needed_the_shade_ends_at_the_largest_limit_without_a_plan():
    ax = plot_memory_sweep(SWEEP.drop(columns="memory_needed_mb").iloc[:3])
    (span,) = ax.patches
    assert span.get_x() + span.get_width() == 600
    assert len(ax.collections) == 0 and ax.get_legend().get_texts()[1].get_text() == "no plan fits below 600 MB"
