"""The pipeline drawings show what the frames hold."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from sappkit import (
    InputError, plot_memory_timeline, plot_plan, plot_schedule, plot_simulation, plot_stage_memory, simulate,
)
from sappkit.layers.units import format_time
from sappkit.plots.pipeline import _chunk_colors

from ..drawing import drawn_texts, figure_overlaps, overlapping


def small_sim(p=3, v=1, m=4, schedule="1f1b", recompute=0.5, limit_mb=None):
    costs = pd.DataFrame(dict(stage=np.tile(np.arange(p), v), chunk=np.repeat(np.arange(v), p),
                              forward_time=1.0, backward_time=2.0, recompute_time=recompute,
                              activation_mb=10.0 + np.arange(p * v)))
    return simulate(costs, schedule=schedule, micro_batches=m, static_mb=100.0, limit_mb=limit_mb)


def test_schedule_draws_every_op_with_recompute_hatched():
    sim = small_sim(p=3, v=2, m=3, schedule="interleaved")
    ax = plot_schedule(sim)
    boxes, hatched = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(boxes.get_paths()) == len(sim.timeline)
    backward = sim.timeline.phase == "backward"
    assert len(hatched.get_paths()) == backward.sum() and hatched.get_hatch() == "////"
    colors = [tuple(c) for c in boxes.get_facecolors()]
    expected = [to_rgba(_chunk_colors(c)[int(b)]) for c, b in zip(sim.timeline.chunk, backward)]
    assert colors == expected
    first = boxes.get_paths()[0].vertices
    row = sim.timeline.iloc[0]
    assert first[:, 0].min() == row.start and first[:, 0].max() == row.end
    assert first[:, 1].min() == pytest.approx(row.stage - 0.4)
    assert len(ax.texts) == len(sim.timeline)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "chunk 0", "chunk 1", "light forward, dark backward", "recompute"]
    assert ax.get_ylim() == (2.5, -0.5) and ax.get_xlim() == (0, sim.step_time)


def test_schedule_without_recompute():
    sim = small_sim(p=4, m=32, recompute=0.0)
    ax = plot_schedule(sim)
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["forward", "backward"]
    assert ax.get_title() == (f"1f1b: step time {format_time(sim.step_time, sim.time_unit)}, "
                              f"bubble {sim.bubbles['real']:.1%}")
    assert ax.get_xlabel() == f"time ({sim.time_unit})"


def op_boxes(ax, timeline):
    """Each op's box on the screen, by the middle of the op (where its number is written)."""
    (boxes,) = [c for c in ax.collections if isinstance(c, PolyCollection)]
    corners = [np.sort(ax.transData.transform(path.vertices[[0, 2]]), axis=0) for path in boxes.get_paths()]
    middles = zip((timeline.start + timeline.end) / 2, timeline.stage)
    return {(float(x), float(y)): Bbox(corner) for (x, y), corner in zip(middles, corners)}


@pytest.mark.parametrize("width", [4, 10, 30])
def test_micro_batch_numbers_that_fit_their_op_and_none_that_do_not(width):
    sim = small_sim(p=4, m=32, recompute=0.0)
    fig, ax = plt.subplots(figsize=(width, 3))
    plot_schedule(sim, ax=ax)
    shown = drawn_texts(ax)
    assert overlapping(shown) == []
    boxes = op_boxes(ax, sim.timeline)
    numbers = dict(zip(zip((sim.timeline.start + sim.timeline.end) / 2, sim.timeline.stage),
                       sim.timeline.micro_batch))
    for text in shown:
        x, y = text.get_position()
        op, label = boxes[float(x), float(y)], text.get_window_extent()
        assert text.get_text() == str(numbers[x, y]) and 5 <= text.get_fontsize() <= 7
        assert op.x0 <= label.x0 and label.x1 <= op.x1 and op.y0 <= label.y0 and label.y1 <= op.y1
    # 256 ops on 4 inches: no number fits; on 10 inches every backward's (twice as long) and more; on 30 every op's.
    backward = int((sim.timeline.phase == "backward").sum())
    assert len(shown) == {4: 0, 30: len(sim.timeline)}.get(width, len(shown)) and (width != 10 or
                                                                                   len(shown) > backward)


def test_micro_batch_numbers_are_sized_when_drawn():
    sim = small_sim(p=4, m=32, recompute=0.0)
    fig, ax = plt.subplots(figsize=(30, 3))
    plot_schedule(sim, ax=ax)
    before = drawn_texts(ax)
    assert {text.get_fontsize() for text in before} == {7.0}
    count = len(before)
    fig.set_size_inches(10, 3)
    after = drawn_texts(ax)
    assert count > len(after) > 0 and overlapping(after) == []
    assert min(text.get_fontsize() for text in after) < 7.0


