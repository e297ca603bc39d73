"""The figure check itself (tests/drawing.py): it finds each kind of overlap a reader would stumble on."""

import matplotlib.pyplot as plt
import numpy as np

from ..drawing import figure_overlaps


def _figure():
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    x = np.linspace(0, 10, 50)
    ax.plot(x, x, label="rising")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    return fig, ax


def test_a_clean_figure_has_nothing_to_say():
    fig, ax = _figure()
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    assert figure_overlaps(fig) == []


def test_a_legend_over_the_data_is_found():
    fig, ax = _figure()
    ax.legend(loc="center", fontsize=20)
    assert figure_overlaps(fig) == ["axes 0 (y): legend covers line 'rising'"]


def test_a_line_through_an_annotation_is_found():
    fig, ax = _figure()
    ax.axhline(5, color="red", label="limit")
    ax.text(8, 5, "+1,234 MB", ha="center", va="center")
    assert figure_overlaps(fig) == ["axes 0 (y): '+1,234 MB' is crossed by line 'limit'"]


def test_texts_on_top_of_each_other_and_a_label_longer_than_its_axis_are_found():
    fig, ax = _figure()
    ax.text(1, 8, "first")
    ax.text(1, 8, "second")
    ax.set_ylabel("a label\nof two lines, the second far longer than the axis it labels is tall")
    found = figure_overlaps(fig)
    assert "axes 0 (a label): 'first' overlaps axes 0 (a label): 'second'" in found
    assert any("longer than its axis" in problem for problem in found)


def test_an_axes_squeezed_by_a_wide_legend_is_found():
    """As notebook 06's Gantt chart was: a legend of twelve long entries beside it left it 70 px wide."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3), layout="constrained")
    left.plot([0, 1], [0, 1])
    for number in range(12):
        right.plot([0, 1], [number, number], label=f"backward or input pass (chunk {number})")
    right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), ncol=2)
    problems = figure_overlaps(fig)
    assert any(problem.startswith("axes 1 (axes 1): squeezed to ") and problem.endswith(
        " px (a readable Axes is at least 120 x 50)") for problem in problems), problems


def test_a_bar_taller_than_the_peak_it_marks_is_found():
    """A negative part stacked as positive lifts a bar above the peak tick of its stage."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([0, 1], [50.0, 50.0], label="parameters")
    ax.bar([0, 1], [20.0, 30.0], bottom=[50.0, 50.0], label="overhead")
    ax.scatter([0, 1], [70.0, 60.0], marker="_", label="peak")
    assert figure_overlaps(fig) == ["axes 0 (axes 0): the bar at x=1 reaches 80, above the peak 60 it marks"]


def test_a_title_wider_than_its_figure_and_a_text_on_the_offset_text_are_found():
    """As plot_simulation's title was on an 11 in figure; and a note on the y axis' ``1e6`` scale."""
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ax.plot([0, 10], [0, 3e6], label="rising")
    ax.annotate("note", (0, 1), xycoords="axes fraction", xytext=(0, 4), textcoords="offset points")
    fig.suptitle("a title far wider than the six inches of its figure, " * 3)
    fig.canvas.draw()
    assert ax.yaxis.get_offset_text().get_text() == "1e6"
    problems = figure_overlaps(fig)
    assert "axes 0 (axes 0): 'note' overlaps axes 0 (axes 0): '1e6'" in problems
    (edge,) = [problem for problem in problems if "edge" in problem]
    assert edge.startswith("figure: 'a title far wider") and edge.endswith(" px right)")
    assert " runs past the figure's edge (" in edge and " px left, " in edge
