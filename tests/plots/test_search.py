"""plot_strategy_pareto: a marker per schedule, the front of the strategies none beats, refusals by name."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, plot_strategy_pareto

from ..drawing import figure_overlaps

FRAME = pd.DataFrame(dict(label=list("abcde"), schedule=["1f1b", "zbv", "zbv", "1f1b", "1f1b"],
                          tokens_per_s_per_device=[900.0, 1000.0, 950.0, 800.0, np.nan],
                          peak_memory_mb=[40000.0, 70000.0, 75000.0, 30000.0, np.nan]))


def test_markers_per_schedule_and_the_front():
    _, ax = plt.subplots()
    assert plot_strategy_pareto(FRAME, memory_mb=80000, highlight=1, ax=ax) is ax
    assert figure_overlaps(ax.figure) == []
    scatter = [c for c in ax.collections]
    assert [len(c.get_offsets()) for c in scatter] == [2, 2, 1]  # the unpriced row left out; the ring
    front = ax.get_lines()[0].get_xydata()
    assert front.tolist() == [[30.0, 800.0], [40.0, 900.0], [70.0, 1000.0]]
    assert ax.get_ylabel() == "tokens/s per device"


@pytest.mark.parametrize("frame, options, message", [
    (FRAME.drop(columns="schedule"), {}, "frame is missing column(s) 'schedule'; a strategy search's frame needs "
                                         "label, schedule, tokens_per_s_per_device, peak_memory_mb"),
    (FRAME, dict(ax="axes"), "ax must be a matplotlib Axes or None; got 'axes'"),
    (FRAME, dict(memory_mb="big"), "memory_mb must be a finite number; got 'big'"),
])
def test_bad_arguments_are_refused(frame, options, message):
    with pytest.raises(InputError) as error:
        plot_strategy_pareto(frame, **options)
    assert str(error.value) == message