def test_memory_timeline_draws_each_stage_up_to_its_peak_with_a_colour_bar():
    sim = small_sim(p=3, limit_mb=200)
    fig, ax = plt.subplots()
    assert plot_memory_timeline(sim, ax=ax) is ax
    lines = ax.get_lines()
    assert len(lines) == 4 and lines[-1].get_ydata()[0] == 200
    for stage, line in enumerate(lines[:3]):
        assert line.get_xdata()[-1] == sim.step_time
        assert max(line.get_ydata()) == sim.stages.loc[stage, "memory_mb"]
    assert ax.get_legend() is None and [t.get_text() for t in ax.texts] == ["limit 200 MB"]
    (bar,) = [other for other in fig.axes if other is not ax]
    assert bar.get_ylabel() == "stage" and bar.get_ylim() == (-0.5, 2.5)
    assert len({tuple(line.get_color()) for line in lines[:3]}) == 3


def test_simulation_figure_stacks_schedule_over_memory_and_states_the_bubble_once():
    sim = small_sim()
    fig = plot_simulation(sim)
    top, bottom = fig.axes[:2]
    assert top.get_ylabel() == "stage" and bottom.get_ylabel() == "memory (MB)"
    b = sim.bubbles
    assert fig.get_suptitle() == (
        f"1f1b: step time {format_time(sim.step_time, sim.time_unit)}; peak {sim.stages.memory_mb.max():,.0f} MB\n"
        f"bubble {b['real']:.1%} of the compute = ideal {b['ideal']:.1%} + imbalance {b['imbalance']:.1%} + "
        f"recompute {b['recompute']:.1%} (idle {b['of_step']:.1%} of the step)")
    fig.canvas.draw()
    words = [t.get_text() for t in fig.findobj(Text) if t.get_visible()]
    assert sum("bubble" in text for text in words) == 1
    bar = fig.axes[2]
    assert bar.get_ylabel() == "stage" and top.get_position().x1 == pytest.approx(bottom.get_position().x1)


@pytest.mark.parametrize(("schedule", "chunks"), [("1f1b", 1), ("interleaved", 2), ("zb_interleaved", 2)])
def test_the_simulation_figure_of_the_tour_fits_its_title_and_reads_without_overlaps(schedule, chunks):
    """Issue 39: the title, on one line, was some 240 px wider than the 11 in figure."""
    from sappkit import read_layers_json
    from sappkit.demo import tour_simulation

    from ..bundled import DATA
    from ..drawing import figure_overlaps

    sim = tour_simulation(read_layers_json(DATA / "llama2_70b.json"), schedule=schedule, stages=8,
                          micro_batches=16, chunks=chunks, option="selective")
    assert figure_overlaps(plot_simulation(sim)) == []


def stage_frame(**changes):
    frame = pd.DataFrame(dict(stage=[0, 1, 2], param_mb=[100.0, 120.0, 90.0], activation_mb=[50.0, 20.0, 5.0],
                              overhead_mb=[0.0, 7.0, 0.0], working_mb=0.0, const_mb=10.0, limit_mb=np.nan))
    frame["memory_mb"] = frame[["param_mb", "activation_mb", "overhead_mb", "working_mb", "const_mb"]].sum(axis=1)
    return frame.assign(**changes)


def test_stage_memory_stacks_the_nonzero_parts():
    frame = stage_frame()
    ax = plot_stage_memory(frame, limit_mb=150)
    parts = [c for c in ax.containers]
    assert [c.get_label() for c in parts[:4]] == ["parameters", "activations", "interleave overhead", "constant"]
    tops = np.sum([[bar.get_height() for bar in c] for c in parts[:4]], axis=0)
    np.testing.assert_allclose(tops, frame.memory_mb)
    np.testing.assert_allclose([bar.get_y() for bar in parts[1]], frame.param_mb)
    outlined = parts[4]
    assert [bar.get_x() + bar.get_width() / 2 for bar in outlined] == [0, 1]  # 160 and 157 MB > 150
    assert ax.get_lines()[0].get_ydata()[0] == 150
    (ticks,) = ax.collections  # every stage's peak is marked, on top of its bar when memory_mb is the sum
    assert ticks.get_offsets().tolist() == [[x, peak] for x, peak in enumerate(frame.memory_mb)]


def test_stage_memory_marks_a_peak_beyond_the_parts_and_reads_the_frames_limit():
    frame = stage_frame(memory_mb=[160.0, 180.0, 105.0], limit_mb=500.0)
    ax = plot_stage_memory(frame)
    (ticks,) = ax.collections
    assert ticks.get_offsets().tolist() == [[0.0, 160.0], [1.0, 180.0], [2.0, 105.0]]
    assert ax.get_lines()[0].get_ydata()[0] == 500
    assert "peak" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_stage_memory_of_a_simulation():
    sim = small_sim(limit_mb=1000)
    ax = plot_stage_memory(sim.stages)
    assert ax.get_lines()[0].get_ydata()[0] == 1000


