"""plot_strategy_pareto: a marker per schedule, the front of the strategies none beats, refusals by name;
plot_step_bands: the fastest strategies' bands, the best's shaded, those within its error in colour."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from sappkit import InputError, plot_step_bands, plot_strategy_pareto

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


BANDS = pd.DataFrame(dict(rank=[3.0, 1.0, 2.0, 2.0, np.nan, 6.0], label=list("abcdef"),
                          step_ms=[130.0, 100.0, 104.0, 104.0, np.nan, 400.0],
                          step_low_ms=[124.0, 95.0, 99.0, 99.0, np.nan, 200.0],
                          step_high_ms=[137.0, 105.0, 109.0, 109.0, np.nan, np.inf],
                          within_error=[False, True, True, True, False, True]))


def test_bands_rank_the_fastest_and_colour_those_within_the_best_error():
    _, ax = plt.subplots()
    assert plot_step_bands(BANDS, n=4, ax=ax) is ax
    assert figure_overlaps(ax.figure) == []
    assert [tick.get_text() for tick in ax.get_yticklabels()] == ["1 b", "2= c", "2= d", "3 a"]
    within, outside = ax.collections  # the band lines: within the best's error, then outside
    assert [segment[:, 0].tolist() for segment in within.get_segments()] == [[95, 105], [99, 109], [99, 109]]
    assert [segment[:, 0].tolist() for segment in outside.get_segments()] == [[124, 137]]
    shade = ax.patches[0].get_bbox()
    assert (shade.x0, shade.x1) == (95.0, 105.0)  # the best's band
    assert [tuple(line.get_xdata()) for line in ax.get_lines()] == [(100.0, 104.0, 104.0), (130.0,)]


def test_an_open_band_runs_to_the_edge_and_nothing_priced_says_so():
    ax = plot_step_bands(BANDS)
    assert ax.get_xlim()[1] == pytest.approx(1.05 * 400)
    assert ax.collections[0].get_segments()[-1][:, 0].tolist() == [200.0, 420.0]
    assert plot_step_bands(BANDS.iloc[4:5]).get_title() == "no priced strategy"
    plt.close("all")


@pytest.mark.parametrize("frame, options, message", [
    (BANDS.drop(columns="within_error"), {}, "frame is missing column(s) 'within_error'; a strategy search's frame "
                                             "needs rank, label, step_ms, step_low_ms, step_high_ms, within_error"),
    (BANDS, dict(n=0), "n must be an int >= 1; got 0"),
])
def test_bad_band_arguments_are_refused(frame, options, message):
    with pytest.raises(InputError) as error:
        plot_step_bands(frame, **options)
    assert str(error.value) == message