@pytest.mark.parametrize("call, message", [
    (lambda: plot_stage_memory(stage_frame().drop(columns=["working_mb", "const_mb"])),
     "stages is missing column(s) 'working_mb', 'const_mb'; per-stage memory needs stage, param_mb, "
     "activation_mb, overhead_mb, working_mb, const_mb, memory_mb"),
    (lambda: plot_stage_memory([1, 2]), "stages must be a DataFrame with columns stage, param_mb, activation_mb, "
                                               "overhead_mb, working_mb, const_mb, memory_mb; got list"),
    (lambda: plot_schedule(stage_frame()),
     "sim must be a sappkit.Simulation (from sappkit.simulate); got DataFrame"),
    (lambda: plot_simulation(None), "sim must be a sappkit.Simulation (from sappkit.simulate); got NoneType"),
])
def test_bad_input(call, message):
    with pytest.raises(InputError) as caught:
        call()
    assert str(caught.value) == message


def test_a_split_backward_shows_its_weight_passes():
    costs = pd.DataFrame(dict(stage=[0, 1, 0, 1], chunk=[0, 0, 1, 1], forward_time=1.0, backward_time=2.0,
                              activation_mb=1.0))
    ax = plot_schedule(simulate(costs, schedule="zbv", micro_batches=2))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "chunk 0", "chunk 1", "light forward, dark backward or input pass, darker weight pass"]


def test_a_zero_bubble_plans_figure_is_readable_and_no_bar_is_taller_than_its_peak():
    """Issue 39: zb_interleaved's overhead_mb is negative (-21 GB here: fewer activations are held at the peak
    than every cell's in-flight count); it used to be stacked as positive, lifting the bars ~20 GB above the
    peak, and the 12-entry legend of four chunks squeezed the Gantt chart to a sliver."""
    from sappkit import balance, read_layers_json

    from ..bundled import DATA
    from ..drawing import figure_overlaps

    plan = balance(read_layers_json(DATA / "llama2_70b.json"), stages=4, micro_batches=8, chunks=4,
                   schedule="zb_interleaved", memory_mb=70000)
    assert (plan.stages["overhead_mb"] < 0).any()
    figure = plot_plan(plan)
    assert figure_overlaps(figure) == []
    gantt, memory = figure.axes[:2]
    # The Gantt chart's legend, wider than the chart, above the whole figure: above the chart, the layout took
    # its overhang off the chart, which kept 42% of the figure's width (notebook 06's dashboard: 398 of 1,129 px).
    assert gantt.get_window_extent().width / figure.bbox.width >= 0.6
    (legend,) = figure.legends
    assert gantt.get_legend() is None and [text.get_text() for text in legend.get_texts()] == [
        "chunk 0", "chunk 1", "chunk 2", "chunk 3", "light forward, dark backward or input pass, darker weight pass",
        "recompute"]
    tops = {}
    for bar in memory.patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), bar.get_y() + bar.get_height())
    assert [tops[stage] for stage in range(4)] == pytest.approx(plan.stages["memory_mb"].tolist())
    plt.close(figure)


@pytest.mark.parametrize("p", [4, 64])
def test_stage_ticks_label_every_stage_that_fits_and_never_overlap(p):
    """Notebook 06's layout (a 14 × 4 in figure, schedule and stage memory side by side at 2.2 : 1) and notebook
    00's 9 × 4 in stage memory: a tick on every stage overlapped its neighbours' labels at 64 stages."""
    sim = small_sim(p=p, m=2 * p, recompute=0.0)
    figure, (left, right) = plt.subplots(1, 2, figsize=(14, 4), gridspec_kw=dict(width_ratios=[2.2, 1]))
    plot_schedule(sim, ax=left)
    plot_stage_memory(sim.stages, ax=right)
    alone = plot_stage_memory(sim.stages, ax=plt.subplots(figsize=(9, 4))[1])
    for figure_ in (figure, alone.figure):
        assert figure_overlaps(figure_) == []
    labelled = [int(tick) for tick in left.get_yticks() if 0 <= tick < p]
    assert labelled[0] == 0 and (labelled == list(range(p)) if p == 4 else len(labelled) < p)
    plt.close("all")


def test_plot_plan_refuses_what_is_not_a_plan_and_a_plan_without_placement():
    from sappkit import balance, read_layers_json

    from ..bundled import DATA

    with pytest.raises(InputError, match="plan must be a sappkit.Plan .*; got DataFrame"):
        plot_plan(pd.DataFrame())
    tight = balance(read_layers_json(DATA / "llama2_70b.json"), stages=4, micro_batches=8, memory_mb=1000)
    with pytest.raises(InputError, match="plan has no placement to draw"):
        plot_plan(tight)
    with pytest.raises(InputError, match="fig must be a matplotlib Figure"):
        plot_plan(balance(read_layers_json(DATA / "llama2_70b.json"), stages=4, micro_batches=8, memory_mb=70000),
                  fig="no")
